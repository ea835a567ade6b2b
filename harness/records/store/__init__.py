"""The results store: one local SQLite file (stdlib ``sqlite3``), WAL mode.

One row per run (config hash = run_id) with its config, seed, status, provenance,
timings, parameter counts and error, one row per evaluated scale, and the run's
diagnostics (:mod:`harness.records.store.schema`); a finished run's rows are a serialisation of
its ``harness.records.record.RunRecord``.

A run's metrics and its ``finished`` status are written in one transaction, so a killed
process never leaves a half-finished run that looks finished. Re-running a finished
(config, seed) is a no-op; pandas reads the store through :func:`harness.records.frames.load`.

Claims (:mod:`harness.records.store.claims`): a run is trained by one process at a time.
:meth:`Store.claim` takes a run in one write transaction and refuses a finished run or one
that a live process holds; a claim whose process is gone is taken over. A process on this
machine is alive while its pid runs with the same start time; a process on another
machine while its heartbeat (refreshed every ``HEARTBEAT_SECONDS`` by
:meth:`Store.keep_alive`) is younger than ``LEASE_SECONDS``. :meth:`Store.finish` and
:meth:`Store.mark` write only for the process that holds the claim, and never change a
finished run.

Opening (:mod:`harness.records.store.connection`, the floor of :mod:`harness.records.store.store`): a
writer (``Store(path)``) checks that the file is a pezoo store and runs SQLite's
``quick_check`` before it writes anything; a reader (``Store(path, readonly=True)``)
opens the file read-only and never creates, migrates or switches it to WAL. Whatever
goes wrong is a :class:`StoreError` that says what (:mod:`harness.records.store.errors`):
read-only or unwritable (:class:`StoreAccessError`), disk full
(:class:`StoreFullError`), damaged (:class:`StoreCorruptError`), not a pezoo store
(:class:`NotAStoreError`).

One module per part:

    connection  a store file opened safely, and the one connection to it
    schema      the tables, the schema version and the migrations from older stores
    claims      who holds a run: its process, whether it is alive, heartbeats
    errors      what goes wrong with a store, as a ``StoreError`` that says what to do
    store       ``Store``: claims on runs, and writing and reading their rows
"""

from harness.records.store.claims import HEARTBEAT_SECONDS, LEASE_SECONDS, Claim, Owner
from harness.records.store.errors import (
    ClaimLostError,
    NotAStoreError,
    StoreAccessError,
    StoreCorruptError,
    StoreError,
    StoreFullError,
)
from harness.records.store.schema import SCHEMA_VERSION
from harness.records.store.store import Store

__all__ = [
    "HEARTBEAT_SECONDS",
    "LEASE_SECONDS",
    "SCHEMA_VERSION",
    "Claim",
    "ClaimLostError",
    "NotAStoreError",
    "Owner",
    "Store",
    "StoreAccessError",
    "StoreCorruptError",
    "StoreError",
    "StoreFullError",
]
