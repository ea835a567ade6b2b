"""Training data layout, learning-rate schedule, decoding and metrics."""

from __future__ import annotations

import random

import pytest
import torch

from harness.config import RunConfig, TrainConfig, preset_config
from harness.evaluation.evaluate import evaluate_length, greedy_decode
from harness.tasks import Example, create
from harness.tasks.data import IGNORE, collate, evaluation_set
from harness.tasks.vocab import EOS_ID, TOKEN_ID
from harness.training.train import build_model, lr_factor


def test_collate_puts_loss_only_on_target_and_eos():
    ex = Example(prompt=("1", "2"), target=("2", "1", "."), scale=2)
    batch = collate([ex, Example(prompt=("5",), target=("5", "."), scale=1)])
    ids = [TOKEN_ID[t] for t in ("<bos>", "1", "2", "=", "2", "1", ".", "<eos>")]
    assert batch.inputs[0].tolist() == ids[:-1]
    # label at t is token t+1, kept only where token t+1 is part of "target <eos>"
    assert batch.labels[0].tolist() == [IGNORE, IGNORE, IGNORE, *ids[4:]]
    assert batch.labels[1].tolist() == [IGNORE, IGNORE, TOKEN_ID["5"], TOKEN_ID["."], EOS_ID, IGNORE, IGNORE]
    assert batch.scales.tolist() == [2, 1]


@pytest.mark.parametrize("task", ["copy", "reverse", "odds_first", "addition", "stack_manipulation"])
def test_collate_equals_filling_each_row_in_place(task):
    """The batch as built row by row with slice assignments (how it was built until the
    rows became lists, for the GPU loop's host time): equal tensors, mixed widths."""
    from harness.tasks.data import hint, layout
    from harness.tasks.vocab import PAD_ID

    t, rng = create(task), random.Random(task)
    examples = [t.sample(rng.randint(1, 12), rng) for _ in range(33)]
    encoded = [layout(ex) for ex in examples]
    width = max(len(ids) for ids, _ in encoded) - 1
    inputs = torch.full((len(examples), width), PAD_ID, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
    for row, (ids, start) in enumerate(encoded):
        inputs[row, : len(ids) - 1] = torch.tensor(ids[:-1])
        labels[row, start - 1 : len(ids) - 1] = torch.tensor(ids[start:])
    batch = collate(examples)
    assert torch.equal(batch.inputs, inputs) and torch.equal(batch.labels, labels)
    assert torch.equal(batch.scored, labels != IGNORE) and batch.scales.tolist() == [hint(ex) for ex in examples]
    assert batch.inputs.dtype == batch.labels.dtype == torch.long


def test_lr_schedule_warms_up_then_decays_to_floor():
    cfg = RunConfig(pe="nope", task="copy", train=TrainConfig(steps=100, warmup=10, min_lr_ratio=0.1))
    assert lr_factor(0, cfg) == pytest.approx(0.1)
    assert lr_factor(9, cfg) == pytest.approx(1.0)
    assert lr_factor(99, cfg) == pytest.approx(0.1, abs=1e-3)
    assert all(lr_factor(s, cfg) >= lr_factor(s + 1, cfg) for s in range(10, 99))


def test_strict_config_keys():
    with pytest.raises(ValueError, match="valid keys: steps"):
        RunConfig.from_dict({"pe": "nope", "task": "copy", "train": {"stepz": 3}})
    with pytest.raises(ValueError, match="unknown preset"):
        preset_config("huge", pe="nope", task="copy", seed=0)


def test_run_id_changes_with_config_and_seed():
    a = preset_config("smoke", pe="rope", task="copy", seed=0)
    assert a.run_id() == preset_config("smoke", pe="rope", task="copy", seed=0).run_id()
    assert a.run_id() != preset_config("smoke", pe="rope", task="copy", seed=1).run_id()
    assert a.run_id() != preset_config("smoke", pe="rope", task="copy", seed=0, overrides={"train": {"lr": 1}}).run_id()
    assert RunConfig.from_dict(a.to_dict()) == a


def test_evaluation_sets_are_fixed_per_task_scale_seed():
    task = create("copy")
    assert evaluation_set(task, 7, 5, 0) == evaluation_set(task, 7, 5, 0)
    assert evaluation_set(task, 7, 5, 0) != evaluation_set(task, 7, 5, 1)


@pytest.mark.parametrize("pe", ["nope", "rope", "alibi", "ape"])
def test_cached_greedy_decoding_equals_recomputing(pe):
    model = build_model(preset_config("smoke", pe=pe, task="copy", seed=0)).eval()
    prompts = torch.randint(4, 14, (4, 9), generator=torch.Generator().manual_seed(0))
    cached = greedy_decode(model, prompts, 12)
    assert torch.equal(cached, greedy_decode(model, prompts, 12, use_cache=False))


def test_exact_match_requires_eos(monkeypatch):
    """A decode that is right but never stops must not count as an exact match."""
    from harness.evaluation import evaluate

    task = create("copy")
    examples = [task.sample(3, random.Random(i)) for i in range(4)]

    def fake_decode(model, prompts, max_new, **kw):
        out = []
        for row in prompts.tolist():
            digits = row[1:-1]  # drop <bos> and "="
            out.append((digits + [TOKEN_ID["."]] + [TOKEN_ID["0"]] * 10)[:max_new])  # no EOS
        return torch.tensor(out)

    monkeypatch.setattr(evaluate, "greedy_decode", fake_decode)
    trace, answer = evaluate.exact_match(None, examples, 8, "cpu", task=task)
    assert trace.sum() == 0 and answer.sum() == 0

    def right_decode(model, prompts, max_new, **kw):
        return torch.tensor(
            [(row[1:-1] + [TOKEN_ID["."], EOS_ID] + [EOS_ID] * 10)[:max_new] for row in prompts.tolist()]
        )

    monkeypatch.setattr(evaluate, "greedy_decode", right_decode)
    trace, answer = evaluate.exact_match(None, examples, 8, "cpu", task=task)
    assert trace.tolist() == answer.tolist() == [1.0] * 4


def test_evaluate_length_reports_scale_and_token_length():
    cfg = preset_config("smoke", pe="rope", task="reverse", seed=0)
    model = build_model(cfg)
    m = evaluate_length(model, evaluation_set(create("reverse"), 6, 4, 0), batch_size=2, device="cpu")
    assert m.length == 6 and m.n == 4 and m.token_length == 1 + 6 + 1 + 6 + 1 + 1  # <bos> p = t . <eos>
    assert 0 <= m.exact_match <= 1 and 0 <= m.token_accuracy <= 1
    assert model.training  # restored
