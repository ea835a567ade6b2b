"""Sizing the local executor: how many workers on which devices, and whether the runs
train in this process or in a pool of worker processes.

Packing a GPU: a small run leaves most of a GPU idle (its kernels are short and its host
work is Python), so on CUDA the pool puts several workers on each GPU, as many as its free
memory holds (each a CUDA context plus the run's measured footprint: :func:`runs_per_gpu`),
at most one per CPU core (each worker's host work needs one) and at most
:data:`PACK_CAP`. Every worker trains its own run in its own process with its own seeded
streams, so a run's result does not depend on what trains beside it
(tests/harness/test_packing.py).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence

import torch

from harness.config import RunConfig
from harness.execution.run import Progress
from harness.sweeps.executors.grouped import Grouped
from harness.sweeps.executors.in_process import InProcess
from harness.sweeps.executors.interface import Executor
from harness.sweeps.executors.jobs import Job
from harness.sweeps.executors.local_pool import LocalPool


def default_cpu_workers() -> int:
    """CPU cores this process may use (one single-threaded worker each)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


PACK_CAP = 8
"""Most workers on one GPU: past this the measured throughput of small runs stops growing
(8 quick-preset workers on one H100 trained 3.6x one worker's steps, docs/performance.md)."""

CONTEXT_BYTES = 768 * 2**20
"""What a worker process holds on its GPU before its run: the CUDA context, cuBLAS
workspaces and the allocator's first blocks (about 0.5-0.7 GiB on recent cards)."""

FOOTPRINT_MARGIN = 3.0
"""A run's footprint as a multiple of one eager step's peak: CUDA graphs keep a memory pool
per length bucket, and evaluation decodes bigger batches than training steps."""


def runs_per_gpu(
    free_bytes: int,
    run_bytes: int,
    cores_per_gpu: int,
    *,
    cap: int = PACK_CAP,
    context_bytes: int = CONTEXT_BYTES,
    reserve: float = 0.1,
) -> int:
    """How many runs train side by side on one GPU with ``free_bytes`` free: as many as fit
    in its memory less a ``reserve`` fraction (each ``context_bytes`` + ``run_bytes``), at
    most ``cores_per_gpu`` (one CPU core per worker) and ``cap``; at least 1."""
    if free_bytes < 0 or run_bytes < 0 or cores_per_gpu < 0:
        raise ValueError("free memory, run footprint and cores must be >= 0")
    fit = math.floor(free_bytes * (1 - reserve) / max(1, context_bytes + run_bytes))
    return max(1, min(fit, cores_per_gpu, cap))


def run_footprint(cfg: RunConfig, device: torch.device) -> int:
    """Bytes one run of ``cfg`` needs on ``device`` (CUDA) besides its process's context:
    the peak of two eager training steps at its largest training scale (weights, gradients,
    optimiser state, activations), times :data:`FOOTPRINT_MARGIN`. Measured here, once."""
    import random

    import harness.tasks as tasks
    from harness.perf.train import build_for, step_function
    from harness.tasks.data import collate
    from harness.tasks.lm.data import lm_batches

    if cfg.is_lm:  # a language-modelling run's windows of L bytes
        batch = lm_batches(cfg.task, cfg.seed, cfg.train.train_max).batch(0, cfg.train.batch_size).to(device)
    else:
        task = tasks.create(cfg.task)
        scale = max(n for n in cfg.train_lengths() if task.has_scale(n))
        rng = random.Random("footprint")
        batch = collate([task.sample(scale, rng) for _ in range(cfg.train.batch_size)], cfg.protocol).to(device)
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    model, opt = build_for(cfg.preset, cfg.pe, cfg.backbone.backend, device, **dict(cfg.pe_options))
    step = step_function(model, opt, batch)
    step()
    step()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    del model, opt, step, batch
    torch.cuda.empty_cache()
    return int(peak * FOOTPRINT_MARGIN)


GROUP_ENV = "PEZOO_GROUP"
"""How a sweep's local runs share their device: ``threads`` (a group: one process, a thread
per run, on a GPU a CUDA stream each, ``harness.sweeps.executors.grouped.Grouped``) or
``processes`` (a worker process per run, ``LocalPool``: processes only time-share a GPU).
Unset: threads on CUDA, processes on a CPU (single-threaded workers, one per core)."""

GROUP_CAP = 16
"""Most runs in one GPU's group. Measured once, at this size only: 16 board runs in a group on
an H100 trained about 300 steps/s together, as 8 packed processes did (GIL-bound;
benchmarks/results/cuda-gpu-nvidia-h100-80gb-hbm3-2.md). At that rate the size shares the
steps out rather than adding to them; a sweep over sizes is to set it once a group's step is
off the host (``harness.training.step_graph``)."""


def group_mode(value: str | None = None, device_type: str = "cuda") -> str:
    """``threads`` or ``processes``, from :data:`GROUP_ENV` (or ``value``); unset: ``threads``
    on CUDA, ``processes`` elsewhere."""
    setting = (os.environ.get(GROUP_ENV, "") if value is None else value).strip()
    if not setting:
        return "threads" if device_type == "cuda" else "processes"
    if setting not in ("threads", "processes"):
        raise ValueError(f"{GROUP_ENV}: {setting!r} is not threads or processes")
    return setting


def packed_per_gpu(configs: Sequence[RunConfig], device: torch.device, *, grouped: bool = False) -> int:
    """Runs per GPU for ``configs`` on CUDA ``device`` (1 elsewhere): :func:`runs_per_gpu`
    from the GPU's free memory now and the biggest footprint among the sweep's distinct
    models (:func:`run_footprint`). Worker processes (``grouped`` False) each hold a CUDA
    context and a CPU core (this process's cores shared among the GPUs), at most
    :data:`PACK_CAP`; a group's threads share one context and one process, at most
    :data:`GROUP_CAP`."""
    if device.type != "cuda" or not configs:
        return 1
    index = device.index if device.index is not None else 0
    gpus = 1 if device.index is not None else max(1, torch.cuda.device_count())
    free, _ = torch.cuda.mem_get_info(index)
    shapes = {(c.preset, c.pe, str(sorted(c.pe_options.items())), c.task): c for c in configs}
    biggest = max(run_footprint(c, torch.device("cuda", index)) for c in shapes.values())
    if grouped:
        return runs_per_gpu(free, biggest, GROUP_CAP, cap=GROUP_CAP, context_bytes=0)
    return runs_per_gpu(free, biggest, default_cpu_workers() // gpus)


def local_devices(device: torch.device, workers: int | None, todo: int, per_gpu: int = 1) -> list[str]:
    """One device string per local worker.

    ``workers=None`` sizes the pool to the machine: ``per_gpu`` workers per GPU (all
    visible GPUs for ``cuda``, just that one for ``cuda:N``; :func:`packed_per_gpu`), else
    one per CPU core; never more workers than runs to do. An explicit ``workers`` above
    the GPU count shares GPUs round-robin.
    """
    if device.type == "cuda":
        gpus = [str(device)] if device.index is not None else [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    else:
        gpus = []
    n = workers if workers is not None else (len(gpus) * max(1, per_gpu) or default_cpu_workers())
    n = max(1, min(n, max(todo, 1)))
    return [gpus[i % len(gpus)] for i in range(n)] if gpus else ["cpu"] * n


def local_executor(
    device: torch.device,
    workers: int | None,
    todo: int,
    progress_for: Callable[[Job], Progress | None] = lambda job: None,
    notice: Callable[[Job, str], None] = lambda job, msg: None,
    *,
    isolate: bool = False,
    hang_seconds: float | None = None,
    configs: Sequence[RunConfig] = (),
) -> Executor:
    """In-process when one worker is enough (or asked for); on CUDA a group of runs in this
    process (``Grouped``: a thread and a stream per run, :data:`GROUP_ENV`); else a
    ``LocalPool`` of worker processes.

    ``isolate`` (runs that use code not from pezoo, a plugin's encoding) gives a pool even
    of one worker: a plugin that crashes its process (a segfault, ``os._exit``) then ends
    its run, which is retried and recorded failed, not the sweep and its driver. So does
    ``hang_seconds`` (``LocalPool``): only a worker process can be stopped when it hangs.
    On CUDA with ``workers`` unset, the sweep's ``configs`` size the group or the packing
    (:func:`packed_per_gpu`)."""
    grouped = not isolate and hang_seconds is None and group_mode(device_type=device.type) == "threads"
    per_gpu = packed_per_gpu(configs, device, grouped=grouped) if workers is None and todo > 1 else 1
    devices = local_devices(device, workers, todo, per_gpu)
    if len(devices) == 1 and not isolate and hang_seconds is None:
        return InProcess(torch.device(devices[0]) if device.type == "cuda" else device, progress_for, notice)
    if grouped:
        return Grouped(devices, progress_for, notice)
    return LocalPool(devices, progress_for, notice, hang_seconds=hang_seconds)
