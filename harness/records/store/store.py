"""The results store: claims on runs, and writing and reading their rows, over the
connection :class:`harness.records.store.connection.StoreConnection` opens safely.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from harness.records.store.claims import (
    HEARTBEAT_SECONDS,
    LEASE_SECONDS,
    Claim,
    Owner,
    count_death,
    death_noted,
    describe,
)
from harness.records.store.connection import StoreConnection
from harness.records.store.errors import ClaimLostError, StoreError
from harness.records.store.schema import SEAL_KEY, lm_scores_of, metric_rows, record_of, run_row
from harness.tasks.lm import LM_TASKS

if TYPE_CHECKING:
    from harness.config import RunConfig
    from harness.records.lm_metrics import LmScores
    from harness.records.metrics import LengthMetrics
    from harness.records.record import RunRecord


class Store(StoreConnection):
    """Results store at ``path``.

    A writer (the default) creates the store on first use (parent folders included),
    migrates an older schema and checks the file with SQLite's ``quick_check`` before
    anything is written. ``readonly=True`` opens an existing store without changing it
    (works on a read-only file, folder or filesystem); writing then raises StoreError.

    Raises:
        StoreError: (one of its subclasses) the file cannot be used; the message says why.
    """

    lease_seconds = LEASE_SECONDS

    def _state(self, db: sqlite3.Connection, run_id: str, me: Owner) -> tuple[str, str | None]:
        """Inside a transaction: ``(state, holder)`` of a run for ``me``: ``absent``,
        ``finished``, ``ours`` (running, claimed by me), ``live`` (running, claimed by a
        process that is alive) or ``free`` (anything else: failed, interrupted, or running
        under a process that is gone); ``holder`` describes the claim for live and free."""
        row = db.execute("SELECT status, owner, heartbeat, started_at FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            return "absent", None
        status, owner_json, heartbeat, since = row
        if status == "finished":
            return "finished", None
        owner = Owner.from_json(owner_json)
        if status != "running":
            return "free", None
        if owner == me:
            return "ours", None
        now = time.time()
        holder = describe(owner, since, heartbeat, now)
        if owner is not None and owner.alive(heartbeat, now, self.lease_seconds):
            return "live", holder
        return "free", holder

    # -- claims ----------------------------------------------------------------------
    def claim(
        self,
        cfg: RunConfig,
        provenance: Mapping[str, Any],
        owner: Owner | None = None,
        *,
        started_at: float | None = None,
        step: int | None = None,
    ) -> Claim:
        """Take ``cfg`` for ``owner`` (default: this process) to train, in one transaction.

        Refuses a run the store holds finished (``Claim.status == "finished"``) and one a
        live process holds (``"busy"``, with who and since when). Otherwise the run is
        registered ``running`` under ``owner`` (``"taken"``), replacing an earlier attempt
        that did not finish or whose process is gone. ``started_at`` (Unix time, default
        now) is when the run started.

        Taking over from a process that died counts the death (``Claim.deaths``, kept in
        the running row's ``error`` until the run ends): ``step`` is the step of the run's
        checkpoint now, and a death after the checkpoint moved on since the last one counts
        from 1 again, so a sweep killed now and then is never taken for a crashing run."""
        run_id = cfg.run_id()
        me = owner or Owner.this_process()
        now = time.time()
        values = (
            cfg.pe,
            cfg.task,
            cfg.seed,
            cfg.preset,
            json.dumps(cfg.to_dict(), sort_keys=True),
            json.dumps(dict(provenance), sort_keys=True),
            now if started_at is None else started_at,
            me.to_json(),
            now,
            run_id,
        )
        with self._write(f"claiming run {run_id}") as db:
            state, holder = self._state(db, run_id, me)
            if state == "finished":
                return Claim(run_id, "finished")
            if state == "live":
                return Claim(run_id, "busy", holder)
            if state == "absent":
                db.execute(
                    "INSERT INTO runs (pe, task, seed, preset, config, status, provenance, started_at, owner,"
                    " heartbeat, run_id) VALUES (?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?)",
                    values,
                )
                return Claim(run_id, "taken")
            deaths, note = 0, None
            if state == "free" and holder is not None:  # a running row whose process died
                (before,) = db.execute("SELECT error FROM runs WHERE run_id=?", (run_id,)).fetchone()
                deaths, note = count_death(before, step)
            _restart_attempt(db, run_id, values, note)  # an unfinished attempt: ours, or nobody's any more
        return Claim(run_id, "taken", holder, deaths)

    def start(self, cfg: RunConfig, provenance: Mapping[str, Any], *, started_at: float | None = None) -> str:
        """:meth:`claim` for this process, raising StoreError when the run is finished or
        another process holds it; returns the run id."""
        claim = self.claim(cfg, provenance, started_at=started_at)
        if not claim.taken:
            raise StoreError(f"run {claim.run_id} is {claim.holder or claim.status}; not started")
        return claim.run_id

    def check(self, run_id: str, owner: Owner | None = None) -> Claim:
        """Whether ``owner`` (default: this process) still holds run ``run_id``, without
        changing anything: ``taken`` if so, ``finished``, or ``busy`` with the claim that
        replaced it (or none)."""
        me = owner or Owner.this_process()
        try:
            state, holder = self._state(self._conn, run_id, me)
        except sqlite3.Error as exc:
            raise self._explain(exc, "reading it") from exc
        if state == "ours":
            return Claim(run_id, "taken")
        if state == "finished":
            return Claim(run_id, "finished")
        return Claim(run_id, "busy", holder or f"no longer claimed by this process (status: {state})")

    def held_elsewhere(self, run_id: str) -> str | None:
        """Who holds run ``run_id`` if another live process is training it ("claimed by
        host:pid since ..."), else None (finished, free, absent, or ours)."""
        try:
            state, holder = self._state(self._conn, run_id, Owner.this_process())
        except sqlite3.Error as exc:
            raise self._explain(exc, "reading it") from exc
        return holder if state == "live" else None

    def held_by_others(self) -> dict[str, str]:
        """The runs other live processes are training now: run id -> the holder's
        ``host:pid`` (for a sweep's ETA when processes share the store's work)."""
        me, now = Owner.this_process(), time.time()
        held = {}
        for run_id, owner_json, heartbeat in self._query(
            "SELECT run_id, owner, heartbeat FROM runs WHERE status='running'"
        ):
            owner = Owner.from_json(owner_json)
            if owner is not None and owner != me and owner.alive(heartbeat, now, self.lease_seconds):
                held[run_id] = f"{owner.host}:{owner.pid}"
        return held

    def lapsed(self) -> set[str]:
        """Runs the store says are ``running`` whose process is gone (killed, or the machine
        restarted): interrupted in fact, and taken over by the next bench to reach them."""
        me, now = Owner.this_process(), time.time()
        gone = set()
        for run_id, owner_json, heartbeat in self._query(
            "SELECT run_id, owner, heartbeat FROM runs WHERE status='running'"
        ):
            owner = Owner.from_json(owner_json)
            if owner != me and (owner is None or not owner.alive(heartbeat, now, self.lease_seconds)):
                gone.add(run_id)
        return gone

    def suspects(self) -> set[str]:
        """Lapsed runs (:meth:`lapsed`) that a process had died training before the last one
        did (their row carries a death note, ``claims.count_death``): maybe what kills the
        processes that train them. A run lapsed once, as a sweep killed with its session or
        its machine leaves the run it was training, is not one."""
        lapsed = self.lapsed()
        noted = {
            run_id
            for run_id, error in self._query("SELECT run_id, error FROM runs WHERE status='running'")
            if death_noted(error)
        }
        return lapsed & noted

    def set_provenance(
        self, run_id: str, provenance: Mapping[str, Any], started_at: float, owner: Owner | None = None
    ) -> bool:
        """Record where and when a claimed run actually ran (a worker's provenance); only
        for the process holding its claim (returns False otherwise, changing nothing)."""
        me = owner or Owner.this_process()
        with self._write(f"recording run {run_id}") as db:
            if self._state(db, run_id, me)[0] != "ours":
                return False
            db.execute(
                "UPDATE runs SET provenance=?, started_at=? WHERE run_id=?",
                (json.dumps(dict(provenance), sort_keys=True), started_at, run_id),
            )
        return True

    def heartbeat(self, owner: Owner | None = None) -> None:
        """Say that ``owner`` (default: this process) is alive: refresh its claims' heartbeat."""
        me = owner or Owner.this_process()
        with self._write("refreshing claims") as db:
            db.execute("UPDATE runs SET heartbeat=? WHERE status='running' AND owner=?", (time.time(), me.to_json()))

    @contextmanager
    def keep_alive(self, every: float = HEARTBEAT_SECONDS) -> Iterator[None]:
        """While the block runs, a thread refreshes this process's claims every ``every``
        seconds (through its own connection), so that processes on other machines do
        not take them over. A failed refresh (busy, full disk) is tried again next time."""
        owner = Owner.this_process().to_json()
        sql = "UPDATE runs SET heartbeat=? WHERE status='running' AND owner=?"
        stop = threading.Event()

        def beat() -> None:
            try:
                db = sqlite3.connect(self.path, timeout=5.0, isolation_level=None)
            except sqlite3.Error:
                return  # the claims then lapse for other machines only; this machine checks pids
            try:
                while not stop.wait(every):
                    try:
                        db.execute(sql, (time.time(), owner))
                    except sqlite3.Error:
                        pass
            finally:
                db.close()

        thread = threading.Thread(target=beat, name="pezoo-store-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    # -- writing results -------------------------------------------------------------
    def finish(
        self,
        run_id: str,
        metrics: Iterable[tuple[str, LengthMetrics]],
        *,
        final_loss: float,
        train_seconds: float,
        eval_seconds: float,
        n_params: Mapping[str, int],
        diagnostics: Mapping[str, Any] | None = None,
        owner: Owner | None = None,
        lm: LmScores | None = None,
    ) -> bool:
        """Write all metrics (and the run's diagnostics, if any; a language-modelling run's
        scores ``lm``) and mark the run finished, atomically, releasing the claim.

        Returns False, changing nothing, when the store already holds the run finished
        (another process finished it first: its result stays).

        Raises:
            ClaimLostError: ``owner`` (default: this process) does not hold the run's claim.
            StoreFullError: the disk is full (nothing of the run was written).
        """
        me = owner or Owner.this_process()
        with self._write(f"recording run {run_id}") as db:
            state, holder = self._state(db, run_id, me)
            if state == "finished":
                return False
            if state != "ours":
                raise ClaimLostError(
                    f"run {run_id} is {holder or 'not claimed by this process'}; this process's result was not recorded"
                )
            db.execute("DELETE FROM diagnostics WHERE run_id=?", (run_id,))
            if diagnostics is not None:
                db.execute("INSERT INTO diagnostics VALUES (?, ?)", (run_id, json.dumps(diagnostics, sort_keys=True)))
            _write_lm(db, run_id, lm)
            db.executemany(
                "INSERT OR REPLACE INTO metrics VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (run_id, split, m.length, m.token_length, m.n, m.exact, m.tokens, m.tokens_right)
                    for split, m in metrics
                ],
            )
            db.execute(
                "UPDATE runs SET status='finished', error=NULL, final_loss=?, train_seconds=?, eval_seconds=?,"
                " n_params=?, pe_params=?, finished_at=?, owner=NULL, heartbeat=NULL WHERE run_id=?",
                (final_loss, train_seconds, eval_seconds, n_params["total"], n_params["pe"], time.time(), run_id),
            )
        return True

    def mark(self, run_id: str, status: str, error: str | None = None, owner: Owner | None = None) -> bool:
        """Set a terminal non-finished status (diverged, failed, interrupted) with its reason,
        releasing the claim. Only for the process holding the claim, and never on a
        finished run: returns False (changing nothing) otherwise."""
        me = owner or Owner.this_process()
        with self._write(f"recording run {run_id}") as db:
            if self._state(db, run_id, me)[0] != "ours":
                return False
            db.execute(
                "UPDATE runs SET status=?, error=?, finished_at=?, owner=NULL, heartbeat=NULL WHERE run_id=?",
                (status, error, time.time(), run_id),
            )
        return True

    def insert_finished(self, record: RunRecord) -> bool:
        """Add a run finished elsewhere (its record, diagnostics included).

        The inverse of :meth:`record`: ``pezoo leaderboard import`` uses it to give a new
        store the runs already published, so a sweep skips them. A run the store already
        holds finished is left as it is (returns False); an unfinished attempt of the same
        run is replaced by the finished one (returns True; a process still training it
        then finds it finished and keeps it)."""
        return self.insert_finished_runs([record])[0]

    def insert_finished_runs(self, records: Iterable[RunRecord]) -> list[bool]:
        """:meth:`insert_finished` for each of ``records``, all in one transaction: if any
        fails to be written, none is (the error propagates)."""
        added = []
        records = list(records)
        with self._write(f"importing {len(records)} run(s)") as db:
            for record in records:
                added.append(self._insert_finished(db, record))
        return added

    @staticmethod
    def _insert_finished(db: sqlite3.Connection, record: RunRecord) -> bool:
        row = db.execute("SELECT status FROM runs WHERE run_id=?", (record.run_id,)).fetchone()
        if row is not None and row[0] == "finished":
            return False
        db.execute("DELETE FROM runs WHERE run_id=?", (record.run_id,))  # cascades to metrics, diagnostics
        run = run_row(record)
        columns = [c for c in run if c != "status"]
        db.execute(
            f"INSERT INTO runs ({', '.join(columns)}, status, error) VALUES ({', '.join('?' for _ in columns)},"
            " 'finished', NULL)",
            [json.dumps(run[c], sort_keys=True) if c in ("config", "provenance") else run[c] for c in columns],
        )
        db.executemany(
            "INSERT INTO metrics VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(record.run_id, *m.values()) for m in metric_rows(record)],
        )
        if record.diagnostics is not None:
            db.execute(
                "INSERT INTO diagnostics VALUES (?, ?)", (record.run_id, json.dumps(record.diagnostics, sort_keys=True))
            )
        _write_lm(db, record.run_id, record.lm)
        return True

    # -- reading ---------------------------------------------------------------------
    def status(self, run_id: str) -> str | None:
        rows = self._query("SELECT status FROM runs WHERE run_id=?", (run_id,))
        return rows[0]["status"] if rows else None

    def run(self, run_id: str) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM runs WHERE run_id=?", (run_id,))
        if not rows:
            return None
        d = dict(rows[0])
        d["config"], d["provenance"] = json.loads(d["config"]), json.loads(d["provenance"])
        owner = Owner.from_json(d.get("owner"))
        d["owner"] = asdict(owner) if owner is not None else None  # a schema-1 store has no claims
        d.setdefault("heartbeat", None)
        return d

    def runs(self) -> list[dict[str, Any]]:
        runs = [self.run(r["run_id"]) for r in self._query("SELECT run_id FROM runs ORDER BY started_at")]
        return [run for run in runs if run is not None]  # never None: a run is deleted only where it is re-inserted

    def finished_with(self, provenance_key: str) -> list[dict[str, Any]]:
        """The finished runs (as :meth:`run`) whose provenance has ``provenance_key``
        (``weights_sha256``: the runs that kept their final weights), oldest first."""
        rows = self._query(
            "SELECT run_id FROM runs WHERE status='finished' AND instr(provenance, ?) > 0 ORDER BY started_at",
            (json.dumps(provenance_key),),
        )
        runs = [self.run(r["run_id"]) for r in rows]
        return [run for run in runs if run is not None and provenance_key in run["provenance"]]

    def seal_key(self) -> bytes | None:
        """This store's own secret (32 random bytes, made with the store and kept only in
        it): what a result kept beside it while it could not be written is sealed with
        (``harness.records.kept_results``), so that only a result this store's process kept is
        taken back. None in a store no writer has opened since pezoo made one."""
        rows = self._query("SELECT value FROM meta WHERE key=?", (SEAL_KEY,))
        try:
            return bytes.fromhex(rows[0]["value"]) if rows else None
        except ValueError:
            return None

    def record(self, run_id: str) -> RunRecord | None:
        """The record of run ``run_id`` (diagnostics included) if the store holds it
        finished, else None; unchecked (``RunRecord.problems`` checks it)."""
        run = self.run(run_id)
        if run is None or run["status"] != "finished":
            return None
        lm = self.lm_scores(run_id) if run["task"] in LM_TASKS else None
        try:
            scores = lm_scores_of(run, lm) if lm is not None else None
        except ValueError as exc:
            raise StoreError(f"run {run_id} in {self.path}: its language-modelling scores do not read ({exc})") from exc
        return record_of(run, self.metrics(run_id), self.diagnostics(run_id), scores)

    def lm_scores(self, run_id: str) -> dict[str, Any] | None:
        """A finished language-modelling run's scores as stored (``LmScores.to_body``), or None."""
        rows = self._query("SELECT body FROM lm_scores WHERE run_id=?", (run_id,))
        return json.loads(rows[0]["body"]) if rows else None

    def diagnostics(self, run_id: str) -> dict[str, Any] | None:
        """The diagnostics stored with a finished run (``harness.training.diagnostics``), or None."""
        rows = self._query("SELECT body FROM diagnostics WHERE run_id=?", (run_id,))
        return json.loads(rows[0]["body"]) if rows else None

    def metrics(self, run_id: str) -> list[dict[str, Any]]:
        """The run's metrics rows, as counts (``exact``, ``tokens``, ``tokens_right``): a
        store older than counts (schema 2, read without migrating it) has its fractions
        recounted on the fly (``harness.records.recount``)."""
        rows = [dict(r) for r in self._query("SELECT * FROM metrics WHERE run_id=? ORDER BY length", (run_id,))]
        if rows and "exact" not in rows[0]:
            from harness.records.recount import RecountError, recount

            run = self.run(run_id)
            try:
                rows = [{"run_id": run_id, **recount(r, run["config"] if run else {})} for r in rows]
            except (RecountError, KeyError) as e:
                raise StoreError(f"run {run_id} in {self.path}: its metrics cannot be read as counts ({e})") from e
        return rows


def _restart_attempt(db: sqlite3.Connection, run_id: str, values: tuple[Any, ...], note: str | None) -> None:
    """Register run ``run_id`` ``running`` again over its unfinished attempt: its metrics and
    diagnostics dropped, its row's results cleared, ``values`` (as ``Store.claim`` orders
    them) written and ``note`` (deaths counted) kept in ``error``."""
    db.execute("DELETE FROM metrics WHERE run_id=?", (run_id,))
    db.execute("DELETE FROM diagnostics WHERE run_id=?", (run_id,))
    db.execute("DELETE FROM lm_scores WHERE run_id=?", (run_id,))
    db.execute(
        "UPDATE runs SET pe=?, task=?, seed=?, preset=?, config=?, status='running', error=?,"
        " provenance=?, n_params=NULL, pe_params=NULL, final_loss=NULL, train_seconds=NULL,"
        " eval_seconds=NULL, started_at=?, finished_at=NULL, owner=?, heartbeat=? WHERE run_id=?",
        (*values[:5], note, *values[5:]),
    )


def _write_lm(db: sqlite3.Connection, run_id: str, lm: LmScores | None) -> None:
    """A language-modelling run's scores into ``lm_scores`` (replacing an earlier attempt's)."""
    db.execute("DELETE FROM lm_scores WHERE run_id=?", (run_id,))
    if lm is not None:
        body = json.dumps(lm.to_body(), sort_keys=True, allow_nan=False)
        db.execute("INSERT INTO lm_scores VALUES (?, ?)", (run_id, body))
