"""Bits per byte by position within the window: buckets, exact sums, the record's ``positions`` key."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from harness.evaluation.lm import evaluate_lengths
from harness.lm.config import LmConfig, lm_preset_config
from harness.lm.record import LmRecord, checksum
from harness.records.lm_metrics import LengthScore
from harness.records.lm_positions import PositionCurve, bucket_sums, position_edges
from leaderboard.lm_results import read_lm_results

CPU = torch.device("cpu")
BYTE = 65
"""Every held-out byte of the stand-in's regions."""


def test_edges_are_half_octaves_rounded_down_in_integers():
    assert position_edges(4096) == (0, 1, 2, 4, 5, 8, 11, 16, 22, 32, 45, 64, 90, 128, 181, 256, 362, 512, 724, 1024,
                                    1448, 2048, 2896, 4096)  # fmt: skip
    for length in (1, 2, 3, 7, 32, 100, 256, 16384, 65536):
        edges = position_edges(length)
        floats = {math.floor(2 ** (j / 2)) for j in range(40) if 2 ** (j / 2) < length}
        assert set(edges) == {0, length} | floats and list(edges) == sorted(set(edges))
    assert all(2**k in position_edges(65536) for k in range(17))  # every power of two: L = 256 is an edge


def test_bucket_sums_are_exact_sums_per_bucket():
    values = [0.1] * 10 + [1e16, 1.0, -1e16]
    edges = position_edges(13)
    got = bucket_sums(values, edges)
    assert got == tuple(math.fsum(values[a:b]) for a, b in pairwise(edges))
    with pytest.raises(ValueError, match="positions"):
        bucket_sums(values, position_edges(12))


class KnownLoss(nn.Module):
    """A stand-in model whose loss at position p of a window is known: it gives byte
    :data:`BYTE` the logit ``p / 10`` (and every other token 0), so a window of that byte
    costs ``log(e^(p/10) + 256) - p/10`` nats at position p, whatever the chunking."""

    def __init__(self) -> None:
        super().__init__()
        self.pe = SimpleNamespace(drawing_from=lambda generator: contextlib.nullcontext())  # draws nothing

    def start_state(self, batch: int, max_length: int, device: Any) -> dict[str, Any]:
        return {"at": 0}

    def forward(self, tokens: Tensor, *, state: dict[str, Any]) -> Tensor:
        b, c = tokens.shape
        at = state["at"]
        state["at"] = at + c
        logits = torch.zeros(b, c, 257)  # (b, c, v)
        logits[:, :, BYTE] = torch.arange(at, at + c, dtype=torch.float32) / 10
        return logits


def known(p: int) -> float:
    return math.log(math.exp(p / 10) + 256) - p / 10


def test_a_stand_in_with_known_losses_gives_the_expected_buckets_and_they_add_up_exactly():
    regions = [bytes([BYTE]) * 64] * 3  # 3 regions of the longest length
    model: Any = KnownLoss()
    scores = evaluate_lengths(
        model, regions, (16, 32, 64), 16, chunk=5, batch_size=2, precision="fp32", device=CPU, positions=True
    )
    plain = evaluate_lengths(model, regions, (16, 32, 64), 16, chunk=5, batch_size=2, precision="fp32", device=CPU)
    for score, without in zip(scores, plain, strict=True):
        if score.mode == "tail":  # the fixed target has no curve
            assert score.curve is None and score == without
            continue
        curve = score.curve
        assert curve is not None and curve.edges == position_edges(score.length)
        windows = 3 * 64 // score.length
        for (a, b), nats, n in zip(pairwise(curve.edges), curve.nats, curve.n_bytes,
                                   strict=True):  # fmt: skip
            assert n == windows * (b - a)
            assert nats == pytest.approx(windows * sum(known(p) for p in range(a, b)), rel=1e-6)
        assert curve.total() == (score.nats, score.n_bytes)  # exactly: the score is the sum of its buckets
        assert score.nats == pytest.approx(without.nats, rel=1e-6) and without.curve is None
    assert scores[2].curve is not None and scores[2].curve.nats[-1] > scores[2].curve.nats[0] / 64  # rises with p


def test_an_unreached_length_has_no_curve():
    model: Any = KnownLoss()
    model.pe.max_position = 32
    scores = evaluate_lengths(
        model, [bytes([BYTE]) * 64], (16, 32, 64), 16, chunk=8, batch_size=1, precision="fp32", device=CPU,
        positions=True,
    )  # fmt: skip
    by = {(s.mode, s.length): s for s in scores}
    assert not by["windows", 64].reached and by["windows", 64].curve is None
    assert by["windows", 32].curve is not None


def smoke(**evals: Any) -> LmConfig:
    """The lm_smoke preset's config (curves by position asked), without its passkey grid."""
    return lm_preset_config("lm_smoke", pe="alibi", task="lm_en", seed=0, overrides={"eval": {"passkey": 0, **evals}})


def _record(cfg: LmConfig, scores: tuple[LengthScore, ...]) -> LmRecord:
    return LmRecord(cfg, scores, 1.0, 10, 1.0, 1.0, {"total": 1}, {"corpus_sha256": "ab" * 32})


def _scored(cfg: LmConfig, *, positions: bool) -> tuple[LengthScore, ...]:
    regions = [bytes([BYTE]) * cfg.eval.lengths[-1]] * cfg.eval.regions
    e = cfg.eval
    got = evaluate_lengths(
        KnownLoss(), regions, e.lengths, e.tail, chunk=e.chunk, batch_size=2, precision="fp32", device=CPU,  # type: ignore[arg-type]
        positions=positions,
    )  # fmt: skip
    return tuple(got)


def test_a_record_keeps_its_curves_exactly_when_its_config_asks():
    cfg = smoke()
    assert cfg.eval.positions and cfg.to_dict()["eval"]["positions"] is True
    record = _record(cfg, _scored(cfg, positions=True))
    d = json.loads(json.dumps(record.to_dict()))
    assert [c["length"] for c in d["positions"]] == [32, 64, 128]
    again = LmRecord.from_dict(d)
    assert again == record and again.position_curve(128) == record.position_curve(128) is not None

    off = smoke(positions=False)
    assert "positions" not in off.to_dict()["eval"]  # left out: published configs keep their run ids
    plain = _record(off, _scored(off, positions=False)).to_dict()
    assert "positions" not in plain and LmRecord.from_dict(plain).position_curve(128) is None

    with pytest.raises(ValueError, match="exactly when"):
        LmRecord.from_dict({**plain, "positions": d["positions"]})
    with pytest.raises(ValueError, match="exactly when"):
        LmRecord.from_dict({k: v for k, v in d.items() if k != "positions"})


def _sealed(d: dict[str, Any]) -> dict[str, Any]:
    return {**d, "checksum": checksum(d)}


def test_curves_that_do_not_add_up_or_miss_a_length_are_refused():
    cfg = smoke()
    d = _record(cfg, _scored(cfg, positions=True)).to_dict()
    edited = json.loads(json.dumps(d))
    edited["positions"][0]["nats"][0] += 1.0
    with pytest.raises(ValueError, match="adds up"):
        LmRecord.from_dict(_sealed(edited))
    edited = json.loads(json.dumps(d))
    edited["positions"][1]["bytes"][0] += 1
    with pytest.raises(ValueError, match="windows' bytes"):
        LmRecord.from_dict(_sealed(edited))
    edited = json.loads(json.dumps(d))
    edited["positions"][2]["edges"] = [0, 64, 128]
    with pytest.raises(ValueError, match="edges"):
        LmRecord.from_dict(_sealed(edited))
    with pytest.raises(ValueError, match="missing at"):
        LmRecord.from_dict(_sealed({**d, "positions": d["positions"][:2]}))
    with pytest.raises(ValueError, match="one per length"):
        LmRecord.from_dict(_sealed({**d, "positions": [*d["positions"], d["positions"][0]]}))


def test_a_curve_adds_up_to_its_score_as_checked():
    curve = PositionCurve.of([0.5, 0.25, 0.125, 0.0625], windows=2)
    assert curve.edges == (0, 1, 2, 4) and curve.n_bytes == (2, 2, 4) and curve.total() == (0.9375, 8)
    curve.check(0.9375, 8)
    with pytest.raises(ValueError):
        curve.check(0.9375000000000001, 8)
    assert dataclasses.replace(curve, nats=(0.5, 0.25, 0.1875)).total()[0] == 0.9375


def test_published_records_read_as_not_measured_with_their_checksums():
    folder = Path(__file__).parents[3] / "leaderboard" / "results" / "lm"
    for record in read_lm_results(folder):
        if record.harness_ids is None:  # the records published before the one harness
            assert not record.config.eval.positions
            assert all(s.curve is None for s in record.scores)
