"""The results store: one local SQLite file (stdlib ``sqlite3``), WAL mode.

Tables:
    runs     one row per run (config hash = run_id): full config JSON, seed, status,
             provenance (commit, device, versions), timings, parameter counts, error.
    metrics  one row per (run, evaluated scale): exact match, per-token accuracy.

A run's metrics and its ``finished`` status are written in one transaction, so a killed
process never leaves a half-finished run that looks finished. Re-running a finished
(config, seed) is a no-op; pandas reads the store through :func:`harness.results.load`.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.config import RunConfig
from harness.evaluate import LengthMetrics

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id        TEXT PRIMARY KEY,
    pe            TEXT NOT NULL,
    task          TEXT NOT NULL,
    seed          INTEGER NOT NULL,
    preset        TEXT NOT NULL,
    config        TEXT NOT NULL,
    status        TEXT NOT NULL,   -- running | finished | diverged | failed | interrupted
    error         TEXT,
    provenance    TEXT NOT NULL,   -- JSON: commit, device, torch/pezoo/python versions, host
    n_params      INTEGER,
    pe_params     INTEGER,
    final_loss    REAL,
    train_seconds REAL,
    eval_seconds  REAL,
    started_at    REAL NOT NULL,
    finished_at   REAL
);
CREATE TABLE IF NOT EXISTS metrics (
    run_id         TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    split          TEXT NOT NULL,  -- train | test
    length         INTEGER NOT NULL,
    token_length   REAL NOT NULL,
    n              INTEGER NOT NULL,
    exact_match    REAL NOT NULL,
    token_accuracy REAL NOT NULL,
    PRIMARY KEY (run_id, length)
);
CREATE TABLE IF NOT EXISTS diagnostics (
    run_id TEXT PRIMARY KEY REFERENCES runs(run_id) ON DELETE CASCADE,
    body   TEXT NOT NULL  -- JSON: what the encoding did on one example (harness.diagnostics)
);
"""


class StoreError(RuntimeError):
    """The store file is unreadable, corrupt, or from an incompatible schema."""


class Store:
    """Results store at ``path`` (created on first use, parent folders included)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._create_schema()
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"results store {self.path} is not a readable pezoo store ({exc}); "
                "move it aside and run again to start a new one"
            ) from exc
        self._db.row_factory = sqlite3.Row

    def _create_schema(self) -> None:
        # Tables and the version row are made in one write transaction, so two processes
        # opening a new store at once cannot both see "no version yet" and both insert it.
        with self._transaction() as db:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if int(row[0]) != SCHEMA_VERSION:
            raise StoreError(f"results store {self.path} has schema {row[0]}, this pezoo reads {SCHEMA_VERSION}")

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # -- writing ---------------------------------------------------------------------
    def start(self, cfg: RunConfig, provenance: Mapping[str, Any], *, started_at: float | None = None) -> str:
        """Record that ``cfg`` is running (replacing an unfinished earlier attempt).

        ``started_at`` (Unix time, default now) lets a sweep driver record when a remote
        worker actually started the run it reports."""
        run_id = cfg.run_id()
        with self._transaction() as db:
            db.execute("DELETE FROM metrics WHERE run_id=?", (run_id,))
            db.execute(
                "INSERT OR REPLACE INTO runs (run_id, pe, task, seed, preset, config, status, provenance, started_at)"
                " VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?)",
                (
                    run_id,
                    cfg.pe,
                    cfg.task,
                    cfg.seed,
                    cfg.preset,
                    json.dumps(cfg.to_dict(), sort_keys=True),
                    json.dumps(dict(provenance), sort_keys=True),
                    time.time() if started_at is None else started_at,
                ),
            )
        return run_id

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
    ) -> None:
        """Write all metrics (and the run's diagnostics, if any) and mark the run finished, atomically."""
        with self._transaction() as db:
            db.execute("DELETE FROM diagnostics WHERE run_id=?", (run_id,))
            if diagnostics is not None:
                db.execute("INSERT INTO diagnostics VALUES (?, ?)", (run_id, json.dumps(diagnostics, sort_keys=True)))
            db.executemany(
                "INSERT OR REPLACE INTO metrics VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (run_id, split, m.length, m.token_length, m.n, m.exact_match, m.token_accuracy)
                    for split, m in metrics
                ],
            )
            db.execute(
                "UPDATE runs SET status='finished', error=NULL, final_loss=?, train_seconds=?, eval_seconds=?,"
                " n_params=?, pe_params=?, finished_at=? WHERE run_id=?",
                (final_loss, train_seconds, eval_seconds, n_params["total"], n_params["pe"], time.time(), run_id),
            )

    def mark(self, run_id: str, status: str, error: str | None = None) -> None:
        """Set a terminal non-finished status (diverged, failed, interrupted) with its reason."""
        with self._transaction() as db:
            db.execute(
                "UPDATE runs SET status=?, error=?, finished_at=? WHERE run_id=?", (status, error, time.time(), run_id)
            )

    def insert_finished(
        self,
        run: Mapping[str, Any],
        metrics: Iterable[Mapping[str, Any]],
        diagnostics: Mapping[str, Any] | None = None,
    ) -> bool:
        """Add a run finished elsewhere, in the shapes :meth:`run` and :meth:`metrics` return.

        The inverse of reading a finished run: ``pezoo leaderboard import`` uses it to give a
        new store the runs already published, so a sweep skips them. A run the store already
        holds finished is left as it is (returns False); an unfinished attempt of the same
        run is replaced by the finished one (returns True)."""
        run_id = run["run_id"]
        with self._transaction() as db:
            row = db.execute("SELECT status FROM runs WHERE run_id=?", (run_id,)).fetchone()
            if row is not None and row[0] == "finished":
                return False
            db.execute("DELETE FROM runs WHERE run_id=?", (run_id,))  # cascades to metrics, diagnostics
            db.execute(
                "INSERT INTO runs (run_id, pe, task, seed, preset, config, status, error, provenance, n_params,"
                " pe_params, final_loss, train_seconds, eval_seconds, started_at, finished_at)"
                " VALUES (?, ?, ?, ?, ?, ?, 'finished', NULL, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    run["pe"],
                    run["task"],
                    run["seed"],
                    run["preset"],
                    json.dumps(run["config"], sort_keys=True),
                    json.dumps(run["provenance"], sort_keys=True),
                    run["n_params"],
                    run["pe_params"],
                    run["final_loss"],
                    run["train_seconds"],
                    run["eval_seconds"],
                    run["started_at"],
                    run["finished_at"],
                ),
            )
            db.executemany(
                "INSERT INTO metrics VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (run_id, m["split"], m["length"], m["token_length"], m["n"], m["exact_match"], m["token_accuracy"])
                    for m in metrics
                ],
            )
            if diagnostics is not None:
                db.execute("INSERT INTO diagnostics VALUES (?, ?)", (run_id, json.dumps(diagnostics, sort_keys=True)))
        return True

    # -- reading ---------------------------------------------------------------------
    def status(self, run_id: str) -> str | None:
        row = self._db.execute("SELECT status FROM runs WHERE run_id=?", (run_id,)).fetchone()
        return None if row is None else row["status"]

    def run(self, run_id: str) -> dict[str, Any] | None:
        row = self._db.execute("SELECT * FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            return None
        d = dict(row)
        d["config"], d["provenance"] = json.loads(d["config"]), json.loads(d["provenance"])
        return d

    def runs(self) -> list[dict[str, Any]]:
        return [self.run(r["run_id"]) for r in self._db.execute("SELECT run_id FROM runs ORDER BY started_at")]

    def diagnostics(self, run_id: str) -> dict[str, Any] | None:
        """The diagnostics stored with a finished run (``harness.diagnostics``), or None."""
        row = self._db.execute("SELECT body FROM diagnostics WHERE run_id=?", (run_id,)).fetchone()
        return None if row is None else json.loads(row["body"])

    def metrics(self, run_id: str) -> list[dict[str, Any]]:
        rows = self._db.execute("SELECT * FROM metrics WHERE run_id=? ORDER BY length", (run_id,))
        return [dict(r) for r in rows]
