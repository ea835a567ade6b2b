"""A language-modelling run's evaluation: bits per byte at every test length, in two modes, as
sums and counts, and the passkey grid (its samples: ``harness.tasks.lm.passkey``).

Axis letters: b batch (windows), s sequence, c query block, v vocab (257).

Each held-out region (M bytes, M the longest test length) is scored at every length S:

``windows``  the region cut into M / S non-overlapping windows of S bytes; each window is
             read from ``BOS`` and its bytes, and all its bytes are scored. Every length
             scores the same M bytes per region; a short window's first bytes have little
             context (the papers' default evaluation, and its "early-token curse").
``tail``     one window of the region's last S bytes; only its last ``tail`` bytes are
             scored, with S - ``tail`` bytes of context before them (ALiBi App. B): every
             length scores the same ``tail`` bytes, and a longer S only adds context.

A metric is the sum of the scored bytes' negative log-likelihoods in nats (float64) and the
integer number of bytes scored; bits per byte = nats / (bytes · ln 2), computed from them
where shown (:func:`bpb`).

A forward pass of S tokens runs as blocks of ``chunk`` queries against the cached keys
(the backbone's KV cache; every encoding supports it): no (S, S) score or bias tensor is
built, only (b, h, chunk, S), so a bias encoding evaluates 16,384 tokens in a few hundred
MiB. A length the encoding cannot reach (a learned table with fewer positions, randomized
positions drawn from a smaller range, memory) is recorded as not reached with the reason,
never dropped.

Asked for (``positions``), each reached length of the windows mode also keeps its loss by
position within the window (``harness.records.lm_positions``: nats and bytes per half-octave bucket),
and its total nats is then the exact sum of its buckets'.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from harness.config import RunConfig
from harness.records.lm_metrics import LengthScore, LmScores, PasskeyCell
from harness.records.lm_positions import PositionCurve
from harness.tasks.lm.data import task_regions, window_tokens
from harness.tasks.lm.passkey import ANSWER_BYTES, DEPTHS, passkey_lengths, passkey_samples
from harness.training.backbone import Backbone
from harness.training.precision import autocast, evaluation_precision

__all__ = [
    "answers_right",
    "evaluate_lengths",
    "evaluate_passkey",
    "evaluate_run",
    "score_positions",
    "score_windows",
]


@torch.no_grad()
def score_windows(
    model: Backbone, targets: Tensor, scored_from: int, chunk: int, precision: str, device: torch.device
) -> float:
    """Summed nats of bytes ``targets[:, scored_from:]`` (b, s) predicted from BOS and the
    bytes before each, fed ``chunk`` queries at a time through the KV cache."""
    return float(_score(model, targets, scored_from, chunk, precision, device, per_position=False))


@torch.no_grad()
def score_positions(model: Backbone, targets: Tensor, chunk: int, precision: str, device: torch.device) -> Tensor:
    """Each position's nats summed over the windows ``targets`` (b, s): a (s,) float64 tensor,
    every byte scored, each byte's loss taken in float32 and added in float64."""
    return _score(model, targets, 0, chunk, precision, device, per_position=True)


def _score(
    model: Backbone,
    targets: Tensor,
    scored_from: int,
    chunk: int,
    precision: str,
    device: torch.device,
    *,
    per_position: bool,
) -> Tensor:
    """:func:`score_windows`' sum (a float64 scalar), or with ``per_position`` the (s,) sums per position."""
    b, s = targets.shape
    targets = targets.to(device)
    total = torch.zeros((s,) if per_position else (), dtype=torch.float64, device=device)
    for lo, end, part in _predictions(model, targets, scored_from, chunk, precision, device):
        if per_position:
            nll = F.cross_entropy(part.reshape(-1, part.shape[-1]), targets[:, lo:end].reshape(-1), reduction="none")
            total[lo:end] += nll.reshape(b, end - lo).double().sum(0)  # (c',): summed over the windows
            continue
        nll = F.cross_entropy(part.reshape(-1, part.shape[-1]), targets[:, lo:end].reshape(-1), reduction="sum")
        total += nll.double()
    return total


def _predictions(
    model: Backbone, targets: Tensor, first: int, chunk: int, precision: str, device: torch.device
) -> Iterator[tuple[int, int, Tensor]]:
    """The model's float32 logits (b, c', v) at positions ``lo..end-1`` of windows ``targets``
    (b, s) from ``first`` on, block by block: each window read from BOS and the bytes before
    each position, ``chunk`` queries at a time through the KV cache (the blocks before ``first``
    run only to fill it). Yields (lo, end, logits)."""
    b, s = targets.shape
    tokens = window_tokens(targets).to(device)  # (b, s)
    state = model.start_state(b, s, device)
    for start in range(0, s, chunk):
        end = min(s, start + chunk)
        with autocast(precision, device):
            logits = model(tokens[:, start:end], state=state)  # (b, c, v)
        assert isinstance(logits, Tensor)
        lo = max(start, first)
        if lo < end:
            yield lo, end, logits[:, lo - start :].float()


def _positions_bound(model: Backbone) -> int | None:
    return getattr(model.pe, "max_position", None)


def evaluate_lengths(
    model: Backbone,
    regions: Sequence[bytes],
    lengths: Sequence[int],
    tail: int,
    *,
    chunk: int,
    batch_size: int,
    precision: str,
    device: torch.device,
    seed: int = 0,
    report: Callable[[LengthScore], None] | None = None,
    positions: bool = False,
) -> list[LengthScore]:
    """Every (mode, length) score of ``model`` on ``regions`` (each ``max(lengths)`` bytes):
    ``windows`` at every length, ``tail`` at the lengths of at least ``tail`` tokens; with
    ``positions``, each reached windows score carries its :class:`PositionCurve` (its nats
    then the exact sum of the curve's buckets)."""
    model.eval()
    data = torch.stack([torch.frombuffer(bytearray(r), dtype=torch.uint8) for r in regions]).to(torch.int64)  # (r, M)
    longest = data.shape[1]
    bound = _positions_bound(model)
    scores: list[LengthScore] = []
    plan = [("windows", s) for s in lengths] + [("tail", s) for s in lengths if s >= tail]
    draws = torch.Generator()  # its own stream, never torch's global one (runs side by side in threads)
    with model.pe.drawing_from(draws):
        for mode, s in plan:
            if bound is not None and s > bound:
                score = LengthScore(mode, s, None, 0, False, f"the encoding has positions 0..{bound - 1} only")
            else:
                if mode == "windows":
                    windows = data.reshape(-1, s)  # (r * M/S, S): consecutive windows of each region
                    scored_from, n_bytes = 0, data.numel()
                else:
                    windows = data[:, longest - s :]  # (r, S): the last S bytes
                    scored_from, n_bytes = s - tail, tail * data.shape[0]
                try:
                    nats, curve = 0.0, None
                    draws.manual_seed(seed)  # random positions at evaluation (randomized PE) are one fixed draw
                    if positions and mode == "windows":
                        per_position = torch.zeros(s, dtype=torch.float64)  # (s,)
                        for i in range(0, windows.shape[0], batch_size):
                            part = score_positions(model, windows[i : i + batch_size], chunk, precision, device)
                            per_position += part.cpu()
                        curve = PositionCurve.of(per_position.tolist(), windows.shape[0])
                        nats = curve.total()[0]
                    else:
                        for i in range(0, windows.shape[0], batch_size):
                            nats += score_windows(
                                model, windows[i : i + batch_size], scored_from, chunk, precision, device
                            )
                    if math.isfinite(nats):
                        score = LengthScore(mode, s, nats, n_bytes, curve=curve)
                    else:
                        score = LengthScore(mode, s, None, 0, False, f"the loss is {nats}")
                except (torch.OutOfMemoryError, MemoryError) as exc:
                    score = LengthScore(mode, s, None, 0, False, f"out of memory ({type(exc).__name__})")
                except ValueError as exc:  # an encoding refusing a length (randomized positions' range, ...)
                    score = LengthScore(mode, s, None, 0, False, str(exc).splitlines()[0])
            scores.append(score)
            if report is not None:
                report(score)
    return scores


@torch.no_grad()
def answers_right(
    model: Backbone, targets: Tensor, answer: int, chunk: int, precision: str, device: torch.device
) -> Tensor:
    """(b,) bool: whether the argmax at each of the last ``answer`` positions of ``targets``
    (b, s) is its byte, read from BOS and the bytes before (the greedy decode's answer, module
    docstring), fed ``chunk`` queries at a time through the KV cache."""
    b, s = targets.shape
    targets = targets.to(device)
    right = torch.ones(b, dtype=torch.bool, device=device)
    for lo, end, logits in _predictions(model, targets, s - answer, chunk, precision, device):  # the answer's
        right &= (logits.argmax(-1) == targets[:, lo:end]).all(-1)  # (b,)
    return right


def evaluate_passkey(
    model: Backbone,
    regions: Sequence[bytes],
    lengths: Sequence[int],
    samples: int,
    *,
    chunk: int,
    batch_size: int,
    precision: str,
    device: torch.device,
    seed: int = 0,
    report: Callable[[PasskeyCell], None] | None = None,
) -> list[PasskeyCell]:
    """The grid's cells of ``model``: at each of ``passkey_lengths(lengths)`` and each depth,
    ``samples`` samples (:func:`passkey_samples` under ``seed``) scored by :func:`answers_right`;
    length-major, depths in :data:`DEPTHS`' order."""
    model.eval()
    bound = getattr(model.pe, "max_position", None)
    cells: list[PasskeyCell] = []
    draws = torch.Generator()  # its own stream, as evaluate_lengths'
    with model.pe.drawing_from(draws):
        for s in passkey_lengths(lengths):
            drawn = passkey_samples(regions, s, samples, seed)
            if bound is not None and s > bound:
                done = [
                    PasskeyCell(s, d, 0, 0, False, f"the encoding has positions 0..{bound - 1} only") for d in DEPTHS
                ]
            else:
                targets = torch.tensor([list(x.text) for x in drawn], dtype=torch.int64)  # (samples · depths, s)
                try:
                    draws.manual_seed(seed)  # random positions at evaluation (randomized PE) are one fixed draw
                    right = torch.cat(
                        [
                            answers_right(
                                model, targets[i : i + batch_size], ANSWER_BYTES, chunk, precision, device
                            ).cpu()
                            for i in range(0, targets.shape[0], batch_size)
                        ]
                    )  # (samples · depths,) in ``drawn``'s order
                    done = [
                        PasskeyCell(
                            s, d, sum(bool(r) for r, x in zip(right, drawn, strict=True) if x.depth == d), samples
                        )
                        for d in DEPTHS
                    ]
                except (torch.OutOfMemoryError, MemoryError) as exc:
                    done = [PasskeyCell(s, d, 0, 0, False, f"out of memory ({type(exc).__name__})") for d in DEPTHS]
                except ValueError as exc:  # an encoding refusing a length (randomized positions' range, ...)
                    done = [PasskeyCell(s, d, 0, 0, False, str(exc).splitlines()[0]) for d in DEPTHS]
            for cell in done:
                cells.append(cell)
                if report is not None:
                    report(cell)
    return cells


def evaluate_run(
    cfg: RunConfig,
    model: Backbone,
    device: torch.device,
    report: Callable[[int, int, str], None] | None = None,
) -> LmScores:
    """Everything a language-modelling run of ``cfg`` measures on ``model``: bits per byte at
    each of its lengths in both modes (:func:`evaluate_lengths`, with curves by position
    where ``eval.positions`` asks) and the passkey grid where ``eval.passkey`` asks
    (:func:`evaluate_passkey`), on its task's scored regions
    (``harness.tasks.lm.data.task_regions``), in ``eval.precision`` (else the training's).
    ``report(done, total, note)`` hears each score (``length 512: 1.234 bpb``)."""
    lm = cfg.lm_eval
    regions = [r.data for r in task_regions(cfg.task, lm.lengths[-1], lm.regions)]
    precision = evaluation_precision(lm.precision, cfg.train.precision)
    total = len(lm.lengths) + len(lm.tail_lengths())
    done = 0

    def told(score: LengthScore) -> None:
        nonlocal done
        done += 1
        if report is not None:
            value = f"{score.bpb:.3f} bpb" if score.bpb is not None else f"not reached ({score.note})"
            report(done, total, f"{score.mode} {score.length}: {value}")

    if report is not None:
        report(0, total, "")
    scores = evaluate_lengths(
        model, regions, lm.lengths, lm.tail, chunk=lm.chunk, batch_size=lm.batch_size, precision=precision,
        device=device, seed=cfg.seed, report=told, positions=lm.positions,
    )  # fmt: skip
    passkey = None
    if lm.passkey:
        passkey = evaluate_passkey(
            model, regions, lm.lengths, lm.passkey, chunk=lm.chunk, batch_size=lm.batch_size, precision=precision,
            device=device, seed=cfg.seed,
        )  # fmt: skip
    return LmScores(tuple(scores), None if passkey is None else tuple(passkey), lm.positions)
