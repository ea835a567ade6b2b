"""What goes wrong with a store, as the :class:`StoreError` that says what and what to do.

Read-only or unwritable (:class:`StoreAccessError`), disk full (:class:`StoreFullError`),
damaged (:class:`StoreCorruptError`), not a pezoo store (:class:`NotAStoreError`), a claim
lost to another process (:class:`ClaimLostError`). :func:`explain` turns an error from
SQLite or the OS into the one that says what it means for the store at hand.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path

from harness.records.files import file_size_limit, size_limit_words


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


def is_busy(exc: BaseException) -> bool:
    """Whether SQLite's ``exc`` says the database is locked by another connection."""
    code = getattr(exc, "sqlite_errorcode", None)
    return (code & 0xFF if isinstance(code, int) else None) in (_BUSY, _LOCKED) or "locked" in str(exc)


EFFECTIVE = {"effective_ids": True} if os.access in os.supports_effective_ids else {}
"""Keyword arguments of ``os.access`` that check with the effective ids, where the platform can."""


def has_content(path: Path) -> bool:
    """Whether ``path`` is a file with at least one byte."""
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


def corrupt(path: Path, detail: str) -> StoreCorruptError:
    """The error for a store SQLite finds damaged (``detail``: what SQLite said)."""
    return StoreCorruptError(
        f"results store {path} is corrupt (SQLite: {detail}); nothing was written to it. Keep the file: "
        "restore the store from a backup (or export its results from one with `pezoo leaderboard export "
        "--store BACKUP`), or salvage what is readable into a new store with `sqlite3 "
        f"{path} .recover | sqlite3 NEW.sqlite` and point --store at that; runs published under "
        "leaderboard/results come back into a new store with `pezoo leaderboard import`"
    )


def access_problem(path: Path, readonly: bool) -> str | None:
    """Why this process may not write (or, opened read-only, read) the store at ``path``,
    or None if the permissions look fine."""
    folder = path.parent if path.parent != Path("") else Path(".")
    if readonly:
        if path.exists() and not os.access(path, os.R_OK, **EFFECTIVE):
            return f"permission denied: this user cannot read it ({_mode(path)})"
        return None
    probe = folder if folder.exists() else next((p for p in folder.parents if p.exists()), Path("/"))
    try:
        if os.statvfs(probe).f_flag & os.ST_RDONLY:
            return f"it is on a read-only filesystem ({probe})"
    except OSError:
        pass
    if not folder.exists():
        return f"its folder {folder} does not exist and cannot be created here"
    if path.exists():
        if not os.access(path, os.R_OK, **EFFECTIVE):
            return f"permission denied: this user cannot read it ({_mode(path)})"
        if not os.access(path, os.W_OK, **EFFECTIVE):
            return f"the file is read-only ({_mode(path)}); `chmod u+w {path}` makes it writable"
    if not os.access(folder, os.W_OK | os.X_OK, **EFFECTIVE):
        return (
            f"its folder {folder} is not writable ({_mode(folder)}): SQLite creates {path.name}-wal, "
            f"{path.name}-shm and journal files beside the store, so it cannot write even a writable "
            "store file there; make the folder writable or copy the store to one that is"
        )
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    if wal.exists() and not os.access(wal, os.W_OK, **EFFECTIVE):
        # never advise removing the -wal: it may hold commits not yet in the store file
        return f"{wal} is read-only ({_mode(wal)}): `chmod u+w {wal}` makes it writable"
    if shm.exists() and not os.access(shm, os.W_OK, **EFFECTIVE):
        return (
            f"{shm} is read-only ({_mode(shm)}): `chmod u+w {shm}`, or remove it while no process has the "
            "store open (it is only an index; SQLite makes a new one)"
        )
    return None


def _at_size_limit(path: Path, limit: int) -> bool:
    """Whether the store file, its -wal or its -journal is within a write (64 KiB, SQLite's
    largest page) of the file size ``limit``: SQLite reports a write refused past it (EFBIG)
    as a plain I/O error."""
    for f in (path, Path(f"{path}-wal"), Path(f"{path}-journal")):
        try:
            if f.stat().st_size > limit - 65_536:
                return True
        except OSError:
            continue
    return False


def explain(exc: BaseException, path: Path, readonly: bool, doing: str) -> StoreError:
    """The StoreError that says what ``exc`` (from SQLite or the OS) means for the store at
    ``path`` while ``doing``."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    message = str(exc)
    if primary is None and "disk I/O error" in message:  # Python 3.10's sqlite3 gives SQLite's text, not its code
        primary = _IOERR
    os_errno = exc.errno if isinstance(exc, OSError) else None
    full = primary == _FULL or "disk is full" in message or os_errno in (errno.ENOSPC, errno.EDQUOT)
    # SQLite reports a full disk met while growing its -shm file, or while writing
    # the WAL on some filesystems, as an I/O error: tell them apart by the free space.
    if full or (primary == _IOERR and (code == _IOERR_SHMSIZE or _free_bytes(path) < 2**20)):
        return StoreFullError(
            f"results store {path}: the disk is full ({_free(path)} free) while {doing}; free some "
            "space and run again. Nothing half-written was kept: the store holds what it held before"
        )
    limit = file_size_limit()
    if limit is not None and (os_errno == errno.EFBIG or (primary == _IOERR and _at_size_limit(path, limit))):
        return StoreError(
            f"results store {path}: a file of the store reached {size_limit_words(limit)} while {doing}; raise "
            "the limit (ulimit -f unlimited) and run again. Nothing half-written was kept: the store holds what it "
            "held before"
        )
    if primary == _CORRUPT or "malformed" in message:
        return corrupt(path, message)
    if primary == _NOTADB or "not a database" in message:
        return NotAStoreError(
            f"results store {path} is not a SQLite database ({message}); not a pezoo store, or one "
            "damaged at its start. Nothing was changed"
        )
    if is_busy(exc):
        return StoreError(f"results store {path} stayed locked by another process for 30 s while {doing}; run again")
    access = primary in (_PERM, _READONLY, _CANTOPEN, _AUTH) or "readonly" in message or "unable to open" in message
    if access or isinstance(exc, PermissionError) or os_errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        why = access_problem(path, readonly)
        if why is None:
            why = f"SQLite could not {'open' if primary == _CANTOPEN else 'write'} it ({message})"
        readable = has_content(path) and os.access(path, os.R_OK, **EFFECTIVE)
        if readonly or not readable:
            return StoreAccessError(f"results store {path} cannot be {'read' if readonly else 'written'}: {why}")
        return StoreAccessError(
            f"results store {path} cannot be written: {why}. The store is intact: `pezoo results`, "
            "`pezoo sweep plan` and `pezoo leaderboard export` can read it as it is"
        )
    if primary == _IOERR:
        return StoreError(f"results store {path}: I/O error while {doing} ({message}); is the disk healthy?")
    return StoreError(f"results store {path}: {doing} failed ({type(exc).__name__}: {message})")
