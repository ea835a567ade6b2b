"""Read a protocol study's TensorBoard logs: how fit and extrapolation move with training.

A study is a sweep run with periodic evaluation and ``--tensorboard DIR`` (see
docs/protocol-study.md). Every evaluation logged the exact match and per-token accuracy
at each scale; this script turns them into one row per (task, encoding, seed, run, step) with
the board's numbers (``harness.records.ranking``): EM≤N, fits, EM>N, reach and tok>N, and draws
EM≤N and EM>N against the training step per task.

    python benchmarks/protocol_study.py runs/study-tb --train-max 10 --markdown docs/study.md --plot docs/study.png
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pandas as pd

from harness.records.ranking import fits, reach_beyond

_TAG = re.compile(r"^eval/(exact_match|token_accuracy)/len(\d+)$")


def read_run(folder: Path) -> pd.DataFrame:
    """(step, length, exact_match, token_accuracy) of every evaluation logged in ``folder``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    values: dict[tuple[int, int], dict[str, float]] = {}
    for tag in acc.Tags()["scalars"]:
        m = _TAG.match(tag)
        if not m:
            continue
        metric, length = m.group(1), int(m.group(2))
        for event in acc.Scalars(tag):
            values.setdefault((event.step, length), {})[metric] = event.value
    rows = [{"step": s, "length": n, **v} for (s, n), v in sorted(values.items())]
    return pd.DataFrame(rows, columns=["step", "length", "exact_match", "token_accuracy"])


def study(root: Path, train_max: int) -> pd.DataFrame:
    """One row per (task, pe, seed, run, step): the board's numbers at that evaluation. The
    run id tells apart two runs of one encoding, task and seed trained differently (more
    steps, another preset)."""
    rows = []
    for folder in sorted(root.glob("*/*/seed*")):
        task, pe = folder.parts[-3], folder.parts[-2]
        seed, _, run = folder.name[4:].partition("-")
        df = read_run(folder)
        for step, g in df.groupby("step"):
            em = g.set_index("length")["exact_match"]
            within = em[em.index <= train_max].mean()
            beyond = g[g["length"] > train_max]
            rows.append(
                {
                    "task": task,
                    "pe": pe.replace("-", ":"),
                    "seed": int(seed),
                    "run": run,
                    "step": int(step),
                    "EM≤N": within,
                    "fits": fits(within),
                    "EM>N": beyond["exact_match"].mean(),
                    "reach": reach_beyond(em, train_max),
                    "tok>N": beyond["token_accuracy"].mean(),
                }
            )
    return pd.DataFrame(rows)


def plot(table: pd.DataFrame, path: Path) -> None:
    """EM≤N (dashed) and EM>N (solid) against the step, one panel per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted(table["task"].unique())
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4), squeeze=False, sharey=True)
    colours = dict(zip(sorted(table["pe"].unique()), plt.get_cmap("tab10").colors, strict=False))
    for ax, task in zip(axes[0], tasks, strict=True):
        for (pe, seed, run), g in table[table["task"] == task].groupby(["pe", "seed", "run"]):
            g = g.sort_values("step")
            label = f"{pe} (seed {seed}, {run})"
            ax.plot(g["step"], g["EM>N"], "-o", color=colours[pe], label=label, markersize=3)
            ax.plot(g["step"], g["EM≤N"], "--", color=colours[pe], alpha=0.6)
        ax.set_title(f"{task}: EM>N (solid), EM≤N (dashed)")
        ax.set_xlabel("training step")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("exact match")
    axes[0][-1].legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="the --tensorboard folder of the study sweep")
    parser.add_argument("--train-max", type=int, default=10, help="largest training scale N")
    parser.add_argument("--markdown", type=Path, help="write the table here as markdown")
    parser.add_argument("--csv", type=Path, help="write the table here as CSV")
    parser.add_argument("--plot", type=Path, help="write the curves here (PNG)")
    args = parser.parse_args()
    table = study(args.root, args.train_max)
    if table.empty:
        raise SystemExit(f"no evaluations under {args.root}")
    table = table.sort_values(["task", "pe", "seed", "run", "step"])
    text = table.to_markdown(index=False, floatfmt=".2f")
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    if args.csv:
        table.to_csv(args.csv, index=False)
    if args.plot:
        plot(table, args.plot)


if __name__ == "__main__":
    main()
