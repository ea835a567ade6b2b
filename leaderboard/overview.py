"""The at-a-glance grid: per preset, every encoding across every task, in one table.

Per preset (:func:`overview`): an encodings × tasks grid whose cell is the ranking
measure (EM>N, mean over seeds) where the encoding fitted, "did not fit" otherwise. Rows
are ordered by the mean of EM>N over the preset's *counted* tasks, those whose table is
complete (every task while none is, or without a plan), counting a task the encoding did
not fit (or was not run on) as 0, then by counted tasks fitted, the mean compared as the
grid shows it (two decimals); rows equal on both share a position and are listed by
name. A task still being filled is shown but not counted, so the order does not depend
on which runs happened to finish first.

The grid is read off the board's own tables (``leaderboard.board.Row``), never the
records, so a cell is the number its task's table shows. The site's front page and the
README quote ``OVERVIEW_RULE`` above it, and ``PENDING_RULE`` below it while a task is
still being filled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from harness import ranking
from leaderboard.board import Board, Row

OVERVIEW_RULE = (
    "Each cell is the ranking measure, EM>N (exact match beyond the training scales, mean over seeds), where every "
    "seed of the encoding fitted that task; “did not fit” where some seed did not (with how many of its seeds "
    "fit); blank where it was not run. "
    "Rows are ordered by the mean over the tasks of EM>N, counting a task the encoding did not fit, is not ranked "
    "on yet (short of its seeds) or was not run on as 0, then by the number of tasks fitted, both compared as "
    "shown (the mean to two decimals); rows equal on both share a position. While the board is being filled, only "
    "the tasks whose table is complete count, so the order does not depend on which runs finished first."
)
"""What the at-a-glance grid shows and how its rows are ordered, quoted by the site and the README."""

PENDING_MARK = "†"
PENDING_RULE = f"{PENDING_MARK} still being filled: shown, not counted in the mean or the tasks fitted"
"""The key to a grid column whose table is incomplete (:attr:`Overview.pending`)."""


@dataclass(frozen=True)
class OverviewRow:
    """One encoding across the tasks of one preset: its row on each task's table.

    ``score`` is the ordering measure: the mean over the preset's counted tasks
    (:class:`Overview`) of EM>N where the encoding fitted, 0 where it did not fit or was
    not run, or is not ranked yet (short of its planned seeds). ``tasks_fitted`` counts the
    counted tasks on which it is ranked (every seed fit).
    """

    position: int
    label: str
    encoding: str
    cells: Mapping[str, Row]  # task -> the encoding's row there (absent: not run on it)
    score: float
    tasks_fitted: int


@dataclass(frozen=True)
class Overview:
    """A preset's at-a-glance grid: its tasks (columns), the ones its order counts, and its rows."""

    tasks: list[str]
    counted: list[str]  # the tasks whose table is complete; every task while none is
    rows: list[OverviewRow]

    @property
    def pending(self) -> list[str]:
        """The tasks still being filled: shown, not counted in the order (marked †)."""
        return [t for t in self.tasks if t not in self.counted]

    def counted_text(self) -> str | None:
        """``The order counts copy and reverse only, ...`` while some task is still being
        filled (the grid then is not an overall ranking), else None."""
        if not self.pending:
            return None
        counted = " and ".join(self.counted) if len(self.counted) < 3 else ", ".join(self.counted)
        pending = ", ".join(self.pending)
        return (
            f"The order counts {counted} only, the {'task' if len(self.counted) == 1 else 'tasks'} whose table is "
            f"complete; {pending} ({PENDING_MARK}) {'is' if len(self.pending) == 1 else 'are'} still being filled."
        )


def overview(board: Board, preset: str) -> Overview:
    """The preset's at-a-glance grid; the order is in the module docstring."""
    tables = [t for t in board.tables if t.preset == preset]
    tasks = [t.task for t in tables]
    complete = [t.task for t in tables if (f := board.table_filled(t)) is None or f.covered]
    counted = complete or tasks
    cells: dict[str, dict[str, Row]] = {}
    encodings: dict[str, str] = {}
    for table in tables:
        for row in table.rows:
            cells.setdefault(row.label, {})[table.task] = row
            encodings[row.label] = row.encoding
    unordered = []
    for label, by_task in cells.items():
        fitted = [t for t, r in by_task.items() if r.ranked]  # a row not ranked yet counts as not fitted
        beyond = [max(_or_low(by_task[t].scores["em_beyond"].mean), 0.0) for t in fitted if t in counted]
        score = sum(beyond) / max(len(counted), 1)
        unordered.append(((-ranking.shown(score), -len(beyond)), label, by_task, score, len(beyond)))
    unordered.sort(key=lambda item: (item[0], item[1]))  # equal as shown: by name
    rows, position, previous = [], 0, None
    for i, (key, label, by_task, score, n_fit) in enumerate(unordered, start=1):
        if key != previous:  # competition positions: rows equal as shown share one
            position, previous = i, key
        rows.append(OverviewRow(position, label, encodings[label], by_task, score, n_fit))
    return Overview(tasks, counted, rows)


def _or_low(x: float) -> float:
    return -math.inf if math.isnan(x) else x
