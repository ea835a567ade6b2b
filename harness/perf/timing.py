"""`pezoo perf`: timing (see :mod:`harness.perf`)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Timing:
    """Summary of one candidate's timed rounds, in milliseconds."""

    median_ms: float
    q1_ms: float
    q3_ms: float
    min_ms: float
    rounds: int
    cpu_ms: float = math.nan

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median."""
        return (self.q3_ms - self.q1_ms) / self.median_ms if self.median_ms > 0 else 0.0

    @classmethod
    def of(cls, samples_ms: Sequence[float], cpu_samples_ms: Sequence[float] = ()) -> Timing:
        """Summary of wall-clock samples (and, optionally, the process CPU time of the same calls)."""
        xs = sorted(samples_ms)
        if len(xs) >= 2:
            q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
        else:
            q1 = q3 = xs[0]
        cpu = statistics.median(cpu_samples_ms) if cpu_samples_ms else math.nan
        return cls(statistics.median(xs), q1, q3, xs[0], len(xs), cpu)


def synchronizer(device: torch.device) -> Callable[[], None]:
    """What makes a timed region end when the device's work has ended."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def time_interleaved(
    candidates: Mapping[str, Callable[[], object]],
    *,
    repeats: int,
    warmup: int,
    sync: Callable[[], None] = lambda: None,
) -> dict[str, Timing]:
    """Time every candidate ``repeats`` times, one call of each per round.

    Each candidate is called ``warmup`` times first (compilation, allocator growth,
    lazy initialisation). The order of the candidates is rotated every round, so no
    candidate always runs right after the same other one.
    """
    names = list(candidates)
    for name in names:
        for _ in range(warmup):
            candidates[name]()
    sync()
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            sync()
            start, start_cpu = time.perf_counter(), time.process_time()
            candidates[name]()
            sync()
            wall[name].append((time.perf_counter() - start) * 1000.0)
            cpu[name].append((time.process_time() - start_cpu) * 1000.0)
    return {name: Timing.of(wall[name], cpu[name]) for name in names}
