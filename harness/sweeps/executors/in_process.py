"""The in-process executor: each job trains in this process, one at a time (the default
with one worker). The process keeps its torch thread count, so on CPU its numbers may
differ from a pool's in the last digits (each is reproducible by itself).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import replace

import torch

from harness.execution.run import Progress
from harness.sweeps.executors.interface import Executor
from harness.sweeps.executors.jobs import Completion, Job
from harness.sweeps.executors.worker import run_job


class InProcess(Executor):
    """Runs each job in this process, one at a time (the default with one worker).

    ``progress_for(job)`` gives the per-run progress callback, ``notice(job, msg)`` shows
    notices as they happen. The process keeps its torch thread count.
    """

    name = "in-process"
    capacity = 1
    live_notices = True

    def __init__(
        self,
        device: torch.device,
        progress_for: Callable[[Job], Progress | None] = lambda job: None,
        notice: Callable[[Job, str], None] = lambda job, msg: None,
    ) -> None:
        self.device = device
        self.device_type = device.type
        self._progress_for, self._notice = progress_for, notice
        self.live_notices = notice is not None
        self._queue: deque[Job] = deque()

    def submit(self, job: Job) -> None:
        self._queue.append(replace(job, device=str(self.device)))

    def wait(self) -> list[Completion]:
        job = self._queue.popleft()
        return [(job, run_job(job, self._progress_for(job), lambda msg: self._notice(job, msg)))]

    def close(self, *, cancel: bool = False) -> None:
        self._queue.clear()
