"""Recorded speeds: how fast a preset's runs went on a kind of device, measured once and
written down here, for the estimates of ``pezoo bench`` and ``pezoo sweep plan`` when the
store has no finished run of the same encoding, task and model on that kind of device (a
cold store, or a new row), and ``pezoo sweep plan`` nothing closer to borrow from.

Such an estimate is rough by nature: another machine, another load, and one median over
encodings (PRISM trains about 1.7x slower than NoPE at the quick size). It is labelled
rough wherever it is shown. A preset, device kind or model that is not here has no
recorded speed, and the estimate is *unknown*: a number taken from another preset's
model can be off by orders of magnitude (a store of smoke runs once put the quick board
at 61 s per run; it took 8-12 hours). The GPU rows come from benchmarks/device_check.py: the
board and quick presets' from one H100's default group of 16 runs (a run's speed with 15 others
beside it, as a GPU sweep trains them), the gpu preset's from one H200 run alone. Add a row
(with where it was measured) once measured.

Speeds are training steps per second (``train.steps / train_seconds``) and evaluation
seconds per unit (``eval_seconds / harness.sweeps.estimate.eval_units``: examples × evaluated
scales), as ``harness.sweeps.estimate.measurements`` reads them off finished runs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RecordedSpeed:
    """One measured speed.

    Attributes:
        preset: the preset, run with its own model (backbone, batch size, training
            lengths); other steps, evaluation samples or test lengths are fine, as
            speeds are per step and per evaluation unit.
        device_type: ``cpu`` or ``cuda``.
        task: the task, or None for the preset's median over the tasks measured.
        steps_per_second: training steps per second.
        eval_seconds_per_unit: evaluation seconds per (example × evaluated scale).
        source: where and how it was measured.
    """

    preset: str
    device_type: str
    task: str | None
    steps_per_second: float
    eval_seconds_per_unit: float
    source: str


_QUICK_CPU = (
    "the committed quick board (leaderboard/results: 110 runs, 11 encodings x 5 tasks x 2 seeds, "
    "November 2026), one torch thread per run on a 2-core x86_64 VM, torch 2.13.0+cpu; median over encodings"
)
_BOARD_CPU = (
    "the committed board's runs of leaderboard/board.toml (240 trained, 17 encodings x 4 tasks, 3-8 seeds, "
    "23-26 November 2026), one torch thread per run on 2-core x86_64 VMs (AMD EPYC and Intel Xeon, AVX512), "
    "torch 2.13.0+cpu; median over runs"
)
_SMOKE_CPU = (
    "nope and rope, 100 steps per task, one torch thread on a 2-core x86_64 VM shared with other work, "
    "torch 2.13.0+cpu (commit a35be72)"
)

_BOARD_CUDA = (
    "one NVIDIA H100 80GB HBM3, torch 2.11.0+cu130, the default group (16 board-preset runs of 500 steps in one "
    "process, a thread each: nope, rope, alibi, ape x copy, reverse x 2 seeds; the loop's GPU features on), per run "
    "with 16 at once; benchmarks/results/cuda-gpu-nvidia-h100-80gb-hbm3-2.md"
)
_GPU_CUDA = (
    "one NVIDIA H200, torch 2.11.0+cu130, one gpu-preset NoPE run alone (2000 steps, bf16, the loop's GPU "
    "features on); "
    "benchmarks/results/cuda-gpu-nvidia-h200.md"
)

RECORDED_SPEEDS: tuple[RecordedSpeed, ...] = (
    RecordedSpeed("board", "cuda", None, 19.3, 0.128e-3, _BOARD_CUDA),
    RecordedSpeed("quick", "cuda", None, 19.3, 0.128e-3, _BOARD_CUDA + " (the quick model is the board's)"),
    RecordedSpeed("gpu", "cuda", None, 123.7, 0.121e-3, _GPU_CUDA),
    RecordedSpeed("board", "cpu", "copy", 6.34, 4.252e-3, _BOARD_CPU),
    RecordedSpeed("board", "cpu", "odds_first", 10.28, 2.945e-3, _BOARD_CPU),
    RecordedSpeed("board", "cpu", "reverse", 7.08, 3.691e-3, _BOARD_CPU),
    RecordedSpeed("board", "cpu", "stack_manipulation", 13.95, 2.471e-3, _BOARD_CPU),
    RecordedSpeed("board", "cpu", None, 8.23, 3.285e-3, _BOARD_CPU),
    RecordedSpeed("quick", "cpu", "addition", 2.40, 41.3e-3, _QUICK_CPU),
    RecordedSpeed("quick", "cpu", "copy", 6.13, 3.95e-3, _QUICK_CPU),
    RecordedSpeed("quick", "cpu", "odds_first", 10.23, 2.62e-3, _QUICK_CPU),
    RecordedSpeed("quick", "cpu", "reverse", 6.58, 4.31e-3, _QUICK_CPU),
    RecordedSpeed("quick", "cpu", "stack_manipulation", 10.12, 2.77e-3, _QUICK_CPU),
    RecordedSpeed("quick", "cpu", None, 7.14, 3.61e-3, _QUICK_CPU),
    RecordedSpeed("smoke", "cpu", "addition", 126.0, 8.3e-3, _SMOKE_CPU),
    RecordedSpeed("smoke", "cpu", "copy", 314.0, 0.31e-3, _SMOKE_CPU),
    RecordedSpeed("smoke", "cpu", "odds_first", 350.0, 0.29e-3, _SMOKE_CPU),
    RecordedSpeed("smoke", "cpu", "reverse", 300.0, 0.30e-3, _SMOKE_CPU),
    RecordedSpeed("smoke", "cpu", "stack_manipulation", 320.0, 0.53e-3, _SMOKE_CPU),
    RecordedSpeed("smoke", "cpu", None, 315.0, 0.33e-3, _SMOKE_CPU),
)
"""Measured speeds per (preset, device kind, task); ``task=None``: any other task."""


def recorded_speed(preset: str, device_type: str | None, task: str) -> RecordedSpeed | None:
    """The recorded speed of ``preset`` on ``device_type`` for ``task`` (else the preset's
    median on that device kind), or None when nothing is recorded for them."""
    rows = [r for r in RECORDED_SPEEDS if r.preset == preset and r.device_type == device_type]
    return next((r for r in rows if r.task == task), None) or next((r for r in rows if r.task is None), None)
