"""The terminal leaderboard: one table per task, one row per encoding (a language-modelling
task's in bits per byte, :func:`lm_tables`).

Columns (exact match of the greedy decode, EOS included; with several seeds a cell reads
``mean (min–max)`` over the seeds):
    rank          position among the encodings whose every seed fits the training scales
                  (``-``: did not fit, or not ranked yet: fewer finished seeds than the
                  sweep planned; listed after the ranked ones)
    fit           seeds whose mean exact match over the training scales reaches 0.95
    EM≤N          mean exact match over the training scales 1..N
    2N, 4N, ...   exact match at multiples of the training scale N that were evaluated
    EM>N          exact match, mean over all evaluated scales beyond N
    reach         the largest scale L with exact match >= 0.9 at every evaluated scale
                  N+1..L (N: not even N+1)
    tok>N         teacher-forced per-token accuracy, mean over all scales beyond N
    params        parameters of the whole model (the encoding's own in parentheses):
                  the backbone is identical, so differences are the encoding's

Rows are ordered by ``harness.records.ranking.RULE``: the same rule as the published leaderboard
(``leaderboard.board``).

A row is one encoding *with its options*: the ``pe_label`` column when the frame has it
(``harness.records.frames.load``: e.g. ``prism{paper}``, ``randomized{randomize_eval=false}``),
else ``pe``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd
from tabulate import tabulate

from harness.records import counts
from harness.records.lm_metrics import bpb
from harness.records.ranking import FIT_THRESHOLD, Spread, Standing, fits, reach_beyond, standings

LEGEND = (
    f"rank: among encodings whose every seed fits (EM≤N ≥ {FIT_THRESHOLD:.2f}; '-': did not fit, or fewer "
    "finished seeds than planned) · "
    "EM: exact match of the whole decode · N: largest training scale · EM>N, tok>N: mean beyond N · "
    "reach: largest L with EM ≥ 0.9 at every scale N+1..L · cells with several seeds: mean (min–max) · "
    "params: whole model (the encoding's own)"
)
"""One line printed under the terminal tables."""


def _labelled(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with ``pe`` replaced by the displayed name (``pe_label``) when it has one."""
    return df.assign(pe=df["pe_label"]) if "pe_label" in df else df


def per_seed_summary(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (task, encoding with its options, seed) with the summary numbers of that run."""
    df = _labelled(df)
    rows = []
    for (task, pe, seed), g in df.groupby(["task", "pe", "seed"]):
        n = int(g["train_max"].iloc[0])
        em = g.set_index("length")["exact_match"].sort_index()
        test = g[g["split"] == "test"]
        lo = int(g["train_min"].iloc[0]) if "train_min" in g else 1
        row = {"task": task, "pe": pe, "seed": seed, "train_min": lo, "train_max": n}
        row["in-dist"] = counts.mean(g.loc[g["split"] == "train", "exact_match"])  # exact: harness.records.counts
        for k in (2, 4, 8, 16):
            at = em[em.index <= k * n]
            if k * n <= em.index.max():
                row[f"{k}N"] = at.iloc[-1]
        row["EM>N"] = counts.mean(test["exact_match"])
        row["tok-acc>N"] = counts.mean(test["token_accuracy"])
        row["tok_within"] = counts.mean(g.loc[g["split"] == "train", "token_accuracy"])
        row["reach"] = reach_beyond(em, n)
        row["fits"] = fits(row["in-dist"])
        if "n_params" in g:
            row["params"] = f"{int(g['n_params'].iloc[0]):,} ({int(g['pe_params'].iloc[0]):,})"
        rows.append(row)
    return pd.DataFrame(rows)


def _status(standing: Standing, seeds_wanted: Mapping[str, int] | None, task: str) -> str:
    if not standing.fitted:
        return " did not fit"
    if standing.pending:
        return f" not ranked yet ({standing.seeds} of {(seeds_wanted or {}).get(task)} seeds)"
    return ""


def fmt(values: pd.Series, integer: bool = False) -> str:
    """``mean (min–max)`` over seeds, one value alone, ``-`` when missing."""
    return Spread.of(values).text(0 if integer else 2)


def leaderboard_tables(df: pd.DataFrame, seeds_wanted: Mapping[str, int] | None = None) -> dict[str, str]:
    """Task -> rendered table, rows in the order of ``harness.records.ranking.RULE``; runs of a
    task trained on other scales (``--train-len``) are a table of their own, keyed
    ``copy (trained on 1..20)``, its columns at its N. With
    ``seeds_wanted`` (task -> the seeds a sweep planned), a row with fewer finished seeds
    is listed unranked, "not ranked yet", as on the board."""
    if df.empty:
        return {}
    summary = per_seed_summary(df)
    out = {}
    ranges = summary.drop_duplicates(["task", "train_min", "train_max"])["task"].value_counts()
    # runs of one task trained on other scales are tables of their own: their N, their columns
    for (task, lo, n), g in summary.groupby(["task", "train_min", "train_max"]):
        cols = [c for c in ("2N", "4N", "8N", "16N") if c in g and g[c].notna().any()]
        rows = []
        for standing in standings(g, seeds_wanted=(seeds_wanted or {}).get(str(task))):
            r = g[g["pe"] == standing.label]
            rows.append(
                {
                    "rank": standing.rank if standing.ranked else "-",
                    "encoding": standing.label,
                    "fit": f"{standing.seeds_fit}/{standing.seeds}" + _status(standing, seeds_wanted, str(task)),
                    f"EM≤{n}": fmt(r["in-dist"]),
                    **{c: fmt(r[c]) for c in cols},
                    f"EM>{n}": fmt(r["EM>N"]),
                    "reach": fmt(r["reach"], integer=True),
                    f"tok>{n}": fmt(r["tok-acc>N"]),
                    "params": r["params"].iloc[0] if "params" in r else "-",
                }
            )
        runs = df[(df["task"] == task) & _labelled(df)["pe"].isin(g["pe"])]
        encoder = "protocol" in df and (runs["protocol"] == "encoder").all()
        answer = "match" in df and (runs["match"] == "answer").all()
        metric = "exact match = every masked output right" if encoder else "exact match of the decode incl. EOS"
        metric = "exact match of the final answer" if answer else metric
        key = str(task) if ranges[task] == 1 else f"{task} (trained on {lo}..{n})"
        out[key] = f"task {task} (trained on scales {lo}..{n}; {metric})\n" + tabulate(
            rows, headers="keys", tablefmt="github"
        )
    return out


LM_LEGEND = (
    "bits per byte of held-out text (windows mode: every byte scored in windows of that many bytes; pooled over "
    "seeds from nats and bytes) · L: the training length · ×L: bits per byte at the longest length over that at L "
    "· '-': not reached (why in the record)"
)
"""One line printed under the language-modelling tables."""


def lm_tables(df: pd.DataFrame) -> dict[str, str]:
    """Language-modelling task -> its table, from ``harness.records.frames.load_lm``'s rows: one
    row per encoding (a variant its own row), bits per byte at each test length in the windows
    mode, pooled over the row's seeds (the sum of their nats over the sum of their bytes: the
    counts the records keep; '-' where a seed did not reach it), and the longest length's over
    L's; rows by that ratio, the unreached last."""
    tables = {}
    windows = df[df["mode"] == "windows"]
    for task, at_task in sorted(windows.groupby("task"), key=lambda item: str(item[0])):
        cols = sorted(int(n) for n in at_task["length"].unique())
        body: list[tuple[float, list[object]]] = []  # (sort key: ×L, unreached last; the row)
        for label, rows in at_task.groupby("pe_label", sort=False):
            pooled: dict[int, float | None] = {}
            for n in cols:
                at = rows[rows["length"] == n]
                whole = bool(len(at)) and bool(at["reached"].all())
                pooled[n] = _pooled(list(zip(at["nats"], at["bytes"], strict=True))) if whole else None
            first, last = pooled[cols[0]], pooled[cols[-1]]
            ratio = last / first if first and last is not None else math.inf
            cells = [f"{pooled[n]:.3f}" if pooled[n] is not None else "-" for n in cols]
            seeds = rows["seed"].nunique()
            body.append((ratio, [label, seeds, *cells, f"{ratio:.2f}" if math.isfinite(ratio) else "-"]))
        body.sort(key=lambda row: row[0])
        header = ["encoding", "seeds", *(f"{n}{' (L)' if i == 0 else ''}" for i, n in enumerate(cols)), "×L"]
        table = tabulate([row for _, row in body], headers=header, tablefmt="github", disable_numparse=True)
        tables[str(task)] = f"{task} (bits per byte)\n" + table
    return tables


def _pooled(parts: Sequence[tuple[float, int]]) -> float:
    """Bits per byte of several (nats, bytes) counts together."""
    return bpb(sum(n for n, _ in parts), sum(b for _, b in parts))
