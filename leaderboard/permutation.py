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

ALPHA = 0.05
"""A difference counts when its one-sided p is at most this."""

MAX_SPLITS = 200_000
"""Above this many splits (e.g. 12 seeds against 12) the test is not run (None)."""

RULE = (
    "Where the board says one row is above another, it names an exact one-sided permutation test over seeds of "
    "the difference of their means (every split of the pooled per-seed values into the two rows' sizes; p is the "
    f"share of splits whose difference is at least the observed one); above means p ≤ {ALPHA:g}. The smallest p "
    "3 seeds against 3 can give is 0.05 (1 of 20 splits), 2 against 3 only 0.1: where the smallest possible p "
    f"is above {ALPHA:g} the seeds are too few to decide. No correction for the many pairs of a table is applied."
)
"""The test in one paragraph, quoted by the site and the README."""


def smallest_p(n: int, m: int) -> float:
    """The smallest one-sided p of ``n`` seeds against ``m``: ``1 / comb(n + m, n)``."""
    return 1.0 / math.comb(n + m, n) if n and m else 1.0


def too_few(n: int, m: int) -> bool:
    """Whether ``n`` seeds against ``m`` can never reach p ≤ ALPHA."""
    return smallest_p(n, m) > ALPHA


def p_above(a: Sequence[float], b: Sequence[float]) -> float | None:
    """One-sided exact permutation p that ``a``'s mean is above ``b``'s: the share of the
    splits of the pooled values into groups of ``len(a)`` and ``len(b)`` whose first group's
    mean minus the second's is at least the observed difference. None when either side is
    empty or the splits exceed MAX_SPLITS."""
    a, b = [float(x) for x in a if not math.isnan(x)], [float(x) for x in b if not math.isnan(x)]
    n, m = len(a), len(b)
    if not n or not m or math.comb(n + m, n) > MAX_SPLITS:
        return None
    pooled, total = a + b, sum(a) + sum(b)
    observed = sum(a) / n - sum(b) / m
    tolerance = 1e-12 * max(1.0, abs(total))  # a split equal to the observed one counts, float sums aside
    hits = splits = 0
    for group in itertools.combinations(range(n + m), n):
        first = sum(pooled[i] for i in group)
        diff = first / n - (total - first) / m
        hits += diff >= observed - tolerance
        splits += 1
    return hits / splits


def p_text(p: float | None, n: int, m: int) -> str:
    """``permutation p = 0.05, 3 vs 3 seeds`` (or with ``too few seeds to decide``)."""
    if p is None:
        return f"no permutation test ({n} vs {m} seeds)"
    few = f"; too few seeds to decide (the smallest possible p is {smallest_p(n, m):.2g})" if too_few(n, m) else ""
    return f"permutation p = {p:.2g}, {n} vs {m} seeds{few}"
