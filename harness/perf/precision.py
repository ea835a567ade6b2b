"""`pezoo perf`: the training step in each precision (see :mod:`harness.perf`).

Per preset and encoding, the benchmark's own training step (``harness.training.train``: the model
the harness builds, its optimiser for that precision, the loss of ``training_loss`` under
``harness.training.precision.autocast``, fp16 with its loss scaler) in fp32 and in every other
precision of the grid, all interleaved in one process on one fixed batch; the ratio of
each to the same encoding's fp32 step.

Interleaved with the steps, the matrix product alone (:func:`matmul_reference`: the
preset's MLP input layer, tokens × d @ d × d_ff, in each precision's dtype): its ratio is
what the device gives low-precision matrix work at that moment, the floor a step ratio
approaches as matrix work takes over the step. Every row carries it.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable
from typing import Any

import torch

from harness.config import RunConfig, preset_config
from harness.perf.grid import PRECISION_TARGETS, PRESET_TASKS, PerfGrid
from harness.perf.timing import synchronizer, time_interleaved
from harness.perf.train import basis_ms, ratio_basis, training_batch
from harness.training.precision import autocast_dtype, grad_scaler

MATMUL_REPEATS = 10
"""Matrix products per timed call of :func:`matmul_reference` (a few ms on a CPU core)."""


def precision_step(preset: str, pe: str, precision: str, batch: Any, device: torch.device) -> Callable[[], float]:
    """One training step of ``pe`` at ``preset`` in ``precision``, as ``harness.training.train.train`` takes it."""
    from harness.training.loss import training_loss
    from harness.training.train import build_model, make_optimizer

    overrides: dict[str, dict[str, Any]] = {"train": {"precision": precision}}
    cfg = preset_config(preset, pe=pe, task=PRESET_TASKS.get(preset, "copy"), seed=0, overrides=overrides)
    model = build_model(cfg, device)
    model.train()
    optimizer = make_optimizer(model, cfg)
    scaler = grad_scaler(precision, device)

    def step() -> float:
        loss, _ = training_loss(model, batch, precision)
        optimizer.zero_grad(set_to_none=True)
        if scaler is None:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
        return 0.0

    return step


def matmul_reference(
    cfg: RunConfig, tokens: int, precision: str, device: torch.device
) -> tuple[Callable[[], float], tuple[int, int, int]]:
    """(a call of :data:`MATMUL_REPEATS` products (tokens × d) @ (d × d_ff) in ``precision``'s
    dtype, with inputs made once in that dtype: the kernel alone, no casts; the (m, k, n) shape)."""
    d = cfg.backbone.d_model
    d_ff = cfg.backbone.d_ff or 4 * d
    dtype = autocast_dtype(precision) or torch.float32
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(tokens, d, generator=generator).to(device=device, dtype=dtype)
    b = torch.randn(d, d_ff, generator=generator).to(device=device, dtype=dtype)

    def products() -> float:
        for _ in range(MATMUL_REPEATS):
            a @ b
        return 0.0

    return products, (tokens, d, d_ff)


def measure_precision(grid: PerfGrid, device: torch.device) -> list[dict[str, Any]]:
    """Rows for every (preset, encoding, precision) of ``grid``, with the ratio to fp32."""
    rows: list[dict[str, Any]] = []
    basis = ratio_basis(device)
    precisions = tuple(dict.fromkeys(("fp32", *grid.precisions)))
    for preset in grid.presets:
        cfg, batch = training_batch(preset, grid.batch_size, device)
        b, s = batch.inputs.shape
        candidates = {}
        for p in precisions:
            candidates[f"|{p}"], shape = matmul_reference(cfg, b * s, p, device)  # "" names the product alone
        candidates.update(
            {f"{pe}|{p}": precision_step(preset, pe, p, batch, device) for pe in grid.encodings for p in precisions}
        )
        timings = time_interleaved(candidates, repeats=grid.repeats, warmup=grid.warmup, sync=synchronizer(device))
        flop = 2 * shape[0] * shape[1] * shape[2] * MATMUL_REPEATS
        for key, t in timings.items():
            pe, precision = key.split("|")
            if not pe:
                continue
            fp32 = basis_ms(timings[f"{pe}|fp32"], basis)
            product = basis_ms(timings[f"|{precision}"], basis)
            ratio = basis_ms(t, basis) / fp32 if fp32 > 0 else math.nan
            target = PRECISION_TARGETS.get(pe, PRECISION_TARGETS["*"]) if precision == "bf16" else None
            rows.append(
                {
                    "preset": preset,
                    "pe": pe,
                    "precision": precision,
                    "batch": [b, s],
                    "median_ms": t.median_ms,
                    "spread": t.spread,
                    "cpu_ms": t.cpu_ms,
                    "basis": basis,
                    "ratio_to_fp32": ratio,
                    "target": target,
                    "meets_target": None if target is None else bool(ratio <= target),
                    "matmul_shape": list(shape),
                    "matmul_gflops": flop / product / 1e6 if product > 0 else math.nan,
                    "matmul_ratio_to_fp32": product / basis_ms(timings["|fp32"], basis) if product > 0 else math.nan,
                }
            )
        del candidates
        gc.collect()
    return rows
