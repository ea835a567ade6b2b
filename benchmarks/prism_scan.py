"""PRISM speed: the histogram update at P = 256..2048 against a dense-matrix reference, and
one training step of the quick-preset backbone with ``nope`` vs ``prism`` (eager and
compiled scan), with a profile of where PRISM's time goes.

    python benchmarks/prism_scan.py                 # CPU (and CUDA too when available)
    python benchmarks/prism_scan.py --threads 2 --json out.json

Timings are medians of repeated runs on whatever else the machine is doing: compare the
numbers of one run side by side, not across runs. On a shared CPU use ``--threads 1``
(torch's OpenMP threads spin-wait when cores are oversubscribed, which can cost 10x).

glibc serves every allocation above its mmap threshold (128 KiB at start) with fresh
pages from the kernel, so an elementwise op on a tensor of a few MiB pays page faults on
each call and timings jump superlinearly with P. By default this script raises the
threshold (``mallopt``, Linux/glibc only; ``--raw-malloc`` keeps the default); the same
can be had for any run with ``MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=...``.

Axis letters: n cursors (batch × heads × cursors flattened), p bins 2P+1, s tokens.
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import json
import random
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

import pezoo
from harness.config import preset_config
from harness.tasks import create as create_task
from harness.tasks.data import IGNORE, collate, sample_training_batch
from harness.training.backbone import Backbone, BackboneConfig
from pezoo.encodings.prism.histogram import unchecked_histogram_step as histogram_step  # timed: no gate check


def tune_malloc() -> bool:
    """Serve allocations up to 32 MiB from the heap and keep freed memory (glibc only)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_mmap_threshold, 32 << 20)) and bool(libc.mallopt(m_trim_threshold, 1 << 30))


def median_ms(fn: Callable[[], object], repeats: int, device: torch.device, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def dense_step(h: torch.Tensor, reset, inc, dec, keep, gamma, eps) -> torch.Tensor:
    """Reference: build each cursor's dense (p, p) row-stochastic M_t (§5.1.2), then h @ M_t, sharpen."""
    n, bins = h.shape
    mid = bins // 2
    idx = torch.arange(bins, device=h.device)
    m = torch.zeros(n, bins, bins, device=h.device, dtype=h.dtype)  # (n, from, to)
    rows = idx.expand(n, bins)
    for target, weight in (
        ((idx + 1).clamp(max=bins - 1), (1 - reset) * inc),
        (idx, (1 - reset) * keep),
        ((idx - 1).clamp(min=0), (1 - reset) * dec),
    ):
        m.index_put_((torch.arange(n, device=h.device)[:, None], rows, target.expand(n, bins)),
                     weight[:, None].expand(n, bins), accumulate=True)  # fmt: skip
    for offset, weight in ((1, reset * inc), (0, reset * keep), (-1, reset * dec)):
        m[:, :, mid + offset] += weight[:, None]
    new = torch.bmm(h[:, None, :], m)[:, 0]  # (n, p)
    logits = gamma[:, None] * torch.log(new + eps)
    return torch.softmax(logits, dim=-1)


def update_scan(device: torch.device, repeats: int, n_dense: int, n_banded: int) -> list[dict]:
    """Time one update at each P: banded (O(P)) vs dense (O(P²)) on n_dense cursors, and banded on n_banded."""
    rows = []
    for support in (256, 512, 1024, 2048):
        results = {"P": support}
        for label, n, fn in (("banded", n_dense, histogram_step), ("dense", n_dense, dense_step),
                             ("banded_wide", n_banded, histogram_step)):  # fmt: skip
            g = torch.Generator().manual_seed(0)
            h = torch.softmax(torch.randn(n, 2 * support + 1, generator=g), -1).to(device)
            reset = torch.rand(n, generator=g).to(device)
            moves = torch.softmax(torch.randn(n, 3, generator=g), -1).to(device)
            gamma = torch.full((n,), 2.0, device=device)
            args = (h, reset, moves[:, 0], moves[:, 1], moves[:, 2], gamma, 1e-6)
            with torch.no_grad():
                results[f"{label}_ms"] = median_ms(lambda fn=fn, args=args: fn(*args), repeats, device)
                if label == "dense":
                    torch.testing.assert_close(dense_step(*args), histogram_step(*args), rtol=0, atol=1e-5)
        results["dense_over_banded"] = results["dense_ms"] / results["banded_ms"]
        rows.append(results)
    for prev, row in itertools.pairwise(rows):
        row["banded_ratio_per_doubling"] = row["banded_wide_ms"] / prev["banded_wide_ms"]
    return rows


def training_step(device: torch.device, repeats: int, batch_size: int, compiled: bool) -> tuple[dict, str]:
    """ms per optimiser step (forward, backward, AdamW) of the quick backbone on copy."""
    run = preset_config("quick", pe="nope", task="copy", seed=0)
    cfg = BackboneConfig(**{**run.backbone.__dict__})
    task = create_task("copy")
    batch = collate(sample_training_batch(task, random.Random(0), batch_size, 1, run.train.train_max)).to(device)
    dims = pezoo.ModelDims(cfg.d_model, cfg.n_heads, cfg.n_layers)
    out, profile_table = {"tokens": list(batch.inputs.shape)}, ""
    variants = [("nope", "nope", {}), ("prism", "prism", {})]
    if compiled:
        variants.append(("prism_compiled", "prism", {"compile_scan": True}))
    for label, name, options in variants:
        torch.manual_seed(0)
        model = Backbone(cfg, pezoo.create(name, dims=dims, **options)).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step(model=model, opt=opt):
            logits = model(batch.inputs)
            loss = F.cross_entropy(logits.flatten(0, 1), batch.labels.flatten(), ignore_index=IGNORE)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        if options.get("compile_scan"):
            start = time.perf_counter()
            step()
            out["compile_s"] = time.perf_counter() - start
        out[f"{label}_ms"] = median_ms(step, repeats, device)
        if label == "prism" and device.type == "cpu":
            from torch.profiler import profile

            with profile() as prof:
                step()
            averages = prof.key_averages()
            out["prism_forward_regions_ms"] = {
                e.key: e.cpu_time_total / 1000 for e in averages if e.key.startswith("prism.")
            }
            profile_table = averages.table(sort_by="self_cpu_time_total", row_limit=15)
    out["prism_over_nope"] = out["prism_ms"] / out["nope_ms"]
    if compiled:
        out["prism_compiled_over_nope"] = out["prism_compiled_ms"] / out["nope_ms"]
    return out, profile_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--dense-cursors", type=int, default=4, help="cursors in the dense comparison (O(P²) memory)")
    parser.add_argument(
        "--cursors", type=int, default=1024, help="cursors in the banded linearity scan (out of L2 at every P)"
    )
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--skip-compile", action="store_true", help="no torch.compile variant (slow first call)")
    parser.add_argument("--raw-malloc", action="store_true", help="keep glibc's default mmap threshold")
    parser.add_argument("--json", help="write the results here as JSON")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    malloc_tuned = False if args.raw_malloc else tune_malloc()
    report: dict = {"torch": torch.__version__, "threads": args.threads, "malloc_tuned": malloc_tuned}
    print(f"torch {torch.__version__}, malloc threshold raised: {malloc_tuned}")
    for device in devices:
        print(
            f"\n## {device} ({torch.cuda.get_device_name() if device.type == 'cuda' else f'{args.threads} thread(s)'})"
        )
        rows = update_scan(device, args.repeats, args.dense_cursors, args.cursors)
        print(f"\nupdate of one step: banded vs dense on {args.dense_cursors} cursors; banded on {args.cursors}")
        print("|    P | banded ms | dense ms | dense/banded | banded ms (wide) | ratio per doubling |")
        print("|-----:|---------:|---------:|-------------:|-----------------:|-------------------:|")
        for r in rows:
            ratio = r.get("banded_ratio_per_doubling")
            print(f"| {r['P']:4d} | {r['banded_ms']:8.3f} | {r['dense_ms']:8.2f} | {r['dense_over_banded']:12.1f} "
                  f"| {r['banded_wide_ms']:16.3f} | {'' if ratio is None else f'{ratio:.2f}':>18} |")  # fmt: skip
        mean_ratio = (rows[-1]["banded_wide_ms"] / rows[0]["banded_wide_ms"]) ** (1 / (len(rows) - 1))
        print(f"geometric-mean ratio per doubling of P (banded, {args.cursors} cursors): {mean_ratio:.2f}")
        report[f"{device.type}_update"] = rows
        report[f"{device.type}_mean_ratio_per_doubling"] = mean_ratio
        if not args.skip_train:
            step, table = training_step(device, args.repeats, args.batch_size, not args.skip_compile)
            report[f"{device.type}_train_step"] = step
            print(f"\ntraining step, quick backbone, copy batch {step['tokens']} (b, s):")
            print(f"  nope            {step['nope_ms']:8.1f} ms")
            print(f"  prism (eager)   {step['prism_ms']:8.1f} ms   {step['prism_over_nope']:.2f}x nope")
            if "prism_compiled_ms" in step:
                compiled, ratio = step["prism_compiled_ms"], step["prism_compiled_over_nope"]
                print(
                    f"  prism (compile) {compiled:8.1f} ms   {ratio:.2f}x nope   (first call {step['compile_s']:.0f} s)"
                )
            if "prism_forward_regions_ms" in step:
                print(
                    "  PRISM forward regions (ms):",
                    {k: round(v, 1) for k, v in step["prism_forward_regions_ms"].items()},
                )
                print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
