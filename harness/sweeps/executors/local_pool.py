"""The local pool: one worker process per device slot on this machine, each training
one job at a time with one torch thread (so on CPU the same seeds give bit-identical
metrics on the pool and on Ray), sending its progress and notices to the driver over its
pipe, replaced when it dies and killed when it hangs.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from harness.execution.run import Progress
from harness.records.result import RunResult
from harness.sweeps.executors.interface import Executor, ExecutorError
from harness.sweeps.executors.jobs import Completion, Job, NoticeReport, ProgressReport, Started, WorkerLost
from harness.sweeps.executors.worker import run_job

PROGRESS_INTERVAL = 0.5
"""Least seconds between a pool worker's progress messages (a phase's first and last always go)."""


def throttled_progress(
    send: Callable[[ProgressReport], None],
    interval: float = PROGRESS_INTERVAL,
    clock: Callable[[], float] = time.monotonic,
) -> Progress:
    """A ``Progress`` that sends a ``ProgressReport`` at most every ``interval`` seconds,
    and always the first and last of each phase (a training step is milliseconds: one
    message per step would flood the pipe)."""
    last: dict[str, Any] = {"phase": None, "at": 0.0}

    def progress(phase: str, done: int, total: int, note: str) -> None:
        now = clock()
        if phase != last["phase"] or done >= total or now - last["at"] >= interval:
            last["phase"], last["at"] = phase, now
            send(ProgressReport(phase, done, total, note))

    return progress


def _exit_with_parent(parent_pid: int) -> None:
    """Worker watchdog: a driver that was killed (SIGKILL) leaves no orphans training."""
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    os._exit(1)


def _pool_worker(conn: multiprocessing.connection.Connection, parent_pid: int) -> None:
    """A pool worker: one torch thread; answer each job with its RunResult until told to
    stop, sending its progress (``ProgressReport``, throttled) and notices (``NoticeReport``)
    on the way."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    torch.set_num_threads(1)
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), daemon=True).start()
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        conn.send(Started())
        conn.send(run_job(job, throttled_progress(conn.send), lambda msg: conn.send(NoticeReport(msg))))


@dataclass
class _Slot:
    device: str
    process: Any = None  # multiprocessing.Process
    conn: multiprocessing.connection.Connection | None = None
    job: Job | None = None
    heard: float | None = None  # when its worker last sent anything about its job (time.monotonic)

    def pipe(self) -> multiprocessing.connection.Connection:
        """The driver's end of the pipe to the slot's worker, which must have been started."""
        if self.conn is None:
            raise RuntimeError(f"no worker process on {self.device}")
        return self.conn

    def running(self) -> Job:
        """The job the slot's worker holds, which there must be."""
        if self.job is None:
            raise RuntimeError(f"the worker on {self.device} holds no job")
        return self.job


def _set_sigint(handler: Any) -> Any:
    """Set the SIGINT handler and return the previous one (no-op off the main thread)."""
    if handler is None or threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, handler)


def _death(process: Any) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        return f"worker process {process.pid} was killed by {signal.Signals(-code).name}"
    return f"worker process {process.pid} exited with status {code}"


class LocalPool(Executor):
    """A pool of worker processes on this machine, one per entry of ``devices``
    (``["cuda:0", "cuda:1"]`` for two GPUs, ``["cpu"] * n`` for n CPU workers).

    Workers are started (``spawn``) when first needed and replaced when they die; each
    holds one job at a time, so a death is charged to exactly the run it was training.
    Their progress and notices reach ``progress_for(job)`` and ``notice(job, msg)`` in
    the driver (within ``wait``) as they come; without ``notice`` the driver shows them
    from the ``RunResult`` instead (``live_notices`` is False).

    ``hang_seconds``: a worker that has taken its job and then sends nothing (no progress,
    notice or result) for this long is taken to hang (a plugin stuck in a loop, a
    deadlock) and killed: its attempt ends as a ``WorkerLost`` saying so. None: wait for
    ever. Progress comes at least once per training step and per evaluated length, so the
    limit must exceed the longest of those (and a first ``torch.compile``).
    """

    name = "local"

    def __init__(
        self,
        devices: Sequence[str],
        progress_for: Callable[[Job], Progress | None] = lambda job: None,
        notice: Callable[[Job, str], None] | None = None,
        *,
        hang_seconds: float | None = None,
    ) -> None:
        if not devices:
            raise ExecutorError("a local pool needs at least one worker")
        self._ctx = multiprocessing.get_context("spawn")
        self._slots = [_Slot(d) for d in devices]
        self.capacity = len(self._slots)
        self.device_type = torch.device(devices[0]).type
        self._progress_for, self._notice = progress_for, notice
        self.live_notices = notice is not None
        self.hang_seconds = hang_seconds

    def _start(self, slot: _Slot) -> None:
        parent, child = self._ctx.Pipe()
        # Not daemonic: a daemonic process may not start children, and torch.compile (the
        # flex backend) may start compile workers. close() and the worker's watchdog
        # (_exit_with_parent) make sure no worker outlives its driver.
        slot.process = self._ctx.Process(target=_pool_worker, args=(child, os.getpid()), daemon=False)
        # Started with SIGINT ignored (inherited through exec), so a Ctrl-C meant for the
        # driver does not interrupt a worker that is still importing torch.
        previous = _set_sigint(signal.SIG_IGN)
        try:
            slot.process.start()
        except BaseException:  # no worker (no memory to spawn one, say): leave the slot empty
            slot.process = None
            parent.close()
            child.close()
            raise
        finally:
            _set_sigint(previous)
        child.close()  # the worker's end: once it dies, reading ours gives EOF
        slot.conn = parent

    def submit(self, job: Job) -> None:
        slot = next(s for s in self._slots if s.job is None)
        if slot.process is None or not slot.process.is_alive():
            self._start(slot)
        slot.job = placed = replace(job, device=slot.device)
        slot.heard = None
        slot.pipe().send(placed)

    def _timeout(self, busy: list[_Slot]) -> float | None:
        """Seconds until the first busy worker that has started its job would count as hung."""
        heard = [s.heard for s in busy if s.heard is not None]
        if self.hang_seconds is None or not heard:
            return None if self.hang_seconds is None else 1.0  # look again once a worker has started
        return max(0.0, min(heard) + self.hang_seconds - time.monotonic())

    def wait(self) -> list[Completion]:
        while True:
            busy = [s for s in self._slots if s.job is not None]
            multiprocessing.connection.wait(
                [s.conn for s in busy] + [s.process.sentinel for s in busy], timeout=self._timeout(busy)
            )
            done: list[Completion] = []
            for slot in busy:
                job = slot.running()
                answer: RunResult | WorkerLost | None = self._read(slot)
                if answer is None and not slot.process.is_alive():
                    answer = self._read(slot)  # what it sent just before it ended
                    if answer is None:
                        slot.process.join()
                        answer = WorkerLost(job.run_id, _death(slot.process))
                        slot.pipe().close()
                        slot.process = slot.conn = None
                elif answer is None and self._hung(slot):
                    pid = slot.process.pid
                    slot.process.kill()
                    slot.process.join()
                    answer = WorkerLost(
                        job.run_id,
                        f"worker process {pid} sent nothing for {self.hang_seconds:g} s (--hang-timeout): it hung, "
                        "and was killed",
                    )
                    slot.pipe().close()
                    slot.process = slot.conn = None
                if answer is not None:
                    done.append((job, answer))
                    slot.job = None
            if done:
                return done

    def _hung(self, slot: _Slot) -> bool:
        """Whether the slot's worker started its job and has been silent past ``hang_seconds``."""
        if self.hang_seconds is None or slot.heard is None:
            return False
        return time.monotonic() - slot.heard >= self.hang_seconds

    def _read(self, slot: _Slot) -> RunResult | None:
        """Read what the slot's worker has sent: hand progress and notices on, return its
        ``RunResult`` once it comes (None until then, or when the pipe is closed)."""
        progress = None
        conn, job = slot.pipe(), slot.running()
        try:
            while conn.poll():
                message = conn.recv()
                slot.heard = time.monotonic()
                if isinstance(message, Started):
                    continue
                if isinstance(message, ProgressReport):
                    progress = progress or self._progress_for(job) or (lambda *a: None)
                    progress(message.phase, message.done, message.total, message.note)
                elif isinstance(message, NoticeReport):
                    if self._notice is not None:
                        self._notice(job, message.message)
                else:
                    return message
        except (EOFError, OSError):
            pass
        return None

    def close(self, *, cancel: bool = False) -> None:
        for slot in self._slots:
            if slot.process is None:
                continue
            if cancel or slot.job is not None:
                slot.process.terminate()
            else:
                try:
                    slot.pipe().send(None)
                except OSError:
                    slot.process.terminate()
            slot.process.join(timeout=10)
            if slot.process.is_alive():
                slot.process.kill()
                slot.process.join()
            slot.pipe().close()
            slot.process = slot.conn = None
            slot.job = None
