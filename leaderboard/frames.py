"""The published results as pandas DataFrames, with the board's ranking and fit rules applied.

``leaderboard.read_results()`` reads the results files (``leaderboard/results/*.jsonl``, or
any folder of them) straight into a DataFrame — no store, no import first — through the very
code the site is built with (:func:`leaderboard.board.assemble`: validation, the sweep
files' plans, the retirements in ``retired.toml``), so every rank, fit and "not ranked yet"
in the frame is the one the board shows.

Three granularities (``per=``):

* ``"row"``   one row per board row: (preset, task, encoding label) with its rank and its
  scores' mean and min..max over seeds, in the board's order;
* ``"seed"``  one row per run: each seed's scores and whether it fits, with its row's rank;
* ``"length"`` one row per run and evaluated length (the per-length metrics the curves
  show), with its row's rank and its run's fit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from harness.records import ranking
from leaderboard.board import Board, assemble
from leaderboard.plans import NO_PLANS, read_plans
from leaderboard.records import frame
from leaderboard.retired import read_retirements
from leaderboard.rows import SCORES, Row
from leaderboard.schema import read_results as read_records

DEFAULT_RESULTS = Path(__file__).resolve().parent / "results"
"""The published board's results: ``leaderboard/results`` of this checkout."""

PER = ("row", "seed", "length")

ROW_COLUMNS = [
    "preset",
    "task",
    "train_max",
    "test_max",
    "test_range",
    "rank",
    "ties_above",
    "status",
    "label",
    "encoding",
    "seeds",
    "seeds_fit",
    "seeds_wanted",
    *(f"{score}{part}" for score in SCORES for part in ("", "_min", "_max")),
]
"""Columns of ``per="row"``. ``test_range`` is the largest test scale the table's runs were
planned to (a table's identity beside preset and task: copy tested to 40 and copy tested to
100 are two tables, each ranked on its own). ``rank`` is the board's (NA where it shows —); ``ties_above``
is its ≈ (the permutation test does not put it below a row ranked above); ``status`` is
``ranked``, ``did not fit`` or ``pending`` (fewer seeds than the plan wants); each score
(``em_beyond``, ``reach``, ...: ``leaderboard.rows.SCORES``) as its mean over seeds and
the seeds' min and max."""


def read_results(path: str | Path | None = None, *, per: str = "row", plans: bool = True) -> pd.DataFrame:
    """The results files under ``path`` as one DataFrame, ranked and fit-checked as on the board.

    Args:
        path: a folder of ``*.jsonl`` results files; default the published board's
            (:data:`DEFAULT_RESULTS`).
        per: ``"row"`` (a board row each), ``"seed"`` (a run each) or ``"length"`` (a run
            and evaluated length each); see the module docstring.
        plans: read the sweep files and ``retired.toml`` next to the folder, as the site
            does (a row short of its planned seeds is pending, retired tables are left
            out); False ranks every row whose seeds fit and keeps every table.

    Raises:
        ValueError: an unknown ``per``; a missing folder or one without results files.
        leaderboard.schema.ResultsError: a malformed results file (every problem listed).
        leaderboard.records.BoardError: runs that cannot share a board.
    """
    if per not in PER:
        raise ValueError(f"per must be one of {', '.join(PER)}; got {per!r}")
    folder = DEFAULT_RESULTS if path is None else Path(path)
    from leaderboard.site import results_folder_problem

    problem = results_folder_problem(folder)
    if problem:
        raise ValueError(problem)
    records = read_records(folder)
    if plans:
        board = assemble(records, read_plans(folder.parent), read_retirements(folder.parent))
    else:
        board = assemble(records, NO_PLANS)
    rows = _rows(board)
    if per == "row":
        return rows
    keys = ["preset", "task", "test_range", "pe"]  # a board row: a task may have several tables
    ranks = rows[["preset", "task", "test_range", "label", "rank", "status"]].rename(columns={"label": "pe"})
    if per == "seed":
        seeds = _seeds(board)
        return seeds.merge(ranks, on=keys, how="left", validate="many_to_one")
    df = frame(board.records)
    fit = _seeds(board)[[*keys, "seed", "fits"]]
    df = df.merge(fit, on=[*keys, "seed"], how="left", validate="many_to_one")
    return df.merge(ranks, on=keys, how="left", validate="many_to_one")


def _status(row: Row) -> str:
    if row.ranked:
        return "ranked"
    return "pending" if row.fitted else "did not fit"


def _rows(board: Board) -> pd.DataFrame:
    out: list[dict[str, Any]] = []
    for table in board.tables:
        for row in table.rows:
            item: dict[str, Any] = {
                "preset": table.preset,
                "task": table.task,
                "train_max": table.train_max,
                "test_max": table.test_max,
                "test_range": table.tested_to,
                "rank": row.rank,
                "ties_above": row.overlaps_above,
                "status": _status(row),
                "label": row.label,
                "encoding": row.encoding,
                "seeds": len(row.seeds),
                "seeds_fit": row.seeds_fit,
                "seeds_wanted": row.seeds_wanted,
            }
            for score in SCORES:
                stat = row.scores[score]
                item.update({score: stat.mean, f"{score}_min": stat.lo, f"{score}_max": stat.hi})
            out.append(item)
    df = pd.DataFrame(out, columns=ROW_COLUMNS)
    df["rank"] = df["rank"].astype("Int64")
    df["seeds_wanted"] = df["seeds_wanted"].astype("Int64")
    return df


def _seeds(board: Board) -> pd.DataFrame:
    out: list[dict[str, Any]] = []
    for table in board.tables:
        for row in table.rows:
            for i, seed in enumerate(row.seeds):
                item: dict[str, Any] = {"preset": table.preset, "task": table.task, "pe": row.label}
                item.update({"encoding": row.encoding, "seed": seed, "train_max": table.train_max})
                item["test_range"] = table.tested_to
                item.update({score: row.per_seed[score][i] for score in SCORES})
                item["fits"] = ranking.fits(item["em_within"])
                out.append(item)
    return pd.DataFrame(out)
