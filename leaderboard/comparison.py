"""One task table built from two results sets, compared row by row: the cross-device check.

A GPU retrain of a published CPU table (issue 62) has the same configs and seeds, so the
same run ids (the device is provenance), and cannot share a results folder with it; it is
published in a folder of its own, and :func:`compare` builds the same (preset, task, test
range) table from each folder with the board's own functions (``leaderboard.board.assemble``
with the sweep files and ``retired.toml`` beside each folder, as the site reads them; the
ranks, ≈ marks and reach of ``leaderboard.rows`` and ``leaderboard.reach``; the verdicts of
``leaderboard.claims``), so nothing here restates a rule. It writes down, per row, the rank,
the ≈ mark, the reach, EM>N and how the row was made in each, and the per-length exact-match
counts side by side; per claim, the verdict in each; per run pair (one run id in both, or
one row and seed whose configs differ: named, not paired) the absolute difference of exact
match at every length; and a summary of what agrees and what does not.

``pezoo leaderboard compare`` (``leaderboard.compare``) prints it as markdown or JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from harness.records import counts
from leaderboard import claims as cl
from leaderboard.board import Board, Table, assemble
from leaderboard.making import making_of
from leaderboard.plans import read_plans
from leaderboard.reach import Reach, reaches, times_n
from leaderboard.records import _differing_keys, record_label, test_range
from leaderboard.retired import read_retirements
from leaderboard.rows import Row, cell_text
from leaderboard.schema import Record, read_results

DIFFERENCE_DIGITS = 3
"""Decimals of an absolute difference of exact match in the markdown (the JSON keeps the counts)."""


class ComparisonError(ValueError):
    """The two results sets cannot be compared as asked (no such table, or more than one)."""


@dataclass(frozen=True)
class Side:
    """One results set's table, as the board builds it.

    Attributes:
        source: the results folder, as given.
        board: the board assembled from the folder (with its sweep files and retirements).
        table: the (preset, task, test range) table compared.
        records: the table's runs.
        verdicts: each claim's verdict on the table (``leaderboard.claims.table_verdicts``).
    """

    source: str
    board: Board
    table: Table
    records: tuple[Record, ...]
    verdicts: tuple[tuple[cl.Claim, cl.Verdict], ...]

    def row(self, label: str) -> Row | None:
        return next((r for r in self.table.rows if r.label == label), None)

    def reach(self, label: str) -> Reach | None:
        """The row's reach per seed (``leaderboard.reach.reaches``); None where it did not fit."""
        return next((r for r in reaches(self.table) if r.row.label == label), None)

    def ways(self) -> list[str]:
        """How its runs were made (``leaderboard.making``), each way once, with its number of runs."""
        found: dict[str, int] = {}
        for rec in self.records:
            made = making_of(rec.data).sentence()
            found[made] = found.get(made, 0) + 1
        return [f"{k} run{'s' if k != 1 else ''} {made}" for made, k in sorted(found.items())]


@dataclass(frozen=True)
class Counts:
    """Exact-match counts at one length: examples right and examples, summed over seeds or one run's."""

    exact: int
    n: int

    @property
    def fraction(self) -> Fraction:
        return Fraction(self.exact, self.n)

    def text(self) -> str:
        return f"{self.exact}/{self.n}"


@dataclass(frozen=True)
class RowComparison:
    """One row (an encoding label) in both tables (``a`` or ``b`` None where it is in one only)."""

    label: str
    a: Row | None
    b: Row | None
    reach_a: Reach | None
    reach_b: Reach | None
    lengths: tuple[tuple[int, Counts | None, Counts | None], ...]  # (n, A's counts over its seeds, B's)

    @property
    def in_both(self) -> bool:
        return self.a is not None and self.b is not None

    @property
    def rank_agrees(self) -> bool:
        return self.in_both and _rank(self.a) == _rank(self.b)

    @property
    def overlap_agrees(self) -> bool:
        return self.in_both and _overlap(self.a) == _overlap(self.b)

    @property
    def reach_agrees(self) -> bool:
        """The weakest seed reaches the same scale in both (or neither fitted)."""
        return self.in_both and _weakest(self.reach_a) == _weakest(self.reach_b)


@dataclass(frozen=True)
class VerdictComparison:
    """One claim's verdict on each table (None: no verdict there)."""

    claim: str
    source: str
    a: cl.Verdict | None
    b: cl.Verdict | None

    @property
    def agrees(self) -> bool:
        """The same verdict as each table words it (or no verdict on either)."""
        return _verdict_text(self.a) == _verdict_text(self.b)


@dataclass(frozen=True)
class RunPair:
    """One run in both results sets (one run id: same config, same seed), its exact match per
    length in each, and how each was made."""

    run_id: str
    label: str
    seed: int
    made_a: str
    made_b: str
    lengths: tuple[tuple[int, Counts, Counts], ...]

    def difference(self, length: int) -> Fraction:
        """|EM_A − EM_B| at ``length``, exactly."""
        _, a, b = next(item for item in self.lengths if item[0] == length)
        return abs(a.fraction - b.fraction)

    @property
    def differences(self) -> tuple[tuple[int, Fraction], ...]:
        """(length, |EM_A − EM_B|) at every length both evaluated."""
        return tuple((n, abs(a.fraction - b.fraction)) for n, a, b in self.lengths)

    @property
    def largest(self) -> tuple[int, Fraction] | None:
        """The length with the largest difference (the first such), and the difference."""
        diffs = self.differences
        if not diffs:
            return None
        top = max(d for _, d in diffs)
        return next((n, d) for n, d in diffs if d == top)

    @property
    def identical(self) -> bool:
        """Every per-length count equal (and the same lengths)."""
        return all(a == b for _, a, b in self.lengths)


@dataclass(frozen=True)
class Unpaired:
    """One row and seed in both sets under different run ids: its configs differ (``keys``)."""

    label: str
    seed: int
    run_a: str
    run_b: str
    keys: tuple[str, ...]


@dataclass(frozen=True)
class Comparison:
    """The two tables, row by row, claim by claim and run by run."""

    a: Side
    b: Side
    rows: tuple[RowComparison, ...]  # A's order, then B's rows not in A in B's order
    verdicts: tuple[VerdictComparison, ...]
    pairs: tuple[RunPair, ...]
    unpaired: tuple[Unpaired, ...]

    @property
    def both(self) -> list[RowComparison]:
        return [r for r in self.rows if r.in_both]

    def swaps(self) -> list[tuple[str, str]]:
        """(x, y): rows ranked in both, x above y in A and y above x in B (ranks compared by
        number, the ≈ aside; a tie on either side is not a swap)."""
        ranked = [r for r in self.both if _rank(r.a) is not None and _rank(r.b) is not None]
        out = []
        for i, x in enumerate(ranked):
            for y in ranked[i + 1 :]:
                ax, ay, bx, by = _rank(x.a), _rank(y.a), _rank(x.b), _rank(y.b)
                assert ax is not None and ay is not None and bx is not None and by is not None
                if (ax < ay and bx > by) or (ax > ay and bx < by):
                    up, down = (x, y) if ax < ay else (y, x)
                    out.append((up.label, down.label))
        return out

    def summary(self) -> dict[str, Any]:
        """What agrees and what does not, as counts and lists (the markdown's Summary and the JSON's)."""
        both = self.both
        largest = max(((p, *p.largest) for p in self.pairs if p.largest is not None), key=lambda t: t[2], default=None)
        return {
            "rows_in_both": len(both),
            "only_in_a": [r.label for r in self.rows if r.a is not None and r.b is None],
            "only_in_b": [r.label for r in self.rows if r.b is not None and r.a is None],
            "ranks_agree": sum(r.rank_agrees for r in both),
            "ranks_differ": [r.label for r in both if not r.rank_agrees],
            "swapped": [list(s) for s in self.swaps()],
            "overlaps_agree": sum(r.overlap_agrees for r in both),
            "overlaps_differ": [r.label for r in both if not r.overlap_agrees],
            "reach_agrees": sum(r.reach_agrees for r in both),
            "reach_differs": [r.label for r in both if not r.reach_agrees],
            "verdicts": len(self.verdicts),
            "verdicts_agree": sum(v.agrees for v in self.verdicts),
            "verdicts_differ": [v.claim for v in self.verdicts if not v.agrees],
            "run_pairs": len(self.pairs),
            "run_pairs_identical": sum(p.identical for p in self.pairs),
            "largest_difference": None
            if largest is None
            else {
                "label": largest[0].label,
                "seed": largest[0].seed,
                "length": largest[1],
                "difference": _fraction_json(largest[2]),
            },
            "unpaired": len(self.unpaired),
        }


def _rank(row: Row | None) -> int | None:
    return None if row is None else row.rank


def _overlap(row: Row | None) -> bool:
    return row is not None and row.overlaps_above


def _weakest(reach: Reach | None) -> int | None:
    return None if reach is None else reach.weakest


def load_side(folder: Path, task: str, preset: str | None = None, tested_to: int | None = None) -> Side:
    """The ``task`` table of the results in ``folder`` (of ``preset`` and test range
    ``tested_to`` where given), assembled as the site assembles it.

    Raises:
        ComparisonError: the folder has no such table, or more than one (say which with
            ``preset`` / ``tested_to``).
        leaderboard.schema.ResultsError, leaderboard.records.BoardError,
        leaderboard.retired.RetiredFileError: as ``check`` and ``build`` raise them.
    """
    records = read_results(folder)
    board = assemble(records, read_plans(folder.parent), read_retirements(folder.parent))
    on_task = board.tables_of_task(task)
    tables = [
        t for t in on_task if (preset is None or t.preset == preset) and (tested_to is None or t.tested_to == tested_to)
    ]
    if len(tables) != 1:
        have = "; ".join(f"preset {t.preset} tested to {t.tested_to}" for t in on_task) or "none"
        asked = "".join(
            [f" of preset {preset}" if preset else "", f" tested to {tested_to}" if tested_to is not None else ""]
        )
        why = "no" if not tables else f"{len(tables)}"
        hint = "" if not tables else ": choose one with --preset (--preset-b for the second) and --tested-to"
        raise ComparisonError(f"{folder}: {why} {task} table{asked} (its {task} tables: {have}){hint}")
    table = tables[0]
    runs = tuple(
        r for r in board.records_where(preset=table.preset, task=task) if test_range(r.data) == table.tested_to
    )
    return Side(str(folder), board, table, runs, tuple(cl.table_verdicts(board, table)))


def compare(a: Side, b: Side) -> Comparison:
    """The two sides' tables compared (see the module docstring)."""
    labels = [r.label for r in a.table.rows] + [r.label for r in b.table.rows if a.row(r.label) is None]
    counts_a, counts_b = _counts_by_row(a.records), _counts_by_row(b.records)
    rows = []
    for label in labels:
        ca, cb = counts_a.get(label, {}), counts_b.get(label, {})
        lengths = tuple((n, ca.get(n), cb.get(n)) for n in sorted(set(ca) | set(cb)))
        rows.append(RowComparison(label, a.row(label), b.row(label), a.reach(label), b.reach(label), lengths))
    pairs, unpaired = _pairs(a.records, b.records)
    return Comparison(a, b, tuple(rows), _verdicts(a, b), pairs, unpaired)


def _counts_by_row(records: Sequence[Record]) -> dict[str, dict[int, Counts]]:
    """label -> length -> exact-match counts summed over the row's seeds."""
    out: dict[str, dict[int, Counts]] = {}
    for rec in records:
        by_length = out.setdefault(record_label(rec.data), {})
        for m in rec.data["metrics"]:
            have = by_length.get(m["length"], Counts(0, 0))
            by_length[m["length"]] = Counts(have.exact + m["exact"], have.n + m["n"])
    return out


def _verdicts(a: Side, b: Side) -> tuple[VerdictComparison, ...]:
    """Per claim with a verdict on either table, both verdicts, in the board's order of claims."""
    va, vb = dict(a.verdicts), dict(b.verdicts)
    out = []
    for claim in cl.CLAIMS:
        if claim in va or claim in vb:
            out.append(VerdictComparison(claim.says, claim.source, va.get(claim), vb.get(claim)))
    return tuple(out)


def _pairs(a: Sequence[Record], b: Sequence[Record]) -> tuple[tuple[RunPair, ...], tuple[Unpaired, ...]]:
    """The runs of both sets (one run id), and the rows and seeds in both under other run ids."""
    by_id = {r.run_id: r for r in b}
    by_seed = {(record_label(r.data), int(r.data["seed"])): r for r in b}
    pairs, unpaired = [], []
    for ra in a:
        label, seed = record_label(ra.data), int(ra.data["seed"])
        rb = by_id.get(ra.run_id)
        if rb is None:
            other = by_seed.get((label, seed))
            if other is not None:
                keys = tuple(_differing_keys(ra.data["config"], other.data["config"]))
                unpaired.append(Unpaired(label, seed, ra.run_id, other.run_id, keys))
            continue
        ma = {m["length"]: Counts(m["exact"], m["n"]) for m in ra.data["metrics"]}
        mb = {m["length"]: Counts(m["exact"], m["n"]) for m in rb.data["metrics"]}
        lengths = tuple((n, ma[n], mb[n]) for n in sorted(set(ma) & set(mb)))
        made_a, made_b = making_of(ra.data).sentence(), making_of(rb.data).sentence()
        pairs.append(RunPair(ra.run_id, label, seed, made_a, made_b, lengths))
    pairs.sort(key=lambda p: (p.label, p.seed))
    return tuple(pairs), tuple(unpaired)


# -- the report ----------------------------------------------------------------------------


def _rank_text(row: Row | None) -> str:
    return "absent" if row is None else row.rank_text()


def _weakest_text(row: Row | None, reach: Reach | None, table: Table) -> str:
    """The weakest seed's reach as a multiple of N, as the answer's table shows it."""
    if row is None:
        return "absent"
    if reach is None:
        return "did not fit"
    return "—" if reach.weakest <= table.train_max else times_n(reach.weakest, table)


def _cell(row: Row | None, score: str) -> str:
    return "absent" if row is None else cell_text(row, score)


def _made(row: Row | None) -> str:
    if row is None or row.making is None:
        return ""
    return row.making.mark or row.making.kind


def _verdict_text(v: cl.Verdict | None) -> str:
    return "no verdict" if v is None else v.shown


def _yes(flag: bool) -> str:
    return "yes" if flag else "**no**"


def _difference(x: Fraction) -> str:
    return counts.fixed(x, DIFFERENCE_DIGITS)


def markdown(c: Comparison) -> str:
    """The comparison as a markdown report: the two sides, the summary, the rows, the
    verdicts, exact match per length per row, and the run pairs."""
    from tabulate import tabulate

    from leaderboard.readme import md

    ta, tb = c.a.table, c.b.table
    n = ta.train_max
    title = f"{ta.task}, preset {ta.preset}" + (f" / {tb.preset}" if tb.preset != ta.preset else "")
    out = [f"# {md(title)}, tested to {ta.tested_to}: A against B", ""]
    for name, side in (("A", c.a), ("B", c.b)):
        out.append(f"- **{name}**: `{md(side.source)}`: {md('; '.join(side.ways()))}")
    out += ["", "## Summary", ""]
    s = c.summary()
    total = s["rows_in_both"]
    out.append(f"- rows in both: {total}; only in A: {md(', '.join(s['only_in_a']) or 'none')}; only in B: "
               f"{md(', '.join(s['only_in_b']) or 'none')}")  # fmt: skip
    for key, what in (("ranks", "rank"), ("overlaps", "≈ mark"), ("reach", "weakest seed's reach")):
        agree = s[f"{key}_agree" if key != "reach" else "reach_agrees"]
        differ = s[f"{key}_differ" if key != "reach" else "reach_differs"]
        out.append(f"- {what}: the same on {agree} of {total} rows; differs on {md(', '.join(differ) or 'none')}")
    swapped = "; ".join(f"{x} above {y} in A, below it in B" for x, y in s["swapped"])
    out.append(f"- order: {len(s['swapped'])} pair(s) of ranked rows swapped{': ' + md(swapped) if swapped else ''}")
    out.append(
        f"- verdicts: the same on {s['verdicts_agree']} of {s['verdicts']} claims; differ on "
        f"{md('; '.join(s['verdicts_differ']) or 'none')}"
    )
    largest = s["largest_difference"]
    top = (
        ""
        if largest is None or largest["difference"][0] == 0
        else f"; the largest {md('|ΔEM|')} is {_difference(Fraction(*largest['difference']))} "
        f"({md(largest['label'])} seed {largest['seed']}, n = {largest['length']})"
    )
    out.append(
        f"- runs: {s['run_pairs']} in both (one run id); {s['run_pairs_identical']} with every per-length count "
        f"equal{top}" + (f"; {s['unpaired']} row-and-seed(s) in both under other configs" if s["unpaired"] else "")
    )
    out += ["", "## Rows", ""]
    body = [
        [
            md(r.label),
            _rank_text(r.a),
            _rank_text(r.b),
            _weakest_text(r.a, r.reach_a, ta),
            _weakest_text(r.b, r.reach_b, tb),
            _cell(r.a, "reach"),
            _cell(r.b, "reach"),
            _cell(r.a, "em_beyond"),
            _cell(r.b, "em_beyond"),
            md(_made(r.a)),
            md(_made(r.b)),
            "—" if not r.in_both else _yes(r.rank_agrees and r.overlap_agrees and r.reach_agrees),
        ]
        for r in c.rows
    ]
    headers = ["encoding", "rank A", "rank B", "weakest A", "weakest B", "reach A", "reach B"]
    headers += [f"EM>{n} A", f"EM>{n} B", "made A", "made B", "agree"]
    out += [tabulate(body, headers=headers, tablefmt="github", disable_numparse=True), ""]
    if c.verdicts:
        out += ["## Verdicts", ""]
        vbody = [[md(v.claim), md(_verdict_text(v.a)), md(_verdict_text(v.b)), _yes(v.agrees)] for v in c.verdicts]
        out += [tabulate(vbody, headers=["claim", "A", "B", "agree"], tablefmt="github", disable_numparse=True), ""]
    out += ["## Exact match per length", "", "Examples exactly right of examples, summed over each row's seeds.", ""]
    for r in c.rows:
        lbody = [
            [
                str(length),
                "" if ca is None else ca.text(),
                "" if cb is None else cb.text(),
                "" if ca is None or cb is None else _difference(abs(ca.fraction - cb.fraction)),
            ]
            for length, ca, cb in r.lengths
        ]
        out += [f"### {md(r.label)}", ""]
        headers = ["n", "A", "B", md("|ΔEM|")]
        out += [tabulate(lbody, headers=headers, tablefmt="github", disable_numparse=True), ""]
    if c.pairs:
        out += [
            "## Run pairs",
            "",
            md("Per run in both sets: |EM_A − EM_B| at each length where the counts differ."),
            "",
        ]
        pbody = []
        for p in c.pairs:
            differing = [(length, d) for length, d in p.differences if d]
            pbody.append(
                [
                    md(p.label),
                    str(p.seed),
                    p.run_id,
                    str(len(differing)),
                    ", ".join(f"{length}: {_difference(d)}" for length, d in differing) or "none",
                ]
            )
        headers = ["encoding", "seed", "run id", "lengths differing", md("|ΔEM| per length")]
        out += [tabulate(pbody, headers=headers, tablefmt="github", disable_numparse=True), ""]
    if c.unpaired:
        out += ["Rows and seeds in both under other run ids (their configs differ), not paired:", ""]
        out += [f"- {md(u.label)} seed {u.seed}: {u.run_a} / {u.run_b} ({md(', '.join(u.keys))})" for u in c.unpaired]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def as_json(c: Comparison) -> dict[str, Any]:
    """The comparison as JSON-ready data: every count as it is, every fraction as [numerator, denominator]."""

    def side(s: Side) -> dict[str, Any]:
        t = s.table
        return {
            "source": s.source,
            "preset": t.preset,
            "task": t.task,
            "train_max": t.train_max,
            "tested_to": t.tested_to,
            "runs": len(s.records),
            "made": s.ways(),
        }

    def row(r: Row | None, reach: Reach | None, table: Table) -> dict[str, Any] | None:
        if r is None:
            return None
        return {
            "rank": r.rank,
            "rank_text": r.rank_text(),
            "overlaps_above": r.overlaps_above,
            "seeds": list(r.seeds),
            "reach": cell_text(r, "reach"),
            "weakest": None if reach is None else reach.weakest,
            "weakest_text": _weakest_text(r, reach, table),
            "reach_per_seed": None if reach is None else list(reach.per_seed),
            "em_beyond": cell_text(r, "em_beyond"),
            "made": None if r.making is None else r.making.sentence(),
            "mark": None if r.making is None else r.making.mark,
        }

    def verdict(v: cl.Verdict | None) -> dict[str, Any] | None:
        return None if v is None else {"outcome": v.outcome, "shown": v.shown, "evidence": v.evidence}

    def counts_json(x: Counts | None) -> list[int] | None:
        return None if x is None else [x.exact, x.n]

    return {
        "a": side(c.a),
        "b": side(c.b),
        "summary": c.summary(),
        "rows": [
            {
                "label": r.label,
                "a": row(r.a, r.reach_a, c.a.table),
                "b": row(r.b, r.reach_b, c.b.table),
                "rank_agrees": r.rank_agrees,
                "overlap_agrees": r.overlap_agrees,
                "reach_agrees": r.reach_agrees,
                "exact_per_length": [[length, counts_json(ca), counts_json(cb)] for length, ca, cb in r.lengths],
            }
            for r in c.rows
        ],
        "verdicts": [
            {"claim": v.claim, "source": v.source, "a": verdict(v.a), "b": verdict(v.b), "agrees": v.agrees}
            for v in c.verdicts
        ],
        "run_pairs": [
            {
                "run_id": p.run_id,
                "label": p.label,
                "seed": p.seed,
                "made_a": p.made_a,
                "made_b": p.made_b,
                "identical": p.identical,
                "per_length": [
                    [length, [a.exact, a.n], [b.exact, b.n], _fraction_json(abs(a.fraction - b.fraction))]
                    for length, a, b in p.lengths
                ],
            }
            for p in c.pairs
        ],
        "unpaired": [
            {"label": u.label, "seed": u.seed, "run_a": u.run_a, "run_b": u.run_b, "config_differs_in": list(u.keys)}
            for u in c.unpaired
        ],
    }


def _fraction_json(x: Fraction) -> list[int]:
    """An exact fraction as [numerator, denominator] (JSON has no exact rationals)."""
    return [x.numerator, x.denominator]


__all__ = [
    "Comparison",
    "ComparisonError",
    "Counts",
    "RowComparison",
    "RunPair",
    "Side",
    "Unpaired",
    "VerdictComparison",
    "as_json",
    "compare",
    "load_side",
    "markdown",
]
