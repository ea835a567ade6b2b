"""Run `pezoo perf` on a named grid and keep its figures: ``<out>/<name>.json`` (the full
report: provenance, grid, every row) and ``<out>/<name>.md`` (the rendered tables), which
docs/performance.md quotes.

    python benchmarks/zoo_perf.py                                   # default grid -> benchmarks/results/
    python benchmarks/zoo_perf.py --grid full --name cpu-full
    python benchmarks/zoo_perf.py --sections memory --set memory_lengths=[8192] --set memory_cap_gib=12

``--set KEY=JSON`` replaces one field of the grid (``harness.perf.PerfGrid``; unknown
keys are an error naming the valid ones). The PRISM histogram update in isolation (banded
vs dense, one step) is ``benchmarks/prism_scan.py``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.perf import GRIDS, SECTIONS, grid_from, render, run_perf
from harness.records.provenance import resolve_device


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", choices=sorted(GRIDS), default="default")
    parser.add_argument("--sections", help=f"comma-separated subset of {','.join(SECTIONS)}")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=JSON")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--name", help="file stem (default: <device type>-<grid>)")
    args = parser.parse_args()

    overrides = {}
    for item in args.overrides:
        key, _, value = item.partition("=")
        parsed = json.loads(value)
        overrides[key] = tuple(parsed) if isinstance(parsed, list) else parsed
    if args.sections:
        overrides["sections"] = tuple(s.strip() for s in args.sections.split(","))
    grid = grid_from(args.grid, **overrides)
    device = resolve_device(args.device)
    report = run_perf(grid, device, log=print)
    text = render(report)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.name or f"{device.type}-{args.grid}"
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / f"{stem}.md").write_text(text + "\n")
    print(f"\nwrote {args.out / stem}.json and .md")


if __name__ == "__main__":
    main()
