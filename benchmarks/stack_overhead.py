"""What a stacked pass saves the host: the same K tiny runs trained one at a time, side by side
in threads, and stacked (``harness.training.stacked``), in milliseconds per run-step.

    python benchmarks/stack_overhead.py [--device cuda] [--runs 8] [--steps 150] [--pe nope]

The model is made tiny (d_model 16, one layer, batch 4) so that a step is nearly all host
work: Python, the autograd engine, kernel launches; what is left per run-step in a stack is
what sixteen runs on one GPU would share one GIL for. The stacked pass's own share (the last
member to arrive runs it for all, under the stack's lock) is timed apart from the rest (each
run's clipping, optimiser step, read-back and batch). On CUDA the runs take the loop's
default device features (``Accel.for_device``) but batches made inline (a producer process
per run would cost a lone run seconds of start-up), the stacked ones ``stack`` besides; its
stacked passes are recorded as CUDA graphs after ``CAPTURE_AFTER`` uses, so ``--steps``
should be well above that.
"""

from __future__ import annotations

import argparse
import dataclasses
import threading
import time
from typing import Any

import torch

import harness.training.stacked as stacked
from harness.config import preset_config
from harness.training.accel import Accel
from harness.training.train import build_model, train, training_task


def _configs(runs: int, steps: int, pe: str) -> list[Any]:
    overrides = {"backbone": {"d_model": 16, "n_layers": 1, "n_heads": 2}, "train": {"steps": steps, "batch_size": 4}}
    return [preset_config("smoke", pe=pe, task="copy", seed=seed, overrides=overrides) for seed in range(runs)]


def _in_threads(configs: list[Any], device: str, accel: Accel, stacks: stacked.Stacks | None) -> float:
    errors: list[BaseException] = []

    def one(cfg: Any) -> None:
        try:
            with stacked.installed(stacks):
                train(cfg, build_model(cfg, device), training_task(cfg), device, accel=accel)
        except BaseException as exc:  # reported below, not lost in a thread
            errors.append(exc)

    start = time.perf_counter()
    threads = [threading.Thread(target=one, args=(cfg,)) for cfg in configs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - start


def measure(device: str = "cpu", runs: int = 8, steps: int = 150, pe: str = "nope") -> dict[str, Any]:
    """Milliseconds per run-step three ways, and the stacked pass's share."""
    torch.set_num_threads(1)
    configs = _configs(runs, steps, pe)
    # batches made inline: a producer process per run (``spawn``) would cost each lone run its
    # start-up, seconds against a tiny run's milliseconds (batch 4 is a few microseconds to make)
    accel = dataclasses.replace(Accel.for_device(device), prefetch=0, spawn=False)
    total = runs * steps
    start = time.perf_counter()
    for cfg in configs:
        train(cfg, build_model(cfg, device), training_task(cfg), device, accel=accel)
    alone = time.perf_counter() - start
    threads = _in_threads(configs, device, accel, None)
    passes = [0.0]
    original = stacked.Stack._run

    def timed(self: stacked.Stack) -> None:  # under the stack's lock: one at a time, so the sum is wall time
        t0 = time.perf_counter()
        original(self)
        passes[0] += time.perf_counter() - t0

    stacks = stacked.Stacks()
    stacked.Stack._run = timed  # type: ignore[method-assign]
    try:
        together = _in_threads(configs, device, dataclasses.replace(accel, stack=True), stacks)
    finally:
        stacked.Stack._run = original  # type: ignore[method-assign]
    (stack,) = stacks.all()
    ms = {
        "alone": 1000 * alone / total,
        "threads": 1000 * threads / total,
        "stacked": 1000 * together / total,
        "stacked_pass": 1000 * passes[0] / total,
    }
    return {
        "device": device,
        "runs": runs,
        "steps": steps,
        "pe": pe,
        "ms_per_run_step": {k: round(v, 3) for k, v in ms.items()},
        "passes": stack.passes,
        "member_steps": stack.member_steps,
        "backend": stack.backend,
        "dissolved": stack.dissolved,
    }


def render(result: dict[str, Any]) -> str:
    ms = result["ms_per_run_step"]
    return "\n".join(
        [
            f"{result['runs']} tiny {result['pe']} runs x {result['steps']} steps on {result['device']} "
            "(d_model 16, 1 layer, batch 4): ms per run-step",
            "",
            "| one at a time | side by side (threads) | stacked | of which the stacked pass |",
            "|---:|---:|---:|---:|",
            f"| {ms['alone']:.3f} | {ms['threads']:.3f} | {ms['stacked']:.3f} | {ms['stacked_pass']:.3f} |",
            "",
            f"stack: {result['passes']} passes for {result['member_steps']} run-steps, {result['backend']} attention"
            + (f", dissolved: {result['dissolved']}" if result["dissolved"] else ""),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--pe", default="nope")
    args = parser.parse_args(argv)
    print(render(measure(args.device, args.runs, args.steps, args.pe)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
