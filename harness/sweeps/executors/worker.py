"""What every worker runs for a job, wherever it runs: train and evaluate the attempt
(``harness.execution.run.train_and_evaluate``), with the fault injected for it in tests and drills
(``FAULT_ENV``).
"""

from __future__ import annotations

import os
import platform
import signal
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from harness.config import RunConfig
from harness.execution.run import Progress, train_and_evaluate
from harness.records.result import RunResult
from harness.sweeps.executors.interface import ExecutorError
from harness.sweeps.executors.jobs import Job

FAULT_ENV = "PEZOO_INJECT_FAULT"
"""Fault injection for tests and drills: ``kill:<run_id>`` makes the first attempt of
that run SIGKILL its own process as soon as its first checkpoint exists (so the retry
resumes from it); ``raise:<run_id>`` makes every attempt raise at its first training
step. Several, comma-separated. Read by the driver and shipped with each job, so it
reaches workers on any machine."""


def run_job(job: Job, progress: Progress | None = None, notice: Callable[[str], None] = lambda _msg: None) -> RunResult:
    """Train and evaluate one attempt of a run, wherever this is called (worker entry point)."""
    cfg = RunConfig.from_dict(job.config)
    report = _with_fault(job, progress)
    result = train_and_evaluate(
        cfg,
        torch.device(job.device),
        Path(job.checkpoint),
        report,
        checkpoint_every=job.checkpoint_every,
        notice=notice,
        tensorboard=job.tensorboard,
        keep_weights=job.keep_weights,
        kept_weights=job.kept_weights,
    )
    return replace(result, provenance={**result.provenance, "host": platform.node()})


def _with_fault(job: Job, progress: Progress | None) -> Progress | None:
    """Wrap ``progress`` with the job's injected fault (see ``FAULT_ENV``)."""
    if job.fault is None or (job.fault == "kill" and job.attempt > 1):
        return progress
    checkpoint = Path(job.checkpoint)

    def report(phase: str, done: int, total: int, note: str) -> None:
        if job.fault == "raise":
            raise RuntimeError(f"injected fault ({FAULT_ENV}) in run {job.run_id}, attempt {job.attempt}")
        if job.fault == "kill" and checkpoint.exists():
            os.kill(os.getpid(), signal.SIGKILL)
        if progress is not None:
            progress(phase, done, total, note)

    return report


def injected_faults(value: str | None = None) -> dict[str, str]:
    """``{run_id: "kill" | "raise"}`` from ``FAULT_ENV`` (or ``value``)."""
    spec = os.environ.get(FAULT_ENV, "") if value is None else value
    faults = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        kind, _, run_id = item.partition(":")
        if kind not in ("kill", "raise") or not run_id:
            raise ExecutorError(f"{FAULT_ENV}: {item!r} is not kill:<run_id> or raise:<run_id>")
        faults[run_id] = kind
    return faults
