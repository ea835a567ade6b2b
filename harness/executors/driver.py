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
from harness.estimate import checkpointed_steps
from harness.executors.interface import Executor, first_line
from harness.executors.jobs import Job, WorkerLost
from harness.executors.worker import injected_faults
from harness.provenance import git_commit
from harness.result import RunOutcome, RunResult
from harness.run import (
    WEIGHTS_DIGEST,
    checkpoint_dir_for,
    checkpoint_path,
    drop_leftovers,
    record_or_keep,
    recorded_weights,
    recover_kept,
    trusted_weights,
)
from harness.store import Claim, ClaimLostError, Store, StoreError


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

    A claim the store refuses with an error (locked past SQLite's busy timeout, a full
    disk) is tried again after each of :data:`CLAIM_RETRY_DELAYS`; if every try fails,
    no further run starts, the runs in flight finish and are recorded, and
    :class:`SweepStopped` (a ``StoreError`` carrying the outcomes so far) is raised.

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
    lapsed = store.lapsed()  # in flight when their process died: maybe what killed it, so they go last
    seal_key = store.seal_key()  # what a result kept beside the store is sealed with (harness.kept_results)
    last: list[Job] = []
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
        kept = recover_kept(cfg, path, seal_key, functools.partial(events.notice, job))
        if kept is not None:  # finished before, but the store could not take it then
            claim = _claim(store, cfg, kept.provenance, events, job)
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
        (last if run_id in lapsed else queue).append(job)
    queue.extend(last)

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

    stopped: StoreError | None = None  # a claim the store kept refusing: no new run starts

    def startable(job: Job) -> bool:
        """Once stopped, only retries of runs this process holds already start."""
        return stopped is None or job.attempt > 1

    try:
        with store.keep_alive():
            while any(startable(j) for j in queue) or in_flight:
                while queue and len(in_flight) < executor.capacity:
                    next_job = next((j for j in queue if startable(j) and ready(j)), None)
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
                        try:
                            claim = _claim(store, by_id[job.run_id], dispatch_provenance, events, job)
                        except StoreError as exc:  # the runs in flight finish and are recorded first
                            stopped = exc
                            queue.appendleft(job)
                            break
                        if claim.status == "finished":  # finished by another process since the queue was built
                            events.skipped(job.index, by_id[job.run_id])
                            continue
                        if claim.status == "busy":
                            holder = cast(str, claim.holder)  # a busy claim always names its holder
                            events.claimed(job.index, by_id[job.run_id], holder)
                            outcomes.append(RunOutcome(job.run_id, "claimed", holder))
                            continue
                        if claim.deaths >= attempts:  # it kills whatever trains it: not once more
                            error = (
                                f"the process training it died {claim.deaths} times in a row without its checkpoint "
                                f"moving on (the last was {claim.holder}): a crash in its code, such as a plugin's "
                                "segfault, or the machine killing it (out of memory); not run again in this sweep"
                            )
                            store.mark(job.run_id, "failed", error)
                            outcome = RunOutcome(job.run_id, "failed", error)
                            outcomes.append(outcome)
                            events.finished(job, outcome, WorkerLost(job.run_id, error))
                            continue
                        if claim.holder is not None:
                            events.notice(job, f"took over from a process that is gone (it was {claim.holder})")
                    # the kept weights it may evaluate, as the store's records vouch for them now
                    recorded = recorded_weights(store.finished_with(WEIGHTS_DIGEST))
                    job = replace(job, kept_weights=trusted_weights(by_id[job.run_id], recorded))
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
    if stopped is not None:
        raise SweepStopped(str(stopped), outcomes, sum(1 for j in queue if j.attempt == 1)) from stopped
    return outcomes


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
