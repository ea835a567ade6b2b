"""Where the runs of a sweep train: in this process, in a pool of local worker
processes, or as Ray tasks on a cluster. Whatever the executor, workers only train and
evaluate (``harness.run.train_and_evaluate``) and ship a ``RunResult`` back; the driver
(:func:`run_sweep`) alone writes the results store.

The ``Executor`` interface is three calls: ``submit(job)`` hands one run to a free slot
(at most ``capacity`` in flight), ``wait()`` blocks until at least one submitted run is
over and returns what happened to it — a ``RunResult``, or a ``WorkerLost`` when the
process or node running it died — and ``close()``.

Determinism: pool workers and Ray tasks train with one torch thread
(``torch.set_num_threads(1)``), so on CPU the same seeds give bit-identical metrics on
either executor. The in-process executor keeps the process's thread count; CPU matmul
results depend on it in the last bits, so its numbers may differ from the pool's in the
last digits (each is reproducible by itself).

Retries: an attempt whose worker died or which raised is run again, up to ``retries``
more times, resuming from the run's checkpoint when the worker can read the checkpoint
directory (always locally; on a cluster when the directory is shared). A run that fails
every attempt is stored as ``failed`` with its traceback (or the worker's fate), and
the other runs go on. A NaN loss (``diverged``) is deterministic and not retried, nor is a
variant whose trained run kept no usable weights (``RunResult.retryable``).
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import multiprocessing.connection
import os
import platform
import signal
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import torch

from harness.config import RunConfig
from harness.provenance import git_commit
from harness.run import (
    Progress,
    RunOutcome,
    RunResult,
    checkpoint_dir_for,
    checkpoint_path,
    record_or_keep,
    recover_kept,
    train_and_evaluate,
)
from harness.store import ClaimLostError, Store, StoreError

FAULT_ENV = "PEZOO_INJECT_FAULT"
"""Fault injection for tests and drills: ``kill:<run_id>`` makes the first attempt of
that run SIGKILL its own process as soon as its first checkpoint exists (so the retry
resumes from it); ``raise:<run_id>`` makes every attempt raise at its first training
step. Several, comma-separated. Read by the driver and shipped with each job, so it
reaches workers on any machine."""


class ExecutorError(RuntimeError):
    """An executor cannot be set up (Ray missing or unreachable, no GPU where one is asked)."""


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
            variants (``harness.run.weights_path``).
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


@dataclass(frozen=True)
class WorkerLost:
    """The process (or node) running an attempt died before it could answer."""

    run_id: str
    reason: str


Completion = tuple[Job, RunResult | WorkerLost]


@dataclass(frozen=True)
class ProgressReport:
    """A pool worker's progress on its job, sent to the driver before its ``RunResult``
    (the arguments of ``harness.run.Progress``)."""

    phase: str
    done: int
    total: int
    note: str


@dataclass(frozen=True)
class NoticeReport:
    """A pool worker's notice (resume, corrupt checkpoint), sent as it happens."""

    message: str


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


# --------------------------------------------------------------------------------------
# The interface and its three implementations
# --------------------------------------------------------------------------------------


class Executor(ABC):
    """Runs jobs somewhere and reports each one's end; see the module docstring.

    Attributes:
        name: ``in-process``, ``local`` (process pool) or ``ray``; stored with each run.
        capacity: how many jobs may be in flight at once.
        device_type: ``cuda`` when runs get a GPU, else ``cpu``.
        live_notices: True when notices reach the driver while the run goes on (then
            the driver does not repeat the ``RunResult.notices``).
    """

    name: str
    capacity: int
    device_type: str
    live_notices: bool = False

    @abstractmethod
    def submit(self, job: Job) -> None: ...

    @abstractmethod
    def wait(self) -> list[Completion]:
        """Block until at least one submitted job is over; return every one that is."""

    @abstractmethod
    def close(self, *, cancel: bool = False) -> None:
        """Release workers; ``cancel`` stops jobs still in flight (driver interrupted)."""


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
        conn.send(run_job(job, throttled_progress(conn.send), lambda msg: conn.send(NoticeReport(msg))))


@dataclass
class _Slot:
    device: str
    process: Any = None  # multiprocessing.Process
    conn: multiprocessing.connection.Connection | None = None
    job: Job | None = None

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
    """

    name = "local"

    def __init__(
        self,
        devices: Sequence[str],
        progress_for: Callable[[Job], Progress | None] = lambda job: None,
        notice: Callable[[Job, str], None] | None = None,
    ) -> None:
        if not devices:
            raise ExecutorError("a local pool needs at least one worker")
        self._ctx = multiprocessing.get_context("spawn")
        self._slots = [_Slot(d) for d in devices]
        self.capacity = len(self._slots)
        self.device_type = torch.device(devices[0]).type
        self._progress_for, self._notice = progress_for, notice
        self.live_notices = notice is not None

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
        slot.pipe().send(placed)

    def wait(self) -> list[Completion]:
        while True:
            busy = [s for s in self._slots if s.job is not None]
            multiprocessing.connection.wait([s.conn for s in busy] + [s.process.sentinel for s in busy])
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
                if answer is not None:
                    done.append((job, answer))
                    slot.job = None
            if done:
                return done

    def _read(self, slot: _Slot) -> RunResult | None:
        """Read what the slot's worker has sent: hand progress and notices on, return its
        ``RunResult`` once it comes (None until then, or when the pipe is closed)."""
        progress = None
        conn, job = slot.pipe(), slot.running()
        try:
            while conn.poll():
                message = conn.recv()
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


def _ray_run_job(job: Job) -> RunResult:
    """The Ray task: one torch thread (as in the local pool), then the same worker code."""
    torch.set_num_threads(1)
    return run_job(job)


class RayExecutor(Executor):
    """The same jobs as Ray tasks: ``num_cpus=1`` each, plus ``num_gpus=1`` when the
    cluster has GPUs and ``device`` allows them (``auto`` or ``cuda``).

    Connects to ``address`` (``auto``, ``host:port``, ``ray://host:10001``), else to the
    cluster in ``RAY_ADDRESS``, else starts a local instance with ``num_cpus`` CPUs
    (default: this machine's). An instance already initialised in this process (e.g. a
    test fixture) is used as it is and left running. ``capacity`` (jobs in flight) is
    ``workers`` or else the cluster's GPU (or CPU) count at connection time.
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        workers: int | None = None,
        device: str = "auto",
        num_cpus: int | None = None,
    ) -> None:
        try:
            import ray
        except ImportError:
            raise ExecutorError("the ray executor needs Ray: pip install 'pezoo[ray]'") from None
        if device not in ("auto", "cpu", "cuda"):
            raise ExecutorError(f"--device {device} with the ray executor: use auto, cpu or cuda (one GPU per run)")
        self._ray = ray
        self._owns_instance = False
        if not ray.is_initialized():
            try:
                if address or os.environ.get("RAY_ADDRESS"):
                    ray.init(address=address or None)
                else:
                    ray.init(num_cpus=num_cpus or default_cpu_workers(), include_dashboard=False)
                    self._owns_instance = True
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ExecutorError(
                    f"could not connect to Ray at {address or os.environ.get('RAY_ADDRESS')}: {exc}"
                ) from exc
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0)) if device != "cpu" else 0
        if device == "cuda" and not gpus:
            self.close()
            raise ExecutorError("--device cuda was asked for but the Ray cluster has no GPUs; use --device auto or cpu")
        self.device_type = "cuda" if gpus else "cpu"
        self.capacity = workers or max(1, gpus or int(resources.get("CPU", 1)))
        self._task = ray.remote(_ray_run_job)
        self._resources = {"num_cpus": 1, "num_gpus": 1 if gpus else 0, "max_retries": 0}
        self._pending: dict[Any, Job] = {}

    def submit(self, job: Job) -> None:
        job = replace(job, device=self.device_type)
        # Named after the run: Ray shows the name in ``ray list tasks``, on the dashboard and
        # as the worker's process title (``ray::pezoo run <run_id> (attempt n)``), so which
        # node trains which run can be seen (a test finds the runs a killed node held by it).
        name = task_name(job)
        self._pending[self._task.options(name=name, **self._resources).remote(job)] = job

    def wait(self) -> list[Completion]:
        ray = self._ray
        ray.wait(list(self._pending), num_returns=1)
        ready, _ = ray.wait(list(self._pending), num_returns=len(self._pending), timeout=0)
        done: list[Completion] = []
        for ref in ready:
            job = self._pending.pop(ref)
            try:
                done.append((job, ray.get(ref)))
            except ray.exceptions.RayError as exc:  # worker/node died, or the task could not run
                done.append((job, WorkerLost(job.run_id, _first_line(exc))))
        return done

    def close(self, *, cancel: bool = False) -> None:
        if cancel:
            for ref in self._pending:
                self._ray.cancel(ref, force=True)
            self._pending.clear()
        if self._owns_instance:
            self._ray.shutdown()
            self._owns_instance = False


def task_name(job: Job) -> str:
    """The Ray task's name for one attempt: ``pezoo run <run_id> (attempt n)``."""
    return f"pezoo run {job.run_id} (attempt {job.attempt})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), text)
    return f"{type(exc).__name__}: {line}"[:500]


# --------------------------------------------------------------------------------------
# Sizing the local executor
# --------------------------------------------------------------------------------------


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
) -> Executor:
    """In-process when one worker is enough (or asked for), else a ``LocalPool``."""
    devices = local_devices(device, workers, todo)
    if len(devices) == 1:
        return InProcess(torch.device(devices[0]) if device.type == "cuda" else device, progress_for, notice)
    return LocalPool(devices, progress_for, notice)


# --------------------------------------------------------------------------------------
# The driver loop
# --------------------------------------------------------------------------------------


class SweepEvents:
    """What the driver reports; override what you show (the CLI prints, tests record)."""

    def skipped(self, index: int, cfg: RunConfig) -> None:
        """Run ``index`` is already finished in the store."""

    def claimed(self, index: int, cfg: RunConfig, holder: str) -> None:
        """Run ``index`` is being trained by another process (``holder`` says which), or is
        a variant whose trained run is: skipped."""

    def deferred(self, index: int, cfg: RunConfig, reason: str) -> None:
        """Run ``index`` was not started: ``admit`` said why (``run_sweep``), or it is a
        variant whose trained run was deferred. It is left for a later sweep."""

    def started(self, job: Job) -> None:
        """An attempt was handed to the executor."""

    def notice(self, job: Job, message: str) -> None:
        """A notice about a run (a takeover; a worker's resume or corrupt checkpoint when its
        executor has no live notices: then shown when its result arrives)."""

    def retrying(self, job: Job, reason: str, attempts: int) -> None:
        """Attempt ``job.attempt`` of ``attempts`` ended (``reason``) and runs again."""

    def finished(self, job: Job, outcome: RunOutcome, result: RunResult | WorkerLost) -> None:
        """The run's last attempt ended and is recorded (finished, diverged or failed), or
        was not recorded because another process finished it meanwhile (``cached``) or took
        its claim over (``claimed``)."""


def run_sweep(
    executor: Executor,
    configs: Sequence[RunConfig],
    store: Store,
    *,
    checkpoint_dir: str | Path | None = None,
    checkpoint_every: int = 250,
    retries: int = 2,
    events: SweepEvents | None = None,
    tensorboard: str | Path | None = None,
    admit: Callable[[int, RunConfig], str | None] | None = None,
    keep_weights: bool = False,
) -> list[RunOutcome]:
    """Run every config the store does not hold finished; return the recorded outcomes.

    ``keep_weights`` keeps every trained run's final weights (``harness.run.weights_path``),
    not only those of runs with variants in ``configs``: a later inference-time variant or
    re-evaluation then never trains again.

    Each run is claimed for this process (``Store.claim``) when first dispatched: a run
    found finished then is skipped, and one another live process holds is skipped with
    the outcome ``claimed`` (nothing is recorded for it, and it is no failure). While the
    sweep goes on, a thread refreshes this process's claims (``Store.keep_alive``).
    A claimed run's result is recorded when it arrives (with the worker's provenance,
    the executor's name and the number of attempts), and its checkpoint removed once
    finished. Lost or failed attempts run
    again, at most ``retries`` more times. ``KeyboardInterrupt`` stops the workers,
    marks the runs in flight ``interrupted`` (their checkpoints stay for the next time)
    and propagates. Runs that are already finished are never run again; a finished result
    kept in the checkpoint folder because the store could not take it then
    (``harness.run.record_or_keep``) is recorded without training. ``tensorboard`` (a
    folder) makes every run log there too.

    An inference-time variant (``RunConfig.is_variant``) is dispatched once its trained
    run is neither queued nor in flight; a trained run with variants in ``configs`` keeps
    its final weights (``harness.run.weights_path``), which its variants evaluate. A
    variant whose trained run another live process is training is skipped with the
    outcome ``claimed``, as that run is: its weights do not exist yet.

    ``admit(index, cfg)``, asked as each run is about to start (not for a retry), returns
    None to start it, else why it is *deferred*: not started, nothing recorded, the outcome
    ``deferred`` with that reason, and the next run in the list is looked at instead
    (``harness.deadline.TimeLimit`` defers what cannot end before a time limit). A
    variant whose trained run was deferred is deferred too.
    """
    events = events or SweepEvents()
    ckpt_dir = checkpoint_dir_for(store.path, checkpoint_dir).resolve()
    faults = injected_faults()
    attempts = retries + 1
    by_id: dict[str, RunConfig] = {}
    queue: deque[Job] = deque()
    outcomes: list[RunOutcome] = []
    with_variants = {c.trained_config().run_id() for c in configs if c.is_variant}  # keep their final weights
    for index, cfg in enumerate(configs, start=1):
        run_id = cfg.run_id()
        if run_id in by_id:
            continue
        by_id[run_id] = cfg
        if store.status(run_id) == "finished":
            events.skipped(index, cfg)
            continue
        path = checkpoint_path(ckpt_dir, run_id)
        tb = str(Path(tensorboard).resolve()) if tensorboard is not None else None
        job = Job(
            index,
            cfg.to_dict(),
            run_id,
            str(path),
            checkpoint_every,
            fault=faults.get(run_id),
            tensorboard=tb,
            keep_weights=keep_weights or run_id in with_variants,
        )
        kept = recover_kept(cfg, path, functools.partial(events.notice, job))
        if kept is not None:  # finished before, but the store could not take it then
            claim = store.claim(cfg, kept.provenance)
            if claim.status == "finished":
                events.skipped(index, cfg)
                continue
            if claim.status == "busy":
                holder = cast(str, claim.holder)  # a busy claim always names its holder
                events.claimed(index, cfg, holder)
                outcomes.append(RunOutcome(run_id, "claimed", holder))
                continue
            events.started(job)
            try:
                outcome = record_or_keep(store, cfg, kept, path, provenance=kept.provenance)
            except ClaimLostError as exc:
                outcome = RunOutcome(run_id, "claimed", str(exc))
            outcomes.append(outcome)
            events.finished(job, outcome, kept)
            continue
        queue.append(job)

    dispatch_provenance = {"commit": git_commit(), "device": "pending", "executor": executor.name}
    in_flight: dict[str, Job] = {}
    deferred: set[str] = set()

    def defer(job: Job, reason: str) -> None:
        deferred.add(job.run_id)
        events.deferred(job.index, by_id[job.run_id], reason)
        outcomes.append(RunOutcome(job.run_id, "deferred", reason))

    def ready(job: Job) -> bool:
        """A variant waits while its trained run is queued or training."""
        cfg = by_id[job.run_id]
        if not cfg.is_variant:
            return True
        trained = cfg.trained_config().run_id()
        return trained not in in_flight and all(j.run_id != trained for j in queue)

    try:
        with store.keep_alive():
            while queue or in_flight:
                while queue and len(in_flight) < executor.capacity:
                    next_job = next((j for j in queue if ready(j)), None)
                    if next_job is None:
                        break  # only variants whose trained runs are still training
                    job = next_job
                    queue.remove(job)
                    cfg = by_id[job.run_id]
                    if job.attempt == 1 and cfg.is_variant and cfg.trained_config().run_id() in deferred:
                        defer(job, f"its trained run {cfg.trained_config().run_id()} was deferred")
                        continue
                    if job.attempt == 1 and admit is not None and (reason := admit(job.index, cfg)) is not None:
                        defer(job, reason)
                        continue
                    if job.attempt == 1 and (trainer := _trained_elsewhere(store, by_id[job.run_id])):
                        # its weights do not exist yet: not a failure, a run for later
                        events.claimed(job.index, by_id[job.run_id], trainer)
                        outcomes.append(RunOutcome(job.run_id, "claimed", trainer))
                        continue
                    if job.attempt == 1:
                        claim = store.claim(by_id[job.run_id], dispatch_provenance)
                        if claim.status == "finished":  # finished by another process since the queue was built
                            events.skipped(job.index, by_id[job.run_id])
                            continue
                        if claim.status == "busy":
                            holder = cast(str, claim.holder)  # a busy claim always names its holder
                            events.claimed(job.index, by_id[job.run_id], holder)
                            outcomes.append(RunOutcome(job.run_id, "claimed", holder))
                            continue
                        if claim.holder is not None:
                            events.notice(job, f"took over from a process that is gone (it was {claim.holder})")
                    executor.submit(job)
                    in_flight[job.run_id] = job
                    events.started(job)
                if not in_flight:
                    continue  # every run left was finished or claimed elsewhere
                for job, answer in executor.wait():
                    del in_flight[job.run_id]
                    if isinstance(answer, RunResult) and not executor.live_notices:
                        for message in answer.notices:
                            events.notice(job, message)
                    if _should_retry(answer) and job.attempt < attempts:
                        events.retrying(job, _reason(answer), attempts)
                        queue.appendleft(replace(job, attempt=job.attempt + 1))
                        continue
                    outcome = _record(store, by_id[job.run_id], job, answer, executor.name)
                    outcomes.append(outcome)
                    events.finished(job, outcome, answer)
    except BaseException:
        executor.close(cancel=True)
        for job in in_flight.values():
            with contextlib.suppress(StoreError):  # e.g. a full disk: keep the original error
                store.mark(job.run_id, "interrupted", "the sweep driver was interrupted; run it again to resume")
        raise
    executor.close()
    return outcomes


def _trained_elsewhere(store: Store, cfg: RunConfig) -> str | None:
    """For a variant whose trained run another live process is training: who holds that
    run ("claimed by host:pid since ..."); None otherwise."""
    if not cfg.is_variant:
        return None
    return store.held_elsewhere(cfg.trained_config().run_id())


def _should_retry(answer: RunResult | WorkerLost) -> bool:
    return isinstance(answer, WorkerLost) or (answer.status == "failed" and answer.retryable)


def _reason(answer: RunResult | WorkerLost) -> str:
    return answer.reason if isinstance(answer, WorkerLost) else str(answer.error)


def _record(store: Store, cfg: RunConfig, job: Job, answer: RunResult | WorkerLost, executor: str) -> RunOutcome:
    """Write the last attempt's answer; the driver is the only writer of the store, and
    writes only while it holds the run's claim (a finished run is never changed)."""
    held = store.check(job.run_id)
    if not held.taken:  # finished, or taken over, by another process meanwhile: leave it to them
        if held.status == "finished":
            return RunOutcome(job.run_id, "cached", "finished by another process meanwhile; its result is kept")
        return RunOutcome(job.run_id, "claimed", held.holder)
    if isinstance(answer, WorkerLost):
        error = f"its worker was lost on all {job.attempt} attempts; the last time: {answer.reason}"
        store.mark(job.run_id, "failed", error)
        return RunOutcome(job.run_id, "failed", error)
    prov = {**answer.provenance, "executor": executor, "attempts": str(job.attempt)}
    if answer.status == "failed" and job.attempt > 1:
        answer = replace(answer, traceback=f"{answer.traceback}\n(failed on all {job.attempt} attempts)")
    # the worker's provenance and start time; once finished, the checkpoint goes (on a shared dir this frees it)
    try:
        return record_or_keep(store, cfg, replace(answer, provenance=prov), Path(job.checkpoint), provenance=prov)
    except ClaimLostError as exc:
        return RunOutcome(job.run_id, "claimed", str(exc))
