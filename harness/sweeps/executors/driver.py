"""The driver loop (:func:`run_sweep`): claims each run in the store, hands its attempts to
an executor, retries what failed, and records every answer; the driver alone writes the
results store.

Retries: an attempt whose worker died or which raised is run again, up to ``retries``
more times, resuming from the run's checkpoint when the worker can read the checkpoint
directory (always locally; on a cluster when the directory is shared). A run that fails
every attempt is stored as ``failed`` with its traceback (or the worker's fate), and
the other runs go on. A NaN loss (``diverged``) is deterministic and not retried, nor is a
variant whose trained run kept no usable weights, nor a run whose code called
``sys.exit`` (``RunResult.retryable``).

A run the store shows ``running`` under a process that died (the driver itself was
killed or crashed while training it in-process) is started after every other run of the
sweep, so a run that crashes whatever trains it cannot stop the others; once
``retries + 1`` processes in a row died on it without its checkpoint moving on
(``Claim.deaths``), it is recorded ``failed`` instead of being run again.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from harness.config import RunConfig
from harness.execution.kept_weights import WEIGHTS_DIGEST, recorded_weights, trusted_weights
from harness.execution.recording import drop_leftovers, record_or_keep, recover_kept
from harness.execution.run import checkpoint_dir_for, checkpoint_path
from harness.records.provenance import git_commit
from harness.records.result import RunOutcome, RunResult
from harness.records.store import Claim, ClaimLostError, Store, StoreError
from harness.sweeps.estimate import checkpointed_steps
from harness.sweeps.executors.grouped import stack_order
from harness.sweeps.executors.interface import Executor, first_line
from harness.sweeps.executors.jobs import Job, WorkerLost
from harness.sweeps.executors.worker import injected_faults


class SweepEvents:
    """What the driver reports; override what you show (the CLI prints, tests record)."""

    def skipped(self, index: int, cfg: RunConfig) -> None:
        """Run ``index`` is already finished in the store."""

    def claimed(self, index: int, cfg: RunConfig, holder: str) -> None:
        """Run ``index`` is being trained by another process (``holder`` says which), or is
        a variant whose trained run is: skipped."""

    def waiting(self, index: int, cfg: RunConfig, reason: str) -> None:
        """``admit`` refused run ``index`` for now (``reason``): it is asked again each time a
        run ends and a worker is free, before the runs after it; if it never fits, it is
        :meth:`deferred` once nothing else is left to run."""

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

    ``keep_weights`` keeps every trained run's final weights (``harness.execution.kept_weights.weights_path``),
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
    (``harness.execution.recording.record_or_keep``) is recorded without training. ``tensorboard`` (a
    folder) makes every run log there too.

    How runs start (variants after their trained run, refused claims, ``admit``): :class:`_Sweep`.
    """
    sweep = _Sweep(executor, store, events or SweepEvents(), admit, attempts=retries + 1)
    sweep.queue_runs(
        configs,
        checkpoint_dir_for(store.path, checkpoint_dir).resolve(),
        checkpoint_every=checkpoint_every,
        tensorboard=str(Path(tensorboard).resolve()) if tensorboard is not None else None,
        keep_weights=keep_weights,
    )
    try:
        with store.keep_alive():
            while True:
                sweep.start_what_fits()
                if sweep.in_flight:
                    sweep.collect()
                elif sweep.waiting:  # nothing runs that could free time or better an estimate: they never fit
                    sweep.give_up_waiting()
                else:  # every run left was finished, claimed elsewhere or deferred
                    break
    except BaseException:
        sweep.interrupted()
        raise
    executor.close()
    if sweep.stopped is not None:
        not_started = sum(1 for j in sweep.queue if j.attempt == 1)
        raise SweepStopped(str(sweep.stopped), sweep.outcomes, not_started) from sweep.stopped
    return sweep.outcomes


class _Sweep:
    """The driver's state while a sweep runs, and its steps: :meth:`queue_runs` (what the
    store lacks, in order), :meth:`start_what_fits` (claim and submit while the executor
    has room), :meth:`collect` (record or retry what comes back), :meth:`interrupted`.

    An inference-time variant (``RunConfig.is_variant``) is dispatched once its trained
    run is neither queued nor in flight; a trained run with variants in ``configs`` keeps
    its final weights (``harness.execution.kept_weights.weights_path``), which its variants evaluate. A
    variant whose trained run another live process is training is skipped with the
    outcome ``claimed``, as that run is: its weights do not exist yet.

    A claim the store refuses with an error (locked past SQLite's busy timeout, a full
    disk) is tried again after each of :data:`CLAIM_RETRY_DELAYS`; if every try fails,
    no further run starts, the runs in flight finish and are recorded, and
    :class:`SweepStopped` (a ``StoreError`` carrying the outcomes so far) is raised.

    ``admit(index, cfg)``, asked as each run is about to start (not for a retry), returns
    None to start it, else why it does not fit now: the run *waits* and the next run in the
    list is looked at instead (``harness.sweeps.deadline.TimeLimit`` holds back what cannot
    end before a time limit). Each time a worker is free the waiting runs are asked again
    first, in list order (a run that ended may have bettered their estimates: a probe on a
    loaded machine can overestimate a run by half); a retry still goes first. Runs that
    never fit are *deferred* once nothing is left in flight: not started, nothing
    recorded, the outcome ``deferred`` with the last reason. A variant waits while its
    trained run waits, and is deferred with it.
    """

    def __init__(
        self,
        executor: Executor,
        store: Store,
        events: SweepEvents,
        admit: Callable[[int, RunConfig], str | None] | None,
        attempts: int,
    ) -> None:
        self.executor, self.store, self.events, self.admit, self.attempts = executor, store, events, admit, attempts
        self.by_id: dict[str, RunConfig] = {}
        self.queue: deque[Job] = deque()
        self.outcomes: list[RunOutcome] = []
        self.in_flight: dict[str, Job] = {}
        self.deferred: set[str] = set()
        self.waiting: list[tuple[Job, str]] = []  # first attempts admit refused for now, in list order, and why
        self.stopped: StoreError | None = None  # a claim the store kept refusing: no new run starts
        self.dispatch_provenance = {"commit": git_commit(), "device": "pending", "executor": executor.name}

    def queue_runs(
        self,
        configs: Sequence[RunConfig],
        ckpt_dir: Path,
        *,
        checkpoint_every: int,
        tensorboard: str | None,
        keep_weights: bool,
    ) -> None:
        """A job per distinct run the store does not hold finished; a result kept because the
        store could not take it is recorded now; runs that processes kept dying on go last."""
        faults = injected_faults()
        with_variants = {c.trained_config().run_id() for c in configs if c.is_variant}  # keep their final weights
        # in flight when a process died on them before the last one did: maybe what kills them, so
        # they go last. A run lapsed once (its sweep killed with the session) resumes in its place.
        suspects = self.store.suspects()
        # what a result kept beside the store is sealed with (harness.records.kept_results)
        seal_key = self.store.seal_key()
        last: list[Job] = []
        for index, cfg in enumerate(configs, start=1):
            run_id = cfg.run_id()
            if run_id in self.by_id:
                continue
            self.by_id[run_id] = cfg
            if self.store.status(run_id) == "finished":
                self.events.skipped(index, cfg)
                continue
            path = checkpoint_path(ckpt_dir, run_id)
            job = Job(
                index,
                cfg.to_dict(),
                run_id,
                str(path),
                checkpoint_every,
                fault=faults.get(run_id),
                tensorboard=tensorboard,
                keep_weights=keep_weights or run_id in with_variants,
            )
            kept = recover_kept(cfg, path, seal_key, functools.partial(self.events.notice, job))
            if kept is not None:  # finished before, but the store could not take it then
                self._record_kept(job, cfg, kept, path)
                continue
            (last if run_id in suspects else self.queue).append(job)
        if getattr(self.executor, "stacks_runs", False):  # a stacking group: runs of one shape together
            self.queue = deque(sorted(self.queue, key=lambda job: stack_order(self.by_id[job.run_id])))
        self.queue.extend(last)

    def _record_kept(self, job: Job, cfg: RunConfig, kept: RunResult, path: Path) -> None:
        claim = _claim(self.store, cfg, kept.provenance, self.events, job)
        if claim.status == "finished":
            self.events.skipped(job.index, cfg)
            return
        if claim.status == "busy":
            holder = cast(str, claim.holder)  # a busy claim always names its holder
            self.events.claimed(job.index, cfg, holder)
            self.outcomes.append(RunOutcome(job.run_id, "claimed", holder))
            return
        self.events.started(job)
        try:
            outcome = record_or_keep(self.store, cfg, kept, path, provenance=kept.provenance)
        except ClaimLostError as exc:
            outcome = RunOutcome(job.run_id, "claimed", str(exc))
        self.outcomes.append(outcome)
        self.events.finished(job, outcome, kept)

    def startable(self, job: Job) -> bool:
        """Once stopped, only retries of runs this process holds already start."""
        return self.stopped is None or job.attempt > 1

    def ready(self, job: Job) -> bool:
        """A variant waits while its trained run is queued or training."""
        cfg = self.by_id[job.run_id]
        if not cfg.is_variant:
            return True
        trained = cfg.trained_config().run_id()
        return (
            trained not in self.in_flight
            and all(j.run_id != trained for j in self.queue)
            and all(j.run_id != trained for j, _ in self.waiting)
        )

    def defer(self, job: Job, reason: str) -> None:
        self.deferred.add(job.run_id)
        self.events.deferred(job.index, self.by_id[job.run_id], reason)
        self.outcomes.append(RunOutcome(job.run_id, "deferred", reason))

    def wait(self, job: Job, reason: str) -> None:
        self.waiting.append((job, reason))
        self.events.waiting(job.index, self.by_id[job.run_id], reason)

    def give_up_waiting(self) -> None:
        """Defer the runs still waiting (nothing in flight: none will fit later)."""
        waiting, self.waiting = self.waiting, []
        for job, reason in waiting:
            self.defer(job, reason)

    def _next(self) -> tuple[Job | None, bool]:
        """The job to start next and whether ``admit`` already let it: a retry first, then a
        waiting run that fits now, then the queue's next."""
        queued = next((j for j in self.queue if self.startable(j) and self.ready(j)), None)
        if (queued is None or queued.attempt == 1) and self.admit is not None:
            for k, (job, _) in enumerate(self.waiting):
                if not (self.startable(job) and self.ready(job)):
                    continue
                reason = self.admit(job.index, self.by_id[job.run_id])
                if reason is None:
                    del self.waiting[k]
                    return job, True
                self.waiting[k] = (job, reason)
        if queued is not None:
            self.queue.remove(queued)
        return queued, False

    def start_what_fits(self) -> None:
        """Submit jobs while the executor has room (first attempts claimed first)."""
        while len(self.in_flight) < self.executor.capacity:
            job, admitted = self._next()
            if job is None:
                return  # nothing left, only variants whose trained runs are training, or runs that wait
            if job.attempt == 1:
                go = self._first_attempt(job, admitted)
                if go is None:  # the store refused the claim: the runs in flight finish and are recorded first
                    return
                if not go:
                    continue
            # the kept weights it may evaluate, as the store's records vouch for them now
            recorded = recorded_weights(self.store.finished_with(WEIGHTS_DIGEST))
            job = replace(job, kept_weights=trusted_weights(self.by_id[job.run_id], recorded))
            self.executor.submit(job)
            self.in_flight[job.run_id] = job
            self.events.started(job)

    def _first_attempt(self, job: Job, admitted: bool = False) -> bool | None:
        """Whether a run's first attempt starts: waiting (``admit`` refused it for now; not
        asked again when ``admitted``), deferred, claimed elsewhere, finished meanwhile or
        failed for good (its process kept dying) it does not; None: the store refused to
        claim it (the sweep stops starting runs, the job goes back to the queue)."""
        cfg = self.by_id[job.run_id]
        if cfg.is_variant and cfg.trained_config().run_id() in self.deferred:
            self.defer(job, f"its trained run {cfg.trained_config().run_id()} was deferred")
            return False
        if not admitted and self.admit is not None and (reason := self.admit(job.index, cfg)) is not None:
            self.wait(job, reason)
            return False
        if trainer := _trained_elsewhere(self.store, cfg):
            # its weights do not exist yet: not a failure, a run for later
            self.events.claimed(job.index, cfg, trainer)
            self.outcomes.append(RunOutcome(job.run_id, "claimed", trainer))
            return False
        try:
            claim = _claim(self.store, cfg, self.dispatch_provenance, self.events, job)
        except StoreError as exc:
            self.stopped = exc
            self.queue.appendleft(job)
            return None
        if claim.status == "finished":  # finished by another process since the queue was built
            self.events.skipped(job.index, cfg)
            return False
        if claim.status == "busy":
            holder = cast(str, claim.holder)  # a busy claim always names its holder
            self.events.claimed(job.index, cfg, holder)
            self.outcomes.append(RunOutcome(job.run_id, "claimed", holder))
            return False
        if claim.deaths >= self.attempts:  # it kills whatever trains it: not once more
            error = (
                f"the process training it died {claim.deaths} times in a row without its checkpoint "
                f"moving on (the last was {claim.holder}): a crash in its code, such as a plugin's "
                "segfault, or the machine killing it (out of memory); not run again in this sweep"
            )
            self.store.mark(job.run_id, "failed", error)
            outcome = RunOutcome(job.run_id, "failed", error)
            self.outcomes.append(outcome)
            self.events.finished(job, outcome, WorkerLost(job.run_id, error))
            return False
        if claim.holder is not None:
            self.events.notice(job, f"took over from a process that is gone (it was {claim.holder})")
        return True

    def collect(self) -> None:
        """Wait for answers: retry a lost or failed attempt while attempts are left, else record it."""
        for job, answer in self.executor.wait():
            del self.in_flight[job.run_id]
            if isinstance(answer, RunResult) and not self.executor.live_notices:
                for message in answer.notices:
                    self.events.notice(job, message)
            if _should_retry(answer) and job.attempt < self.attempts:
                self.events.retrying(job, _reason(answer), self.attempts)
                self.queue.appendleft(replace(job, attempt=job.attempt + 1))
                continue
            outcome = _record(self.store, self.by_id[job.run_id], job, answer, self.executor.name)
            self.outcomes.append(outcome)
            self.events.finished(job, outcome, answer)

    def interrupted(self) -> None:
        """Stop the workers and mark the runs in flight ``interrupted`` (their checkpoints stay)."""
        self.executor.close(cancel=True)
        for job in self.in_flight.values():
            with contextlib.suppress(StoreError):  # e.g. a full disk: keep the original error
                self.store.mark(job.run_id, "interrupted", "the sweep driver was interrupted; run it again to resume")


class SweepStopped(StoreError):
    """The store kept refusing to claim the next run (:data:`CLAIM_RETRY_DELAYS`): the sweep
    stopped there, after the runs in flight were recorded.

    Attributes:
        outcomes: what the sweep recorded before it stopped, as ``run_sweep`` returns it.
        not_started: how many runs it did not start.
    """

    def __init__(self, message: str, outcomes: list[RunOutcome], not_started: int) -> None:
        super().__init__(message)
        self.outcomes = outcomes
        self.not_started = not_started


CLAIM_RETRY_DELAYS = (1.0, 2.0, 4.0, 8.0)
"""Seconds to wait before each new try of a claim the store refused with an error (locked
past SQLite's 30 s busy timeout, a full disk): a store busy for a while, or a disk freed
meanwhile, does not end the sweep; after the last try it stops (``StoreError``)."""


def _claim(store: Store, cfg: RunConfig, provenance: Mapping[str, Any], events: SweepEvents, job: Job) -> Claim:
    """``store.claim``, tried again after each of :data:`CLAIM_RETRY_DELAYS` while the store
    raises ``StoreError``; the last error, saying how often it was tried, once they are spent."""
    step = checkpointed_steps(Path(job.checkpoint).parent, [job.run_id]).get(job.run_id, 0)
    for delay in (*CLAIM_RETRY_DELAYS, None):
        try:
            return store.claim(cfg, provenance, step=step)
        except StoreError as exc:
            if delay is None:
                tries = len(CLAIM_RETRY_DELAYS) + 1
                raise StoreError(
                    f"could not claim run {cfg.run_id()} ({tries} tries over {sum(CLAIM_RETRY_DELAYS):g} s): "
                    f"{first_line(exc)}"
                ) from exc
            events.notice(job, f"could not claim the run ({first_line(exc)}); trying again in {delay:g} s")
            time.sleep(delay)
    raise AssertionError("unreachable")


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
        if held.status == "finished":  # what this attempt checkpointed after they finished is of no use
            drop_leftovers(Path(job.checkpoint))
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
