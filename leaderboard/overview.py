"""The at-a-glance grid: per preset, every encoding across every task, in one table.

Per preset (:func:`overview`): an encodings × tasks grid whose cell is how far the
encoding holds past N on its weakest seed, as a multiple of N (exact match ≥ 0.9 at every
scale up to it), with the seeds' range of that reach and their mean EM>N, where the
encoding fitted; "did not fit" otherwise. Rows are ordered by the mean of EM>N over the
preset's *counted* tasks, those on which something extrapolates (a task where no seed of
any fitted row gets past N, odds_first at N = 10, contrasts nothing and is left out),
counting a task the encoding did not fit as 0, then by counted tasks fitted, the mean
compared as the grid shows it (two decimals); rows equal on both share a position and are
listed by name. Only rows whose runs on every counted task are in are ordered; the others
follow them with neither position nor mean:

* a row the plan puts on some counted task whose runs there are not all published yet
  (``Overview.filling``, marked †: a new encoding's row while its tasks are trained, or a
  row short of its first seeds): its mean would count the missing task as 0, and the
  order would depend on which runs happened to finish first;
* a row never run on some counted task (a variant the plan puts on a few tasks only, such
  as randomized:ape at another L on copy and reverse): a mean that counted the tasks it
  never ran as 0 would rank it on what was not tested.

So the rows already in keep their order, over every task, while new rows are filled (an
earlier rule counted only the tasks whose tables were complete, and the first new row to
complete one task put the whole order on that task alone). Evaluation-time variants (a
trained row's weights evaluated otherwise, "same weights") have a small grid of their own
(:attr:`Overview.variants`).

The grid is read off the board's own tables (``leaderboard.rows.Row``), never the
records, so a cell is the number its task's table shows. The site's front page and the
README quote ``OVERVIEW_RULE`` above it, and ``FILLING_RULE`` below it while a row is
still being filled.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from harness.records import counts, ranking
from leaderboard.board import Board, Table
from leaderboard.reach import nothing_extrapolates, times_n
from leaderboard.records import SIZED_KEY, training_length
from leaderboard.rows import Row, cell_text

OVERVIEW_RULE = (
    "Each cell is how far the encoding holds past N on its weakest seed, as a multiple of N (exact match ≥ 0.9 at "
    "every scale up to it; ≥ 4× where it holds to the largest tested scale; “—” where it falls below 0.9 at N+1), "
    "with the range over its seeds when they differ and, below, its EM>N (exact match beyond N, mean over seeds), "
    "where every seed fitted; “did not fit” where some seed did not; blank where it was not run. "
    "The mean column is the mean EM>N over the tasks it names, counting a task the encoding did not fit as 0; it "
    "leaves out tasks where no encoding extrapolates. Rows are ordered by it, then by the number of those tasks "
    "fitted, both compared as shown (the mean to two decimals); rows equal on both share a position. A row not run "
    "on every task the mean names, or whose planned runs on one are not all in yet (†), follows the ordered rows "
    "with neither position nor mean (“—”): it is not ranked on tasks it was never run on, nor before its runs are "
    "in. Evaluation-time variants (same weights) have their own grid below."
)
"""What the at-a-glance grid shows and how its rows are ordered, quoted by the site and the README."""

FILLING_MARK = "†"
FILLING_RULE = f"{FILLING_MARK} still being filled: shown, not ordered until the plan's runs of it are in"
NULL_MARK = "∅"
NULL_KEY = f"{NULL_MARK} no encoding extrapolates at N: shown, left out of the mean"
"""The key to a grid column where no encoding extrapolates (:attr:`Overview.null`)."""


@dataclass(frozen=True)
class OverviewRow:
    """One encoding across the tasks of one preset: its row on each task's table.

    ``score`` is the ordering measure: the mean over the preset's counted tasks
    (:class:`Overview`) of EM>N where the encoding fitted, 0 where it did not fit.
    ``tasks_fitted`` counts the counted tasks on which it is ranked (every seed fit). A row
    not run on some counted task, or still being filled on one (``filling``), has neither
    ``position`` nor ``score`` (None): it follows the ordered rows, by name.
    """

    position: int | None
    label: str
    encoding: str
    cells: Mapping[str, Row]  # task -> the encoding's row there (absent: not run on it)
    score: float | None
    tasks_fitted: int
    filling: bool = False  # the plan's runs of it on some counted task not all published: not ordered yet


@dataclass(frozen=True)
class Overview:
    """A preset's at-a-glance grid: its tasks (columns), the ones its order counts, and its rows."""

    tasks: list[str]
    counted: list[str]  # the tasks the mean counts: something extrapolates on them
    rows: list[OverviewRow]
    null: list[str] = field(default_factory=list)  # tasks where no encoding extrapolates (left out of the mean)
    variants: list[OverviewRow] = field(default_factory=list)  # evaluation-time variants ("same weights")
    lengths: dict[str, int] = field(default_factory=dict)  # task -> L, where some row's name has an L

    def sized_key(self) -> str | None:
        """``L in a row's name: ... (24 on copy, ...)`` where some row's name sizes an option
        to the task's training sequences (``leaderboard.records.SIZED_TO_TRAINING``), else None."""
        if not self.lengths:
            return None
        by_length: dict[int, list[str]] = {}
        for task, n in self.lengths.items():
            by_length.setdefault(n, []).append(task)
        values = "; ".join(f"{n} on {', '.join(tasks)}" for n, tasks in sorted(by_length.items()))
        return f"{SIZED_KEY}: {values}"

    @property
    def filling(self) -> list[str]:
        """The rows still being filled (marked †): shown, not ordered yet."""
        return [r.label for r in (*self.rows, *self.variants) if r.filling]

    def mean_title(self) -> str:
        """``mean EM>N over copy, reverse, stack_manipulation``: what the mean column is."""
        return f"mean EM>N over {', '.join(self.counted) or 'no task'}"

    def filling_text(self) -> str | None:
        """``fox, pope (†) are still being filled: ...`` while some row is, else None."""
        labels = self.filling
        if not labels:
            return None
        one = len(labels) == 1
        return (
            f"{', '.join(labels)} ({FILLING_MARK}) {'is' if one else 'are'} still being filled: the plan's runs of "
            f"{'it' if one else 'each'} on some task the mean names are not all published yet; "
            f"{'its' if one else 'their'} cells so far are shown, {'its' if one else 'their'} position and mean "
            "wait for them."
        )


def overview(board: Board, preset: str) -> Overview:
    """The preset's at-a-glance grid; the order is in the module docstring."""
    tables = first_tables(board, preset)
    tasks = [t.task for t in tables]
    null = [t.task for t in tables if nothing_extrapolates(t)]
    contrasting = [t for t in tables if t.task not in null]
    counted = [t.task for t in contrasting]
    planned = {t.task: _planned_labels(board, t) for t in contrasting}
    cells: dict[str, dict[str, Row]] = {}
    encodings: dict[str, str] = {}
    for table in tables:
        for row in table.rows:
            cells.setdefault(row.label, {})[table.task] = row
            encodings[row.label] = row.encoding
    unordered: list[tuple[tuple[Any, ...], str, dict[str, Row], Any, int, bool]] = []  # exact means: Fractions
    for label, by_task in cells.items():
        fitted = [t for t, r in by_task.items() if r.ranked]
        beyond = [max(_or_low(by_task[t].scores["em_beyond"].mean), Fraction(0)) for t in fitted if t in counted]
        filling = any(
            by_task[t].pending if t in by_task else label in planned[t] for t in counted
        )  # some counted task's planned runs of it not all in
        if filling or any(t not in by_task for t in counted):  # not ordered (module docstring)
            unordered.append(((math.inf,), label, by_task, None, len(beyond), filling))
            continue
        score = Fraction(sum(beyond, Fraction(0)), max(len(counted), 1))  # exact: harness.records.counts
        unordered.append(((-ranking.shown(score), -len(beyond)), label, by_task, score, len(beyond), False))
    unordered.sort(key=lambda item: (item[0], item[1]))  # equal as shown: by name
    rows: list[OverviewRow] = []
    variants: list[OverviewRow] = []
    for part, kept in ((rows, False), (variants, True)):
        position: int | None = 0
        previous: tuple[float, ...] | None = None
        i = 0
        for key, label, by_task, mean, n_fit, filling in unordered:
            if is_variant(label) != kept:
                continue
            i += 1
            if mean is None:
                position = None
            elif key != previous:  # competition positions: rows equal as shown share one
                position, previous = i, key
            part.append(OverviewRow(position, label, encodings[label], by_task, mean, n_fit, filling))
    lengths: dict[str, int] = {}
    if any(_SIZED.search(label) for label in cells):
        found = {t.task: training_length(t.task, t.train_max) for t in tables}
        lengths = {task: n for task, n in found.items() if n is not None}
    return Overview(tasks, counted, rows, null, variants, lengths)


_SIZED = re.compile(r"=L[,}]")
"""A row name with an option sized to the task's training sequences (``fope{train_length=L}``)."""


def made_key(grid: Overview) -> str | None:
    """The key to the grid's marks of how a row's runs on a task were made (``GPU``:
    ``leaderboard.making``): each mark and the ways it stands for; None where no cell has one."""
    ways: dict[str, set[str]] = {}
    for entry in (*grid.rows, *grid.variants):
        for row in entry.cells.values():
            if row.making is not None and row.making.mark:
                ways.setdefault(row.making.mark, set()).add(row.making.sentence())
    if not ways:
        return None
    keys = [f"{mark}: trained and evaluated {'; or '.join(sorted(ways[mark]))}" for mark in sorted(ways)]
    return "; ".join(keys) + " (the task's table names its rows so made)"


def _planned_labels(board: Board, table: Table) -> set[str]:
    """The rows ``table``'s plan puts on it (none where it has no plan, or a plan that
    counts runs without naming its rows): a row planned there and not yet on the table is
    still being filled, a row neither is simply not run there."""
    plan = board.table_plan(table)
    return set() if plan is None else set(plan.seeds_of_rows())


def is_variant(label: str) -> bool:
    """An evaluation-time variant: a trained row's weights evaluated otherwise (``rope → yarn×4 (same weights)``)."""
    return label.endswith("(same weights)")


def first_tables(board: Board, preset: str) -> list[Table]:
    """The preset's table per task that the grid shows: the one tested to the shortest
    range (copy to 40, not the copy table tested to 100 beside it, which has a few rows)."""
    out: dict[str, Table] = {}
    for t in board.tables:
        if t.preset == preset and (t.task not in out or t.tested_to < out[t.task].tested_to):
            out[t.task] = t
    return list(out.values())


def _or_low(x: Any) -> Any:
    return -math.inf if counts.is_missing(x) else counts.exact(x)


@dataclass(frozen=True)
class Cell:
    """What one grid cell shows (the site and the README alike).

    Attributes:
        kind: ``value``, ``unfit`` or ``none`` (not run).
        reach: the weakest seed's reach as a multiple of N (``1.3×``, ``≥ 4×``), ``—`` where
            it falls below 0.9 at N+1.
        em: ``EM>N 0.66``: the mean EM>N over seeds.
        spread: the seeds' reaches where they differ, as multiples of N (``1.3–2.4×``).
        fraction: how far the weakest seed holds, from 0 (not past N) to 1 (the largest
            tested scale): the cell's colour.
        title: the tooltip: rank, each number with its seeds' range, the fit.
        made: the row's mark where its runs were made otherwise than the CPU board's
            (``GPU``: ``leaderboard.making``), else ``""``.
    """

    kind: str
    reach: str
    em: str
    spread: str
    fraction: float
    title: str
    sort: str
    made: str = ""


def cell(table: Table | None, task: str, row: Row | None) -> Cell:
    """The grid cell of ``row`` on ``table`` (None: not run)."""
    if row is None or table is None:
        return Cell("none", "", "", "", 0.0, f"{task}: not run", "")
    made = row.making.mark if row.making is not None else ""
    made_title = f" · trained and evaluated {row.making.sentence()}" if made and row.making is not None else ""
    em = row.scores["em_beyond"]
    fit = f"{row.seeds_fit}/{len(row.seeds)} seeds fit, EM≤N {cell_text(row, 'em_within')}"
    if not row.fitted:
        return Cell(
            "unfit",
            f"did not fit ({row.seeds_fit}/{len(row.seeds)})",
            "",
            "",
            0.0,
            f"{task}: did not fit ({fit}){made_title}",
            "-1",
            made,
        )
    n = table.train_max
    per_seed = [int(r) for r in row.per_seed.get("reach") or (n,)]
    low, high = min(per_seed), max(per_seed)
    reach = "—" if low <= n else times_n(low, table)
    spread = "" if high == low else f"{counts.significant(Fraction(low, n))}–{times_n(high, table).replace('≥ ', '')}"
    ranked = sum(r.ranked for r in table.rows)
    standing = f"rank {row.rank_text()} of {ranked} ranked" if row.ranked else row.status_text()
    seeds = ", ".join(map(str, per_seed))
    title = f"{task}: {standing} · reach per seed {seeds} (N = {n}) · EM>N {em.text()} · {fit}"
    span = max(table.test_max - n, 1)
    fraction = max(0.0, min(1.0, (low - n) / span))
    text_em = "-" if counts.is_missing(em.mean) else f"EM>N {counts.fixed(em.mean, 2)}"
    sort = counts.fixed(Fraction(low, n), 6)
    return Cell("value", reach, text_em, spread, fraction, title + made_title, sort, made)
