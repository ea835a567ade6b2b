"""Training windows, held-out regions and bits per byte (chunked attention against one pass)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from lm_fixtures import tiny_corpus

from harness.config import preset_config
from harness.evaluation.lm import evaluate_lengths, score_windows
from harness.records.lm_metrics import bpb
from harness.tasks.lm import BOS
from harness.tasks.lm.data import TrainingWindows, scored_regions, window_tokens
from harness.tasks.lm.split import split
from harness.training.train import build_model

CPU = torch.device("cpu")


def test_windows_lie_inside_documents_and_depend_on_seed_and_step_only():
    docs = [("a", bytes(range(40))), ("b", bytes(range(100, 130))), ("short", b"xy")]
    windows = TrainingWindows(docs, 8)
    assert windows.n_windows == (40 - 8 + 1) + (30 - 8 + 1)
    tokens, targets = windows.batch(seed=3, step=5, batch_size=64)
    for row in targets.tolist():
        assert any(bytes(row) in data for _, data in docs[:2])
    assert torch.equal(tokens[:, 0], torch.full((64,), BOS)) and torch.equal(tokens[:, 1:], targets[:, :-1])
    again = TrainingWindows(docs, 8).batch(seed=3, step=5, batch_size=64)[1]
    assert torch.equal(again, targets)
    assert not torch.equal(windows.batch(seed=3, step=6, batch_size=64)[1], targets)
    with pytest.raises(ValueError, match="no training document"):
        TrainingWindows([("s", b"abc")], 8)


def test_bpb_is_nats_over_bytes_times_ln2():
    assert bpb(8 * math.log(2), 4) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        bpb(1.0, 0)


@pytest.mark.parametrize("pe", ["alibi", "rope", "kerple_log", "xpos{blockwise=16}"])
def test_chunked_scoring_equals_one_full_pass(pe):
    cfg = preset_config("lm_smoke", pe=pe, task="lm_en", seed=0)
    model = build_model(cfg).eval()
    targets = torch.randint(256, (2, 48), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(window_tokens(targets))  # one pass, no cache
    expected = F.cross_entropy(logits[:, 10:].reshape(-1, 257), targets[:, 10:].reshape(-1), reduction="sum")
    chunked = score_windows(model, targets, 10, 7, "fp32", CPU)
    assert chunked == pytest.approx(float(expected), rel=1e-5)


def test_every_length_scores_the_same_bytes_and_unreachable_lengths_are_marked():
    corpus = tiny_corpus()
    regions = [r.data for r in scored_regions(split(corpus), 64, 2)]
    cfg = preset_config("lm_smoke", pe="learned_ape{max_position=40}", task="lm_en", seed=0)
    model = build_model(cfg)
    scores = evaluate_lengths(model, regions, (16, 32, 64), 16, chunk=16, batch_size=3, precision="fp32", device=CPU)
    by = {(s.mode, s.length): s for s in scores}
    assert set(by) == {("windows", 16), ("windows", 32), ("windows", 64), ("tail", 16), ("tail", 32), ("tail", 64)}
    assert [by["windows", s].n_bytes for s in (16, 32)] == [128, 128]
    assert [by["tail", s].n_bytes for s in (16, 32)] == [32, 32]
    assert not by["windows", 64].reached and "positions 0..39" in by["windows", 64].note
    assert by["windows", 64].nats is None and by["windows", 64].n_bytes == 0
    assert by["windows", 16].bpb is not None and by["windows", 16].bpb > 0
