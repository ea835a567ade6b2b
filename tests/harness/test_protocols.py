"""The encoder protocol (randomized-PE paper), curricula and GPU-sized presets."""

from __future__ import annotations

import random

import pytest
import torch
from click.testing import CliRunner

from harness.cli import main
from harness.config import EvalConfig, RunConfig, TrainConfig, preset_config, prism_curriculum
from harness.evaluation.evaluate import evaluate_length
from harness.tasks import Example, create
from harness.tasks.data import BLANK_ID, IGNORE, collate, sample_training_batch
from harness.tasks.vocab import TOKEN_ID
from harness.training.train import build_model, curriculum_max


def test_encoder_layout_puts_targets_at_blanks_and_scores_the_mask():
    ex = Example(prompt=("1", "0", "1"), target=("1", "1", "2", "0"), scale=3, mask=(True, True, True, False))
    batch = collate([ex], "encoder")
    t = TOKEN_ID
    assert batch.inputs[0].tolist() == [t["1"], t["0"], t["1"], BLANK_ID, BLANK_ID, BLANK_ID, BLANK_ID]
    assert batch.labels[0].tolist() == [IGNORE] * 3 + [t["1"], t["1"], t["2"], t["0"]]
    assert batch.scored[0].tolist() == [False] * 3 + [True, True, True, False]


def test_encoder_metrics_count_only_masked_slots(monkeypatch):
    """A model right on every masked slot and wrong elsewhere scores 1.0 on both metrics."""
    task = create("binary_addition")
    examples = [task.sample(6, random.Random(i)) for i in range(5)]
    batch = collate(examples, "encoder")

    class Oracle(torch.nn.Module):
        training = False

        def forward(self, inputs, scale_hint=None):
            logits = torch.zeros(*inputs.shape, 64)
            wanted = torch.where(batch.scored, batch.labels, TOKEN_ID["9"])  # wrong off the mask
            logits.scatter_(-1, wanted.clamp(min=0)[..., None], 1.0)
            return logits

    m = evaluate_length(Oracle(), examples, batch_size=8, device="cpu", protocol="encoder")
    assert m.exact_match == 1.0 and m.token_accuracy == 1.0
    assert not all(all(ex.mask) for ex in examples)  # the mask did exclude something


def test_encoder_training_shares_one_scale_per_batch():
    rng = random.Random(0)
    for _ in range(5):
        batch = sample_training_batch(create("parity_check"), rng, 8, 1, 40, shared_scale=True)
        assert len({ex.scale for ex in batch}) == 1


def test_ruoss_preset_is_the_papers_protocol():
    cfg = preset_config("ruoss", pe="rope", task="parity_check", seed=0)
    assert cfg.protocol == "encoder" and not cfg.backbone.causal
    assert (cfg.backbone.d_model, cfg.backbone.n_layers, cfg.backbone.n_heads) == (64, 5, 8)
    assert (cfg.train.batch_size, cfg.train.train_max, cfg.eval.test_max) == (128, 40, 500)
    assert cfg.train.optimizer == "adam"


def test_encoder_protocol_needs_non_causal_backbone():
    with pytest.raises(ValueError, match="causal=False"):
        RunConfig(pe="nope", task="parity_check", protocol="encoder")


def test_prism_curriculum():
    assert prism_curriculum("reverse", 40) == ((0, 5), (5000, 10), (15000, 20), (25000, 30), (35000, 40))
    assert prism_curriculum("copy", 40) == ((0, 5), (5000, 10), (10000, 40))
    train = TrainConfig(train_max=40, curriculum=((0, 5), (100, 10)))
    cfg = RunConfig(pe="nope", task="copy", train=train, eval=EvalConfig(test_max=50))
    assert [curriculum_max(s, cfg) for s in (0, 99, 100, 5000)] == [5, 5, 10, 10]
    assert curriculum_max(7, RunConfig(pe="nope", task="copy")) == 10


def test_gpu_preset_on_cpu_fails_fast_unless_allowed(tmp_path):
    store = tmp_path / "s.sqlite"
    args = ["bench", "--pe", "rope", "--task", "parity_check", "--preset", "ruoss", "--device", "cpu"]
    refused = CliRunner().invoke(main, [*args, "--store", str(store)])
    assert refused.exit_code == 2 and "--allow-cpu" in refused.output and not store.exists()
    wrong_task = CliRunner().invoke(main, [*args[:4], "copy", *args[5:], "--allow-cpu", "--store", str(store)])
    assert wrong_task.exit_code == 2 and "no fixed output length" in wrong_task.output


@pytest.mark.slow
def test_ruoss_preset_runs_a_few_steps_on_cpu(tmp_path):
    args = ["bench", "--pe", "randomized:rope", "--task", "parity_check", "--preset", "ruoss", "--allow-cpu"]
    args += ["--steps", "3", "--test-len", "42", "--eval-samples", "4", "--device", "cpu"]
    result = CliRunner().invoke(main, [*args, "--store", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 0, result.output
    assert "every masked output right" in result.output


def test_build_model_for_encoder_preset_is_bidirectional():
    cfg = preset_config("ruoss", pe="alibi", task="parity_check", seed=0)
    model = build_model(cfg).eval()
    x = torch.randint(0, 10, (1, 6))
    y = x.clone()
    y[0, 5] = (y[0, 5] + 1) % 10
    assert not torch.allclose(model(x)[:, 0], model(y)[:, 0])  # position 0 sees the future
