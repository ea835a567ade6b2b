"""The ranking rule shared by the terminal table (``harness.commands.report``) and the published
board (``leaderboard.board``): fit first, then rank on what happens beyond training.

The question a length-extrapolation board answers is *which encoding keeps working past
the training length?* Two things would blur it, and the rule removes both:

* A model that never learned the task in distribution says nothing about extrapolation.
  A run **fits** when its mean exact match over the training scales (EM≤N) is at least
  :data:`FIT_THRESHOLD`; an encoding is **ranked** on a task only when every one of its
  seeds fits. The others are listed after the ranked ones as "did not fit", ordered by
  EM≤N, with no rank.
* Counting scales from 1 (the old ``solved≤``) rewards the training lengths: a slip at
  some n ≤ N put an encoding below one that fits 1..N and collapses at N+1. Ranked
  encodings are ordered by the numbers **beyond N** only:

  1. **EM>N**: exact match averaged over the evaluated scales beyond N (mean over seeds);
  2. **reach**: the largest scale L such that exact match is at least
     :data:`REACH_THRESHOLD` at every evaluated scale N+1..L (N when scale N+1 already
     fails; mean over seeds);
  3. **tok>N**: teacher-forced per-token accuracy beyond N (mean over seeds).

  Each is compared at the precision the tables show (:data:`RANK_DIGITS`, rounded half
  up on the exact value: ``harness.records.counts.ROUNDING_RULE``); ties share a rank
  (competition ranking: 1, 1, 3).

Every number is exact: a scale's metrics are counts (``harness.records.counts``), so 90 of 100
right is 9/10 and meets the reach threshold, and a mean over scales or seeds is a
``fractions.Fraction``.

A table being filled over time (the published board) may hold an encoding with one seed
where three are planned. Such an encoding is **pending**: listed after the ranked ones
with the numbers of its seeds so far, not ranked, so that one lucky seed does not rank
above three seeds' means (``seeds_wanted``). An encoding whose seeds so far include one
that did not fit is "did not fit" whatever its later seeds do.

Seeds are shown as what they did, never as an interval wider than the metric: a cell
with several seeds reads ``mean (min–max)`` over the seeds (:class:`Spread`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import pandas as pd

from harness.records import counts

FIT_THRESHOLD = 0.95
"""A run fits when its mean exact match over the training scales is at least this."""

REACH_THRESHOLD = 0.9
"""``reach`` counts scales beyond N whose exact match is at least this."""

RANK_KEYS = ("EM>N", "reach", "tok-acc>N")
"""Per-seed columns that order fitted encodings, most important first (means over seeds)."""

RANK_DIGITS = {"EM>N": 2, "reach": 1, "tok-acc>N": 2}
"""Each key is compared at the precision the tables show it (``Spread.text``; reach's mean
to one decimal): a difference a reader cannot see does not order two rows. On odds_first,
where no encoding extrapolates, EM>N is 0.00 on every row, and the third decimal (12
exact answers of 3000 on one seed) ranked randomized PE first, ahead of encodings with
higher reach or per-token accuracy beyond N."""

RULE = (
    f"An encoding is ranked on a task only if every seed fits the training scales (mean exact match over scales "
    f"1..N at least {FIT_THRESHOLD:.2f}); the others follow, marked “did not fit”, ordered by that in-distribution "
    f"exact match. Ranked encodings are ordered by exact match averaged over the scales beyond N (EM>N), then by "
    f"reach, the row's effective context length (the largest scale L with exact match at least "
    f"{REACH_THRESHOLD:.1f} at every scale N+1..L; N means none; the largest tested scale means every tested "
    f"scale, and the encoding may reach further), then by "
    f"per-token accuracy beyond N (tok>N), each the mean over seeds, compared as shown (EM>N and tok>N to two "
    f"decimals, reach to one); ties share a rank."
)
"""The rule in one paragraph, quoted by the terminal docs, the site and the README."""

CELLS_RULE = (
    "With several seeds a cell reads mean (min–max) over the seeds: what the seeds did, not a confidence interval "
    "(reach: its mean to one decimal, the seeds' scales whole). " + counts.ROUNDING_RULE
)
"""What a table cell means, quoted by the site and the README."""


def reach_beyond(per_length: pd.Series, train_max: int, threshold: float = REACH_THRESHOLD) -> int:
    """Largest scale L > ``train_max`` with exact match >= ``threshold`` at every evaluated
    scale in ``train_max+1..L``; ``train_max`` when the first scale beyond training fails
    (or none was evaluated). ``per_length``: exact match indexed by scale."""
    best, at_least = train_max, counts.exact(threshold)
    for length, em in per_length[per_length.index > train_max].sort_index().items():
        if counts.is_missing(em) or not counts.exact(em) >= at_least:  # NaN counts as a failure
            break
        best = int(length)
    return best


def fits(em_within: float | Fraction, threshold: float = FIT_THRESHOLD) -> bool:
    """Whether a run's mean exact match over the training scales reaches ``threshold``
    (exactly: ``threshold`` as written, 0.95 = 19/20)."""
    if counts.is_missing(em_within):  # nothing evaluated in distribution: does not fit
        return False
    return counts.exact(em_within) >= counts.exact(threshold)


@dataclass(frozen=True)
class Spread:
    """A number over seeds: the mean and the smallest and largest seed's value.

    ``mean`` is ``nan`` when no seed has a value. Unlike a t-interval with two seeds
    (12.7 × half their difference), ``lo..hi`` never leaves the metric's range.
    """

    mean: Fraction | float
    lo: Fraction | float
    hi: Fraction | float
    n: int

    @classmethod
    def of(cls, values: Iterable[Any]) -> Spread:
        """The exact mean, min and max of the present values (None and NaN left out)."""
        v = [counts.exact(x) for x in values if not counts.is_missing(x)]
        if not v:
            return cls(math.nan, math.nan, math.nan, 0)
        return cls(Fraction(sum(v), len(v)), min(v), max(v), len(v))

    def text(self, digits: int = 2) -> str:
        """``0.93`` (one seed, or seeds that agree), ``0.50 (0.12–0.90)``, ``-`` when missing;
        rounded half up on the exact values (``harness.records.counts.ROUNDING_RULE``)."""
        if counts.is_missing(self.mean):
            return "-"
        mean = counts.fixed(self.mean, digits)
        lo, hi = counts.fixed(self.lo, digits), counts.fixed(self.hi, digits)
        return mean if self.n < 2 or lo == hi else f"{mean} ({lo}–{hi})"

    def sort_value(self) -> str:
        return "" if counts.is_missing(self.mean) else counts.fixed(self.mean, 6)


@dataclass(frozen=True)
class Standing:
    """Where one encoding stands on one task.

    Attributes:
        label: the encoding's name on the table.
        rank: its competition rank among the fitted encodings, ``None`` if it did not fit.
        seeds_fit: how many of its seeds fit the training scales.
        seeds: how many seeds it has.
        pending: every seed so far fits, but it has fewer seeds than the table wants
            (``seeds_wanted``): listed after the ranked encodings, not ranked.
    """

    label: str
    rank: int | None
    seeds_fit: int
    seeds: int
    pending: bool = False

    @property
    def fitted(self) -> bool:
        """Every seed so far fits the training scales."""
        return self.seeds_fit == self.seeds

    @property
    def ranked(self) -> bool:
        """Every seed fits, and the table has all the seeds it wants of it."""
        return self.rank is not None


def standings(
    per_seed: pd.DataFrame, label: str = "pe", seeds_wanted: int | Mapping[str, int] | None = None
) -> list[Standing]:
    """Rank the encodings of one task's per-seed rows (columns ``label``, ``in-dist``
    (EM≤N), and :data:`RANK_KEYS`) by :data:`RULE`. Returns fitted encodings in rank
    order, then the pending ones (every seed fits, fewer than ``seeds_wanted`` seeds: one
    number for every row, or per label, a label it lacks wanting none) in the same order,
    unranked, then the others by EM≤N (higher first), then by name."""
    Entry = tuple[tuple[Fraction | float, ...], str, int, int]  # (sort key, label, seeds fit, seeds)
    fitted: list[Entry] = []
    pending: list[Entry] = []
    unfitted: list[Entry] = []
    for name, g in per_seed.groupby(label, sort=True):
        ok = sum(fits(x) for x in g["in-dist"])
        if ok == len(g):
            key = tuple(-_or_low(shown(counts.mean(g[k]), RANK_DIGITS[k])) for k in RANK_KEYS)
            wanted = seeds_wanted.get(str(name)) if isinstance(seeds_wanted, Mapping) else seeds_wanted
            short = wanted is not None and len(g) < wanted
            (pending if short else fitted).append((key, str(name), ok, len(g)))
        else:
            unfitted.append(((-_or_low(counts.mean(g["in-dist"])),), str(name), ok, len(g)))
    fitted.sort()
    pending.sort()
    unfitted.sort()
    out, rank, previous = [], 0, None
    for i, (key, name, ok, n) in enumerate(fitted, start=1):
        if key != previous:  # competition ranking: ties (at the shown precision) share a rank
            rank, previous = i, key
        out.append(Standing(name, rank, ok, n))
    out += [Standing(name, None, ok, n, pending=True) for _, name, ok, n in pending]
    out += [Standing(name, None, ok, n) for _, name, ok, n in unfitted]
    return out


def order(standings_: Sequence[Standing]) -> Mapping[str, int]:
    """label -> position on the table (1-based), ranked and unranked alike."""
    return {s.label: i for i, s in enumerate(standings_, start=1)}


def shown(value: Any, digits: int = 2) -> Fraction | float:
    """``value`` as a table shows it, exactly (rounded half up: ``harness.records.counts.rounded``,
    the same rounding as the table's text, so an order or a comparison can be read off
    the table); NaN stays NaN. Every comparison between two rows' numbers (the ranking,
    the board's ≈ mark, a claim's "the seeds separate them") goes through this."""
    return counts.rounded(value, digits)


def _or_low(value: Any) -> Fraction | float:
    """NaN (nothing evaluated) ranks below every number."""
    return -math.inf if counts.is_missing(value) else counts.exact(value)
