"""A store file opened safely, and the one connection to it: what ``Store`` stands on.

A writer checks that the file is a pezoo store and runs SQLite's ``quick_check`` before
it writes anything; a reader opens the file read-only and never creates, migrates or
switches it to WAL. Whatever goes wrong is a ``harness.records.store.errors.StoreError`` that
says what. Transactions and queries go through :meth:`StoreConnection._write` and
:meth:`StoreConnection._query`, which turn SQLite's errors into those StoreErrors.

(:class:`harness.records.store.store.Store` is this connection plus the runs' rows.)
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from harness.records.files import NotRegularFileError, nearest_existing, open_regular
from harness.records.store.errors import (
    EFFECTIVE,
    NotAStoreError,
    StoreAccessError,
    StoreCorruptError,
    StoreError,
    access_problem,
    corrupt,
    explain,
    has_content,
    is_busy,
)
from harness.records.store.schema import create_schema, schema_version

_SQLITE_MAGIC = b"SQLite format 3\x00"

_COMPANIONS = ("-wal", "-shm", "-journal")
"""Suffixes of the files SQLite keeps beside a database (its write-ahead log, shared
memory index, rollback journal)."""


def _companion_of(path: Path) -> Path | None:
    """The database ``path`` is a companion file of (``runs/pezoo.sqlite-wal`` ->
    ``runs/pezoo.sqlite``), when that database exists; else None. A store idle between runs
    keeps an empty ``-wal`` beside it, which a typo or a tab completion offers as --store:
    taken for a new store, its writes were wiped by the real store's next checkpoint, and
    two processes on the pair left the real store unreadable."""
    for suffix in _COMPANIONS:
        if path.name.endswith(suffix) and len(path.name) > len(suffix):
            database = path.with_name(path.name[: -len(suffix)])
            if database.is_file():
                return database
    return None


def _wal_mode(db: sqlite3.Connection, timeout: float = 30.0) -> None:
    """``PRAGMA journal_mode=WAL``, waiting as long as every other write does. Switching a
    new database to WAL needs an exclusive lock, and SQLite answers "database is locked" at
    once, without its busy timeout, when other processes open the same new store at the
    same moment (a pool of workers starting together)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


_Self = TypeVar("_Self", bound="StoreConnection")


class StoreConnection:
    """The open store file at ``path``: a writer (the default) creates it on first use
    (parent folders included), migrates an older schema and checks the file with SQLite's
    ``quick_check`` before anything is written; ``readonly=True`` opens an existing store
    without changing it (writing then raises StoreError).

    Raises:
        StoreError: (one of its subclasses) the file cannot be used; the message says why.
    """

    def __init__(self, path: str | Path, *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._db: sqlite3.Connection | None = None
        sidecars = [Path(f"{self.path}-wal"), Path(f"{self.path}-shm")]
        had = [p.exists() for p in sidecars]
        try:
            try:
                if readonly:
                    self._open_reader()
                else:
                    self._open_writer()
            except (sqlite3.Error, OSError) as exc:
                self._close_quietly()
                raise self._explain(exc, "opening it") from exc
            except StoreError:
                self._close_quietly()
                raise
        except StoreCorruptError:
            self._remove_new_sidecars(sidecars, had)
            raise
        self._conn.row_factory = sqlite3.Row

    @staticmethod
    def _remove_new_sidecars(sidecars: list[Path], had: list[bool]) -> None:
        """After a corrupt store was refused: the -wal and -shm files that opening it made
        (SQLite makes them before it reads a page), so "nothing was written" holds for the
        folder too. Only files that were not there before, and only with an empty -wal (no
        writer's commits in it)."""
        wal, _ = sidecars
        if not had[0] and has_content(wal):
            return
        for path, existed in zip(sidecars, had, strict=True):
            if not existed:
                try:
                    path.unlink(missing_ok=True)
                except OSError:
                    pass

    def _check_header(self) -> bool:
        """False for a new (missing or empty) file; True for a SQLite database; else NotAStoreError."""
        if self.path.is_dir():
            raise NotAStoreError(
                f"results store {self.path} is a folder; --store takes a file (e.g. runs/pezoo.sqlite)"
            )
        companion = _companion_of(self.path)
        if companion is not None:
            raise NotAStoreError(
                f"results store {self.path} is SQLite's {self.path.name[len(companion.name) :]} file of the store "
                f"{companion}, not a store; nothing was changed. Point --store at {companion}"
            )
        if not self.path.exists():
            return False
        try:
            with open_regular(self.path) as f:  # a FIFO there would block this read forever
                head = f.read(len(_SQLITE_MAGIC))
        except NotRegularFileError as exc:
            raise NotAStoreError(
                f"results store {exc}, so not a pezoo store; nothing was changed. Point --store at a pezoo store, "
                "or at a new path to start one"
            ) from None
        if not head:
            return False
        if head != _SQLITE_MAGIC:
            raise NotAStoreError(
                f"results store {self.path} is not a SQLite database (its first bytes are not SQLite's header), so "
                "not a pezoo store, or one damaged at its very start; nothing was changed. Point --store at a pezoo "
                "store, or at a new path to start one"
            )
        return True

    def _open_writer(self) -> None:
        existing = self._check_header()
        if existing and (why := access_problem(self.path, self.readonly)) is not None:
            # before SQLite opens it: connecting creates -wal/-shm files beside the store,
            # read-only ones for a read-only store, which then stand in the way of the fix
            readable = os.access(self.path, os.R_OK, **EFFECTIVE)
            tail = (
                ". The store is intact: `pezoo results`, `pezoo sweep plan` and `pezoo leaderboard export` can "
                "read it as it is"
                if readable
                else ""
            )
            raise StoreAccessError(f"results store {self.path} cannot be written: {why}{tail}")
        self._make_folder()
        self._db = db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        schema_version(self._conn, self.path, allow_empty=True)
        if existing:
            self._quick_check()
        _wal_mode(db)
        db.execute("PRAGMA foreign_keys=ON")
        self._create_schema()

    def _make_folder(self) -> None:
        """The store's folder, made when missing; a file where a folder on the way would be
        is said as such (it was "opening it failed (FileExistsError: File exists)")."""
        existing = nearest_existing(self.path.parent)
        if existing is not None and not existing.is_dir():
            raise StoreAccessError(f"results store {self.path} cannot be created: {existing} is not a folder")
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def _open_reader(self) -> None:
        if not self.path.exists():
            raise StoreError(f"no results store at {self.path}; run `pezoo bench` first")
        if not self._check_header():
            raise NotAStoreError(f"results store {self.path} is an empty file, not a pezoo store")
        uri = self.path.resolve().as_uri()
        if not os.access(self.path, os.W_OK, **EFFECTIVE) and not has_content(Path(f"{self.path}-wal")):
            # a store this user may not write, with every commit in the main file: read it as
            # immutable, so SQLite leaves no (read-only, in the way) -shm file beside it
            self._db = sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=30.0, isolation_level=None)
            schema_version(self._conn, self.path, allow_empty=False)
            return
        try:
            self._db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=30.0, isolation_level=None)
            schema_version(self._conn, self.path, allow_empty=False)
        except sqlite3.OperationalError:
            # A WAL store in a folder this process cannot write, or on a full disk: SQLite
            # cannot create the -shm file it reads through. With no (or an empty) -wal file
            # beside it, no writer is at work and every commit is in the main file, which
            # can then be read as immutable.
            self._close_quietly()
            if has_content(Path(f"{self.path}-wal")):
                raise
            self._db = sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=30.0, isolation_level=None)
            schema_version(self._conn, self.path, allow_empty=False)

    def _quick_check(self) -> None:
        rows = [" ".join(str(r[0]).split()) for r in self._conn.execute("PRAGMA quick_check(3)")]
        if rows != ["ok"]:
            raise corrupt(self.path, "quick_check: " + "; ".join(rows))

    def _create_schema(self) -> None:
        with self._transaction() as db:
            create_schema(db, self.path)

    def _explain(self, exc: BaseException, doing: str) -> StoreError:
        """The StoreError that says what ``exc`` (from SQLite or the OS) means for this store."""
        return explain(exc, self.path, self.readonly, doing)

    def _close_quietly(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
            self._db = None

    def close(self) -> None:
        self._close_quietly()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def _conn(self) -> sqlite3.Connection:
        """The open connection; StoreError once the store is closed."""
        if self._db is None:
            raise StoreError(f"results store {self.path} is closed")
        return self._db

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        db = self._conn
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    @contextmanager
    def _write(self, doing: str) -> Iterator[sqlite3.Connection]:
        """A write transaction; SQLite's errors come out as the StoreError saying what they mean."""
        if self.readonly:
            raise StoreError(f"results store {self.path} was opened read-only; {doing} needs a writer")
        try:
            with self._transaction() as db:
                yield db
        except sqlite3.Error as exc:
            raise self._explain(exc, doing) from exc

    def _query(self, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
        try:
            return self._conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._explain(exc, "reading it") from exc
