"""PRISM at long sequences: forward+backward time and allocator peak memory of one PRISM
layer (quick dims: d_model 128, 4 heads, 2 cursors, d_pe 32, GRU 100; batch 1).

    python benchmarks/prism_long.py time --lengths 128,256,512,1024 [--copy]
    python benchmarks/prism_long.py memory --lengths 1024,2048,4096 [--copy] [--option k=v ...]

Time: median wall seconds of ``repeats`` forward+backward passes, one thread (set
``--threads``). Memory: the peak of the CPU allocator's live bytes during one
forward+backward, from the profiler's memory events (``profile_memory=True``: every
allocation and free with its size), relative to what was live before; the fitted
exponent is the least-squares slope of log peak against log S.

Axis letters: b batch, s tokens, d model width.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from pezoo.encodings.prism import PRISMConfig
from pezoo.encodings.prism.layer import PRISMLayer

QUICK = {"d_model": 128, "n_heads": 4, "n_layers": 3}


def build(copy: bool, options: dict) -> PRISMLayer:
    torch.manual_seed(0)
    extra = {"copy_cursors": (0,)} if copy else {}
    return PRISMLayer(PRISMConfig(**QUICK, **extra, **options))


def fwd_bwd(layer: PRISMLayer, x: torch.Tensor) -> None:
    g_q, g_k, _, _ = layer(x, None)
    (g_q.square().sum() + g_k.sum()).backward()


def peak_bytes(fn) -> int:
    """Peak of live CPU-allocator bytes during fn(), from the profiler's memory events."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    live = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        live += e.nbytes()
        peak = max(peak, live)
    return peak


def slope(xs: list[float], ys: list[float]) -> float:
    lx, ly = [math.log(v) for v in xs], [math.log(v) for v in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum((a - mx) ** 2 for a in lx)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("time", "memory"))
    ap.add_argument("--lengths", default="128,256,512,1024")
    ap.add_argument("--copy", action="store_true", help="give query cursor 0 of every head a copy branch")
    ap.add_argument("--option", action="append", default=[], help="PRISM option k=v (Python literal)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    options = {k: ast.literal_eval(v) for k, v in (o.split("=", 1) for o in args.option)}
    layer = build(args.copy, options)
    rows = []
    for s in [int(v) for v in args.lengths.split(",")]:
        x = torch.randn(1, s, QUICK["d_model"], requires_grad=True)
        if args.what == "time":
            fwd_bwd(layer, x)  # warm-up
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                fwd_bwd(layer, x)
                times.append(time.perf_counter() - start)
            rows.append({"s": s, "seconds": statistics.median(times)})
            print(f"S={s:6d}  forward+backward {rows[-1]['seconds']:.3f} s", flush=True)
        else:
            peak = peak_bytes(lambda: fwd_bwd(layer, x))  # noqa: B023
            rows.append({"s": s, "peak_mib": peak / 2**20})
            print(f"S={s:6d}  peak {rows[-1]['peak_mib']:.1f} MiB", flush=True)
    if args.what == "memory" and len(rows) > 1:
        print(f"exponent {slope([r['s'] for r in rows], [r['peak_mib'] for r in rows]):.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"what": args.what, "copy": args.copy, "options": options, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
