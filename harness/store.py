"""The results store: one local SQLite file (stdlib ``sqlite3``), WAL mode.

Tables:
    runs     one row per run (config hash = run_id): full config JSON, seed, status,
             provenance (commit, device, versions), timings, parameter counts, error,
             and while it runs, the claim: the process training it and its heartbeat.
    metrics  one row per (run, evaluated scale): exact match, per-token accuracy.

A run's metrics and its ``finished`` status are written in one transaction, so a killed
process never leaves a half-finished run that looks finished. Re-running a finished
(config, seed) is a no-op; pandas reads the store through :func:`harness.results.load`.

Claims: a run is trained by one process at a time. :meth:`Store.claim` takes a run in
one write transaction and refuses a finished run or one that a live process holds; a
claim whose process is gone is taken over. A process on this machine is alive while its
pid runs with the same start time; a process on another machine while its heartbeat
(refreshed every ``HEARTBEAT_SECONDS`` by :meth:`Store.keep_alive`) is younger than
``LEASE_SECONDS``. :meth:`Store.finish` and :meth:`Store.mark` write only for the
process that holds the claim, and never change a finished run.

Opening: a writer (``Store(path)``) checks that the file is a pezoo store and runs
SQLite's ``quick_check`` before it writes anything; a reader (``Store(path,
readonly=True)``) opens the file read-only and never creates, migrates or switches it to
WAL. Whatever goes wrong is a :class:`StoreError` that says what: read-only or
unwritable (:class:`StoreAccessError`), disk full (:class:`StoreFullError`), damaged
(:class:`StoreCorruptError`), not a pezoo store (:class:`NotAStoreError`).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import socket
import sqlite3
import stat
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.files import NotRegularFileError, open_regular

if TYPE_CHECKING:
    from harness.config import RunConfig
    from harness.evaluate import LengthMetrics

SCHEMA_VERSION = 2
"""2: ``runs.owner`` and ``runs.heartbeat`` (claims). A schema-1 store is migrated in place
by the first writer (finished runs untouched); readers read either."""

HEARTBEAT_SECONDS = 30.0
"""How often :meth:`Store.keep_alive` refreshes the heartbeat of this process's claims."""

LEASE_SECONDS = 300.0
"""A claim held from another machine lapses when its heartbeat is older than this."""

_SQLITE_MAGIC = b"SQLite format 3\x00"

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
    exact_match    REAL NOT NULL,
    token_accuracy REAL NOT NULL,
    PRIMARY KEY (run_id, length)
);
CREATE TABLE IF NOT EXISTS diagnostics (
    run_id TEXT PRIMARY KEY REFERENCES runs(run_id) ON DELETE CASCADE,
    body   TEXT NOT NULL  -- JSON: what the encoding did on one example (harness.diagnostics)
);
"""

_MIGRATIONS = {  # from schema version N to N + 1, in one write transaction
    1: ["ALTER TABLE runs ADD COLUMN owner TEXT", "ALTER TABLE runs ADD COLUMN heartbeat REAL"],
}

_TABLES = {"meta", "runs", "metrics", "diagnostics"}


# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------


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
            code = getattr(exc, "sqlite_errorcode", None)
            busy = (code & 0xFF if isinstance(code, int) else None) in (_BUSY, _LOCKED) or "locked" in str(exc)
            if not busy or time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


class StoreError(RuntimeError):
    """The store cannot be used; the message says why and what to do."""


class StoreAccessError(StoreError):
    """Permission denied, a read-only file or folder, or a read-only filesystem."""


class StoreFullError(StoreError):
    """The disk (or the filesystem's quota) holding the store is full."""


class StoreCorruptError(StoreError):
    """SQLite finds the store damaged."""


class NotAStoreError(StoreError):
    """The file is not a SQLite database, or is one without pezoo's tables."""


class ClaimLostError(StoreError):
    """This process no longer holds the claim on a run it tries to record."""


# SQLite's primary result codes (https://sqlite.org/rescode.html)
_PERM, _BUSY, _LOCKED, _READONLY, _IOERR, _CORRUPT = 3, 5, 6, 8, 10, 11
_FULL, _CANTOPEN, _AUTH, _NOTADB = 13, 14, 23, 26
_IOERR_SHMSIZE = _IOERR | (19 << 8)


# --------------------------------------------------------------------------------------
# Who holds a claim
# --------------------------------------------------------------------------------------


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


_BOOT_ID = _read("/proc/sys/kernel/random/boot_id")  # changes at every boot (Linux)


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks after boot) of a process, from ``/proc/<pid>/stat``
    (fields 3 and 22); None without procfs."""
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return None
    fields = text.rpartition(")")[2].split()  # the command name (field 2) may hold spaces
    return fields[0], int(fields[19])


@dataclass(frozen=True)
class Owner:
    """The process holding a claim.

    Attributes:
        host: the machine's name (``socket.gethostname()``).
        pid: the process id.
        start: when the process started (clock ticks after boot), to tell it from a later
            process given the same pid; None where unknown (no procfs).
        boot: the machine's boot id, to tell a claim from before a reboot; None if unknown.
        pidns: the pid namespace: pids compare only inside one (containers); None if unknown.
    """

    host: str
    pid: int
    start: int | None = None
    boot: str | None = None
    pidns: str | None = None

    @classmethod
    def this_process(cls) -> Owner:
        pid = os.getpid()
        stat_ = _proc_stat(pid)
        try:
            pidns = os.readlink("/proc/self/ns/pid")
        except OSError:
            pidns = None
        return cls(socket.gethostname(), pid, stat_[1] if stat_ else None, _BOOT_ID, pidns)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> Owner | None:
        if not text:
            return None
        try:
            d = json.loads(text)
            return cls(str(d["host"]), int(d["pid"]), d.get("start"), d.get("boot"), d.get("pidns"))
        except (ValueError, KeyError, TypeError):
            return None

    def alive(self, heartbeat: float | None, now: float, lease: float) -> bool:
        """Whether the claim still stands: on this machine (same boot, same pid namespace),
        the process runs and is the one that claimed; elsewhere, its heartbeat is recent.

        A claim with this machine's name but another boot id is either this machine's
        from before its last boot, or another machine's that has the same name (cloned
        VMs, containers named alike): it is taken for the former only when its last
        heartbeat is older than this boot; otherwise the lease decides, as for any
        other machine."""
        here = Owner.this_process()
        if (self.host, self.boot, self.pidns) == (here.host, here.boot, here.pidns):
            return _process_alive(self.pid, self.start)
        if heartbeat is None:
            return False
        if self.host == here.host and self.boot is not None and here.boot is not None and self.boot != here.boot:
            booted = _boot_time()
            if booted is not None and heartbeat < booted:
                return False  # claimed before this machine last booted
        return now - heartbeat < lease


def _boot_time() -> float | None:
    """When this machine booted (Unix time; ``btime`` in ``/proc/stat``), or None."""
    text = _read("/proc/stat")
    for line in (text or "").splitlines():
        if line.startswith("btime "):
            try:
                return float(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def _process_alive(pid: int, start: int | None) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    stat_ = _proc_stat(pid)
    if stat_ is None:
        return True
    state, ticks = stat_
    if state in ("Z", "X"):
        return False  # killed, not yet reaped by its parent
    return start is None or ticks == start


@dataclass(frozen=True)
class Claim:
    """What :meth:`Store.claim` (or :meth:`Store.check`) found.

    Attributes:
        run_id: the run.
        status: ``taken`` (this process holds it now), ``finished`` (the store holds it
            finished: nothing to do) or ``busy`` (another process holds it).
        holder: for ``busy``, who holds it ("claimed by host:pid since ..."); for
            ``taken``, the stale claim of a process that is gone, if one was taken over.
        deaths: for ``taken``, how many processes in a row died while training the run
            (killed, or crashed: a segfault, the OOM killer) without its checkpoint moving
            on in between; 0 when no dead process's claim was taken over.
    """

    run_id: str
    status: str
    holder: str | None = None
    deaths: int = 0

    @property
    def taken(self) -> bool:
        return self.status == "taken"


_DEATHS = re.compile(r"^processes died while training it: (\d+) in a row, at checkpoint step (-?\d+)")


def _count_death(before: str | None, step: int | None) -> tuple[int, str]:
    """(deaths, note) once one more process died holding a run whose running row says
    ``before`` (the note of the deaths before, or nothing) and whose checkpoint is at
    ``step`` now (None: unknown, counted as no progress)."""
    match = _DEATHS.match(before or "")
    deaths, at = (int(match[1]), int(match[2])) if match else (0, -1)  # -1: step unknown
    if step is not None and at >= 0 and step > at:  # progress since the last death: a kill, not a crash loop
        deaths = 0
    now = at if step is None else step
    return deaths + 1, f"processes died while training it: {deaths + 1} in a row, at checkpoint step {now}"


def _describe(owner: Owner | None, since: float | None, heartbeat: float | None, now: float) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if since else "an unknown time"
    if owner is None:
        return f"claimed by an unknown process since {when}"
    text = f"claimed by {owner.host}:{owner.pid} since {when}"
    if heartbeat is not None and owner.host != socket.gethostname():
        text += f" (last heartbeat {now - heartbeat:.0f}s ago)"
    return text


# --------------------------------------------------------------------------------------
# The store
# --------------------------------------------------------------------------------------


class Store:
    """Results store at ``path``.

    A writer (the default) creates the store on first use (parent folders included),
    migrates an older schema and checks the file with SQLite's ``quick_check`` before
    anything is written. ``readonly=True`` opens an existing store without changing it
    (works on a read-only file, folder or filesystem); writing then raises StoreError.

    Raises:
        StoreError: (one of its subclasses) the file cannot be used; the message says why.
    """

    lease_seconds = LEASE_SECONDS

    def __init__(self, path: str | Path, *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._db: sqlite3.Connection | None = None
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
        self._conn.row_factory = sqlite3.Row

    # -- opening ---------------------------------------------------------------------
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
        if existing and (why := self._access_problem()) is not None:
            # before SQLite opens it: connecting creates -wal/-shm files beside the store,
            # read-only ones for a read-only store, which then stand in the way of the fix
            readable = os.access(self.path, os.R_OK, **_EFFECTIVE)
            tail = (
                ". The store is intact: `pezoo results`, `pezoo sweep plan` and `pezoo leaderboard export` can "
                "read it as it is"
                if readable
                else ""
            )
            raise StoreAccessError(f"results store {self.path} cannot be written: {why}{tail}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        self._check_pezoo(allow_empty=True)
        if existing:
            self._quick_check()
        _wal_mode(db)
        db.execute("PRAGMA foreign_keys=ON")
        self._create_schema()

    def _open_reader(self) -> None:
        if not self.path.exists():
            raise StoreError(f"no results store at {self.path}; run `pezoo bench` first")
        if not self._check_header():
            raise NotAStoreError(f"results store {self.path} is an empty file, not a pezoo store")
        uri = self.path.resolve().as_uri()
        if not os.access(self.path, os.W_OK, **_EFFECTIVE) and not _has_content(Path(f"{self.path}-wal")):
            # a store this user may not write, with every commit in the main file: read it as
            # immutable, so SQLite leaves no (read-only, in the way) -shm file beside it
            self._db = sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=30.0, isolation_level=None)
            self._check_pezoo(allow_empty=False)
            return
        try:
            self._db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=30.0, isolation_level=None)
            self._check_pezoo(allow_empty=False)
        except sqlite3.OperationalError:
            # A WAL store in a folder this process cannot write, or on a full disk: SQLite
            # cannot create the -shm file it reads through. With no (or an empty) -wal file
            # beside it, no writer is at work and every commit is in the main file, which
            # can then be read as immutable.
            self._close_quietly()
            if _has_content(Path(f"{self.path}-wal")):
                raise
            self._db = sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=30.0, isolation_level=None)
            self._check_pezoo(allow_empty=False)

    def _check_pezoo(self, *, allow_empty: bool) -> int | None:
        """The file's schema version (None for a database without tables, where allowed);
        NotAStoreError for a SQLite database that is not a pezoo store."""
        tables = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not tables and allow_empty:
            return None
        if "meta" not in tables or "runs" not in tables:
            listed = ", ".join(sorted(tables)[:8]) or "none"
            raise NotAStoreError(
                f"results store {self.path} is a SQLite database but not a pezoo store (its tables: {listed}); "
                "nothing was changed. Point --store at a pezoo store, or at a new path to start one"
            )
        row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        try:
            version = int(row[0])
        except (TypeError, ValueError):
            raise NotAStoreError(
                f"results store {self.path} has a meta table without a pezoo schema version; not a pezoo store"
            ) from None
        if version > SCHEMA_VERSION or version < 1:
            raise StoreError(
                f"results store {self.path} has schema {version}, this pezoo reads up to {SCHEMA_VERSION}; "
                "upgrade pezoo to use it"
            )
        return version

    def _quick_check(self) -> None:
        rows = [" ".join(str(r[0]).split()) for r in self._conn.execute("PRAGMA quick_check(3)")]
        if rows != ["ok"]:
            raise self._corrupt("quick_check: " + "; ".join(rows))

    def _create_schema(self) -> None:
        # Tables, the version row and migrations are made in one write transaction, so two
        # processes opening a new store at once cannot both see "no version yet" and both
        # insert it, and a migration is all or nothing.
        with self._transaction() as db:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            version = int(db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise StoreError(f"results store {self.path} has schema {version}, this pezoo reads {SCHEMA_VERSION}")
            for step in range(version, SCHEMA_VERSION):
                for statement in _MIGRATIONS[step]:
                    db.execute(statement)
            db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))

    # -- what went wrong -------------------------------------------------------------
    def _corrupt(self, detail: str) -> StoreCorruptError:
        return StoreCorruptError(
            f"results store {self.path} is corrupt (SQLite: {detail}); nothing was written to it. Keep the file: "
            "restore the store from a backup (or export its results from one with `pezoo leaderboard export "
            "--store BACKUP`), or salvage what is readable into a new store with `sqlite3 "
            f"{self.path} .recover | sqlite3 NEW.sqlite` and point --store at that; runs published under "
            "leaderboard/results come back into a new store with `pezoo leaderboard import`"
        )

    def _access_problem(self) -> str | None:
        """Why this process may not write (or, opened read-only, read) the store, or None
        if the permissions look fine."""
        folder = self.path.parent if self.path.parent != Path("") else Path(".")
        if self.readonly:
            if self.path.exists() and not os.access(self.path, os.R_OK, **_EFFECTIVE):
                return f"permission denied: this user cannot read it ({_mode(self.path)})"
            return None
        probe = folder if folder.exists() else next((p for p in folder.parents if p.exists()), Path("/"))
        try:
            if os.statvfs(probe).f_flag & os.ST_RDONLY:
                return f"it is on a read-only filesystem ({probe})"
        except OSError:
            pass
        if not folder.exists():
            return f"its folder {folder} does not exist and cannot be created here"
        if self.path.exists():
            if not os.access(self.path, os.R_OK, **_EFFECTIVE):
                return f"permission denied: this user cannot read it ({_mode(self.path)})"
            if not os.access(self.path, os.W_OK, **_EFFECTIVE):
                return f"the file is read-only ({_mode(self.path)}); `chmod u+w {self.path}` makes it writable"
        if not os.access(folder, os.W_OK | os.X_OK, **_EFFECTIVE):
            return (
                f"its folder {folder} is not writable ({_mode(folder)}): SQLite creates {self.path.name}-wal, "
                f"{self.path.name}-shm and journal files beside the store, so it cannot write even a writable "
                "store file there; make the folder writable or copy the store to one that is"
            )
        wal, shm = Path(f"{self.path}-wal"), Path(f"{self.path}-shm")
        if wal.exists() and not os.access(wal, os.W_OK, **_EFFECTIVE):
            # never advise removing the -wal: it may hold commits not yet in the store file
            return f"{wal} is read-only ({_mode(wal)}): `chmod u+w {wal}` makes it writable"
        if shm.exists() and not os.access(shm, os.W_OK, **_EFFECTIVE):
            return (
                f"{shm} is read-only ({_mode(shm)}): `chmod u+w {shm}`, or remove it while no process has the "
                "store open (it is only an index; SQLite makes a new one)"
            )
        return None

    def _explain(self, exc: BaseException, doing: str) -> StoreError:
        """The StoreError that says what ``exc`` (from SQLite or the OS) means for this store."""
        code = getattr(exc, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        message = str(exc)
        os_errno = exc.errno if isinstance(exc, OSError) else None
        full = primary == _FULL or "disk is full" in message or os_errno in (errno.ENOSPC, errno.EDQUOT)
        # SQLite reports a full disk met while growing its -shm file, or while writing
        # the WAL on some filesystems, as an I/O error: tell them apart by the free space.
        if full or (primary == _IOERR and (code == _IOERR_SHMSIZE or _free_bytes(self.path) < 2**20)):
            return StoreFullError(
                f"results store {self.path}: the disk is full ({_free(self.path)} free) while {doing}; free some "
                "space and run again. Nothing half-written was kept: the store holds what it held before"
            )
        if primary == _CORRUPT or "malformed" in message:
            return self._corrupt(message)
        if primary == _NOTADB or "not a database" in message:
            return NotAStoreError(
                f"results store {self.path} is not a SQLite database ({message}); not a pezoo store, or one "
                "damaged at its start. Nothing was changed"
            )
        if primary in (_BUSY, _LOCKED) or "locked" in message:
            return StoreError(
                f"results store {self.path} stayed locked by another process for 30 s while {doing}; run again"
            )
        access = primary in (_PERM, _READONLY, _CANTOPEN, _AUTH) or "readonly" in message or "unable to open" in message
        if access or isinstance(exc, PermissionError) or os_errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            why = self._access_problem()
            if why is None:
                why = f"SQLite could not {'open' if primary == _CANTOPEN else 'write'} it ({message})"
            readable = _has_content(self.path) and os.access(self.path, os.R_OK, **_EFFECTIVE)
            if self.readonly or not readable:
                return StoreAccessError(
                    f"results store {self.path} cannot be {'read' if self.readonly else 'written'}: {why}"
                )
            return StoreAccessError(
                f"results store {self.path} cannot be written: {why}. The store is intact: `pezoo results`, "
                "`pezoo sweep plan` and `pezoo leaderboard export` can read it as it is"
            )
        if primary == _IOERR:
            return StoreError(f"results store {self.path}: I/O error while {doing} ({message}); is the disk healthy?")
        return StoreError(f"results store {self.path}: {doing} failed ({type(exc).__name__}: {message})")

    # -- plumbing --------------------------------------------------------------------
    def _close_quietly(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
            self._db = None

    def close(self) -> None:
        self._close_quietly()

    def __enter__(self) -> Store:
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
        holder = _describe(owner, since, heartbeat, now)
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
                deaths, note = _count_death(before, step)
            # an unfinished attempt: ours, or nobody's any more
            db.execute("DELETE FROM metrics WHERE run_id=?", (run_id,))
            db.execute("DELETE FROM diagnostics WHERE run_id=?", (run_id,))
            db.execute(
                "UPDATE runs SET pe=?, task=?, seed=?, preset=?, config=?, status='running', error=?,"
                " provenance=?, n_params=NULL, pe_params=NULL, final_loss=NULL, train_seconds=NULL,"
                " eval_seconds=NULL, started_at=?, finished_at=NULL, owner=?, heartbeat=? WHERE run_id=?",
                (*values[:5], note, *values[5:]),
            )
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
    ) -> bool:
        """Write all metrics (and the run's diagnostics, if any) and mark the run finished,
        atomically, releasing the claim.

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
            db.executemany(
                "INSERT OR REPLACE INTO metrics VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (run_id, split, m.length, m.token_length, m.n, m.exact_match, m.token_accuracy)
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
        run is replaced by the finished one (returns True; a process still training it
        then finds it finished and keeps it)."""
        return self.insert_finished_runs([(run, metrics, diagnostics)])[0]

    def insert_finished_runs(
        self,
        runs: Iterable[tuple[Mapping[str, Any], Iterable[Mapping[str, Any]], Mapping[str, Any] | None]],
    ) -> list[bool]:
        """:meth:`insert_finished` for each (run, metrics, diagnostics) of ``runs``, all in one
        transaction: if any fails to be written, none is (the error propagates)."""
        added = []
        runs = list(runs)
        with self._write(f"importing {len(runs)} run(s)") as db:
            for run, metrics, diagnostics in runs:
                added.append(self._insert_finished(db, run, metrics, diagnostics))
        return added

    @staticmethod
    def _insert_finished(
        db: sqlite3.Connection,
        run: Mapping[str, Any],
        metrics: Iterable[Mapping[str, Any]],
        diagnostics: Mapping[str, Any] | None,
    ) -> bool:
        run_id = run["run_id"]
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

    def diagnostics(self, run_id: str) -> dict[str, Any] | None:
        """The diagnostics stored with a finished run (``harness.diagnostics``), or None."""
        rows = self._query("SELECT body FROM diagnostics WHERE run_id=?", (run_id,))
        return json.loads(rows[0]["body"]) if rows else None

    def metrics(self, run_id: str) -> list[dict[str, Any]]:
        return [dict(r) for r in self._query("SELECT * FROM metrics WHERE run_id=? ORDER BY length", (run_id,))]


_EFFECTIVE = {"effective_ids": True} if os.access in os.supports_effective_ids else {}


def _has_content(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def _mode(path: Path) -> str:
    try:
        return stat.filemode(path.stat().st_mode)
    except OSError:
        return "mode unknown"


def _free_bytes(path: Path) -> float:
    """Bytes free to this user on the disk holding ``path`` (infinite when unknown)."""
    folder = next((p for p in (path.parent, *path.parents) if p.exists()), Path("."))
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return float("inf")


def _free(path: Path) -> str:
    free = _free_bytes(path)
    return "unknown" if free == float("inf") else f"{free / 2**20:.1f} MiB"
