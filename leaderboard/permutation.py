"""The one test the board applies when it says two rows' seeds differ: an exact permutation
test over seeds.

Two rows of a table have one number per seed (EM>N, or per-token accuracy beyond N). The
test asks how surprising the difference of their means is if the seed labels were
exchangeable: every way of splitting the pooled n + m values into groups of n and m is
enumerated (``math.comb(n + m, n)`` splits: 20 for 3 against 3, 165 for 3 against 8), and
the one-sided p is the fraction of splits whose difference is at least the observed one.
It is exact (no sampling, no normality), so the same records always give the same p.

The smallest p a split can give is ``1 / comb(n + m, n)``: 0.05 for 3 seeds against 3,
0.1 for 2 against 3. Where that is above :data:`ALPHA`, the seeds are too few for the test
to ever decide, and the board says so instead of reading a gap as a difference. No
correction for testing many pairs is applied: each verdict states its own p, and a
table with ~150 pairs will show some p ≤ 0.05 by chance.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from harness.records.counts import exact, is_missing, significant

ALPHA = Fraction(1, 20)
"""A difference counts when its one-sided p is at most this (0.05, exactly)."""

MAX_SPLITS = 200_000
"""Above this many splits (e.g. 12 seeds against 12) the test is not run (None)."""

RULE = (
    "Where the board says one row is above another, it names an exact one-sided permutation test over seeds of "
    "the difference of their means (every split of the pooled per-seed values into the two rows' sizes; p is the "
    f"share of splits whose difference is at least the observed one); above means p ≤ {significant(ALPHA)}. The "
    "smallest p 3 seeds against 3 can give is 0.05 (1 of 20 splits), 2 against 3 only 0.1: where the smallest "
    f"possible p is above {significant(ALPHA)} the seeds are too few to decide. No correction for the many pairs "
    "of a table is applied."
)
"""The test in one paragraph, quoted by the site and the README."""


def smallest_p(n: int, m: int) -> Fraction:
    """The smallest one-sided p of ``n`` seeds against ``m``: ``1 / comb(n + m, n)``."""
    return Fraction(1, math.comb(n + m, n)) if n and m else Fraction(1)


def too_few(n: int, m: int) -> bool:
    """Whether ``n`` seeds against ``m`` can never reach p ≤ ALPHA."""
    return smallest_p(n, m) > ALPHA


def p_above(a: Sequence[Any], b: Sequence[Any]) -> Fraction | None:
    """One-sided exact permutation p that ``a``'s mean is above ``b``'s: the share of the
    splits of the pooled values into groups of ``len(a)`` and ``len(b)`` whose first group's
    mean minus the second's is at least the observed difference, computed exactly
    (``fractions.Fraction``: the values are the board's exact numbers; a float is taken as
    the decimal it reads, ``harness.records.counts.exact``). None when either side is empty or the
    splits exceed MAX_SPLITS; NaN and None values are left out."""
    a_, b_ = [exact(x) for x in a if not is_missing(x)], [exact(x) for x in b if not is_missing(x)]
    n, m = len(a_), len(b_)
    if not n or not m or math.comb(n + m, n) > MAX_SPLITS:
        return None
    scale = math.lcm(*(v.denominator for v in a_ + b_))  # integers in one unit: the same order, fast
    pooled = [int(v * scale) for v in a_ + b_]
    total, mine = sum(pooled), sum(pooled[:n])
    observed = m * mine - n * (total - mine)  # n·m·(mean(a) − mean(b)), exactly
    hits = splits = 0
    for group in itertools.combinations(range(n + m), n):
        first = sum(pooled[i] for i in group)
        hits += m * first - n * (total - first) >= observed  # a split equal to it counts
        splits += 1
    return Fraction(hits, splits)


def p_text(p: Fraction | float | None, n: int, m: int) -> str:
    """``permutation p = 0.05, 3 vs 3 seeds`` (or with ``too few seeds to decide``)."""
    if p is None:
        return f"no permutation test ({n} vs {m} seeds)"
    smallest = significant(smallest_p(n, m))
    few = f"; too few seeds to decide (the smallest possible p is {smallest})" if too_few(n, m) else ""
    return f"permutation p = {significant(p)}, {n} vs {m} seeds{few}"
