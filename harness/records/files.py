"""Writing the harness's own files (checkpoints, kept results) so that neither a killed
process, a second process writing the same file, nor a full disk leaves half a file.

A file is written to a temporary name of its own in the same folder,
``<name>.<pid>.<random>.tmp`` (two processes never share one), flushed to disk, then
renamed over ``<name>`` (``os.replace``, atomic on POSIX and Windows): a reader sees the
old file or the new one, never a mix. A write that fails removes its temporary file and
says whether the disk was full. Readers only ever open ``<name>``, so the temporary
file of a process killed mid-write is ignored; :func:`remove_stale_temps` deletes such
leftovers once they are a day old.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import secrets
import shutil
import sqlite3
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

STALE_TEMP_SECONDS = 24 * 3600
"""A temporary file this old belongs to a process that died mid-write (a checkpoint
takes seconds to write), so :func:`remove_stale_temps` may delete it."""

LOW_SPACE_BYTES = 1 << 20
"""Below this much free space, a write error that does not carry an errno (torch's zip
writer says "unexpected pos" or "file write failed") is taken to be a full disk."""

_TORCH_WRITE_FAILURES = ("unexpected pos", "file write failed", "PytorchStreamWriter failed")
_SQLITE_FULL = 13
"""SQLite's result code for a full disk (``sqlite3.SQLITE_FULL``, which Python 3.10's sqlite3 lacks)."""


class WriteError(OSError):
    """A file could not be written; ``disk_full`` says whether that was a full disk.

    The message names the file and the cause ("disk full: 0.0 MiB free in <folder>");
    the temporary file is already removed and the previous ``<name>``, if any, is intact.
    """

    def __init__(self, message: str, *, disk_full: bool) -> None:
        super().__init__(errno.ENOSPC if disk_full else errno.EIO, message)
        self.disk_full = disk_full

    def __str__(self) -> str:
        return str(self.strerror)


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or during, innermost last."""
    chain, seen = [], set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        chain.append(current)
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return chain


def free_bytes(folder: Path) -> int | None:
    """Free bytes on the file system holding ``folder`` (its nearest existing parent), or None."""
    folder = Path(folder)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def is_disk_full(exc: BaseException, folder: Path) -> bool:
    """Whether ``exc``, raised while writing into ``folder``, means the disk (or quota) is full.

    True for an ``OSError`` with errno ENOSPC or EDQUOT anywhere in its chain, SQLite's
    "database or disk is full" (SQLITE_FULL), and torch's zip-writer errors ("unexpected
    pos", "file write failed") when less than ``LOW_SPACE_BYTES`` is free in ``folder``.
    """
    for e in _causes(exc):
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(e, sqlite3.Error) and (
            getattr(e, "sqlite_errorcode", None) == _SQLITE_FULL or "disk is full" in str(e)
        ):
            return True
        if isinstance(e, RuntimeError) and any(s in str(e) for s in _TORCH_WRITE_FAILURES):
            free = free_bytes(folder)
            if free is not None and free < LOW_SPACE_BYTES:
                return True
    return False


def file_size_limit() -> int | None:
    """This process's limit on the size of a file it writes (``ulimit -f``, the soft
    ``RLIMIT_FSIZE``) in bytes, or None when there is none. A write past it fails with
    EFBIG (Python ignores the SIGXFSZ that would otherwise kill the process)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def size_limit_words(limit: int) -> str:
    """``this process's file size limit (ulimit -f: 64 KiB)``, the cause a message names."""
    return f"this process's file size limit (ulimit -f: {limit / 1024:,.0f} KiB)"


def describe_write_error(exc: BaseException, folder: Path) -> str:
    """``disk full (0.0 MiB free in <folder>)`` when it is, the file size limit when a write
    went past it (EFBIG), else the exception's type and first line."""
    if isinstance(exc, WriteError):
        return str(exc)
    limit = file_size_limit()
    if limit is not None and any(isinstance(e, OSError) and e.errno == errno.EFBIG for e in _causes(exc)):
        return f"the file grew past {size_limit_words(limit)}; raise it (ulimit -f unlimited)"
    if is_disk_full(exc, folder):
        free = free_bytes(folder)
        space = f"{free / 2**20:.1f} MiB free in {folder}" if free is not None else f"in {folder}"
        return f"disk full ({space})"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def write_atomically(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write ``path`` through ``write(file)`` so that it holds the old contents or the new, never half.

    Raises:
        WriteError: the folder could not be written or the data did not fit (``disk_full``);
            the temporary file is gone and ``path`` untouched.
    """
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for open()
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())  # a full disk may only show here (delayed allocation)
        os.replace(tmp, path)
    except BaseException as exc:
        cause = describe_write_error(exc, path.parent) if isinstance(exc, Exception) else None
        full = isinstance(exc, Exception) and is_disk_full(exc, path.parent)
        with contextlib.suppress(OSError):
            tmp.unlink()
        if cause is None:  # KeyboardInterrupt, SystemExit: cleaned up, and on its way
            raise
        raise WriteError(f"could not write {path}: {cause}", disk_full=full) from exc
    _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """Make the rename durable (best effort: not every platform can open a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_stale_temps(path: Path, older_than: float = STALE_TEMP_SECONDS) -> list[Path]:
    """Delete ``path``'s temporary files (``<name>.*tmp``) not modified for ``older_than``
    seconds: leftovers of processes killed mid-write. Returns those removed."""
    path = Path(path)
    removed = []
    now = time.time()
    for tmp in path.parent.glob(f"{glob.escape(path.name)}.*tmp"):
        try:
            if now - tmp.stat().st_mtime > older_than:
                tmp.unlink()
                removed.append(tmp)
        except OSError:  # gone already, or not ours to delete
            continue
    return removed


class NotRegularFileError(OSError):
    """A path the harness reads its own files from holds something else: a FIFO (opening
    one blocks until a writer comes, forever), a device (``/dev/zero`` never ends), a
    socket or a folder. The message names the path and what it is."""

    def __str__(self) -> str:
        return str(self.strerror)


def file_kind(mode: int) -> str:
    """What ``st_mode`` is, in words: "a FIFO", "a character device", ..."""
    kinds = (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading in binary, only if it is a regular file (a symlink to
    one is followed). It is opened without blocking and checked on the open descriptor,
    so a FIFO put there (even after a check of the name) never blocks the reader.

    Raises:
        NotRegularFileError: it is a FIFO, a device, a socket or a folder.
        OSError: it cannot be opened (missing, no permission).
    """

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(errno.EINVAL, f"{path} is {file_kind(mode)}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_regular(path: Path) -> None:
    """Raise :class:`NotRegularFileError` unless ``path`` is a regular file (following
    symlinks), or does not exist; for readers that must name a path, not a descriptor
    (``torch.load(mmap=True)``, SQLite). Opening it never blocks (``os.stat`` only)."""

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise NotRegularFileError(errno.EINVAL, f"{path} is {file_kind(mode)}, not a regular file")


def nearest_existing(folder: Path) -> Path | None:
    """``folder`` or the nearest of its parents that exists: where making ``folder`` starts
    (a file there means it cannot be made)."""
    return next((p for p in (folder, *folder.parents) if p.exists()), None)


def unwritable_folder(folder: Path) -> str | None:
    """Why runs could not write into ``folder`` (created when missing, as runs would), or None."""
    existing = nearest_existing(folder)
    if existing is None or not existing.is_dir():
        return f"{folder} cannot be created: {existing} is not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{folder}: {existing} is not writable by this user"
    return None
