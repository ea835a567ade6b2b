"""The grouped executor: a group of runs trained side by side in this process, one thread per
run, each run on a CUDA stream of its own.

Why threads in one process: a small run's kernels (a d-128 model on a batch of short
sequences) occupy a sliver of a GPU, and its step is one graph replay plus a little host
work. Worker processes only time-share a GPU (eight packed processes on an H200 trained
what one trains: 230 steps/s, the GPU busy 47.5 % of the time); kernels of one process on
different streams can run at once, so a group's steps overlap on the GPU while each
thread's host work waits on the others' only for the GIL.

What a run computes does not depend on its group: each trains exactly the code a run alone
trains (``harness.sweeps.executors.worker.run_job``), on its own stream, drawing from its
own generator (``harness.training.train``: the initialisation from torch's global RNG under
``harness.config.global_rng.GLOBAL_RNG``, every later draw from the run's generator), its
batches from its own seeded stream. So on CPU a run trained in a group gives the record it
gives alone, bit for bit (tests/harness/test_grouped.py); on a GPU the kernels are the
same ones, and benchmarks/device_check.py compares the two there.

With the ``stack`` loop feature (``PEZOO_ACCEL``), runs of one model shape go further: their
forward and backward passes are taken together, as one pass over their stacked weights
(``harness.training.stacked``), so one pass's kernels carry several runs' work; each run
keeps its own thread, data, optimiser and records, and computes what it computes alone up
to float rounding (tests/harness/test_stacked.py).

CUDA graphs are captured one at a time (``harness.training.graphs.capture``), in
``thread_local`` error mode, so another run's step during a capture neither fails nor
spoils it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace

import torch

import harness.training.stacked as stacked
from harness.config import RunConfig
from harness.execution.run import Progress
from harness.records.result import RunResult
from harness.sweeps.executors.interface import Executor, ExecutorError, first_line
from harness.sweeps.executors.jobs import Completion, Job, NoticeReport, ProgressReport, WorkerLost
from harness.sweeps.executors.local_pool import throttled_progress
from harness.sweeps.executors.worker import run_job
from harness.training.accel import Accel

_Event = tuple[Job, ProgressReport | NoticeReport | RunResult | WorkerLost]

CANCEL_SECONDS = 60.0
"""How long a cancelled group waits for its runs to reach their next step and end."""


class GroupCancelled(RuntimeError):
    """Raised in a run's thread at its next step once its group is cancelled."""


class Grouped(Executor):
    """Runs up to ``len(devices)`` jobs at once in this process, one thread per slot
    (``["cuda:0"] * 12``: twelve runs side by side on one GPU; ``["cpu"] * 2`` on a CPU,
    where it computes what a pool would but gains nothing: the CPU default stays the pool).

    Progress and notices reach ``progress_for(job)`` and ``notice(job, msg)`` on the
    driver's thread, within :meth:`wait`, as they come (throttled like a pool worker's).
    A thread is not a process: a run that hangs or crashes the interpreter takes the group
    with it, so runs of code not from pezoo (``isolate``) and ``--hang-timeout`` keep the
    process pool (``harness.sweeps.executors.sizing.local_executor``).
    """

    name = "grouped"

    def __init__(
        self,
        devices: Sequence[str],
        progress_for: Callable[[Job], Progress | None] = lambda job: None,
        notice: Callable[[Job, str], None] | None = None,
    ) -> None:
        if not devices:
            raise ExecutorError("a group needs at least one slot")
        kinds = {torch.device(d).type for d in devices}
        if len(kinds) != 1:
            raise ExecutorError(f"a group's slots are on one kind of device, got {', '.join(sorted(kinds))}")
        self._devices = list(devices)
        self.capacity = len(self._devices)
        self.device_type = kinds.pop()
        self._progress_for, self._notice = progress_for, notice
        self.live_notices = notice is not None
        self._free = list(range(self.capacity))
        self._jobs: list[queue.Queue[Job | None]] = [queue.Queue() for _ in self._devices]  # one per slot
        self._events: queue.Queue[tuple[int, _Event]] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._in_flight: dict[int, Job] = {}
        self._cancelled = threading.Event()
        self._stacks = stacked.Stacks()
        """The group's stacks (``harness.training.stacked``): runs with the ``stack`` loop feature
        (``PEZOO_ACCEL``) and one model shape take their forward and backward passes together."""
        self.stacks_runs = Accel.for_device(self.device_type).stack
        """Whether runs stack (the ``stack`` loop feature): the driver then queues runs of one
        shape next to each other (:func:`stack_order`), so they are in flight together."""

    def _start(self) -> None:
        for slot, device in enumerate(self._devices):
            thread = threading.Thread(target=self._serve, args=(slot, device), name=f"pezoo-group-{slot}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, slot: int, device: str) -> None:
        """One slot's thread: train each job it is handed, on the slot's own CUDA stream."""
        stream: AbstractContextManager[object] = nullcontext()
        if torch.device(device).type == "cuda":
            stream = torch.cuda.stream(torch.cuda.Stream(torch.device(device)))
        with stream, stacked.installed(self._stacks):  # runs of one shape may share their passes
            while True:
                job = self._jobs[slot].get()  # its own slot's: the device and the bookkeeping are the slot's
                if job is None:
                    return
                answer: RunResult | WorkerLost
                try:
                    answer = run_job(job, *self._reporters(slot, job))
                except BaseException as exc:  # run_job answers for the run's own failures; this is the thread's
                    answer = WorkerLost(job.run_id, f"the group's thread for it failed: {first_line(exc)}")
                self._events.put((slot, (job, answer)))

    def _reporters(self, slot: int, job: Job) -> tuple[Progress, Callable[[str], None]]:
        """The job's progress (throttled) and notices, queued for the driver's thread. Once
        the group is cancelled, the next progress (every step, every evaluated length) ends
        the run: a thread cannot be killed, and one still in torch when the interpreter
        exits aborts it."""
        throttled = throttled_progress(lambda message: self._events.put((slot, (job, message))))

        def progress(phase: str, done: int, total: int, note: str) -> None:
            if self._cancelled.is_set():
                raise GroupCancelled(f"the sweep was stopped during run {job.run_id}")
            throttled(phase, done, total, note)

        def tell(message: str) -> None:
            self._events.put((slot, (job, NoticeReport(message))))

        return progress, tell

    def submit(self, job: Job) -> None:
        if not self._threads:
            self._start()
        slot = self._free.pop(0)
        placed = replace(job, device=self._devices[slot])
        self._in_flight[slot] = placed
        self._jobs[slot].put(placed)

    def wait(self) -> list[Completion]:
        if not self._in_flight:
            raise ExecutorError("wait() with no job in flight")
        done: list[Completion] = []
        block = True
        while True:
            try:  # waits in short slices, so a Ctrl-C reaches the driver at once
                slot, (job, event) = self._events.get(timeout=0.5) if block else self._events.get(block=False)
            except queue.Empty:
                if block:
                    continue
                return done
            if isinstance(event, ProgressReport):
                progress = self._progress_for(job)
                if progress is not None:
                    progress(event.phase, event.done, event.total, event.note)
            elif isinstance(event, NoticeReport):
                if self._notice is not None:
                    self._notice(job, event.message)
            else:
                del self._in_flight[slot]
                self._free.append(slot)
                done.append((job, event))
                block = False  # hand back every run already over, without waiting for more

    def close(self, *, cancel: bool = False) -> None:
        """Stop the threads once their runs end; with ``cancel`` (the driver interrupted), the
        runs in flight end at their next step, their checkpoints kept, as an interrupted
        run's are (the driver records them interrupted)."""
        if cancel:
            self._cancelled.set()
        for jobs in self._jobs:
            jobs.put(None)
        for thread in self._threads:
            thread.join(timeout=CANCEL_SECONDS if cancel else None)
        self._threads = []


def stack_order(cfg: RunConfig) -> tuple[str, ...]:
    """A run's place in a stacking group's queue: runs of one encoding, model and precision
    (what a stack needs in common, ``harness.training.stacked.stack_key``) side by side,
    whatever their task and seed, so they are in flight at once; those of one training length
    next to each other (they end together, and the next shape's runs start together)."""
    return (repr(cfg.backbone), cfg.pe, repr(sorted(cfg.pe_options.items())), cfg.train.precision, str(cfg.train.steps))
