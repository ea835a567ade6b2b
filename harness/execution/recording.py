"""Recording a run's result in the store, and keeping a finished one beside its checkpoint
(``harness.records.kept_results``) when the store cannot take it, so that no finished run is lost
to a full disk; the next attempt records what was kept without training.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from harness.config import RunConfig
from harness.records import kept_results
from harness.records.files import WriteError, describe_write_error
from harness.records.result import RunOutcome, RunResult
from harness.records.store import ClaimLostError, Store, StoreError
from harness.training.checkpoint import set_aside


def record(store: Store, result: RunResult) -> RunOutcome:
    """Write a worker's result for a run that ``store.start`` has registered: metrics and
    ``finished`` atomically, or the terminal status with its traceback (failed) or reason
    (diverged)."""
    if result.status == "finished":
        if result.final_loss is None or result.train_seconds is None or result.eval_seconds is None:
            raise ValueError(f"run {result.run_id}: a finished result without its final loss and timings")
        store.finish(
            result.run_id,
            result.metrics,
            final_loss=result.final_loss,
            train_seconds=result.train_seconds,
            eval_seconds=result.eval_seconds,
            n_params=result.n_params,
            diagnostics=result.diagnostics,
            lm=result.lm,
        )
        return RunOutcome(result.run_id, "finished")
    store.mark(result.run_id, result.status, result.traceback or result.error)
    return RunOutcome(result.run_id, result.status, result.error)


def _storage_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is the store failing to write (SQLite or OS error, possibly wrapped in
    a ``StoreError``), as opposed to a refusal the store means."""
    current: BaseException | None = exc
    while current is not None:
        if isinstance(current, sqlite3.Error | OSError):
            return True
        current = current.__cause__ or current.__context__
    return False


def record_or_keep(
    store: Store,
    cfg: RunConfig,
    result: RunResult,
    checkpoint: Path,
    *,
    provenance: Mapping[str, Any] | None = None,
) -> RunOutcome:
    """:func:`record` ``result`` of a run this process has claimed (``store.claim``; with
    ``provenance``, recorded as where the result was made); once a finished result is in
    the store, the run's checkpoint (and a kept result) are removed.

    A finished result the store cannot write (a full disk, an I/O error) is not lost: it is
    kept in ``<run_id>.result.json`` next to the checkpoint (``harness.records.kept_results``) and
    the next ``bench`` of the run records it without training; the checkpoint is then
    removed to free the space (first, when the disk is too full for the small JSON file).
    The outcome is ``unrecorded`` with a message saying so.
    """
    run_id = cfg.run_id()
    kept = kept_results.path_for(checkpoint)
    try:
        if provenance is not None:
            store.set_provenance(run_id, provenance, result.started_at)
        outcome = record(store, result)
    except (sqlite3.Error, OSError, StoreError) as exc:
        if isinstance(exc, ClaimLostError) or result.status != "finished" or not _storage_failure(exc):
            raise
        why = describe_write_error(exc, Path(store.path).parent)
        try:
            _keep_result(store, cfg, result, checkpoint, kept)
        except (OSError, TypeError, ValueError) as keep_exc:
            fate = (
                "its checkpoint stays: the next bench resumes from it"
                if checkpoint.exists()
                else "the next bench trains it from step 0"
            )
            return RunOutcome(
                run_id,
                "unrecorded",
                f"finished, but the store could not record it ({why}) and it could not be kept either "
                f"({keep_exc}); {fate}",
            )
        checkpoint.unlink(missing_ok=True)
        return RunOutcome(
            run_id,
            "unrecorded",
            f"finished, but the store could not record it ({why}); the result is kept in {kept} and the "
            "next bench of this run records it without training",
        )
    if outcome.status == "finished":
        drop_leftovers(checkpoint)  # the results are in the store now
    return outcome


def _keep_result(store: Store, cfg: RunConfig, result: RunResult, checkpoint: Path, kept: Path) -> None:
    """Keep the finished ``result`` the store could not write in ``kept``, sealed with the
    store's key; the checkpoint goes first when the disk is too full for the file. Raises
    ``OSError``, ``TypeError`` or ``ValueError`` when it cannot be kept."""
    key = store.seal_key()
    if key is None:  # every writer makes one: a store opened read-only could not have claimed the run
        raise ValueError(f"results store {store.path} has no seal key to seal it with")
    try:
        kept_results.keep(kept, result.record(cfg), key)
    except WriteError as keep_exc:
        if not (keep_exc.disk_full and checkpoint.exists()):
            raise
        checkpoint.unlink()  # the finished result is worth more than a mid-training state
        kept_results.keep(kept, result.record(cfg), key)


def drop_leftovers(checkpoint: Path) -> None:
    """Remove the checkpoint and kept result of a run the store holds finished (recorded
    by this process, or by another one meanwhile): nothing resumes or records from them."""
    for path in (checkpoint, kept_results.path_for(checkpoint)):
        try:
            path.unlink(missing_ok=True)
        except OSError:  # not ours to delete (another user's folder): harmless, never read again
            pass


def recover_kept(
    cfg: RunConfig, checkpoint: Path, key: bytes | None, notice: Callable[[str], None] = print
) -> RunResult | None:
    """The finished result of ``cfg`` kept next to ``checkpoint`` by :func:`record_or_keep`,
    checked (``harness.records.kept_results.read``: sealed with ``key``, the store's
    ``Store.seal_key``), or None when there is none. One that fails the checks is set
    aside (``.unreadable``), ``notice`` says why, and the run trains."""
    run_id = cfg.run_id()
    path = kept_results.path_for(checkpoint)
    if not path.exists():
        return None
    try:
        kept = kept_results.read(path, cfg, key)
    except kept_results.KeptResultError as exc:
        aside = set_aside(path)
        where = f"set aside as {aside.name}" if aside is not None else "removed"
        notice(f"run {run_id}: {exc}; {where}; the run trains")
        return None
    notice(f"run {run_id}: recording the finished result kept in {path}, without training")
    return RunResult.from_record(kept)
