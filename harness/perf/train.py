"""`pezoo perf`: training step (see :mod:`harness.perf`)."""

from __future__ import annotations

import gc
import itertools
import math
import random
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F

from harness.config import preset_config
from harness.perf.grid import PRESET_TASKS, STEP_TARGETS, PerfGrid
from harness.perf.timing import Timing, synchronizer, time_interleaved
from harness.tasks import create as create_task
from harness.tasks.data import IGNORE, collate
from harness.training.backbone import Backbone


def training_backends(device: torch.device) -> tuple[str, ...]:
    """Backends that can run a training step on ``device`` through their own kernels.

    On CPU ``flex`` has no backward pass (it defers to ``sdpa``) and ``xformers``
    refuses CPU tensors, so only ``eager`` and ``sdpa`` differ there.
    """
    if device.type != "cuda":
        return ("eager", "sdpa")
    from pezoo.backends import xformers_available

    return ("eager", "sdpa", "flex", *(("xformers",) if xformers_available() else ()))


def training_batch(preset: str, batch_size: int, device: torch.device) -> tuple[Any, Any]:
    """(run config of ``nope`` at ``preset``, a fixed batch at the preset's largest training scale)."""
    cfg = preset_config(preset, pe="nope", task=PRESET_TASKS.get(preset, "copy"), seed=0)
    task = create_task(cfg.task)
    rng = random.Random(f"perf/{preset}")
    scale = max(n for n in cfg.train_lengths() if task.has_scale(n))
    n = batch_size or cfg.train.batch_size
    batch = collate([task.sample(scale, rng) for _ in range(n)], cfg.protocol).to(device)
    return cfg, batch


def step_function(model: Backbone, optimizer: torch.optim.Optimizer, batch: Any) -> Callable[[], float]:
    """One training step (forward, loss, backward, clipping, optimiser) on a fixed batch."""

    def step() -> float:
        logits = model(batch.inputs, scale_hint=batch.scales)  # (b, s, v)
        loss = F.cross_entropy(logits.flatten(0, 1), batch.labels.flatten(), ignore_index=IGNORE)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return 0.0

    return step


def build_for(preset: str, pe: str, backend: str, device: torch.device, **pe_options: Any) -> tuple[Backbone, Any]:
    """The benchmark's own model and optimiser for (preset, encoding, backend)."""
    from harness.training.train import build_model, make_optimizer

    cfg = preset_config(
        preset,
        pe=pe,
        task=PRESET_TASKS.get(preset, "copy"),
        seed=0,
        overrides={"backbone": {"backend": backend}},
    )
    if pe_options:
        cfg = replace(cfg, pe_options=dict(pe_options))
    model = build_model(cfg, device)
    model.train()
    return model, make_optimizer(model, cfg)


def ratio_basis(device: torch.device) -> str:
    """Which time ratios are taken on: ``cpu`` (process CPU time) on a single-threaded CPU, else ``wall``.

    A single-threaded process's CPU time is the work it did, whatever else the machine
    is running, so it estimates the idle-machine wall-clock time far more stably than
    wall-clock time on a loaded machine does; with several threads it would also count
    spin-waiting, and on a GPU it is not the device's time.
    """
    return "cpu" if device.type == "cpu" and torch.get_num_threads() == 1 else "wall"


def basis_ms(t: Timing, basis: str) -> float:
    return t.cpu_ms if basis == "cpu" else t.median_ms


def measure_train(grid: PerfGrid, device: torch.device) -> list[dict[str, Any]]:
    """Training-step rows for every (preset, encoding, backend) of ``grid``."""
    rows: list[dict[str, Any]] = []
    backends = grid.backends or training_backends(device)
    basis = ratio_basis(device)
    for preset in grid.presets:
        _, batch = training_batch(preset, grid.batch_size, device)
        candidates: dict[str, Callable[[], object]] = {}
        for pe, backend in itertools.product(grid.encodings, backends):
            model, opt = build_for(preset, pe, backend, device)
            takes = model.pe.attention_backends()
            if takes is not None and backend not in takes:
                continue  # an encoding that runs on some backends only (stick-breaking: eager) has no row here
            step = step_function(model, opt, batch)
            try:
                step()  # untimed: an encoding this preset cannot run (a causal-only one in an encoder) has no row
            except ValueError as exc:
                warnings.warn(f"pezoo perf: {pe} does not run at preset {preset}: {exc}", RuntimeWarning, stacklevel=2)
                continue
            candidates[f"{pe}|{backend}"] = step
        timings = time_interleaved(candidates, repeats=grid.repeats, warmup=grid.warmup, sync=synchronizer(device))
        b, s = batch.inputs.shape
        nope = [basis_ms(t, basis) for key, t in timings.items() if key.startswith("nope|")]
        reference = min(nope) if nope else math.nan
        for key, t in timings.items():
            pe, backend = key.split("|")
            rows.append(
                {
                    "preset": preset,
                    "pe": pe,
                    "backend": backend,
                    "batch": [b, s],
                    "median_ms": t.median_ms,
                    "spread": t.spread,
                    "cpu_ms": t.cpu_ms,
                    "basis": basis,
                    "tokens_per_s": b * s / (t.median_ms / 1000.0),
                    "ratio_to_nope": basis_ms(t, basis) / reference,
                    "target": STEP_TARGETS.get(pe),
                }
            )
        del candidates
        gc.collect()
    return rows


def best_backend_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (preset, encoding) the row of its fastest backend, with whether it meets its target."""
    best: dict[tuple[str, str], Mapping[str, Any]] = {}
    for row in rows:
        key = (row["preset"], row["pe"])
        if key not in best or row["ratio_to_nope"] < best[key]["ratio_to_nope"]:
            best[key] = row
    out = []
    for row in best.values():
        target = row["target"]
        out.append({**row, "meets_target": None if target is None else bool(row["ratio_to_nope"] <= target)})
    return out
