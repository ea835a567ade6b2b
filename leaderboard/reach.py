"""How far each row of a table holds past its training length N, as multiples of N: the
answer every page leads with, and the sentences that give it.

A row's reach on a seed is the largest scale with exact match ≥ 0.9 at every scale
N+1..it (N: none past N): its *effective context length* on the board, the rule the
language-modelling section applies to passkey retrieval too
(``leaderboard.lm_rows.passkey_reach``). The answer names each ranked row's weakest seed's
reach and counts the seeds that reach each multiple of N the table tests (``MILESTONES``). A
table on which no fitted row gets past N cannot contrast encodings
(``nothing_extrapolates``), and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from harness.records import ranking
from harness.records.counts import exact, significant
from leaderboard.board import Board, Table
from leaderboard.rows import Row
from leaderboard.text import and_join, plural

MILESTONES = (1.5, 2, 3, 4, 5, 10)
"""The multiples of N the answer counts seeds at (those the table tests)."""

SPLIT_RANGE = 0.3
SPLIT_SEEDS = 8
SPLIT_SEEDS_RULE = (
    f"Rows whose seeds' EM>N range exceeds {SPLIT_RANGE} split between seeds that extrapolate and seeds that do "
    f"not: they get {SPLIT_SEEDS} seeds, and the answer counts how many of them reach each multiple of N. Until "
    "those seeds are in, such a row is ranked on the seeds it has and says how many are being run."
)
"""The board's rule for rows whose seeds split, quoted by the site and the README."""


def times_n(reach: float, table: Table) -> str:
    """A reach as a multiple of N: ``1.3×``; ``≥ 4×`` where it holds to the largest tested scale."""
    n, top = table.train_max, table.test_max
    return f"≥ {significant(Fraction(top, n))}×" if reach >= top else f"{significant(Fraction(int(reach), n))}×"


@dataclass(frozen=True)
class Reach:
    """How far one row holds on a table, as multiples of N.

    Attributes:
        row: the table's row.
        weakest: the weakest seed's reach (the largest scale with exact match ≥ 0.9 at
            every scale N+1..it; N: none past N).
        per_seed: each seed's reach.
        counts: per multiple of N the table tests (MILESTONES), how many seeds reach it.
    """

    row: Row
    weakest: int
    per_seed: tuple[int, ...]
    counts: tuple[tuple[float, int], ...]
    n: int = 0  # the table's N

    @property
    def past_n(self) -> int:
        """Seeds that keep exact match ≥ 0.9 one scale past N."""
        return sum(r > self.n for r in self.per_seed)

    @property
    def splits(self) -> bool:
        """The seeds' EM>N range exceeds SPLIT_RANGE."""
        em = self.row.scores["em_beyond"]
        return not math.isnan(em.lo) and em.hi - em.lo > exact(SPLIT_RANGE)

    def fractions_text(self) -> str:
        """``2 of 3 seeds reach 2×, 1 of 3 reaches 3×``: the multiples above the weakest
        seed's reach that some seed reaches."""
        total = len(self.per_seed)
        parts = [
            f"{k} of {total} seed{'s' if total != 1 else ''} reach{'es' if k == 1 else ''} {m:g}×"
            for m, k in self.counts
            if 0 < k < total
        ]
        return ", ".join(parts)


def reaches(table: Table) -> list[Reach]:
    """Per ranked row (and row still short of its seeds) that fitted, in the table's order:
    how far it holds on each seed, as multiples of N."""
    n = table.train_max
    marks = [m for m in MILESTONES if m * n <= table.test_max]
    out = []
    for row in table.rows:
        if not row.fitted:
            continue
        per_seed = tuple(int(r) for r in row.per_seed.get("reach") or (n,))
        counts = tuple((m, sum(r >= m * n for r in per_seed)) for m in marks)
        out.append(Reach(row, min(per_seed), per_seed, counts, n))
    return out


def unplanned_splits(board: Board) -> list[str]:
    """The split-seeds rule as a check: one line per ranked row whose seeds split
    (:attr:`Reach.splits`) on a table whose plan gives it fewer than ``SPLIT_SEEDS`` seeds,
    naming the seeds to add to its sweep file. The rule is the board's promise
    (``SPLIT_SEEDS_RULE``, quoted on every page); a row that splits on a new table owes it
    the moment its third seed is published, and nothing else would say so. Rows no plan
    names (a table without a sweep file, a retired one) are not the plans' to mend."""
    lines = []
    for table in board.tables:
        plan = board.table_plan(table)
        planned = {} if plan is None else plan.seeds_by_row()
        for r in reaches(table):
            seeds = planned.get(r.row.label)
            if not r.row.ranked or not r.splits or seeds is None or len(seeds) >= SPLIT_SEEDS:
                continue
            first = max(seeds) + 1
            more = f"{first}-{first + SPLIT_SEEDS - len(seeds) - 1}" if SPLIT_SEEDS - len(seeds) > 1 else str(first)
            em = r.row.scores["em_beyond"]
            lines.append(
                f"{table.task} (preset {table.preset}, tested to {table.tested_to}): {r.row.label}'s seeds split "
                f"(EM>N {float(em.lo):.2f}-{float(em.hi):.2f} over {plural(len(r.row.seeds), 'seed')}) and its plan "
                f"gives it {len(seeds)}; the rule gives it {SPLIT_SEEDS}: plan seeds {more} in its sweep file"
            )
    return lines


def reach_text(reach: Reach, table: Table) -> str:
    """``1.3× N on its weakest seed; 2 of 3 seeds reach 2×`` or ``≥ 4× N on every seed (3 of 3)``."""
    n, total = table.train_max, len(reach.per_seed)
    if reach.weakest >= table.test_max:
        return f"{times_n(reach.weakest, table)} N on every seed ({total} of {total})"
    head = (
        f"{times_n(reach.weakest, table)} N on its weakest seed"
        if reach.weakest > n
        else f"below 0.9 at {n + 1} on its weakest seed"
    )
    if reach.past_n and reach.weakest <= n:
        head += f"; {reach.past_n} of {total} seeds past N"
    more = reach.fractions_text()
    return head + (f"; {more}" if more else "")


def past_n_sentence(table: Table, provisional: bool = False) -> str | None:
    """The table's answer to the board's question in one sentence, from each ranked row's
    weakest seed, as multiples of N: ``How far past N = 10 exact match stays ≥ 0.9 on every
    seed: prism{paper} ≥ 4× N (40, the largest tested scale); learned_prf_sh 1.7× N (17);
    ...; the other 8 ranked rows fall below 0.9 at 11 (2 rows did not fit)``, begun ``So
    far,`` on a ``provisional`` table (still being filled); on a table where nothing
    extrapolates, says so. None for a table with no ranked row."""
    ranked = [row for row in table.rows if row.ranked]
    if not ranked:
        return None
    n, top, em = table.train_max, table.test_max, ranking.REACH_THRESHOLD
    reach = {row.label: int(min(row.per_seed.get("reach") or (n,))) for row in ranked}
    by_reach: dict[int, list[str]] = {}
    for row in ranked:  # in rank order within each reach
        if reach[row.label] > n:
            by_reach.setdefault(reach[row.label], []).append(row.label)
    groups = [
        f"{and_join(labels)} {times_n(far, table)} N ({far}" + (", the largest tested scale)" if far >= top else ")")
        for far, labels in sorted(by_reach.items(), reverse=True)
    ]
    rest = len(ranked) - sum(map(len, by_reach.values()))
    unfit = sum(not row.fitted for row in table.rows)
    pending = sum(row.fitted and not row.ranked for row in table.rows)
    tail = [f"{plural(unfit, 'row')} did not fit"] if unfit else []
    tail += [f"{plural(pending, 'row')} not ranked yet"] if pending else []
    after = f" ({', '.join(tail)})" if tail else ""
    if nothing_extrapolates(table):
        said = f"{null_text(table)}: no seed of any fitted row keeps exact match ≥ {em} at scale {n + 1}{after}"
    elif not groups:
        said = f"no ranked row keeps exact match ≥ {em} at scale {n + 1} on every seed{after}"
    else:
        if rest:
            others = "the other ranked row falls" if rest == 1 else f"the other {rest} ranked rows fall"
            groups.append(f"{others} below {em} at {n + 1}")
        said = f"how far past N = {n} exact match stays ≥ {em} on every seed: {'; '.join(groups)}{after}"
    return f"So far, {said}" if provisional else said[0].upper() + said[1:]


def nothing_extrapolates(table: Table) -> bool:
    """No seed of any fitted row keeps exact match ≥ 0.9 at scale N+1 (odds_first at
    N = 10): the table cannot contrast encodings on extrapolation. It stays on the board,
    labelled so (``NULL_TASK_TEXT``), and is left out of the grid's means and the verdicts."""
    fitted = [row for row in table.rows if row.fitted]
    return bool(fitted) and all(
        max(row.per_seed.get("reach") or (table.train_max,)) <= table.train_max for row in fitted
    )


def null_text(table: Table) -> str:
    """``no encoding extrapolates at N = 10``: what a table that cannot contrast is labelled."""
    return f"no encoding extrapolates at N = {table.train_max}"


NULL_RULE = (
    "A table on which no seed of any fitted row keeps exact match ≥ 0.9 one scale past N is labelled “no encoding "
    "extrapolates at N”: its ranking orders rows by near-zero numbers, so it is left out of the grid's means and "
    "its claims read “no contrast”."
)
"""What a null table is, quoted by the site and the README."""
