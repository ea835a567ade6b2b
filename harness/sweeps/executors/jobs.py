"""A job: one attempt at one run as plain data that travels to any worker, and what
comes back from it besides its ``RunResult``: ``WorkerLost`` when the process or node
running it died, and a pool worker's reports on the way (``Started``, progress, notices).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.records.result import RunResult


@dataclass(frozen=True)
class Job:
    """One attempt at one run, as plain data that travels to any worker.

    Attributes:
        index: the run's position in the sweep (1-based), for labels.
        config: ``RunConfig.to_dict()``.
        run_id: ``RunConfig.run_id()``.
        checkpoint: the run's checkpoint file (an absolute path on the workers).
        checkpoint_every: checkpoint period in steps.
        attempt: 1 for the first attempt, then 2, 3, ...
        device: the torch device the attempt runs on (set by the executor per slot).
        fault: the injected fault for this run (``FAULT_ENV``), if any.
        tensorboard: folder to log the run to for TensorBoard (an absolute path), if any.
        keep_weights: keep the trained model's final weights for the run's inference-time
            variants (``harness.execution.kept_weights.weights_path``).
        kept_weights: ``{run id: SHA-256}`` of the kept weights the store's records vouch
            for that the run may evaluate instead of training (``harness.execution.kept_weights.trusted_weights``),
            set by the driver as the job starts.
    """

    index: int
    config: Mapping[str, Any]
    run_id: str
    checkpoint: str
    checkpoint_every: int = 250
    attempt: int = 1
    device: str = "cpu"
    fault: str | None = None
    tensorboard: str | None = None
    keep_weights: bool = False
    kept_weights: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkerLost:
    """The process (or node) running an attempt died before it could answer."""

    run_id: str
    reason: str


Completion = tuple[Job, RunResult | WorkerLost]


@dataclass(frozen=True)
class ProgressReport:
    """A pool worker's progress on its job, sent to the driver before its ``RunResult``
    (the arguments of ``harness.execution.run.Progress``)."""

    phase: str
    done: int
    total: int
    note: str


@dataclass(frozen=True)
class NoticeReport:
    """A pool worker's notice (resume, corrupt checkpoint), sent as it happens."""

    message: str


@dataclass(frozen=True)
class Started:
    """A pool worker took its job (sent first): from then on, silence counts as a hang
    (``LocalPool(hang_seconds=...)``); before it, the worker may still be starting up."""
