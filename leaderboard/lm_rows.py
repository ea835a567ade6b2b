"""The LM section's rows: one encoding (or variant) on one task, its records one per seed, and
each record's *effective context length* by two metrics, as the longest length at which the
metric stays within its tolerance at that length and every tested length below it, exact on
the records' sums and counts:

* **bits per byte** (:func:`reach`): within 5 % of its bpb at L, ``100 · nats(S) · bytes(L)
  <= 105 · nats(L) · bytes(S)``;
* **passkey retrieval** (:func:`passkey_reach`): at every depth of the grid at least 0.9 of the
  samples right, ``10 · right >= 9 · total`` (the algorithmic board's reach threshold,
  ``harness.records.ranking.REACH_THRESHOLD``, on counts: its reach is the same rule on exact
  match, and is the board's effective context length).

``leaderboard.lm_board`` renders them and judges the claims.

Rows are made only of a set of records that keeps to ``leaderboard.lm_results``' rules (each
run once, one protocol and one corpus per table, a variant's trained run with it): a set
that does not is an :class:`~leaderboard.lm_results.LmResultsError`, so no page ever pools
two protocols in a row or judges a variant without its trained run."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pezoo
from harness.config.pe_spec import display_name
from harness.lm.config import LmConfig
from harness.lm.record import LmRecord
from harness.records.counts import exact, fraction
from harness.records.lm_metrics import PasskeyCell
from harness.records.ranking import REACH_THRESHOLD
from harness.tasks.lm import LM_TASKS
from harness.tasks.lm.passkey import DEPTHS, passkey_lengths
from leaderboard.lm_results import LmResultsError, Located, label_of, read_lm_results, set_problems
from pezoo.spec import format_pe

__all__ = [
    "WITHIN",
    "LmRow",
    "label_of",
    "lm_rows",
    "machine_short",
    "mean_over_seeds",
    "passkey_holds",
    "passkey_reach",
    "ranked",
    "reach",
    "reach_in",
    "read_lm_results",
    "short_label",
    "weakest",
    "weakest_passkey",
    "weakest_tail",
]

WITHIN = (105, 100)
"""5 %: bpb(S) / bpb(L) <= 105 / 100, compared as integers times sums (no float boundary)."""


def short_label(cfg: LmConfig) -> str:
    """A row's name as the section shows it: the encoding as the algorithmic board names it
    (``harness.config.pe_spec.display_name``: ``randomized:ape{max_length=16384}``, the
    options a run records by default left out), a variant as its card shortens it
    (``rope → yarn×16 L=256``, ``rope → linear×4 +200 steps``)."""
    try:
        base = display_name(cfg.pe, cfg.pe_options)
    except (TypeError, ValueError, KeyError):  # a plugin's options the registry cannot read
        base = format_pe(cfg.pe, cfg.pe_options)
    if not cfg.eval_pe_options:
        return base
    parts = [pezoo.variant_label(k, v) or f"{k}={v}" for k, v in sorted(cfg.eval_pe_options.items())]
    tuned = f" +{cfg.finetune_steps} steps" if cfg.finetune_steps else ""
    return f"{base} → {', '.join(parts)}{tuned}"


@dataclass(frozen=True)
class LmRow:
    """One encoding (label) on one task: its records, one per seed."""

    task: str
    label: str
    records: tuple[LmRecord, ...]
    bases: tuple[LmRecord | None, ...] = ()  # a variant's trained run per seed (lm_rows requires it)

    @property
    def config(self) -> LmConfig:
        return self.records[0].config

    @property
    def shown(self) -> str:
        """The row's name in the tables and the answer: a variant as its card shortens it
        (:func:`short_label`; the whole ``label`` in the HTML's tooltip)."""
        return short_label(self.config)

    @property
    def length(self) -> int:
        return self.config.length

    @property
    def lengths(self) -> tuple[int, ...]:
        return self.config.eval.lengths

    def reaches(self) -> list[int]:
        """Each seed's :func:`reach`; a variant's against its trained run's bpb(L), never its own."""
        bases = self.bases or (None,) * len(self.records)
        if any(r.config.is_variant and base is None for r, base in zip(self.records, bases, strict=True)):
            raise ValueError(f"{self.label} on {self.task}: a variant without its trained run has no reference")
        return [reach(r, base) for r, base in zip(self.records, bases, strict=True)]

    def tail_reaches(self) -> list[int] | None:
        """Each seed's reach in the tail mode (:func:`reach_in`); None when a seed has no tail
        score at L (its tail target is longer than L: records made before issue 63)."""
        bases = self.bases or (None,) * len(self.records)
        got = [reach_in(r, base, "tail") for r, base in zip(self.records, bases, strict=True)]
        return None if any(g is None for g in got) else [g for g in got if g is not None]

    def passkey_reaches(self) -> list[int] | None:
        """Each seed's :func:`passkey_reach`; None when a seed did not measure the passkey grid."""
        got = [passkey_reach(r) for r in self.records]
        return None if any(g is None for g in got) else [g for g in got if g is not None]

    def passkey_counts(self, length: int, depth: int) -> tuple[int, int] | None:
        """The samples right and scored at (length, depth), summed over the row's seeds; None
        where a seed did not measure it or did not reach it."""
        cells = [r.passkey_cell(length, depth) for r in self.records]
        if any(c is None or not c.reached for c in cells):
            return None
        return sum(c.right for c in cells if c), sum(c.total for c in cells if c)

    def bpb(self, length: int, mode: str = "windows") -> list[float | None]:
        out = []
        for r in self.records:
            s = r.score(mode, length)
            out.append(None if s is None else s.bpb)
        return out

    def seconds_per_step(self) -> dict[str, float]:
        """The mean training seconds per step of the row's records, per machine (a run on a
        GPU and one on a CPU are not averaged together): {machine's short name: seconds}."""
        by: dict[str, list[float]] = {}
        for r in self.records:
            if r.seconds_per_step:
                by.setdefault(machine_short(str(r.provenance.get("device", "?"))), []).append(r.seconds_per_step)
        return {m: sum(v) / len(v) for m, v in sorted(by.items())}


def machine_short(device: str) -> str:
    """A provenance ``device`` as a column reads it: ``CPU``, or the GPU's name (``H100 80GB HBM3``)."""
    kind, _, name = device.partition(":")
    return "CPU" if kind == "cpu" else (name.removeprefix("NVIDIA ").strip() or kind)


def reach(record: LmRecord, base: LmRecord | None = None) -> int:
    """The record's effective context length by bits per byte: the longest tested length S
    (tokens) whose bpb, and every tested length's up to S, is within 5 % of the reference bpb
    at L, in non-overlapping windows (the mode the verdicts read); L itself when the next
    length is not (or L was not scored). The reference is the record's own bpb at L, or for a
    variant, ``base``'s: the trained run whose weights it evaluates or fine-tuned, so a
    variant that already costs more than 5 % at L reaches 0 (a PI factor too large for
    zero-shot reads flat, and broken)."""
    got = reach_in(record, base, "windows")
    return record.config.length if got is None else got


def reach_in(record: LmRecord, base: LmRecord | None = None, mode: str = "windows") -> int | None:
    """:func:`reach` in ``mode`` (``windows`` or ``tail``: the same last ``tail`` bytes scored with
    S − ``tail`` bytes of context), against the bpb at L in that mode; None when the record has
    no score at L in it (a tail target longer than L)."""
    length = record.config.length
    own = record.score(mode, length)
    if own is None or not own.reached or own.nats is None:
        return None
    ref = base.score(mode, length) if base is not None else None
    ref = ref if ref is not None and ref.reached and ref.nats is not None else own
    assert ref.nats is not None
    num, den = WITHIN
    if den * own.nats * ref.n_bytes > num * ref.nats * own.n_bytes:
        return 0
    best = length
    for s in record.config.eval.lengths:
        if s <= length:
            continue
        score = record.score(mode, s)
        if score is None or not score.reached or score.nats is None:
            break
        if den * score.nats * ref.n_bytes > num * ref.nats * score.n_bytes:
            break
        best = s
    return best


def passkey_holds(cells: Sequence[PasskeyCell]) -> bool:
    """Whether a length's cells (one per depth) all hold: reached, and at least
    :data:`~harness.records.ranking.REACH_THRESHOLD` (0.9) of each one's samples right, exactly
    on the counts (9 of 10 holds, 17 of 19 does not)."""
    at_least = exact(REACH_THRESHOLD)
    return bool(cells) and all(c.reached and c.total > 0 and fraction(c.right, c.total) >= at_least for c in cells)


def passkey_reach(record: LmRecord) -> int | None:
    """The record's effective context length by passkey retrieval: the longest length of its
    grid at which, and at every shorter length of the grid, every depth has at least 0.9 of its
    samples right (:func:`passkey_holds`); 0 when its shortest length does not (a length not
    reached ends it). None when the record did not measure the grid (records before issue 64)
    or its grid has no length (every test length within the grid's fixed bytes). Unlike bits per
    byte it needs no reference at L: the passkey is answered right or not."""
    lengths = passkey_lengths(record.config.eval.lengths)
    if record.passkey is None or not lengths:
        return None
    best = 0
    for s in lengths:
        cells = [record.passkey_cell(s, d) for d in DEPTHS]
        if not passkey_holds([c for c in cells if c is not None]) or None in cells:
            break
        best = s
    return best


def lm_rows(records: Sequence[LmRecord]) -> dict[str, list[LmRow]]:
    """Rows per task (in the track's task order: ``lm_en``, then ``lm_code``), each row's records
    sorted by seed; LmResultsError where the records break ``leaderboard.lm_results``' rules
    (a run twice, two records of one row and seed, two protocols or corpora in a table, a
    variant without its trained run)."""
    problems = set_problems([Located(r) for r in records])
    if problems:
        raise LmResultsError(problems)
    groups: dict[tuple[str, str], dict[int, LmRecord]] = {}
    for r in records:
        groups.setdefault((r.config.task, label_of(r.config)), {})[r.config.seed] = r
    by_id = {r.run_id: r for r in records}
    out: dict[str, list[LmRow]] = {}
    order = {t: i for i, t in enumerate(LM_TASKS)}
    for (task, label), seeds in sorted(groups.items(), key=lambda item: (order.get(item[0][0], len(order)), item[0])):
        row = tuple(seeds[s] for s in sorted(seeds))
        bases = tuple(by_id.get(r.trained_run_id()) if r.config.is_variant else None for r in row)
        out.setdefault(task, []).append(LmRow(task, label, row, bases))
    return out


def mean_over_seeds(values: Sequence[float | None]) -> float:
    """The mean of every seed's value; infinity when a seed has none (not reached ranks last)."""
    if not values or any(v is None for v in values):
        return math.inf
    return sum(v for v in values if v is not None) / len(values)


def ranked(rows: Sequence[LmRow]) -> list[LmRow]:
    """The rows as the section lists them: farthest weakest-seed reach first, then lowest bpb
    at the longest length."""
    return sorted(rows, key=lambda r: (-weakest(r), mean_over_seeds(r.bpb(r.lengths[-1])), r.label))


def weakest(row: LmRow) -> float:
    """The row's reach on its weakest seed, as a multiple of L."""
    return min(row.reaches()) / row.length


def weakest_passkey(row: LmRow) -> float | None:
    """The row's passkey effective context on its weakest seed, as a multiple of L; None when a
    seed did not measure it."""
    got = row.passkey_reaches()
    return None if got is None else min(got) / row.length


def weakest_tail(row: LmRow) -> float | None:
    """The row's tail-mode reach on its weakest seed, as a multiple of L; None without a tail score at L."""
    got = row.tail_reaches()
    return None if got is None else min(got) / row.length
