"""`pezoo perf --sections gpu`: the harness's training step against the bare step (see :mod:`harness.perf`).

Per preset and encoding, on the current device:

* ``bare_ms``: the model's step alone on one fixed batch (forward, loss, backward,
  clipping, optimiser; :func:`harness.perf.train.step_function`), nothing else.
* ``harness_ms``: a step of the harness's own loop (``harness.training.train.train``: batches made
  from the seeded stream, the learning-rate schedule, the loss read back), per step over
  ``gpu_steps`` steps after a warm-up, with the loop's device features as
  ``harness.training.accel.Accel.for_device`` gives them (``after``) and with none of them
  (``before``: the loop a CPU runs).
* ``busy``: the fraction of the harness step's wall time the device spends in kernels
  (``torch.profiler``'s CUDA kernel times over the same steps; CUDA only).
* ``launches``: kernel launches per harness step on CUDA (the profiler's
  ``cudaLaunchKernel``-like calls, a CUDA graph replay counting one), or ATen operator
  calls per step on CPU (the same host overhead, as CPU sees it).

The ratio ``harness_ms / bare_ms`` is how much the loop around the model costs: the issue's
target is at most 1.2 on a GPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from harness.config import preset_config
from harness.perf.grid import PRESET_TASKS, PerfGrid
from harness.perf.timing import synchronizer, time_interleaved
from harness.perf.train import build_for, step_function, training_batch

LAUNCH_NAMES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaGraphLaunch", "cudaLaunchKernelExC", "cuLaunchKernelEx")


def _profile(run: Callable[[], None], device: torch.device) -> tuple[float, float, int]:
    """(wall ms, device-kernel ms, launches or ATen calls) of ``run()`` under the profiler."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync = synchronizer(device)
    sync()
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        run()
        sync()
        wall = (time.perf_counter() - start) * 1000.0
    kernel_ms, launches = _tally(prof, device)
    return wall, kernel_ms, launches


def _tally(prof: Any, device: torch.device) -> tuple[float, int]:
    """(device-kernel ms, kernel launches on CUDA / ATen calls on CPU) of a finished profile."""
    kernel_us, launches = 0.0, 0
    for evt in prof.events():
        kind = str(getattr(evt, "device_type", "")).rsplit(".", 1)[-1]
        if device.type == "cuda":
            if kind == "CUDA":
                kernel_us += float(getattr(evt, "device_time", None) or getattr(evt, "cuda_time", 0.0) or 0.0)
            elif evt.name in LAUNCH_NAMES:
                launches += 1
        elif evt.name.startswith("aten::"):
            launches += 1
    return kernel_us / 1000.0, launches


def harness_steps(
    cfg: Any, device: torch.device, accel: Any, warmup: int, steps: int, profiled: bool
) -> dict[str, Any]:
    """Train ``cfg`` for ``warmup + steps`` steps with ``accel``: ms per step over the last
    ``steps``, and with ``profiled`` the busy fraction and launches per step over them."""
    from dataclasses import replace

    from harness.tasks import create
    from harness.training.train import build_model, train

    cfg = replace(cfg, train=replace(cfg.train, steps=warmup + steps, warmup=1))
    model = build_model(cfg, device)
    marks: dict[str, Any] = {}
    sync = synchronizer(device)
    prof_box: dict[str, Any] = {}

    def on_lr(step: int, lr: float) -> None:
        if step == warmup:
            sync()
            if profiled:
                from torch.profiler import ProfilerActivity, profile

                acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
                prof_box["p"] = profile(activities=acts)
                prof_box["p"].__enter__()
            marks["start"] = time.perf_counter()

    train(cfg, model, create(cfg.task), device, on_lr=on_lr, accel=accel)
    sync()
    wall = (time.perf_counter() - marks["start"]) * 1000.0
    row: dict[str, Any] = {"ms": wall / steps}
    if profiled:
        prof = prof_box["p"]
        prof.__exit__(None, None, None)
        kernel_ms, launches = _tally(prof, device)
        row["busy"] = kernel_ms / wall if device.type == "cuda" else None
        row["launches"] = launches / steps
    return row


def _repeat(step: Callable[[], object], times: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(times):
            step()

    return run


def measure_gpu(grid: PerfGrid, device: torch.device) -> list[dict[str, Any]]:
    """Rows per (preset, encoding): bare step, harness step before/after, busy fraction, launches."""
    from harness.training.accel import ACCEL_FEATURES, Accel
    from harness.training.train import make_optimizer

    rows: list[dict[str, Any]] = []
    for preset in grid.presets:
        _, batch = training_batch(preset, grid.batch_size, device)
        for pe in grid.encodings:
            cfg = preset_config(preset, pe=pe, task=PRESET_TASKS.get(preset, "copy"), seed=0)
            if grid.batch_size:
                from dataclasses import replace

                cfg = replace(cfg, train=replace(cfg.train, batch_size=grid.batch_size))
            model, opt = build_for(preset, pe, cfg.backbone.backend, device)
            opt = make_optimizer(model, cfg, fused=device.type == "cuda")  # the bare step at its best: fused AdamW
            bare = step_function(model, opt, batch)
            sync = synchronizer(device)
            timing = time_interleaved({"bare": bare}, repeats=grid.repeats, warmup=grid.warmup, sync=sync)
            bare_wall, bare_kernels, bare_launches = _profile(_repeat(bare, grid.gpu_steps), device)
            del model, opt, bare
            after_accel = Accel.for_device(device)
            before = harness_steps(cfg, device, Accel(), grid.warmup + 2, grid.gpu_steps, profiled=False)
            after = harness_steps(cfg, device, after_accel, grid.warmup + 2, grid.gpu_steps, profiled=False)
            profiled = harness_steps(cfg, device, after_accel, grid.warmup + 2, grid.gpu_steps, profiled=True)
            b, s = batch.inputs.shape
            rows.append(
                {
                    "preset": preset,
                    "pe": pe,
                    "batch": [b, s],
                    "bare_ms": timing["bare"].median_ms,
                    "bare_busy": bare_kernels / bare_wall if device.type == "cuda" else None,
                    "bare_launches": bare_launches / grid.gpu_steps,
                    "before_ms": before["ms"],
                    "harness_ms": after["ms"],
                    "ratio": after["ms"] / timing["bare"].median_ms,
                    "busy": profiled["busy"],  # from a run of its own: the profiler slows what it watches
                    "launches": profiled["launches"],
                    "accel": {k: getattr(after_accel, k) for k in ACCEL_FEATURES},
                }
            )
    return rows


def render_gpu(rows: list[dict[str, Any]]) -> list[str]:
    """The section's table (GitHub markdown)."""
    from tabulate import tabulate

    if not rows:
        return []

    def pct(x: float | None) -> str:
        return "—" if x is None else f"{100 * x:.0f}%"

    table = [
        [
            f"{r['preset']}/{r['pe']}",
            f"{r['bare_ms']:.2f}",
            f"{r['before_ms']:.2f}",
            f"{r['harness_ms']:.2f}",
            f"{r['ratio']:.2f}×",
            f"{pct(r['bare_busy'])} → {pct(r['busy'])}",
            f"{r['bare_launches']:.0f} / {r['launches']:.0f}",
        ]
        for r in rows
    ]
    r0 = rows[0]
    from dataclasses import asdict

    from harness.training.accel import Accel

    plain = asdict(Accel())  # the loop as a CPU runs it
    on = ", ".join(f"{k} {v}" if type(v) is int else k for k, v in r0["accel"].items() if v != plain.get(k))
    return [
        f"training step in the harness's loop vs the bare step (batch {r0['batch'][0]} × {r0['batch'][1]}; loop "
        f"features: {on or 'none'}; target on a GPU: harness ≤ 1.2× bare)",
        tabulate(
            table,
            headers=["preset/pe", "bare ms", "loop ms (no features)", "loop ms", "loop/bare", "GPU busy (bare → loop)",
                     "launches or ATen calls per step (bare / loop)"],
            tablefmt="github",
            disable_numparse=True,
        ),
    ]  # fmt: skip
