"""PRISM's training step on the torch scan ("eager") and on the Triton kernels ("kernel"),
against NoPE's, at the quick and gpu presets' shapes: a markdown table, for a GPU.

Usage (a GPU machine; one process, a wall-clock limit for the whole script)::

    PYTHONPATH=. python benchmarks/prism_triton.py --time-limit 240 [--presets quick gpu] [--out FILE]

Per preset: the benchmark's own model and optimiser (``harness.perf.train.build_for``:
the preset's backbone, AdamW as the harness makes it, TF32 and the preset's autocast
precision on CUDA) on the preset's fixed training batch (``training_batch``: copy at
its largest training length, 64 × 23 at quick, 100 × 83 at gpu). One step is forward,
loss, backward, clipping and the optimiser (``step_function``). Candidates:

* ``nope``;
* ``prism``: PRISM's defaults (one PRISM layer, no copy branch);
* ``prism{paper} reverse``: the paper's setup on reverse (copy branch on every fifth
  query cursor, absolute copy keys, C = 4, d_pe scaled, GRU 100);
* ``prism{paper} odds_first``: on odds_first (two PRISM layers, no copy branch);

each PRISM model timed twice, its scan on the torch loop (``scan_backend("torch")``) and on
the kernels (``scan_backend("triton")``), on one model, timed interleaved (rounds rotate
over the two, the device synchronised around each call; the median in ms); ``x NoPE`` is
that over NoPE's median. ``launches`` counts the CUDA kernels of one step (torch profiler).
``grad diff`` is, for the same weights and batch, max |g_kernel − g_eager| / max |g_eager|
over every parameter's gradient of one step: the kernels checked at the benchmark's shapes
(the scan is float32 either way; under the gpu preset's bf16 autocast the layers after it
round to bf16, so expect ~1e-3 there and ~1e-6 in fp32).

The time limit covers everything (builds, warm-up, timing): a model starts only with
``--reserve`` seconds left, its rounds stop early when the time runs short, what does not
fit is marked ``not measured``, and the table is printed whatever happened. On CPU the kernel rows run in Triton's
interpreter and are skipped unless ``--interpret`` (for checking this script on tiny
presets: ``--presets smoke --interpret``).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

PRESETS = ("quick", "gpu")
PAPER_TASKS = ("reverse", "odds_first")


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


@contextlib.contextmanager
def precision_of(preset: str, device: torch.device) -> Iterator[None]:
    """The preset's training precision (autocast) on ``device``."""
    from harness.config.presets import PRESETS as ALL
    from harness.training.precision import autocast

    with autocast(ALL[preset]["train"].get("precision", "fp32"), device):
        yield


def candidates_for(preset: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(row name, encoding, options) of the models timed at ``preset``."""
    from harness.config.presets import PRESETS as ALL
    from harness.config.protocols import paper_pe_options
    from harness.config.run_config import BackboneConfig

    backbone = BackboneConfig(**ALL[preset]["backbone"])
    rows: list[tuple[str, str, dict[str, Any]]] = [("nope", "nope", {}), ("prism", "prism", {})]
    for task in PAPER_TASKS:
        rows.append((f"prism{{paper}} {task}", "prism", paper_pe_options("prism", task, backbone)))
    return rows


def launches(step: Callable[[], object], device: torch.device) -> int | None:
    """CUDA kernels one call of ``step`` launches (None off CUDA)."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize(device)
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def grad_diff(model: torch.nn.Module, batch: Any, preset: str, device: torch.device) -> float:
    """max |g_kernel − g_eager| / max |g_eager| over the parameters' gradients of one step."""
    import torch.nn.functional as F

    from harness.tasks.data import IGNORE
    from pezoo.encodings.prism.fused_scan import scan_backend

    def grads(backend: str) -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        with scan_backend(backend), precision_of(preset, device):
            logits = model(batch.inputs, scale_hint=batch.scales)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), batch.labels.flatten(), ignore_index=IGNORE)
        loss.backward()
        return [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]

    eager, kernel = grads("torch"), grads("triton")
    model.zero_grad(set_to_none=True)
    scale = max(g.abs().max().item() for g in eager)
    return max((a - b).abs().max().item() for a, b in zip(kernel, eager, strict=True)) / scale


def timed(
    runs: dict[str, Callable[[], None]], args: argparse.Namespace, deadline: Deadline, sync: Callable[[], None]
) -> dict[str, float]:
    """Median ms of each run: ``args.warmup`` calls each, then rounds (the order rotating) until
    ``args.repeats`` rounds or the deadline, whichever comes first (at least one round)."""
    import statistics

    names = list(runs)
    for name in names:
        for _ in range(args.warmup):
            runs[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(args.repeats):
        if r and deadline.left() < args.reserve / 2:
            break
        for name in names[r % len(names) :] + names[: r % len(names)]:
            sync()
            start = time.perf_counter()
            runs[name]()
            sync()
            samples[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(v) for name, v in samples.items()}


def measure(preset: str, device: torch.device, args: argparse.Namespace, deadline: Deadline) -> list[dict[str, Any]]:
    from harness.perf.timing import synchronizer
    from harness.perf.train import build_for, step_function, training_batch
    from harness.training.precision import use_tf32
    from pezoo.encodings.prism.fused_scan import scan_backend

    use_tf32(device)
    _, batch = training_batch(preset, 0, device)
    shape = f"{batch.inputs.shape[0]} × {batch.inputs.shape[1]}"
    kernel_ok = device.type == "cuda" or args.interpret
    rows: list[dict[str, Any]] = []
    nope_ms = None
    for name, pe, options in candidates_for(preset):
        scans = {"-": "torch"} if pe == "nope" else {"eager": "torch", "kernel": "triton"}
        if not kernel_ok:
            scans.pop("kernel", None)
        mine = {scan: {"preset": preset, "shape": shape, "model": name, "scan": scan} for scan in scans}
        rows += mine.values()
        if deadline.left() < args.reserve:
            for row in mine.values():
                row["note"] = "not measured (time limit)"
            continue
        try:
            model, opt = build_for(preset, pe, "sdpa", device, **options)
            step = step_function(model, opt, batch)

            def runner(backend: str, step: Callable[[], object] = step) -> Callable[[], None]:
                def run() -> None:
                    with scan_backend(backend), precision_of(preset, device):
                        step()

                return run

            runs = {scan: runner(backend) for scan, backend in scans.items()}
            timings = timed(runs, args, deadline, synchronizer(device))
            for scan, row in mine.items():
                row["ms"] = timings[scan]
                row["launches"] = launches(runs[scan], device)
            if pe == "nope":
                nope_ms = mine["-"]["ms"]
            if "kernel" in mine:
                mine["kernel"]["grad diff"] = grad_diff(model, batch, preset, device)
            del model, opt, step, runs
        except Exception as exc:  # report and go on: one failure must not lose the table
            for row in mine.values():
                row.setdefault("note", f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
        if device.type == "cuda":
            torch.cuda.empty_cache()
        for row in mine.values():
            print(_line(row, nope_ms), file=sys.stderr, flush=True)
    for row in rows:
        row["x nope"] = row["ms"] / nope_ms if "ms" in row and nope_ms else None
    return rows


def _line(row: dict[str, Any], nope_ms: float | None) -> str:
    ms = row.get("ms")
    x = f" ({ms / nope_ms:.2f}x NoPE)" if ms and nope_ms else ""
    return f"{row['preset']} {row['model']} [{row['scan']}]: " + (f"{ms:.2f} ms{x}" if ms else row.get("note", "?"))


def table(rows: list[dict[str, Any]]) -> str:
    head = "| preset | batch × tokens | model | scan | ms / step | × NoPE | launches | grad diff | note |"
    lines = [head, "|---|---|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        ms = f"{r['ms']:.2f}" if "ms" in r else ""
        x = f"{r['x nope']:.2f}" if r.get("x nope") else ""
        n = str(r["launches"]) if r.get("launches") is not None else ""
        g = f"{r['grad diff']:.1e}" if "grad diff" in r else ""
        note = r.get("note", "")
        lines.append(f"| {r['preset']} | {r['shape']} | {r['model']} | {r['scan']} | {ms} | {x} | {n} | {g} | {note} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time-limit", type=float, required=True, help="seconds for the whole script")
    parser.add_argument("--presets", nargs="+", default=list(PRESETS))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reserve", type=float, default=15.0, help="seconds a candidate needs to be started")
    parser.add_argument("--interpret", action="store_true", help="on CPU: time the kernels in Triton's interpreter")
    parser.add_argument("--out", help="also write the table to this file")
    args = parser.parse_args()
    deadline = Deadline(args.time_limit)
    device = torch.device(args.device)
    rows: list[dict[str, Any]] = []
    for preset in args.presets:
        rows += measure(preset, device, args, deadline)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    text = f"PRISM training step, torch scan vs Triton kernels ({name}, torch {torch.__version__})\n\n{table(rows)}\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
