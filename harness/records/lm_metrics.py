"""What a language-modelling run measures, as counts: bits per byte per (mode, length) as a
sum of nats and a count of bytes (:class:`LengthScore`), and the passkey grid's cells as
samples right of samples scored (:class:`PasskeyCell`); and the checks a record's scores go
through (:func:`scores_from`, :func:`with_curves`, :func:`passkey_from`: the one validator
of LM scores, whichever record holds them). How they are measured is ``harness.evaluation.lm``;
the curves by position a windows score may carry, ``harness.records.lm_positions``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.config.checks import shown
from harness.config.lm_eval import MODES, LmEvalConfig
from harness.records.lm_positions import PositionCurve
from harness.tasks.lm.passkey import DEPTHS, FIXED_BYTES, passkey_lengths

__all__ = ["LengthScore", "LmScores", "PasskeyCell", "bpb", "grid_text", "passkey_from", "scores_from", "with_curves"]


@dataclass(frozen=True)
class LengthScore:
    """One (mode, length) of an evaluation.

    Attributes:
        mode: ``windows`` or ``tail``.
        length: S, tokens per window.
        nats: the scored bytes' summed negative log-likelihood (nats); None when not reached.
        n_bytes: the bytes scored (0 when not reached).
        reached: False when the model could not be evaluated at S.
        note: why not (empty when reached).
        curve: the windows mode's nats and bytes by position in the window, where asked
            (``evaluate_lengths(positions=True)``) and reached; None otherwise. Not part of
            :meth:`to_dict`: a record keeps curves under a key of its own (``positions``), so
            scores without them read as they always did.
    """

    mode: str
    length: int
    nats: float | None
    n_bytes: int
    reached: bool = True
    note: str = ""
    curve: PositionCurve | None = None

    @property
    def bpb(self) -> float | None:
        return bpb(self.nats, self.n_bytes) if self.reached and self.nats is not None else None

    def to_dict(self) -> dict[str, object]:
        return {
            "mode": self.mode,
            "length": self.length,
            "nats": self.nats,
            "bytes": self.n_bytes,
            "reached": self.reached,
            "note": self.note,
        }


def bpb(nats: float | None, n_bytes: int) -> float:
    """Bits per byte of a sum of nats over ``n_bytes`` bytes."""
    if nats is None or n_bytes <= 0:
        raise ValueError(f"bits per byte need a sum of nats and a positive byte count, got {nats}, {n_bytes}")
    return nats / (n_bytes * math.log(2))


@dataclass(frozen=True)
class PasskeyCell:
    """One (length, depth) of the grid: how many samples the model answered right, of how many.

    Attributes:
        length: S, bytes per sample.
        depth: where the needle starts, in percent of the filler.
        right: samples whose greedy continuation is the answer.
        total: samples scored (0 when not reached).
        reached: False when the model could not be evaluated at S.
        note: why not (empty when reached).
    """

    length: int
    depth: int
    right: int
    total: int
    reached: bool = True
    note: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "length": self.length,
            "depth": self.depth,
            "right": self.right,
            "total": self.total,
            "reached": self.reached,
            "note": self.note,
        }


def grid_text(cells: Sequence[PasskeyCell] | None) -> str:
    """A grid in a line: per length the samples right of those scored, every depth together
    (``256: 48/50, 512: 31/50``), ``-`` and why where not reached; ``not measured`` for None."""
    if cells is None:
        return "not measured"
    by: dict[int, list[PasskeyCell]] = {}
    for c in cells:
        by.setdefault(c.length, []).append(c)
    parts = [
        f"{s}: {sum(c.right for c in at)}/{sum(c.total for c in at)}"
        if all(c.reached for c in at)
        else f"{s}: - ({next(c.note for c in at if not c.reached)})"
        for s, at in by.items()
    ]
    return ", ".join(parts) or f"no test length above its {FIXED_BYTES} fixed bytes"


def scores_from(run_id: Any, raw_scores: Any, config: LmEvalConfig) -> tuple[LengthScore, ...]:
    """The scores of record ``run_id``: one per (mode, length) ``config`` (an LM run's eval section) evaluates, each
    reached with finite nats or not reached with a note why; ValueError otherwise."""
    if not isinstance(raw_scores, list):
        raise ValueError(f"record {run_id}: its scores must be a list, got {shown(raw_scores)}")
    scores = []
    seen = set()
    for raw in raw_scores:
        if not isinstance(raw, Mapping) or set(raw) != {"mode", "length", "nats", "bytes", "reached", "note"}:
            raise ValueError(f"record {run_id}: a score must have mode, length, nats, bytes, reached, note")
        if raw["mode"] not in MODES or raw["length"] not in config.lengths:
            raise ValueError(f"record {run_id}: score at {raw['mode']!r} {raw['length']!r} is not evaluated")
        if (raw["mode"], raw["length"]) in seen:
            raise ValueError(f"record {run_id}: two scores at {raw['mode']} {raw['length']}")
        seen.add((raw["mode"], raw["length"]))
        n_bytes, nats, reached = raw["bytes"], raw["nats"], raw["reached"]
        if not isinstance(reached, bool) or not isinstance(n_bytes, int) or isinstance(n_bytes, bool):
            raise ValueError(f"record {run_id}: reached must be true/false and bytes an integer")
        if reached and (not isinstance(nats, int | float) or not math.isfinite(nats) or nats < 0 or n_bytes <= 0):
            raise ValueError(f"record {run_id}: a reached score needs finite nats >= 0 and bytes > 0")
        if not reached and (nats is not None or n_bytes != 0 or not raw["note"]):
            raise ValueError(f"record {run_id}: a score not reached has no nats, 0 bytes and a note why")
        scores.append(
            LengthScore(
                raw["mode"],
                raw["length"],
                None if nats is None else float(nats),
                n_bytes,
                reached,
                str(raw["note"]),
            )
        )
    wanted = {("windows", s) for s in config.lengths} | {("tail", s) for s in config.tail_lengths()}
    if seen != wanted:
        raise ValueError(f"record {run_id}: scores missing at {sorted(wanted - seen)}")
    return tuple(scores)


def with_curves(run_id: Any, raw_curves: Any, scores: tuple[LengthScore, ...]) -> tuple[LengthScore, ...]:
    """``scores`` with the position curves of record ``run_id`` attached: one curve per length
    reached in the windows mode, each adding up exactly to its score
    (:meth:`PositionCurve.from_dict`); ValueError otherwise."""
    if not isinstance(raw_curves, list):
        raise ValueError(f"record {run_id}: positions must be a list of curves, got {shown(raw_curves)}")
    reached = {s.length: s for s in scores if s.mode == "windows" and s.reached}
    curves: dict[int, PositionCurve] = {}
    for raw in raw_curves:
        length = raw.get("length") if isinstance(raw, Mapping) else None
        if length not in reached or length in curves:
            raise ValueError(
                f"record {run_id}: a position curve at {shown(length)}: curves are one per length reached in windows"
            )
        assert isinstance(raw, Mapping) and isinstance(length, int)
        score = reached[length]
        try:
            curves[length] = PositionCurve.from_dict(
                {k: v for k, v in raw.items() if k != "length"}, length, score.nats, score.n_bytes
            )
        except ValueError as exc:
            raise ValueError(f"record {run_id}: {exc}") from None
    if set(curves) != set(reached):
        raise ValueError(f"record {run_id}: position curves missing at {sorted(set(reached) - set(curves))}")
    return tuple(
        dataclasses.replace(s, curve=curves[s.length]) if s.mode == "windows" and s.length in curves else s
        for s in scores
    )


def passkey_from(run_id: Any, raw_cells: Any, config: LmEvalConfig) -> tuple[PasskeyCell, ...]:
    """The passkey cells of record ``run_id``: one per (length, depth) of the grid ``config``
    asks for, each reached with ``0 <= right <= total == eval.passkey`` or not reached with
    nothing counted and a note why; ValueError otherwise."""
    if not isinstance(raw_cells, list):
        raise ValueError(f"record {run_id}: passkey must be a list of cells, got {shown(raw_cells)}")
    samples = config.passkey
    cells, seen = [], set()
    for raw in raw_cells:
        if not isinstance(raw, Mapping) or set(raw) != {"length", "depth", "right", "total", "reached", "note"}:
            raise ValueError(f"record {run_id}: a passkey cell must have length, depth, right, total, reached, note")
        at = (raw["length"], raw["depth"])
        if raw["length"] not in passkey_lengths(config.lengths) or raw["depth"] not in DEPTHS:
            raise ValueError(
                f"record {run_id}: a passkey cell at length {shown(at[0])} depth {shown(at[1])} is not tested"
            )
        if at in seen:
            raise ValueError(f"record {run_id}: two passkey cells at length {at[0]} depth {at[1]}")
        seen.add(at)
        right, total, reached, note = raw["right"], raw["total"], raw["reached"], raw["note"]
        if not isinstance(reached, bool) or not isinstance(note, str):
            raise ValueError(f"record {run_id}: a passkey cell's reached is true/false and its note a string")
        if any(not isinstance(n, int) or isinstance(n, bool) for n in (right, total)):
            raise ValueError(f"record {run_id}: a passkey cell's right and total are integers")
        if reached and not (0 <= right <= total == samples):
            raise ValueError(
                f"record {run_id}: a passkey cell counts 0..{samples} right of {samples} (eval.passkey), got "
                f"{right} of {total}"
            )
        if not reached and (right != 0 or total != 0 or not note):
            raise ValueError(f"record {run_id}: a passkey cell not reached counts nothing and says why")
        cells.append(PasskeyCell(at[0], at[1], right, total, reached, note))
    wanted = {(s, d) for s in passkey_lengths(config.lengths) for d in DEPTHS}
    if seen != wanted:
        raise ValueError(f"record {run_id}: passkey cells missing at {sorted(wanted - seen)}")
    return tuple(cells)


@dataclass(frozen=True)
class LmScores:
    """Everything a language-modelling run measures: its :class:`LengthScore` per (mode,
    length), each reached windows score with its curve by position where the config asks
    (``eval.positions``), and the passkey grid's cells where it asks (``eval.passkey`` > 0;
    None: not measured). What a ``RunRecord`` of an LM task holds where an algorithmic
    record holds its ``LengthMetrics``."""

    scores: tuple[LengthScore, ...]
    passkey: tuple[PasskeyCell, ...] | None = None
    positions: bool = False
    """Whether curves by position were measured (``eval.positions``): the record then has its
    ``positions`` key, empty where no length was reached."""

    def score(self, mode: str, length: int) -> LengthScore | None:
        return next((s for s in self.scores if s.mode == mode and s.length == length), None)

    def to_body(self) -> dict[str, Any]:
        """The record's keys for them: ``metrics`` (the scores), ``positions`` (the curves,
        one per length reached in the windows mode) where measured, ``passkey`` (the cells)
        where measured."""
        body: dict[str, Any] = {"metrics": [s.to_dict() for s in self.scores]}
        if self.positions:
            body["positions"] = [
                {"length": s.length, **s.curve.to_dict()} for s in self.scores if s.mode == "windows" and s.curve
            ]
        if self.passkey is not None:
            body["passkey"] = [c.to_dict() for c in self.passkey]
        return body

    @classmethod
    def from_body(cls, run_id: Any, body: Mapping[str, Any], config: LmEvalConfig) -> LmScores:
        """The scores of :meth:`to_body`'s form for a run evaluated as ``config`` says:
        ``positions`` exactly when it asks for curves, ``passkey`` exactly when it asks for
        the grid; ValueError otherwise."""
        scores = scores_from(run_id, body.get("metrics"), config)
        if ("passkey" in body) != bool(config.passkey):
            raise ValueError(
                f"record {run_id}: a record has passkey cells exactly when its config's eval.passkey is above 0 "
                f"(it is {config.passkey})"
            )
        if ("positions" in body) != config.positions:
            raise ValueError(
                f"record {run_id}: a record has position curves exactly when its config's eval.positions is true"
            )
        if "positions" in body:
            scores = with_curves(run_id, body["positions"], scores)
        passkey = passkey_from(run_id, body["passkey"], config) if "passkey" in body else None
        return cls(scores, passkey, config.positions)
