"""A table's rows and curves: one ``Row`` per encoding on a (preset, task), its numbers
per seed and over seeds, and one ``Curve`` per encoding, per scale.

Everything here is computed from the published records alone (never the SQLite store),
with the terminal report's rules (``harness.commands.report``, ``harness.records.ranking``):

* **fit**: a run fits when its mean exact match over the training scales (EM≤N) is at
  least ``harness.records.ranking.FIT_THRESHOLD``; only encodings whose every seed fits are ranked.
* **EM>N / tok>N**: exact match / per-token accuracy averaged over the evaluated scales
  beyond training; **reach**: the largest scale L with exact match >= 0.9 at every
  evaluated scale N+1..L (N: none beyond).
* **EM≤N / tok≤N**: the same over the training scales (in distribution).

Per (preset, task) each number is computed per seed, then shown as its mean and the
seeds' min..max (``Stat``). Fitted encodings are ranked within a (preset, task) by EM>N,
then reach, then tok>N (means); the others follow, unranked, marked "did not fit"
(``harness.records.ranking.RULE``). Curves give, per scale, the mean over seeds and the min..max
band.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from harness.commands.report import per_seed_summary
from harness.config.protocols import extra_input_badge
from harness.records import counts, ranking
from leaderboard import permutation
from leaderboard.making import Making

CELLS_RULE = ranking.CELLS_RULE
RANKING_RULE = ranking.RULE

Stat = ranking.Spread
"""A table cell: mean and min..max over seeds (``harness.records.ranking.Spread``)."""


SCORES = ("em_within", "em_beyond", "reach", "tok_beyond", "tok_within")
SCORE_TITLES = {
    "em_within": "EM≤N",
    "em_beyond": "EM>N",
    "reach": "reach",
    "tok_beyond": "tok>N",
    "tok_within": "tok≤N",
}
INTEGER_SCORES = ("reach",)


@dataclass(frozen=True)
class Row:
    """One encoding on one (preset, task) table.

    ``rank`` is ``None`` when some seed did not fit the training scales, or when every
    seed so far fits but the table's plan wants more seeds of it (``pending``): such rows
    come after the ranked ones (``harness.records.ranking.RULE``), the pending ones first.
    """

    rank: int | None
    label: str
    encoding: str
    seeds: tuple[int, ...]
    scores: Mapping[str, Stat]
    seeds_fit: int = 0
    per_seed: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)  # score -> seeds' exact values
    overlaps_above: bool = False  # the permutation test does not put it below a row ranked above (OVERLAP_RULE)
    overlap_with: str = ""  # the first such row above and the test's words: what the ≈'s hover says
    pending: bool = False  # every seed so far fits, fewer seeds than planned: not ranked yet (PENDING_SEEDS_RULE)
    seeds_wanted: int | None = None  # the seeds the table's plan gives this row, while short of them (None: no plan)
    making: Making | None = None  # how its runs were made (leaderboard.making): device, exact match's method, TF32

    @property
    def fitted(self) -> bool:
        """Every seed so far fits the training scales."""
        return bool(self.seeds) and self.seeds_fit == len(self.seeds)

    @property
    def ranked(self) -> bool:
        """Every seed fits and the table has all the seeds it plans of it."""
        return self.rank is not None

    def overlap_title(self) -> str:
        """The ≈'s hover text: the rule it applies (:data:`OVERLAP_RULE`'s test) and the
        row above that the test does not put this one below, with its p."""
        if not self.overlaps_above:
            return ""
        return (
            f"the exact permutation test over seeds does not put it below {self.overlap_with} on EM>N as shown "
            "(one-sided p > 0.05): the seeds do not separate them"
        )

    def rank_text(self) -> str:
        """``2``, ``≈3`` (its seeds do not separate it from a row ranked above), or ``—``
        (did not fit, or still short of its planned seeds)."""
        if self.rank is None:
            return "—"
        return f"{OVERLAP_MARK if self.overlaps_above else ''}{self.rank}"

    def badges(self) -> list[str]:
        """What a reader must know beside the name: ``did not fit`` or ``1 of 3 seeds: not
        ranked yet``, ``3 of 8 seeds, 5 being run``, ``reads n`` for an encoding with an
        extra input (``harness.config.protocols.EXTRA_INPUTS``), and ``GPU`` for a row made
        otherwise than the CPU board (``leaderboard.making``; the table's legend says how)."""
        return [badge for badge, _ in self.titled_badges()]

    def titled_badges(self) -> list[tuple[str, str]]:
        """:meth:`badges` with each one's hover text (``""``: none); the mark of how the row
        was made says it in full: ``trained and evaluated on a GPU (NVIDIA H200), ...``."""
        status, more, reads = self.status_text(), self.seeds_text(), extra_input_badge(self.encoding)
        out = [(b, "") for b in (status, more, reads) if b is not None]
        if self.making is not None and self.making.mark:
            out.append((self.making.mark, f"trained and evaluated {self.making.sentence()}"))
        return out

    def status_text(self) -> str | None:
        """``did not fit``, ``1 of 3 seeds: not ranked yet``, or None for a ranked row."""
        if self.ranked:
            return None
        if not self.fitted:
            return "did not fit"
        return f"{len(self.seeds)} of {self.seeds_wanted} seeds: not ranked yet"

    @property
    def seeds_to_come(self) -> int:
        """Planned seeds of this row not published yet (0 without a plan, or with all of them)."""
        return max(0, (self.seeds_wanted or 0) - len(self.seeds))

    def seeds_text(self) -> str | None:
        """``3 of 8 seeds, 5 being run`` for a ranked row whose plan gives it more seeds
        (``leaderboard.reach.SPLIT_SEEDS_RULE``), else None: it is ranked on the seeds it has meanwhile."""
        if not self.ranked or not self.seeds_to_come:
            return None
        return f"{len(self.seeds)} of {self.seeds_wanted} seeds, {self.seeds_to_come} being run"


OVERLAP_MARK = "≈"
OVERLAP_RULE = (
    f"{OVERLAP_MARK} before a rank: the exact permutation test over seeds does not put some row ranked above it "
    "above it on EM>N, the ranking measure, as the table shows the seeds' values (two decimals; one-sided p > 0.05, "
    "or too few seeds to decide: 3 against 3 can reach p = 0.05 only where every seed of one is above every seed "
    "of the other). A rank without the mark is below every row ranked above it by that test."
)
"""What the ≈ before a rank means, quoted by the site and the README."""

MIN_RANKED_SEEDS = 3
"""A row is ranked once it has this many seeds (or all its plan gives it, if fewer)."""

PENDING_SEEDS_RULE = (
    f"A row with fewer than {MIN_RANKED_SEEDS} seeds (or than its plan gives it, if fewer) is listed after the "
    "ranked rows, “not ranked yet”, with the numbers of its seeds so far: one seed is not ranked against three "
    "seeds' means. A row with more seeds planned than published is ranked on the seeds it has, marked with how "
    "many are being run."
)
"""What a pending row is, quoted by the site and the README where a table has one."""


def _mark_overlaps(rows: list[Row]) -> list[Row]:
    """Set ``overlaps_above`` on each ranked row that the exact permutation test over seeds
    (``leaderboard.permutation``) does not put below some ranked row with a smaller rank
    number (rows sharing a rank are compared with the rows above them, not with each other),
    on the seeds' EM>N as the table shows them: values that read ``0.00`` and ``0.00`` are
    equal, even where the third decimal differs (odds_first: a handful of exact answers in
    3000)."""
    out: list[Row] = []
    for row in rows:
        if row.ranked:
            mine = [ranking.shown(v) for v in row.per_seed.get("em_beyond", ())]
            for above in out:
                if not above.ranked or above.rank == row.rank:
                    continue
                theirs = [ranking.shown(v) for v in above.per_seed.get("em_beyond", ())]
                p = permutation.p_above(theirs, mine)
                if p is not None and p > permutation.ALPHA:
                    test = permutation.p_text(p, len(theirs), len(mine))
                    row = replace(row, overlaps_above=True, overlap_with=f"{above.label} (rank {above.rank}; {test})")
                    break
        out.append(row)
    return out


def summary(df: pd.DataFrame, seeds_wanted: int | Mapping[str, int] | None = None) -> list[Row]:
    """Rows of one (preset, task) frame in the order of ``harness.records.ranking.RULE``; with
    ``seeds_wanted`` (the seeds the table's plan gives every row, or per label), a row with
    fewer than ``MIN_RANKED_SEEDS`` of them (all of them where fewer are planned) is pending."""
    if df.empty:
        return []
    planned: Mapping[str, int] | None = None
    if isinstance(seeds_wanted, Mapping):
        planned = seeds_wanted
    elif seeds_wanted is not None:
        planned = {str(label): seeds_wanted for label in df["pe"].unique()}
    to_rank = None if planned is None else {k: min(v, MIN_RANKED_SEEDS) for k, v in planned.items()}
    per_seed = per_seed_summary(df)
    rows = []
    columns = {"em_within": "in-dist", "em_beyond": "EM>N", "reach": "reach", "tok_beyond": "tok-acc>N"}
    columns["tok_within"] = "tok_within"
    for standing in ranking.standings(per_seed, seeds_wanted=to_rank):
        g = per_seed[per_seed["pe"] == standing.label].sort_values("seed")
        scores = {score: Stat.of(g[column]) for score, column in columns.items()}
        values = {score: tuple(g[column]) for score, column in columns.items()}  # exact: Fractions, reach ints
        encoding = str(df.loc[df["pe"] == standing.label, "encoding"].iloc[0])
        seeds = tuple(int(s) for s in g["seed"])
        rows.append(
            Row(
                standing.rank,
                standing.label,
                encoding,
                seeds,
                scores,
                standing.seeds_fit,
                values,
                pending=standing.pending,
                seeds_wanted=None if planned is None else planned.get(standing.label),
            )
        )
    return _mark_overlaps(rows)


def cell_text(row: Row, score: str) -> str:
    """One table cell of ``row`` (site and README alike): ``mean (min–max)``, two decimals
    (reach: whole scales, its mean over seeds to one decimal, ``20.3 (13–24)``: a mean
    rounded to a whole scale would name a scale no seed reached, and half-way means would
    round to even). EM≤N of a row that did not fit gets three decimals where two would
    round up to the fit threshold, or where a seed's value below it would read as reaching
    it (:func:`reads_fit`): 0.947 must not read 0.95 beside "did not fit"."""
    stat = row.scores[score]
    if score in INTEGER_SCORES:
        if counts.is_missing(stat.mean):
            return "-"
        mean = counts.fixed(stat.mean, 0 if counts.exact(stat.mean).denominator == 1 else 1)
        lo, hi = counts.fixed(stat.lo, 0), counts.fixed(stat.hi, 0)
        return mean if stat.n < 2 or stat.lo == stat.hi else f"{mean} ({lo}–{hi})"
    threshold = counts.exact(ranking.FIT_THRESHOLD)
    if score == "em_within" and not row.fitted and (counts.rounded(stat.mean, 2) >= threshold or reads_fit(stat)):
        return stat.text(3)
    return stat.text(2)


def reads_fit(stat: Stat, digits: int = 2) -> bool:
    """Whether some number of an EM≤N cell (mean, min or max) is below the fit threshold
    but reads as reaching it at ``digits`` decimals (0.949 rounds half up to 0.95): a
    did-not-fit row then shows three decimals, so no seed that did not fit reads 0.95."""
    threshold = counts.exact(ranking.FIT_THRESHOLD)
    return any(
        not counts.is_missing(v) and counts.exact(v) < threshold <= counts.rounded(v, digits)
        for v in (stat.mean, stat.lo, stat.hi)
    )


@dataclass(frozen=True)
class Curve:
    """One encoding's per-scale numbers on one (preset, task): parallel tuples, sorted by length."""

    label: str
    lengths: tuple[int, ...]
    splits: tuple[str, ...]
    token_lengths: tuple[float, ...]
    seeds: tuple[int, ...]
    exact_match: tuple[Stat, ...]
    exact_match_band: tuple[tuple[float, float], ...]
    token_accuracy: tuple[Stat, ...]
    token_accuracy_band: tuple[tuple[float, float], ...]


def curves(df: pd.DataFrame) -> list[Curve]:
    """Per encoding of one (preset, task) frame: the mean and min..max over seeds, per scale."""
    out = []
    for label, g in df.groupby("pe", sort=True):
        lengths, splits, tlens, em, emb, tok, tokb = [], [], [], [], [], [], []
        for length, h in g.groupby("length", sort=True):
            lengths.append(int(length))
            splits.append(str(h["split"].iloc[0]))
            tlens.append(float(h["token_length"].mean()))
            em.append(Stat.of(h["exact_match"]))
            emb.append((float(min(h["exact_match"])), float(max(h["exact_match"]))))  # drawn: floats
            tok.append(Stat.of(h["token_accuracy"]))
            tokb.append((float(min(h["token_accuracy"])), float(max(h["token_accuracy"]))))
        seeds = tuple(sorted(int(s) for s in g["seed"].unique()))
        out.append(
            Curve(
                label=str(label),
                lengths=tuple(lengths),
                splits=tuple(splits),
                token_lengths=tuple(tlens),
                seeds=seeds,
                exact_match=tuple(em),
                exact_match_band=tuple(emb),
                token_accuracy=tuple(tok),
                token_accuracy_band=tuple(tokb),
            )
        )
    return out
