"""Sizing the local executor: how many workers on which devices, and whether the runs
train in this process or in a pool of worker processes.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from harness.executors.in_process import InProcess
from harness.executors.interface import Executor
from harness.executors.jobs import Job
from harness.executors.local_pool import LocalPool
from harness.run import Progress


def default_cpu_workers() -> int:
    """CPU cores this process may use (one single-threaded worker each)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def local_devices(device: torch.device, workers: int | None, todo: int) -> list[str]:
    """One device string per local worker.

    ``workers=None`` sizes the pool to the machine: one worker per GPU (all visible GPUs
    for ``cuda``, just that one for ``cuda:N``), else one per CPU core; never more
    workers than runs to do. An explicit ``workers`` above the GPU count shares GPUs
    round-robin.
    """
    if device.type == "cuda":
        gpus = [str(device)] if device.index is not None else [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    else:
        gpus = []
    n = workers if workers is not None else (len(gpus) or default_cpu_workers())
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
) -> Executor:
    """In-process when one worker is enough (or asked for), else a ``LocalPool``.

    ``isolate`` (runs that use code not from pezoo, a plugin's encoding) gives a pool even
    of one worker: a plugin that crashes its process (a segfault, ``os._exit``) then ends
    its run, which is retried and recorded failed, not the sweep and its driver. So does
    ``hang_seconds`` (``LocalPool``): only a worker process can be stopped when it hangs."""
    devices = local_devices(device, workers, todo)
    if len(devices) == 1 and not isolate and hang_seconds is None:
        return InProcess(torch.device(devices[0]) if device.type == "cuda" else device, progress_for, notice)
    return LocalPool(devices, progress_for, notice, hang_seconds=hang_seconds)
