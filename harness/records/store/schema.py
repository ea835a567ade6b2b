"""The store's tables, its schema version and the migrations that bring an older store up to it.

Tables:
    meta         key/value; ``schema_version`` is the store's schema, ``seal_key`` its own
                 secret (``Store.seal_key``; added by the first writer, no migration).
    runs         one row per run (config hash = run_id): full config JSON, seed, status,
                 provenance (commit, device, versions), timings, parameter counts, error,
                 and while it runs, the claim: the process training it and its heartbeat.
    metrics      one row per (run, evaluated scale): counts (``harness.records.counts``): examples
                 n and exactly decoded ``exact``, scored ``tokens`` and ``tokens_right``.
    diagnostics  what the encoding did on one example, per finished run (JSON).
    lm_scores    a finished language-modelling run's scores, per run (JSON: the record's
                 ``metrics``, ``positions`` and ``passkey``, ``harness.records.lm_metrics.LmScores``).

A finished run's rows are a serialisation of its ``harness.records.record.RunRecord``
(:func:`harness.records.store.store.Store.record` reads one, ``insert_finished`` writes one).
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.config import RunConfig
from harness.records.lm_metrics import LmScores
from harness.records.metrics import LengthMetrics
from harness.records.record import RunRecord
from harness.records.store.errors import NotAStoreError, StoreError

SCHEMA_VERSION = 4
"""2: ``runs.owner`` and ``runs.heartbeat`` (claims). 3: metrics as counts (``exact``,
``tokens``, ``tokens_right`` for the float ``exact_match`` and ``token_accuracy``,
recovered exactly by ``harness.records.recount``). 4: the ``lm_scores`` table (the
language-modelling tasks run in the one store). An older store is migrated in place by the
first writer; readers read only the current schema."""

SCHEMA = """
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
    finished_at   REAL,
    owner         TEXT,            -- JSON (Owner) of the process holding a running run, else NULL
    heartbeat     REAL             -- when that process last said it is alive (Unix time)
);
CREATE TABLE IF NOT EXISTS metrics (
    run_id         TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    split          TEXT NOT NULL,  -- train | test
    length         INTEGER NOT NULL,
    token_length   REAL NOT NULL,
    n              INTEGER NOT NULL,
    exact          INTEGER NOT NULL,  -- examples decoded exactly, of n
    tokens         INTEGER NOT NULL,  -- tokens scored
    tokens_right   INTEGER NOT NULL,  -- tokens predicted right, of tokens
    PRIMARY KEY (run_id, length)
);
CREATE TABLE IF NOT EXISTS diagnostics (
    run_id TEXT PRIMARY KEY REFERENCES runs(run_id) ON DELETE CASCADE,
    body   TEXT NOT NULL  -- JSON: what the encoding did on one example (harness.diagnostics)
);
CREATE TABLE IF NOT EXISTS lm_scores (
    run_id TEXT PRIMARY KEY REFERENCES runs(run_id) ON DELETE CASCADE,
    body   TEXT NOT NULL  -- JSON: an LM run's metrics, positions, passkey (LmScores.to_body)
);
"""

SEAL_KEY = "seal_key"
"""The meta key of the store's secret: 64 hex digits, made once by the first writer."""


def _metrics_as_counts(db: sqlite3.Connection) -> None:
    """Schema 2 -> 3: the metrics table rebuilt with counts recovered from its fractions."""
    from harness.records.recount import RecountError, recount

    old = "metrics_before_counts"
    db.execute(f"ALTER TABLE metrics RENAME TO {old}")
    db.execute(SCHEMA[SCHEMA.index("CREATE TABLE IF NOT EXISTS metrics") :].split(";")[0])
    configs = {r[0]: json.loads(r[1]) for r in db.execute("SELECT run_id, config FROM runs")}
    columns = ("run_id", "split", "length", "token_length", "n", "exact", "tokens", "tokens_right")
    rows = db.execute(f"SELECT run_id, split, length, token_length, n, exact_match, token_accuracy FROM {old}")
    for run_id, split, length, token_length, n, em, tok in rows.fetchall():
        metric = {"split": split, "length": length, "token_length": token_length, "n": n}
        try:
            counted = recount({**metric, "exact_match": em, "token_accuracy": tok}, configs[run_id])
        except (RecountError, KeyError) as e:
            raise StoreError(f"run {run_id}: its metrics cannot be migrated to counts ({e}); nothing changed") from e
        db.execute(
            f"INSERT INTO metrics ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})",
            [run_id if c == "run_id" else counted[c] for c in columns],
        )
    db.execute(f"DROP TABLE {old}")


MIGRATIONS: dict[int, list[Any]] = {  # from schema version N to N + 1, in one write transaction
    1: ["ALTER TABLE runs ADD COLUMN owner TEXT", "ALTER TABLE runs ADD COLUMN heartbeat REAL"],
    2: [_metrics_as_counts],
    3: [],  # lm_scores: created with the tables (CREATE TABLE IF NOT EXISTS), nothing to move
}


def schema_version(db: sqlite3.Connection, path: Path, *, allow_empty: bool) -> int | None:
    """The schema version of the store ``db`` opened at ``path`` (None for a database
    without tables, where allowed); NotAStoreError for a SQLite database that is not a
    pezoo store, StoreError for one newer than this pezoo reads."""
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not tables and allow_empty:
        return None
    if "meta" not in tables or "runs" not in tables:
        listed = ", ".join(sorted(tables)[:8]) or "none"
        raise NotAStoreError(
            f"results store {path} is a SQLite database but not a pezoo store (its tables: {listed}); "
            "nothing was changed. Point --store at a pezoo store, or at a new path to start one"
        )
    row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    try:
        version = int(row[0])
    except (TypeError, ValueError):
        raise NotAStoreError(
            f"results store {path} has a meta table without a pezoo schema version; not a pezoo store"
        ) from None
    if version > SCHEMA_VERSION or version < 1:
        raise StoreError(
            f"results store {path} has schema {version}, this pezoo reads up to {SCHEMA_VERSION}; "
            "upgrade pezoo to use it"
        )
    return version


def create_schema(db: sqlite3.Connection, path: Path) -> None:
    """Inside one write transaction on ``db``: the tables, the version row and the
    migrations from the store's version to :data:`SCHEMA_VERSION`. In one transaction, two
    processes opening a new store at once cannot both see "no version yet" and both insert
    it, and a migration is all or nothing."""
    for statement in SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)
    db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    version = int(db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise StoreError(f"results store {path} has schema {version}, this pezoo reads {SCHEMA_VERSION}")
    for step in range(version, SCHEMA_VERSION):
        for statement in MIGRATIONS[step]:
            if callable(statement):
                statement(db)
            else:
                db.execute(statement)
    db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))
    db.execute("INSERT OR IGNORE INTO meta VALUES (?, ?)", (SEAL_KEY, secrets.token_hex(32)))


def run_row(record: RunRecord) -> dict[str, Any]:
    """The ``runs`` row of a finished run's record (config and provenance as objects, as
    ``Store.run`` returns them), without the claim's columns."""
    return {
        "run_id": record.run_id,
        "pe": record.pe,
        "task": record.task,
        "seed": record.seed,
        "preset": record.preset,
        "status": "finished",
        "config": record.config,
        "provenance": record.provenance,
        "n_params": record.n_params,
        "pe_params": record.pe_params,
        "final_loss": record.final_loss,
        "train_seconds": record.train_seconds,
        "eval_seconds": record.eval_seconds,
        "started_at": record.started_at,
        "finished_at": record.finished_at,
    }


def metric_rows(record: RunRecord) -> list[dict[str, Any]]:
    """The ``metrics`` rows of a record (without ``run_id``), in the table's column order."""
    return [
        {
            "split": split,
            "length": m.length,
            "token_length": m.token_length,
            "n": m.n,
            "exact": m.exact,
            "tokens": m.tokens,
            "tokens_right": m.tokens_right,
        }
        for split, m in record.metrics
    ]


def lm_scores_of(run: Mapping[str, Any], body: Mapping[str, Any]) -> LmScores:
    """The scores of an LM run's ``lm_scores`` row, read against its config; ValueError when
    they are not what that config measures."""
    return LmScores.from_body(run["run_id"], body, RunConfig.from_dict(run["config"]).lm_eval)


def record_of(
    run: Mapping[str, Any],
    metrics: Iterable[Mapping[str, Any]],
    diagnostics: Mapping[str, Any] | None = None,
    lm: LmScores | None = None,
) -> RunRecord:
    """The record of a finished run's rows (``Store.run``, ``Store.metrics``, ``Store.diagnostics``,
    and an LM run's ``Store.lm_scores``)."""
    rows = sorted(metrics, key=lambda m: m["length"])
    return RunRecord(
        run_id=run["run_id"],
        config=run["config"],
        provenance=run["provenance"],
        metrics=tuple(
            (
                m["split"],
                LengthMetrics(m["length"], m["token_length"], m["n"], m["exact"], m["tokens"], m["tokens_right"]),
            )
            for m in rows
        ),
        final_loss=run["final_loss"],
        train_seconds=run["train_seconds"],
        eval_seconds=run["eval_seconds"],
        started_at=run["started_at"],
        finished_at=run["finished_at"],
        n_params=run["n_params"],
        pe_params=run["pe_params"],
        diagnostics=diagnostics,
        lm=lm,
    )
