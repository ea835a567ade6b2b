"""Copy in bf16 against the board's published fp32 runs, seed by seed (docs/protocol-study.md,
"Precision"): EM<=N (fit), EM>N and reach of every finished run in a store beside the
published fp32 run of the same encoding and seed (preset board, test scale 40).

    pezoo bench --sweep benchmarks/copy-bf16.toml --store runs/bf16.sqlite --workers 2
    python benchmarks/compare_precision.py runs/bf16.sqlite
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

from leaderboard.schema import read_results

N = 10  # the board's training scale


def summary(em: dict[int, float]) -> tuple[float, float, int]:
    """(mean EM at scales <= N, mean EM beyond N, reach: largest L with EM >= 0.9 at every scale N+1..L)."""
    within = [v for n, v in em.items() if n <= N]
    beyond = [v for n, v in em.items() if n > N]
    reach = N
    for n in sorted(n for n in em if n > N):
        if em[n] < 0.9:
            break
        reach = n
    return sum(within) / len(within), sum(beyond) / len(beyond), reach


def main(store: str, results: str = "leaderboard/results") -> None:
    con = sqlite3.connect(f"file:{Path(store).resolve()}?mode=ro", uri=True)
    runs = con.execute("SELECT run_id, pe, seed FROM runs WHERE status = 'finished' AND task = 'copy'").fetchall()
    wanted = {(pe, seed) for _, pe, seed in runs}
    fp32 = {}
    for published in read_results(Path(results)):
        rec = published.record
        c = rec.config
        plain = not c["pe_options"] and not c.get("eval_pe_options")
        if c["task"] == "copy" and c["preset"] == "board" and plain and (c["pe"], c["seed"]) in wanted:
            if c["eval"].get("test_max", 40) == 40 and rec.train_seconds > 0:
                fp32[(c["pe"], c["seed"])] = summary({m.length: m.exact_match for _, m in rec.metrics})
    print(f"| encoding | seed | EM≤{N} fp32 | EM≤{N} bf16 | EM>{N} fp32 | EM>{N} bf16 | reach fp32 | reach bf16 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for run_id, pe, seed in sorted(runs, key=lambda r: (r[1], r[2])):
        em = dict(con.execute("SELECT length, exact_match FROM metrics WHERE run_id = ?", (run_id,)).fetchall())
        b = summary(em)
        a = fp32.get((pe, seed))
        cells = [f"{a[0]:.3f}", f"{b[0]:.3f}", f"{a[1]:.3f}", f"{b[1]:.3f}", str(a[2]), str(b[2])] if a else ["–"] * 6
        if not a:
            cells[1], cells[3], cells[5] = f"{b[0]:.3f}", f"{b[1]:.3f}", str(b[2])
        print(f"| {pe} | {seed} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(*sys.argv[1:])
