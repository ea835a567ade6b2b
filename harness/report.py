"""The terminal leaderboard: one table per task, one row per encoding.

Columns (exact match of the greedy decode, EOS included, mean over seeds):
    in-dist       mean over the training scales 1..N
    2N, 4N, ...   at multiples of the training scale N that were evaluated
    EM>N          exact match, mean over all evaluated scales beyond N
    tok-acc>N     teacher-forced per-token accuracy, mean over all scales beyond N
    params        parameters of the whole model (the encoding's own in parentheses):
                  the backbone is identical, so differences are the encoding's
    solved<=      the largest scale L such that exact match is >= 90% at every
                  evaluated scale <= L (the extrapolation score; N means "none beyond")
With several seeds a cell reads ``mean ± half-width of the 95% t-interval``.

Rows are ranked by solved<=, then EM>N, then tok-acc>N (means over seeds): the same
rule as the published leaderboard (``leaderboard.board``).
"""

from __future__ import annotations

import math

import pandas as pd
from tabulate import tabulate

SOLVED = 0.9

# two-sided 95% Student-t quantiles for 1..30 degrees of freedom
_T95 = [12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18, 2.16, 2.14, 2.13]
_T95 += [2.12, 2.11, 2.10, 2.09, 2.09, 2.08, 2.07, 2.07, 2.06, 2.06, 2.06, 2.05, 2.05, 2.05, 2.04]


def ci95(values: pd.Series) -> tuple[float, float]:
    """(mean, half-width of the 95% t-interval; 0 for one value)."""
    v = values.dropna()
    if len(v) < 2:
        return float(v.mean()), 0.0
    t = _T95[min(len(v) - 1, len(_T95)) - 1]
    return float(v.mean()), t * float(v.std(ddof=1)) / math.sqrt(len(v))


def solved_up_to(per_length: pd.Series, train_max: int) -> int:
    """Largest L with every evaluated exact match at scales <= L at least SOLVED (0 if none)."""
    best = 0
    for length, em in per_length.sort_index().items():
        if em < SOLVED:
            break
        best = int(length)
    return best


def per_seed_summary(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (task, pe, seed) with the summary numbers of that run."""
    rows = []
    for (task, pe, seed), g in df.groupby(["task", "pe", "seed"]):
        n = int(g["train_max"].iloc[0])
        em = g.set_index("length")["exact_match"]
        test = g[g["split"] == "test"]
        row = {"task": task, "pe": pe, "seed": seed, "train_max": n}
        row["in-dist"] = g.loc[g["split"] == "train", "exact_match"].mean()
        for k in (2, 4, 8, 16):
            at = em[em.index <= k * n]
            if k * n <= em.index.max():
                row[f"{k}N"] = at.iloc[-1]
        row["EM>N"] = test["exact_match"].mean()
        row["tok-acc>N"] = test["token_accuracy"].mean()
        row["solved<="] = solved_up_to(em, n)
        if "n_params" in g:
            row["params"] = f"{int(g['n_params'].iloc[0]):,} ({int(g['pe_params'].iloc[0]):,})"
        rows.append(row)
    return pd.DataFrame(rows)


def _or_low(value: float) -> float:
    """NaN (nothing evaluated) ranks below every number."""
    return -math.inf if math.isnan(value) else value


def fmt(values: pd.Series, integer: bool = False) -> str:
    mean, half = ci95(values)
    if math.isnan(mean):
        return "-"
    if integer:
        return f"{mean:.0f}" + (f" ± {half:.0f}" if half else "")
    return f"{mean:.2f}" + (f" ± {half:.2f}" if half else "")


def leaderboard_tables(df: pd.DataFrame) -> dict[str, str]:
    """Task -> rendered table (rows ranked by solved<=, then EM>N, then tok-acc>N)."""
    if df.empty:
        return {}
    summary = per_seed_summary(df)
    out = {}
    for task, g in summary.groupby("task"):
        cols = [c for c in ("in-dist", "2N", "4N", "8N", "16N") if c in g and g[c].notna().any()]
        rows = []
        for pe, r in g.groupby("pe"):
            rows.append(
                {
                    "encoding": pe,
                    "seeds": len(r),
                    **{c: fmt(r[c]) for c in cols},
                    "EM>N": fmt(r["EM>N"]),
                    "tok-acc>N": fmt(r["tok-acc>N"]),
                    "solved<=": fmt(r["solved<="], integer=True),
                    "params": r["params"].iloc[0] if "params" in r else "-",
                    "_key": tuple(_or_low(r[c].mean()) for c in ("solved<=", "EM>N", "tok-acc>N")),
                }
            )
        rows.sort(key=lambda row: row["encoding"])
        rows.sort(key=lambda row: row.pop("_key"), reverse=True)  # stable: ties stay alphabetical
        runs = df.loc[df["task"] == task]
        lo, n = int(runs["train_min"].iloc[0]) if "train_min" in runs else 1, int(g["train_max"].iloc[0])
        encoder = "protocol" in df and (df.loc[df["task"] == task, "protocol"] == "encoder").all()
        answer = "match" in df and (df.loc[df["task"] == task, "match"] == "answer").all()
        metric = "exact match = every masked output right" if encoder else "exact match of the decode incl. EOS"
        metric = "exact match of the final answer" if answer else metric
        out[task] = f"task {task} (trained on scales {lo}..{n}; {metric})\n" + tabulate(
            rows, headers="keys", tablefmt="github"
        )
    return out
