"""From results records to the numbers the leaderboard shows.

Everything here is computed from the published records alone (never the SQLite store),
with the terminal report's rules (``harness.report``, ``harness.ranking``):

* **fit**: a run fits when its mean exact match over the training scales (EM≤N) is at
  least ``harness.ranking.FIT_THRESHOLD``; only encodings whose every seed fits are ranked.
* **EM>N / tok>N**: exact match / per-token accuracy averaged over the evaluated scales
  beyond training; **reach**: the largest scale L with exact match >= 0.9 at every
  evaluated scale N+1..L (N: none beyond).
* **EM≤N / tok≤N**: the same over the training scales (in distribution).

Per (preset, task, encoding) each number is computed per seed, then shown as its mean
and the seeds' min..max (``Stat``). Fitted encodings are ranked within a (preset, task)
by EM>N, then reach, then tok>N (means); the others follow, unranked, marked "did not
fit" (``harness.ranking.RULE``). Curves give, per scale, the mean over seeds and the
min..max band.

An "encoding" on the board is the registry name, with its options appended when a run
set any (``rope{base=500}``), so differently configured runs are never pooled.

What the pages show beside the tables is computed next door, from the records or this
board: where the runs came from (``leaderboard.provenance``), the notes on rows run unlike
their papers, reading extra inputs or set up per task (``leaderboard.notes``), and the at
a glance grid (``leaderboard.overview``). Those modules import this one, never the
reverse.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from harness import ranking
from harness.config import NEW_FIELD_DEFAULTS
from harness.pe_spec import display_name, variant_display_name
from harness.protocols import extra_input_badge
from harness.report import per_seed_summary
from leaderboard import permutation
from leaderboard.plans import NO_PLANS, Filled, Planned, Plans, filled, published_cells, seeds_by_run
from leaderboard.retired import RETIRED_FILE, Retirement, RowRetirement
from leaderboard.schema import Record

FRAME_COLUMNS = [
    "run_id",
    "pe",
    "encoding",
    "task",
    "seed",
    "preset",
    "train_max",
    "test_range",
    "split",
    "length",
    "token_length",
    "n",
    "exact_match",
    "token_accuracy",
]
PROTOCOL_FREE_KEYS = ("pe", "pe_options", "eval_pe_options", "seed")
"""Config keys that may differ between runs compared in one (preset, task) table."""


class BoardError(ValueError):
    """The records cannot be put on one board (e.g. a preset label reused for two protocols)."""


def encoding_label(pe: str, pe_options: Mapping[str, Any], config: Mapping[str, Any] | None = None) -> str:
    """The board's name for an encoding run: its spec as ``harness.pe_spec.display_name``
    writes it (``rope``, ``randomized:ape``, ``prism{paper}``,
    ``randomized:ape{randomize_eval=false}`` for a run evaluated on plain positions),
    with the paper setup recognised when ``config`` (the record's) gives task and backbone."""
    task = backbone = None
    if config is not None:
        task, backbone = config.get("task"), config.get("backbone")
    try:
        return display_name(pe, pe_options, task=task, backbone=backbone)
    except (TypeError, ValueError, KeyError):  # a plugin's options the registry cannot read
        return pe if not pe_options else f"{pe} {json.dumps(pe_options, sort_keys=True)}"


def record_label(data: Mapping[str, Any]) -> str:
    """:func:`encoding_label` of one record's data; an inference-time variant's (a trained
    run evaluated with ``config.eval_pe_options``) as ``rope → yarn×4 L=10 (same weights)``
    (``harness.pe_spec.variant_display_name``)."""
    config = data["config"]
    label = encoding_label(data["pe"], config.get("pe_options") or {}, config)
    return variant_display_name(label, config.get("eval_pe_options"))


def frame(records: Iterable[Record]) -> pd.DataFrame:
    """Per-length rows (the columns of ``harness.store.load``, ``pe`` = board label, plus
    ``encoding`` = registry name), sorted by preset, task, label, seed, length."""
    rows = []
    for rec in records:
        d = rec.data
        base = {
            "run_id": d["run_id"],
            "pe": record_label(d),
            "encoding": d["pe"],
            "task": d["task"],
            "seed": d["seed"],
            "preset": d["preset"],
            "train_max": d["config"]["train"]["train_max"],
            "test_range": test_range(d),
        }
        rows += [{**base, **m} for m in d["metrics"]]
    df = pd.DataFrame(rows, columns=FRAME_COLUMNS)
    return df.sort_values(["preset", "task", "test_range", "pe", "seed", "length"], kind="stable").reset_index(
        drop=True
    )


def test_range(data: Mapping[str, Any]) -> int:
    """A record's largest planned test scale (``config.eval.test_max``): runs tested to 100
    make a table of their own beside the ones tested to 40 on the same task and preset."""
    return int(data["config"]["eval"]["test_max"])


def check_protocols(records: Sequence[Record]) -> None:
    """Raise BoardError if two runs of one (preset, task) differ in more than encoding and seed.

    (One encoding and seed twice under one protocol cannot happen: it is the same run_id,
    which reading the results already refuses.)
    """
    first: dict[tuple[str, str, int], tuple[dict[str, Any], Record]] = {}
    problems = []
    for rec in records:
        d = rec.data
        protocol = {k: v for k, v in _with_later_defaults(d["config"]).items() if k not in PROTOCOL_FREE_KEYS}
        key = (d["preset"], d["task"], test_range(d))
        if key not in first:
            first[key] = (protocol, rec)
        elif protocol != first[key][0]:
            other = first[key][1]
            differ = sorted(_differing_keys(protocol, first[key][0]))
            problems.append(
                f"{rec.path}:{rec.line} and {other.path}:{other.line}: preset {d['preset']!r} on task {d['task']!r} "
                f"with different protocols ({', '.join(differ)}): a table holds one protocol, so runs with "
                "other settings go to a results folder of their own (`pezoo leaderboard export --out DIR`), or "
                "are re-run with the preset's settings"
            )
    seen: dict[tuple[str, str, str, int, int], Record] = {}
    for rec in records:  # e.g. `randomized` and `randomized:ape`: one encoding, two run ids
        d = rec.data
        run_key = (d["preset"], d["task"], record_label(d), d["seed"], test_range(d))
        if run_key in seen:
            other = seen[run_key]
            problems.append(
                f"{rec.path}:{rec.line} and {other.path}:{other.line}: two runs of {run_key[2]!r} on task "
                f"{run_key[1]!r}, seed {run_key[3]}, preset {run_key[0]!r} (run ids {d['run_id']} and "
                f"{other.data['run_id']}); publish one of them"
            )
        seen.setdefault(run_key, rec)
    if problems:
        raise BoardError("results that cannot share a board:\n  " + "\n  ".join(problems))


def _with_later_defaults(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with the fields added after results were first published filled in at
    their defaults, so a record written before they existed compares equal to one written
    after (``harness.config.NEW_FIELD_DEFAULTS``)."""
    out = dict(config)
    for section, defaults in NEW_FIELD_DEFAULTS.items():
        if isinstance(out.get(section), Mapping):
            out[section] = {**defaults, **out[section]}
    return out


def _differing_keys(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> list[str]:
    out = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += _differing_keys(va, vb, f"{prefix}{k}.")
        elif va != vb:
            out.append(f"{prefix}{k}")
    return out


# --------------------------------------------------------------------------------------
# Summaries and curves
# --------------------------------------------------------------------------------------

CELLS_RULE = ranking.CELLS_RULE
RANKING_RULE = ranking.RULE

Stat = ranking.Spread
"""A table cell: mean and min..max over seeds (``harness.ranking.Spread``)."""


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
    come after the ranked ones (``harness.ranking.RULE``), the pending ones first.
    """

    rank: int | None
    label: str
    encoding: str
    seeds: tuple[int, ...]
    scores: Mapping[str, Stat]
    seeds_fit: int = 0
    per_seed: Mapping[str, tuple[float, ...]] = field(default_factory=dict)  # score -> each seed's value, seed order
    overlaps_above: bool = False  # EM>N's range over seeds meets that of a row ranked above (OVERLAP_RULE)
    pending: bool = False  # every seed so far fits, fewer seeds than planned: not ranked yet (PENDING_SEEDS_RULE)
    seeds_wanted: int | None = None  # the seeds the table's plan gives this row, while short of them (None: no plan)

    @property
    def fitted(self) -> bool:
        """Every seed so far fits the training scales."""
        return bool(self.seeds) and self.seeds_fit == len(self.seeds)

    @property
    def ranked(self) -> bool:
        """Every seed fits and the table has all the seeds it plans of it."""
        return self.rank is not None

    def rank_text(self) -> str:
        """``2``, ``≈3`` (its seeds do not separate it from a row ranked above), or ``—``
        (did not fit, or still short of its planned seeds)."""
        if self.rank is None:
            return "—"
        return f"{OVERLAP_MARK if self.overlaps_above else ''}{self.rank}"

    def badges(self) -> list[str]:
        """What a reader must know beside the name: ``did not fit`` or ``1 of 3 seeds: not
        ranked yet``, ``3 of 8 seeds, 5 being run``, and ``reads n`` for an encoding with an
        extra input (``harness.protocols.EXTRA_INPUTS``)."""
        status, more, reads = self.status_text(), self.seeds_text(), extra_input_badge(self.encoding)
        return [b for b in (status, more, reads) if b is not None]

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
        (SPLIT_SEEDS_RULE), else None: it is ranked on the seeds it has meanwhile."""
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
                    row = replace(row, overlaps_above=True)
                    break
        out.append(row)
    return out


def summary(df: pd.DataFrame, seeds_wanted: int | Mapping[str, int] | None = None) -> list[Row]:
    """Rows of one (preset, task) frame in the order of ``harness.ranking.RULE``; with
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
    # the per-seed number per_seed_summary does not give
    tok_within = df[df["split"] == "train"].groupby(["pe", "seed"])["token_accuracy"].mean().rename("tok_within")
    per_seed = per_seed.set_index(["pe", "seed"]).join(tok_within).reset_index()
    rows = []
    columns = {"em_within": "in-dist", "em_beyond": "EM>N", "reach": "reach", "tok_beyond": "tok-acc>N"}
    columns["tok_within"] = "tok_within"
    for standing in ranking.standings(per_seed, seeds_wanted=to_rank):
        g = per_seed[per_seed["pe"] == standing.label].sort_values("seed")
        scores = {score: Stat.of(g[column]) for score, column in columns.items()}
        values = {score: tuple(float(v) for v in g[column]) for score, column in columns.items()}
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
    round up to the fit threshold: 0.947 must not read 0.95 beside "did not fit"."""
    stat = row.scores[score]
    if score in INTEGER_SCORES:
        if math.isnan(stat.mean):
            return "-"
        mean = f"{stat.mean:.0f}" if stat.mean == round(stat.mean) else f"{stat.mean:.1f}"
        return mean if stat.n < 2 or stat.lo == stat.hi else f"{mean} ({stat.lo:.0f}–{stat.hi:.0f})"
    if score == "em_within" and not row.fitted and round(stat.mean, 2) >= ranking.FIT_THRESHOLD:
        return stat.text(3)
    return stat.text(2)


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
            emb.append((float(h["exact_match"].min()), float(h["exact_match"].max())))
            tok.append(Stat.of(h["token_accuracy"]))
            tokb.append((float(h["token_accuracy"].min()), float(h["token_accuracy"].max())))
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


# --------------------------------------------------------------------------------------
# Sentences beside the tables
# --------------------------------------------------------------------------------------


def filling_sentence(board: Board, preset: str) -> str | None:
    """One sentence saying that the preset's board is still being filled, or None (no
    plan, or every planned run published)."""
    f = board.preset_filled(preset)
    if f is None or f.complete:
        return None
    sources = ", ".join(f"leaderboard/{s}" for s in board.plans.sources[preset])
    return (
        f"Still being filled: {f.done} of the {plural(f.planned, 'run')} that {sources} plans are published "
        f"({_seeds_phrase(f)}){_rerun_phrase(f)}; pezoo sweep plan {sources.split(', ')[0]} lists the rest. "
        "A table with fewer runs or seeds than planned is provisional: its ranking may change."
    )


def _rerun_phrase(f: Filled) -> str:
    """``; 3 re-runs of published runs under corrected options to come, ...`` when some
    planned runs re-run published ones (``Filled.rerunning``), else empty."""
    if not f.rerunning:
        return ""
    runs = plural(f.rerunning, "re-run")
    return (
        f"; {runs} of published runs under corrected options to come, the earlier runs standing in meanwhile, "
        "marked with how they depart from their paper"
    )


def superseded_sentence(board: Board, table: Table) -> str | None:
    """``an earlier protocol (3000 steps): the board preset's table for odds_first (30 of
    51 planned runs published) replaces it when complete; not tested against the papers'
    claims`` for a table of a preset whose other tables have already left the board for a
    later protocol, else None."""
    successor = board.successor(table.preset)
    if successor is None:
        return None
    steps = "/".join(map(str, _train_steps(board.records_where(preset=table.preset, task=table.task))))
    later = next((t for t in board.tables if (t.preset, t.task) == (successor, table.task)), None)
    f = None if later is None else board.table_filled(later)
    so_far = "not started" if later is None else f"{f.done} of {f.planned} planned runs published" if f else "begun"
    return (
        f"an earlier protocol ({steps} steps): the {successor} preset's table for {table.task} ({so_far}) replaces "
        "it when complete; not tested against the papers' claims"
    )


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
    return f"≥ {top / n:.2g}×" if reach >= top else f"{reach / n:.2g}×"


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
        return not math.isnan(em.lo) and em.hi - em.lo > SPLIT_RANGE

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
        f"{_and(labels)} {times_n(far, table)} N ({far}" + (", the largest tested scale)" if far >= top else ")")
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


def _and(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def table_filling(board: Board, table: Table) -> str | None:
    """``provisional: 15 of 19 planned runs (seed 0: 13 of 13, seed 1: 2 of 13, ...)`` for an
    unfinished table, else None."""
    f = board.table_filled(table)
    if f is None or f.complete:
        return None
    return f"provisional: {f.done} of {f.planned} planned runs ({_seeds_phrase(f)}){_rerun_phrase(f)}"


def _seeds_phrase(f: Filled) -> str:
    """``seed 0: 20 of 20, seed 1: 1 of 20, seed 2: 1 of 20`` (or, without per-seed counts,
    ``seeds 0, 1 of 0, 1, 2``)."""
    if f.by_seed:
        return ", ".join(f"seed {seed}: {done} of {planned}" for seed, done, planned in f.by_seed)
    done = ", ".join(map(str, f.seeds_done)) or "none"
    return f"{'seed' if len(f.seeds_done) == 1 else 'seeds'} {done} of {', '.join(map(str, f.seeds_planned))}"


def plural(count: Any, noun: str) -> str:
    """``1 run``, ``2 runs``."""
    return f"{count} {noun}" + ("" if count == 1 else "s")


# --------------------------------------------------------------------------------------
# The whole board
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Table:
    """One (preset, task): its training range, ranked rows and curves."""

    preset: str
    task: str
    train_max: int
    test_max: int
    rows: tuple[Row, ...]
    curves: tuple[Curve, ...]
    protocol: str | None = None  # the config's "protocol" (decoder / encoder) where runs record one
    train_min: int = 1
    match: str = "trace"  # what exact match scores (config eval.match): the whole completion, or the final answer
    test_range: int | None = None  # its runs' planned largest test scale (config eval.test_max); None: test_max

    @property
    def tested_to(self) -> int:
        """The largest test scale its runs were planned to (a table's identity beside preset and task)."""
        return self.test_max if self.test_range is None else self.test_range

    @property
    def multiple(self) -> float:
        """The largest tested scale as a multiple of N (4 for 40 over N = 10)."""
        return self.test_max / self.train_max


@dataclass(frozen=True)
class RetiredTable:
    """A (preset, task) table left off the board (``leaderboard.retired``): the retirement,
    and what its published runs were."""

    retirement: Retirement
    runs: int
    seeds: tuple[int, ...]
    steps: tuple[int, ...]
    successor_steps: tuple[int, ...]

    def sentence(self) -> str:
        """``The quick table for copy (22 runs, seeds 0, 1, 3000 training steps) has left the
        board: the board preset's copy table (10000 steps) is complete. Why: ... Its runs stay
        in the results files.``"""
        r = self.retirement
        seeds = ("seed " if len(self.seeds) == 1 else "seeds ") + ", ".join(map(str, self.seeds))
        steps = "/".join(map(str, self.steps))
        replaced = (
            "no table replaces it"
            if r.superseded_by is None
            else f"the {r.superseded_by} preset's {r.task} table ({'/'.join(map(str, self.successor_steps))} steps) "
            "is complete"
        )
        return (
            f"The {r.preset} table for {r.task} ({plural(self.runs, 'run')}, {seeds}, {steps} training steps) "
            f"has left the board: {replaced}. Why: {r.why.rstrip('.')}. Its runs stay in the results files."
        )

    def summary(self) -> str:
        """What left the board, in a few words: ``the quick table for copy``."""
        return f"the {self.retirement.preset} table for {self.retirement.task}"

    @property
    def tasks(self) -> tuple[str, ...]:
        return (self.retirement.task,)


@dataclass(frozen=True)
class RetiredRow:
    """A row left off the board (``[[retired_row]]`` in ``leaderboard.retired``): the
    retirement, and the tasks and seeds its published runs covered."""

    retirement: RowRetirement
    runs: int
    tasks: tuple[str, ...]
    seeds: tuple[int, ...]

    def sentence(self) -> str:
        """``The board row rope → dynamic×4 L=22 (same weights) (6 runs on copy, reverse,
        seeds 0, 1, 2) has left the board for rope → dynamic×4 L=24 (same weights), published
        on the same tasks and seeds. Why: ... Its runs stay in the results files.``"""
        r = self.retirement
        seeds = ("seed " if len(self.seeds) == 1 else "seeds ") + ", ".join(map(str, self.seeds))
        return (
            f"The {r.preset} row {r.row} ({plural(self.runs, 'run')} on {', '.join(self.tasks)}, {seeds}) has left "
            f"the board for {r.superseded_by}, published on the same tasks and seeds. Why: {r.why.rstrip('.')}. "
            "Its runs stay in the results files."
        )

    def summary(self) -> str:
        return f"the {self.retirement.preset} row {self.retirement.row}"


RETIRED_RULE = (
    "Tables superseded by a complete table of a later protocol or withdrawn with their task, and rows replaced by "
    f"a corrected run (leaderboard/{RETIRED_FILE}):"
)


@dataclass(frozen=True)
class TableToCome:
    """A planned table with no published run yet: what it will hold."""

    preset: str
    task: str
    tested_to: int
    labels: tuple[str, ...]
    runs: int
    seeds: tuple[int, ...]

    def sentence(self, train_max: int | None = None) -> str:
        """``Being run: a copy table tested to 100 (10× N): hard_alibi, learned_prf_sh and
        prism{paper}, seeds 0, 1, 2 (9 runs); none published yet.``"""
        times = "" if not train_max else f" ({self.tested_to / train_max:g}× N)"
        seeds = ("seed " if len(self.seeds) == 1 else "seeds ") + ", ".join(map(str, self.seeds))
        return (
            f"Being run: a {self.task} table of preset {self.preset} tested to {self.tested_to}{times}: "
            f"{_and(list(self.labels))}, {seeds} ({plural(self.runs, 'run')}); none published yet"
        )


@dataclass(frozen=True)
class Board:
    """Everything the pages show, computed once from the records (less the retired tables')."""

    records: tuple[Record, ...]
    tables: tuple[Table, ...]  # sorted by task, then preset
    plans: Plans = NO_PLANS  # the committed sweep files' planned runs (leaderboard.plans)
    retired: tuple[RetiredTable | RetiredRow, ...] = ()  # tables and rows left off the board, and why

    def _published(self, **equal: str) -> tuple[dict[str, int], frozenset[str]]:
        records = self.records_where(**equal)
        return seeds_by_run(records), published_cells(records)

    def preset_filled(self, preset: str) -> Filled | None:
        """How much of the preset's plan is published; None without a plan."""
        plan = self.plans.presets.get(preset)
        return None if plan is None else filled(plan, *self._published(preset=preset))

    def table_plan(self, table: Table) -> Planned | None:
        """The planned runs of ``table`` (its preset, task and test range); None without a plan."""
        plan = self.plans.tables.get((table.preset, table.task))
        return None if plan is None else plan.within(table.tested_to)

    def table_filled(self, table: Table) -> Filled | None:
        """How much of the (preset, task, test range)'s plan is published; None without a plan."""
        plan = self.table_plan(table)
        if plan is None:
            return None
        records = self.records_where(preset=table.preset, task=table.task)
        records = [r for r in records if test_range(r.data) == table.tested_to]
        return filled(plan, seeds_by_run(records), published_cells(records))

    def tables_to_come(self, task: str) -> list[TableToCome]:
        """The tables a sweep file plans on ``task`` that have no published run yet (a copy
        table tested to 100 while its runs train), so a page can say they are being run."""
        out = []
        for (preset, planned_task), plan in sorted(self.plans.tables.items()):
            if planned_task != task or self.successor(preset) is not None:
                continue
            have = {t.tested_to for t in self.tables if (t.preset, t.task) == (preset, task)}
            for tested_to in plan.test_ranges():
                if tested_to in have:
                    continue
                part = plan.within(tested_to)
                rows = part.seeds_of_rows()
                out.append(TableToCome(preset, task, tested_to, tuple(sorted(rows)), len(part.run_ids), part.seeds))
        return out

    @property
    def tasks(self) -> list[str]:
        return sorted({t.task for t in self.tables})

    @property
    def presets(self) -> list[str]:
        return sorted({t.preset for t in self.tables})

    @property
    def labels(self) -> list[str]:
        return sorted({row.label for t in self.tables for row in t.rows})

    @property
    def encodings(self) -> list[str]:
        return sorted({row.encoding for t in self.tables for row in t.rows})

    def retired_table(self, preset: str, task: str) -> RetiredTable | None:
        """The retirement of ``preset``'s table for ``task``, if it has left the board."""
        return next(
            (
                r
                for r in self.retired
                if isinstance(r, RetiredTable) and (r.retirement.preset, r.retirement.task) == (preset, task)
            ),
            None,
        )

    def successor(self, preset: str) -> str | None:
        """The later protocol that replaces ``preset``'s tables, where some of them have
        already left the board for it (``[[retired]]`` in ``leaderboard.retired``), else None."""
        return next(
            (
                r.retirement.superseded_by
                for r in self.retired
                if isinstance(r, RetiredTable) and r.retirement.preset == preset and r.retirement.superseded_by
            ),
            None,
        )

    def retired_on(self, task: str) -> list[RetiredTable | RetiredRow]:
        """The retirements that took something off ``task``'s tables."""
        return [r for r in self.retired if task in r.tasks]

    def tables_of_task(self, task: str) -> list[Table]:
        return [t for t in self.tables if t.task == task]

    def records_where(self, **equal: str) -> list[Record]:
        return [r for r in self.records if all(r.data[k] == v for k, v in equal.items())]


def assemble(
    records: Sequence[Record], plans: Plans = NO_PLANS, retirements: Sequence[Retirement | RowRetirement] = ()
) -> Board:
    """The board of ``records`` (validated results) against the sweep files' ``plans``,
    less the tables ``retirements`` retire; raises BoardError on incomparable runs or a
    retirement that does not hold (:func:`retire`)."""
    records, plans, retired = retire(records, plans, retirements)
    check_protocols(records)
    df = frame(records)
    tables = []
    by_table: dict[tuple[str, str, int], list[Record]] = {}
    for r in records:
        by_table.setdefault((r.data["task"], r.data["preset"], test_range(r.data)), []).append(r)
    for (task, preset, tested_to), g in df.groupby(["task", "preset", "test_range"], sort=True):
        table_records = by_table[(str(task), str(preset), int(tested_to))]
        config = table_records[0].data["config"]
        protocol = config.get("protocol")  # one per (task, preset, test range): check_protocols made sure
        plan = plans.tables.get((str(preset), str(task)))
        wanted = _seeds_wanted(None if plan is None else plan.within(int(tested_to)), table_records)
        tables.append(
            Table(
                preset=str(preset),
                task=str(task),
                train_max=int(g["train_max"].iloc[0]),
                test_max=int(g["length"].max()),
                rows=tuple(summary(g, seeds_wanted=wanted)),
                curves=tuple(curves(g)),
                protocol=None if protocol is None else str(protocol),
                train_min=int(config["train"].get("train_min", 1)),
                match=str(config.get("eval", {}).get("match", "trace")),
                test_range=int(tested_to),
            )
        )
    return Board(tuple(records), tuple(tables), plans, retired)


def _seeds_wanted(plan: Planned | None, records: Sequence[Record]) -> int | Mapping[str, int] | None:
    """The seeds the plan gives each row of a table still being filled: per label where
    the plan knows its rows' labels (a row planned for 8 seeds beside rows of 3), else
    the plan's seeds for every row. None (rank every row whose seeds fit) without a plan,
    or once every planned run is published or stood in for: the table is then complete,
    and a row the plan gave fewer seeds than others is as complete as it will get."""
    if plan is None:
        return None
    f = filled(plan, seeds_by_run(records), published_cells(records))
    if f.covered:
        return None
    rows = plan.seeds_of_rows()
    if not rows:
        return len(plan.seeds)
    # a published row the plan does not name wants what the plan's rows want at least
    fallback = min(rows.values())
    return {label: rows.get(label, fallback) for label in {record_label(r.data) for r in records}}


def retire(
    records: Sequence[Record], plans: Plans, retirements: Sequence[Retirement | RowRetirement]
) -> tuple[list[Record], Plans, tuple[RetiredTable | RetiredRow, ...]]:
    """(the records left on the board, the plans less the retired tables, the retired tables
    and rows).

    Raises:
        BoardError: a retirement that matches no published run (a typo), whose successor
            is not planned by a sweep file, is itself retired, or is not complete yet; a
            withdrawal (no successor) while a sweep file plans its task under another
            preset, or while runs of another preset on its task stay on the board; a row
            retirement whose successor row is not published on each of its tasks and seeds.
    """
    tables = [r for r in retirements if isinstance(r, Retirement)]
    kept, plans, retired_tables = _retire_tables(records, plans, tables)
    rows = [r for r in retirements if isinstance(r, RowRetirement)]
    kept, retired_rows = _retire_rows(kept, rows)
    _check_withdrawals(kept, [r for r in tables if r.superseded_by is None])
    return kept, plans, (*retired_tables, *retired_rows)


def _check_withdrawals(kept: Sequence[Record], withdrawn: Sequence[Retirement]) -> None:
    """Refuse a withdrawal whose task still has runs on the board (``kept``: the records
    left once every retirement is applied): their table would be shown, so something does
    replace the withdrawn one, and without a plan nothing marks it provisional."""
    for r in withdrawn:
        shown = sorted({str(rec.data["preset"]) for rec in kept if rec.data["task"] == r.task})
        if shown:
            have = "has" if len(shown) == 1 else "have"
            raise BoardError(
                f"leaderboard/{RETIRED_FILE} withdraws {r.preset!r} on {r.task!r} with no table replacing it, but "
                f"{' and '.join(map(repr, shown))} {have} published runs on {r.task!r}, which the board would show: "
                "plan them in a sweep file beside the results, and retire the old table for theirs once complete"
            )


def _retire_rows(
    records: list[Record], retirements: Sequence[RowRetirement]
) -> tuple[list[Record], tuple[RetiredRow, ...]]:
    """(the records left, the retired rows): each row's runs leave, once its successor row
    has a run on every (task, seed) it had."""
    if not retirements:
        return records, ()
    where = f"leaderboard/{RETIRED_FILE}"
    labels = [record_label(rec.data) for rec in records]
    retired_keys = {(r.preset, r.row) for r in retirements}
    out = []
    for r in retirements:
        gone = [
            rec for rec, label in zip(records, labels, strict=True) if (rec.data["preset"], label) == (r.preset, r.row)
        ]
        if not gone:
            raise BoardError(f"{where} retires the {r.preset} row {r.row!r}, but no published run has it (a typo?)")
        if (r.preset, r.superseded_by) in retired_keys:
            raise BoardError(f"{where}: the {r.preset} row {r.row!r} is superseded by {r.superseded_by!r}, retired too")
        covered = {
            (rec.data["task"], int(rec.data["seed"]))
            for rec, label in zip(records, labels, strict=True)
            if (rec.data["preset"], label) == (r.preset, r.superseded_by)
        }
        needed = {(rec.data["task"], int(rec.data["seed"])) for rec in gone}
        if needed - covered:
            missing = ", ".join(f"{task} seed {seed}" for task, seed in sorted(needed - covered))
            raise BoardError(
                f"{where} retires the {r.preset} row {r.row!r} for {r.superseded_by!r}, which is not published on "
                f"{missing}: retire the old row once its successor covers every task and seed it had"
            )
        out.append(
            RetiredRow(
                r,
                len(gone),
                tuple(sorted({task for task, _ in needed})),
                tuple(sorted({seed for _, seed in needed})),
            )
        )
    kept = [rec for rec, label in zip(records, labels, strict=True) if (rec.data["preset"], label) not in retired_keys]
    return kept, tuple(out)


def _retire_tables(
    records: Sequence[Record], plans: Plans, retirements: Sequence[Retirement]
) -> tuple[list[Record], Plans, tuple[RetiredTable, ...]]:
    """:func:`retire` for the (preset, task) tables."""
    if not retirements:
        return list(records), plans, ()
    where = f"leaderboard/{RETIRED_FILE}"
    retired_keys = {(r.preset, r.task) for r in retirements}
    out = []
    for r in retirements:
        gone = [rec for rec in records if (rec.data["preset"], rec.data["task"]) == (r.preset, r.task)]
        if not gone:
            raise BoardError(
                f"{where} retires preset {r.preset!r} on {r.task!r}, but no published run is one (a typo?)"
            )
        if r.superseded_by is None:
            still = sorted(p for p, t in plans.tables if t == r.task and (p, t) not in retired_keys)
            if still:
                raise BoardError(
                    f"{where} withdraws {r.preset!r} on {r.task!r} with no table replacing it, but a sweep file "
                    f"plans {' and '.join(map(repr, still))} on {r.task!r}: delete the [[withdrawn]] entry (the old "
                    "table returns, marked as an earlier protocol) and retire it ([[retired]]) once that table is "
                    "complete, or take the task out of that sweep file"
                )
            out.append(
                RetiredTable(
                    r, len(gone), tuple(sorted({int(rec.data["seed"]) for rec in gone})), _train_steps(gone), ()
                )
            )
            continue
        if (r.superseded_by, r.task) in retired_keys:
            raise BoardError(
                f"{where}: {r.preset!r} on {r.task!r} is superseded by {r.superseded_by!r}, which is retired too"
            )
        plan = plans.tables.get((r.superseded_by, r.task))
        if plan is None:
            raise BoardError(
                f"{where} retires {r.preset!r} on {r.task!r} in favour of {r.superseded_by!r}, but no sweep file "
                f"plans {r.superseded_by!r} on {r.task!r}, so nothing says that table is complete"
            )
        successors = [rec for rec in records if (rec.data["preset"], rec.data["task"]) == (r.superseded_by, r.task)]
        f = filled(plan, seeds_by_run(successors), published_cells(successors))
        # a table whose rows all stand, some awaiting a corrected re-run, still replaces it; so does one that
        # shows every encoding on every seed the old table showed while later rows or seeds are added to it
        # (8 seeds for rows whose seeds split): it says itself that it is still being filled
        shown_again = {(rec.data["pe"], int(rec.data["seed"])) for rec in successors}
        if not f.covered and not {(rec.data["pe"], int(rec.data["seed"])) for rec in gone} <= shown_again:
            raise BoardError(
                f"{where} retires {r.preset!r} on {r.task!r}, but {r.superseded_by!r} on {r.task!r} has "
                f"{f.done} of its {f.planned} planned runs published: retire the old table once the new one is complete"
            )
        out.append(
            RetiredTable(
                r,
                len(gone),
                tuple(sorted({int(rec.data["seed"]) for rec in gone})),
                _train_steps(gone),
                _train_steps(successors),
            )
        )
    kept = [rec for rec in records if (rec.data["preset"], rec.data["task"]) not in retired_keys]
    return kept, plans.without(retired_keys), tuple(out)


def _train_steps(records: Iterable[Record]) -> tuple[int, ...]:
    return tuple(sorted({int(rec.data["config"]["train"]["steps"]) for rec in records}))
