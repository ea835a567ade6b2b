"""PRISM's fused windowed scan against the per-op autograd scan, side by side in one process.

Usage: ``PYTHONPATH=. python benchmarks/prism_fused.py [--lengths 64 128 256] [--rounds 5] [--step] [--harness-batch]``

One thread, process CPU time (``time.process_time``), candidates interleaved round by
round (so a background load hits them alike); the median per candidate is reported.

* scan: ``scan_emitting`` (windowed, with the offset table, copy branch from the copy
  offsets on the first k cursors) forward + backward, b = 64, n = 12 scanned cursors
  (4 of them copying), P = next power of two >= t, old (``fused=False``) vs new.
* ``--step``: the whole training step (forward, loss, backward, clipping, AdamW) of the
  quick backbone as ``pezoo perf --prism-lengths`` measures it (random batch of b = 64
  sequences of t tokens): NoPE, PRISM with its defaults (16 scanned cursors) and PRISM
  with the copy branch (``copy_cursors=(0,)``: 12 scanned, 4 copying), each PRISM with
  the old and the new scan.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch


def scan_candidates(t: int, b: int = 64, n: int = 12, k: int = 4, f: int = 32) -> dict[str, Callable[[], None]]:
    from pezoo.encodings.prism.config import PRISMConfig, support_for
    from pezoo.encodings.prism.histogram import centre_one_hot
    from pezoo.encodings.prism.layer import PRISMLayer
    from pezoo.encodings.prism.scan import scan_emitting
    from pezoo.encodings.prism.streams import offset_table

    gen = torch.Generator().manual_seed(0)
    support = support_for(t, 16)
    reset = torch.sigmoid(torch.randn(t, b, n, 1, generator=gen) - 2.0)
    moves = torch.softmax(torch.randn(t, b, n, 3, generator=gen), dim=-1)
    gates = torch.cat([reset, moves], dim=-1).requires_grad_()
    gamma = torch.full((n,), 2.0, requires_grad=True)
    logits = torch.randn(t, b, k, t + 1, generator=gen)
    logits[..., :-1] = logits[..., :-1].masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1)[:, None, None], -1e9)
    probs = torch.softmax(logits, dim=-1).requires_grad_()
    table = offset_table(support, f)
    h0 = centre_one_hot((b, n), support)
    weight = torch.randn(f, generator=gen)
    layer = PRISMLayer(PRISMConfig(d_model=16, n_heads=1, n_layers=1))

    def make(fused: bool) -> Callable[[], None]:
        def run() -> None:
            _, out = scan_emitting(
                h0, gates, gamma, 1e-6, None, None, layer._step, table,
                windowed=True, copy_probs=probs if k else None, fused=fused,
            )  # fmt: skip
            (out @ weight).square().sum().backward()
            gates.grad = gamma.grad = probs.grad = None

        return run

    return {f"scan t={t} old": make(False), f"scan t={t} new": make(True)}


def _with_scan(step: Callable[[], object], fused: bool) -> Callable[[], None]:
    """``step`` with ``scan_emitting``'s default ``fused`` set for its duration."""
    import pezoo.encodings.prism.scan as scan

    def run() -> None:
        original = scan.scan_emitting.__kwdefaults__["fused"]
        scan.scan_emitting.__kwdefaults__["fused"] = fused
        try:
            step()
        finally:
            scan.scan_emitting.__kwdefaults__["fused"] = original

    return run


def step_candidates(t: int, b: int = 64) -> dict[str, Callable[[], None]]:
    """``pezoo perf --prism-lengths``' models on its random batch (b × t): NoPE, PRISM with
    its defaults (16 scanned cursors) and with the copy branch (``copy_cursors=(0,)``, 12
    scanned, 4 copying), each PRISM with the old and the new scan."""
    from harness.perf.prism import COPY_OPTIONS, random_batch
    from harness.perf.train import build_for, step_function

    device = torch.device("cpu")
    out: dict[str, Callable[[], None]] = {}
    batch = None
    for name, pe, options in (("nope", "nope", {}), ("prism", "prism", {}), ("copy", "prism", COPY_OPTIONS)):
        model, opt = build_for("quick", pe, "sdpa", device, **options)
        if batch is None:
            batch = random_batch(b, t, model.embed.num_embeddings, device)
        step = step_function(model, opt, batch)
        if pe == "nope":
            out["nope"] = step
        else:
            out[f"{name} old"], out[f"{name} new"] = _with_scan(step, False), _with_scan(step, True)
    return out


def harness_step_candidates() -> dict[str, Callable[[], None]]:
    """The ``pezoo perf`` training step at the quick preset (its own batch, 64 × 23, PRISM's
    default options: 16 scanned cursors, no copy branch), old and new scan, and NoPE."""
    from harness.perf.train import build_for, step_function, training_batch

    device = torch.device("cpu")
    _, batch = training_batch("quick", 0, device)
    out: dict[str, Callable[[], None]] = {}
    for pe in ("nope", "prism"):
        model, opt = build_for("quick", pe, "sdpa", device)
        step = step_function(model, opt, batch)
        if pe == "nope":
            out["nope"] = step
        else:
            out["prism old"], out["prism new"] = _with_scan(step, False), _with_scan(step, True)
    return out


def interleave(candidates: dict[str, Callable[[], None]], rounds: int) -> dict[str, float]:
    for fn in candidates.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            start = time.process_time()
            fn()
            times[name].append(time.process_time() - start)
    return {name: statistics.median(v) * 1e3 for name, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--step", action="store_true")
    parser.add_argument("--no-scan", action="store_true")
    parser.add_argument("--harness-batch", action="store_true", help="also the quick preset's own batch (64 × 23)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.harness_batch:
        ms = interleave(harness_step_candidates(), args.rounds)
        nope, old, new = ms["nope"], ms["prism old"], ms["prism new"]
        print(
            f"quick preset step (64 x 23): nope {nope:.1f} ms  prism old {old:.1f} ms ({old / nope:.2f}x)  "
            f"new {new:.1f} ms ({new / nope:.2f}x)",
            flush=True,
        )
    for t in args.lengths:
        if not args.no_scan:
            ms = interleave(scan_candidates(t), args.rounds)
            old, new = ms[f"scan t={t} old"], ms[f"scan t={t} new"]
            print(f"scan  t={t:4d}: old {old:8.1f} ms  new {new:8.1f} ms  speed-up {old / new:.2f}x", flush=True)
        if args.step:
            ms = interleave(step_candidates(t), args.rounds)
            nope = ms["nope"]
            parts = [f"step  t={t:4d}: nope {nope:8.1f} ms"]
            for name in ("prism", "copy"):
                old, new = ms[f"{name} old"], ms[f"{name} new"]
                parts.append(f"{name} old {old:8.1f} ({old / nope:.2f}x) new {new:8.1f} ({new / nope:.2f}x)")
            parts.append(f"copy/prism new {ms['copy new'] / ms['prism new']:.2f}")
            print("  ".join(parts), flush=True)


if __name__ == "__main__":
    main()
