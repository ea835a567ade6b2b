"""Exact match read off the teacher-forced pass equals the greedy decode's
(``harness.evaluation.evaluate``, "exact match without a decode"; ``Accel.forced``)."""

from __future__ import annotations

import pytest
import torch

from harness.config import preset_config
from harness.evaluation.evaluate import evaluate_length, greedy_decode, windowed_predictions
from harness.tasks import create
from harness.tasks.data import evaluation_set
from harness.training.accel import ACCEL_ENV, Accel
from harness.training.train import build_model, train


@pytest.mark.parametrize(("pe", "window"), [("nope", 0), ("rope", 0), ("alibi", 0), ("randomized", 0), ("rope", 9)])
def test_the_teacher_forced_argmax_over_a_greedy_continuation_is_that_continuation(pe, window):
    """The premise: fed the prompt and its own greedy continuation, the teacher-forced
    pass predicts that continuation token for token (same contexts, same positions)."""
    model = build_model(preset_config("smoke", pe=pe, task="copy", seed=0)).eval()
    prompts = torch.randint(4, 14, (4, 7), generator=torch.Generator().manual_seed(1))
    new = 8
    positions = model.pe.positions(4, 7 + new, "cpu") if pe == "randomized" else None
    with torch.no_grad():
        generated = greedy_decode(model, prompts, new, window=window, jump=3, positions=positions)
        seq = torch.cat([prompts, generated], dim=1)[:, :-1]
        forced = windowed_predictions(model, seq, torch.zeros(4, dtype=torch.long), window, 3, positions)
    assert torch.equal(forced[:, 6:], generated)


@pytest.fixture(scope="module")
def half_trained():
    """A model that gets about half of even_pairs right: its one answer token is a coin
    flip it has not learnt, the EOS after it it has."""
    cfg = preset_config("smoke", pe="rope", task="even_pairs", seed=0, overrides={"train": {"steps": 80}})
    model = build_model(cfg)
    train(cfg, model, create("even_pairs"))
    return model.eval()


@pytest.mark.parametrize("window", [0, 6])
def test_exact_match_off_the_teacher_forced_pass_equals_the_greedy_decodes(half_trained, window):
    task = create("even_pairs")
    seen = []
    for n in (3, 5, 8):
        examples = evaluation_set(task, n, 16, 0)
        kw = {"batch_size": 8, "device": "cpu", "window": window, "jump": 2}
        decoded = evaluate_length(half_trained, examples, **kw)
        forced = evaluate_length(half_trained, examples, **kw, decode=False)
        assert forced == decoded
        seen.append(decoded.exact)
    assert 0 < sum(seen) < 3 * 16  # some right and some wrong: the comparison means something


def test_a_scratchpad_scored_on_its_answer_still_decodes(monkeypatch):
    import harness.evaluation.evaluate as evaluate

    calls = []
    real = evaluate.exact_match
    monkeypatch.setattr(evaluate, "exact_match", lambda *a, **k: calls.append(1) or real(*a, **k))
    task = create("copy")
    model = build_model(preset_config("smoke", pe="nope", task="copy", seed=0))
    examples = evaluation_set(task, 3, 4, 0)
    evaluate_length(model, examples, batch_size=4, device="cpu", decode=False)
    assert calls == []
    evaluate_length(model, examples, batch_size=4, device="cpu", decode=False, answer_task=task)
    assert calls == [1]


def test_forced_is_on_for_cuda_and_on_cpu_only_when_named(monkeypatch):
    monkeypatch.delenv(ACCEL_ENV, raising=False)
    assert Accel.for_device("cuda").forced
    assert not Accel.for_device("cpu").forced and not Accel.for_device("cpu", "on").forced
    assert Accel.for_device("cpu", "forced") == Accel(forced=True)
    assert not Accel.for_device("cuda", "off").forced


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_exact_match_off_the_pass_equals_the_greedy_decodes(half_trained):
    model = half_trained.to("cuda")
    try:
        for n in (3, 5, 8):
            examples = evaluation_set(create("even_pairs"), n, 16, 0)
            decoded = evaluate_length(model, examples, batch_size=8, device="cuda")
            assert evaluate_length(model, examples, batch_size=8, device="cuda", decode=False) == decoded
    finally:
        model.to("cpu")
