"""Speed probes: time a few training steps of a run's model on this machine, for the
estimates of ``pezoo sweep plan --probe`` when the store has no finished run of the same
encoding (options included), task and model.

Borrowed speeds mislead where the encoding sets the cost: prism{paper} with its two PRISM
layers on odds_first trains about 4x slower than with one on copy, and over 10x slower
than the other encodings on odds_first. A probe measures the run itself: a fresh model of
the run's config trained ``warmup + steps`` steps with the run's own training loop, one
torch thread on CPU (as a ``pezoo bench`` worker trains), the first ``warmup`` steps left
out (allocation, first-call costs). It reads the machine as it is now: other work on it
slows the probe as it would slow the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from harness.config import RunConfig
from harness.training.train import build_model, train, training_task

DEFAULT_STEPS = 5
DEFAULT_WARMUP = 2


def probe_speed(cfg: RunConfig, steps: int = DEFAULT_STEPS, warmup: int = DEFAULT_WARMUP, device: str = "cpu") -> float:
    """Training steps per second of ``cfg`` here, timed over ``steps`` steps after ``warmup``."""
    if steps < 1 or warmup < 0:
        raise ValueError(f"a probe needs steps >= 1 and warmup >= 0, got steps={steps}, warmup={warmup}")
    short = replace(cfg, train=replace(cfg.train, steps=warmup + steps, warmup=0))
    if not cfg.is_lm:  # a language-modelling run never evaluates while it trains
        short = replace(short, eval=replace(cfg.decode_eval, every=0))
    stamps: list[float] = []
    threads = torch.get_num_threads()
    if torch.device(device).type == "cpu":
        torch.set_num_threads(1)
    try:
        model = build_model(short, device)
        t0 = time.perf_counter()
        train(
            short,
            model,
            training_task(short),
            device,
            on_step=lambda step, loss: stamps.append(time.perf_counter()),
        )
    finally:
        torch.set_num_threads(threads)
    start = stamps[warmup - 1] if warmup else t0
    return steps / (stamps[-1] - start)


def probe_speeds(
    configs: Sequence[RunConfig],
    key: Callable[[RunConfig], object],
    steps: int = DEFAULT_STEPS,
    warmup: int = DEFAULT_WARMUP,
    device: str = "cpu",
    on_probe: Callable[[int, RunConfig, float | Exception], None] | None = None,
) -> dict[object, tuple[float, int]]:
    """``key(cfg) -> (steps/s, steps timed)`` for each config (one per speed group), in
    order; ``on_probe(i, cfg, steps_per_second)`` after each. A probe that fails (a run
    that diverges in its first steps, memory) is left out, its estimate falling back to
    borrowed speeds, and ``on_probe`` gets the exception instead of a rate."""
    out: dict[object, tuple[float, int]] = {}
    for i, cfg in enumerate(configs, start=1):
        rate: float | Exception
        try:
            speed = probe_speed(cfg, steps, warmup, device)
        except (RuntimeError, ValueError, MemoryError) as exc:  # DivergedError is a RuntimeError
            rate = exc
        else:
            rate = speed
            out[key(cfg)] = (speed, steps)
        if on_probe is not None:
            on_probe(i, cfg, rate)
    return out
