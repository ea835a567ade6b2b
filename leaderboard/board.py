"""From results records to the numbers the leaderboard shows.

Everything here is computed from the published records alone (never the SQLite store),
reusing the terminal report's rules (``harness.report``):

* **solved≤** (the extrapolation score): the largest scale L such that exact match is
  >= 0.9 at every evaluated scale <= L (``solved_up_to``); N, the largest training
  scale, means "nothing beyond training", 0 means not even scale 1.
* **EM>N / tok>N**: exact match / per-token accuracy averaged over the evaluated scales
  beyond training.
* **EM≤N / tok≤N**: the same over the training scales (in distribution).

Per (preset, task, encoding) each number is computed per seed, then summarised as mean ±
half-width of the 95% t-interval over seeds (``ci95``). Encodings are ranked within a
(preset, task) by solved≤, then EM>N, then tok>N (means, higher first); exact ties share
a rank. Curves give, per scale, the mean over seeds and the min..max band.

**At a glance** (``overview``), per preset: every encoding's rank on every task, ordered by
the mean of those ranks (fewer missing tasks first, then lower mean rank, then higher mean
EM>N over the tasks, then name).

An "encoding" on the board is the registry name, with its options appended when a run
set any (``rope {"base": 500}``), so differently configured runs are never pooled.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from harness.config import NEW_FIELD_DEFAULTS
from harness.report import ci95, per_seed_summary
from leaderboard.schema import Record

FRAME_COLUMNS = [
    "run_id",
    "pe",
    "encoding",
    "task",
    "seed",
    "preset",
    "train_max",
    "split",
    "length",
    "token_length",
    "n",
    "exact_match",
    "token_accuracy",
]
PROTOCOL_FREE_KEYS = ("pe", "pe_options", "seed")
"""Config keys that may differ between runs compared in one (preset, task) table."""


class BoardError(ValueError):
    """The records cannot be put on one board (e.g. a preset label reused for two protocols)."""


def encoding_label(pe: str, pe_options: Mapping[str, Any]) -> str:
    """The board's name for an encoding run: the registry name, plus its options if any."""
    return pe if not pe_options else f"{pe} {json.dumps(pe_options, sort_keys=True)}"


def frame(records: Iterable[Record]) -> pd.DataFrame:
    """Per-length rows (the columns of ``harness.store.load``, ``pe`` = board label, plus
    ``encoding`` = registry name), sorted by preset, task, label, seed, length."""
    rows = []
    for rec in records:
        d = rec.data
        base = {
            "run_id": d["run_id"],
            "pe": encoding_label(d["pe"], d["config"].get("pe_options") or {}),
            "encoding": d["pe"],
            "task": d["task"],
            "seed": d["seed"],
            "preset": d["preset"],
            "train_max": d["config"]["train"]["train_max"],
        }
        rows += [{**base, **m} for m in d["metrics"]]
    df = pd.DataFrame(rows, columns=FRAME_COLUMNS)
    return df.sort_values(["preset", "task", "pe", "seed", "length"], kind="stable").reset_index(drop=True)


def check_protocols(records: Sequence[Record]) -> None:
    """Raise BoardError if two runs of one (preset, task) differ in more than encoding and seed.

    (One encoding and seed twice under one protocol cannot happen: it is the same run_id,
    which reading the results already refuses.)
    """
    first: dict[tuple[str, str], tuple[dict[str, Any], Record]] = {}
    problems = []
    for rec in records:
        d = rec.data
        protocol = {k: v for k, v in _with_later_defaults(d["config"]).items() if k not in PROTOCOL_FREE_KEYS}
        key = (d["preset"], d["task"])
        if key not in first:
            first[key] = (protocol, rec)
        elif protocol != first[key][0]:
            other = first[key][1]
            differ = sorted(_differing_keys(protocol, first[key][0]))
            problems.append(
                f"{rec.path}:{rec.line} and {other.path}:{other.line}: preset {d['preset']!r} on task {d['task']!r} "
                f"with different protocols ({', '.join(differ)}); give one of them its own preset name"
            )
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

CELLS_RULE = (
    "mean ± half-width of the 95% t-interval over seeds; with two seeds that is 12.7 × half their difference "
    "(t = 12.71 at one degree of freedom), so an interval may reach past 0 or 1: it says the seeds disagree, not "
    "that a value could lie there."
)
"""What a table cell's ``mean ± half`` means, quoted by the site's and the README's ranking rule."""


@dataclass(frozen=True)
class Stat:
    """Mean and half-width of the 95% t-interval over seeds (``nan`` mean: no value)."""

    mean: float
    half: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Stat:
        series = pd.Series(list(values), dtype=float)
        if series.dropna().empty:
            return cls(math.nan, 0.0)
        return cls(*ci95(series))

    def text(self, digits: int = 2) -> str:
        """``0.93 ± 0.04`` (no ± for one seed), ``-`` when missing: like ``harness.report.fmt``."""
        if math.isnan(self.mean):
            return "-"
        return f"{self.mean:.{digits}f}" + (f" ± {self.half:.{digits}f}" if self.half else "")

    def sort_value(self) -> str:
        return "" if math.isnan(self.mean) else f"{self.mean:.6f}"


SCORES = ("solved", "em_beyond", "tok_beyond", "em_within", "tok_within")
SCORE_TITLES = {
    "solved": "solved≤",
    "em_beyond": "EM>N",
    "tok_beyond": "tok>N",
    "em_within": "EM≤N",
    "tok_within": "tok≤N",
}


@dataclass(frozen=True)
class Row:
    """One encoding on one (preset, task) table."""

    rank: int
    label: str
    encoding: str
    seeds: tuple[int, ...]
    scores: Mapping[str, Stat]


def summary(df: pd.DataFrame) -> list[Row]:
    """Ranked rows of one (preset, task) frame (see the module docstring for the rule)."""
    if df.empty:
        return []
    per_seed = per_seed_summary(df).set_index(["pe", "seed"])
    # the per-seed number per_seed_summary does not give
    tok_within = df[df["split"] == "train"].groupby(["pe", "seed"])["token_accuracy"].mean().rename("tok_within")
    per_seed = per_seed.join(tok_within)
    rows = []
    for label, g in per_seed.groupby(level="pe"):
        scores = {
            "solved": Stat.of(g["solved<="]),
            "em_beyond": Stat.of(g["EM>N"]),
            "tok_beyond": Stat.of(g["tok-acc>N"]),
            "em_within": Stat.of(g["in-dist"]),
            "tok_within": Stat.of(g["tok_within"]),
        }
        encoding = str(df.loc[df["pe"] == label, "encoding"].iloc[0])
        seeds = tuple(sorted(int(s) for s in g.index.get_level_values("seed")))
        rows.append((label, encoding, seeds, scores))

    def key(row: tuple[str, str, tuple[int, ...], dict[str, Stat]]) -> tuple[float, ...]:
        s = row[3]
        return tuple(-_or_low(s[k].mean) for k in ("solved", "em_beyond", "tok_beyond"))

    rows.sort(key=lambda r: (key(r), r[0]))
    ranked: list[Row] = []
    rank, previous = 0, None
    for i, row in enumerate(rows, start=1):
        if key(row) != previous:  # competition ranking: exact ties share a rank
            rank, previous = i, key(row)
        ranked.append(Row(rank, *row))
    return ranked


def _or_low(x: float) -> float:
    return -math.inf if math.isnan(x) else x


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
    """Per encoding of one (preset, task) frame: mean ± CI and min..max over seeds, per scale."""
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
# Provenance
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Provenance:
    """Where the runs of one preset (within some page's scope) came from."""

    preset: str
    runs: int
    seeds: tuple[int, ...]
    tasks: tuple[str, ...]
    encodings: tuple[str, ...]
    steps: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    backbones: tuple[str, ...]
    eval_samples: tuple[int, ...]
    devices: tuple[str, ...]
    commits: tuple[str, ...]
    pezoo_versions: tuple[str, ...]
    torch_versions: tuple[str, ...]
    first_day: str
    last_day: str
    files: tuple[str, ...]

    @property
    def paper_scale(self) -> bool:
        """Only a GPU-preset board run on GPUs is in the papers' regime; everything else is flagged."""
        return self.preset == "gpu" and all(d.startswith("cuda") for d in self.devices)

    @property
    def on_cpu(self) -> bool:
        return any(d.startswith("cpu") for d in self.devices)


def provenance(records: Iterable[Record]) -> list[Provenance]:
    """One Provenance per preset among ``records``, sorted by preset."""
    by_preset: dict[str, list[Record]] = {}
    for rec in records:
        by_preset.setdefault(rec.data["preset"], []).append(rec)
    out = []
    for preset in sorted(by_preset):
        recs = by_preset[preset]

        def values(get: Any, recs: list[Record] = recs) -> tuple[Any, ...]:
            return tuple(sorted({get(r.data) for r in recs}))

        days = values(lambda d: _day(d["timings"]["finished_at"]))
        out.append(
            Provenance(
                preset=preset,
                runs=len(recs),
                seeds=values(lambda d: d["seed"]),
                tasks=values(lambda d: d["task"]),
                encodings=values(lambda d: encoding_label(d["pe"], d["config"].get("pe_options") or {})),
                steps=values(lambda d: d["config"]["train"]["steps"]),
                batch_sizes=values(lambda d: d["config"]["train"]["batch_size"]),
                backbones=values(_backbone_text),
                eval_samples=values(lambda d: d["config"]["eval"]["samples"]),
                devices=values(lambda d: d["provenance"]["device"]),
                commits=values(lambda d: d["provenance"]["commit"]),
                pezoo_versions=values(lambda d: d["provenance"]["pezoo"]),
                torch_versions=values(lambda d: d["provenance"]["torch"]),
                first_day=days[0],
                last_day=days[-1],
                files=tuple(sorted({r.path.name for r in recs})),
            )
        )
    return out


def _backbone_text(d: Mapping[str, Any]) -> str:
    b = d["config"].get("backbone", {})
    return f"d_model {b.get('d_model')}, {plural(b.get('n_layers'), 'layer')}, {plural(b.get('n_heads'), 'head')}"


def plural(count: Any, noun: str) -> str:
    """``1 run``, ``2 runs``."""
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _day(unix: float) -> str:
    return dt.datetime.fromtimestamp(unix, tz=dt.timezone.utc).strftime("%Y-%m-%d")


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


@dataclass(frozen=True)
class Board:
    """Everything the pages show, computed once from the records."""

    records: tuple[Record, ...]
    tables: tuple[Table, ...]  # sorted by task, then preset

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

    def tables_of_task(self, task: str) -> list[Table]:
        return [t for t in self.tables if t.task == task]

    def records_where(self, **equal: str) -> list[Record]:
        return [r for r in self.records if all(r.data[k] == v for k, v in equal.items())]


def assemble(records: Sequence[Record]) -> Board:
    """The board of ``records`` (validated results); raises BoardError on incomparable runs."""
    check_protocols(records)
    df = frame(records)
    tables = []
    for (task, preset), g in df.groupby(["task", "preset"], sort=True):
        config = next(r.data["config"] for r in records if (r.data["task"], r.data["preset"]) == (task, preset))
        protocol = config.get("protocol")  # one per (task, preset): check_protocols made sure
        tables.append(
            Table(
                preset=str(preset),
                task=str(task),
                train_max=int(g["train_max"].iloc[0]),
                test_max=int(g["length"].max()),
                rows=tuple(summary(g)),
                curves=tuple(curves(g)),
                protocol=None if protocol is None else str(protocol),
                train_min=int(config["train"].get("train_min", 1)),
                match=str(config.get("eval", {}).get("match", "trace")),
            )
        )
    return Board(tuple(records), tuple(tables))


@dataclass(frozen=True)
class OverviewRow:
    """One encoding across the tasks of one preset: its row on each task's table."""

    position: int
    label: str
    encoding: str
    cells: Mapping[str, Row]  # task -> the encoding's row there (absent: not run on it)
    mean_rank: float
    mean_em_beyond: float


def overview(board: Board, preset: str) -> tuple[list[str], list[OverviewRow]]:
    """(tasks, rows) of the preset's at-a-glance table; the order is in the module docstring.

    ``mean_rank`` and ``mean_em_beyond`` average over the tasks an encoding has results
    on; an encoding missing from some task is listed after every one that has them all.
    """
    tables = [t for t in board.tables if t.preset == preset]
    tasks = [t.task for t in tables]
    cells: dict[str, dict[str, Row]] = {}
    encodings: dict[str, str] = {}
    for table in tables:
        for row in table.rows:
            cells.setdefault(row.label, {})[table.task] = row
            encodings[row.label] = row.encoding
    unordered = []
    for label, by_task in cells.items():
        ranks = [r.rank for r in by_task.values()]
        em = [r.scores["em_beyond"].mean for r in by_task.values() if not math.isnan(r.scores["em_beyond"].mean)]
        mean_em = sum(em) / len(em) if em else math.nan
        key = (len(tasks) - len(by_task), sum(ranks) / len(ranks), -_or_low(mean_em), label)
        unordered.append((key, label, by_task, mean_em))
    unordered.sort(key=lambda item: item[0])
    rows = [
        OverviewRow(i, label, encodings[label], by_task, key[1], mean_em)
        for i, (key, label, by_task, mean_em) in enumerate(unordered, start=1)
    ]
    return tasks, rows
