"""Reading the files pezoo takes from people: results and diagnostics files, sweep files,
``retired.toml``, a site's manifest. Such a file may be a contributor's, and git stores
symlinks, so whatever sits at its path it is read within bounds or refused with a
:class:`FileReadError` (a ValueError) that says why:

- only a regular file (or a symlink to one) is opened: a FIFO would block the reader
  forever, ``/dev/zero`` never ends; neither is opened at all (the path is checked
  before ``open``, and the open file again after, with ``O_NONBLOCK`` so that a FIFO put
  there in between does not block either);
- at most ``limit`` bytes: a larger file (a 6 GB sparse file) is refused by its size
  before a byte of it is read, and a file that grows while read is refused at ``limit``;
- UTF-8 text only;
- TOML and JSON nest at most :data:`MAX_DEPTH` arrays and objects deep: ``a = [[[[...``
  100,000 levels deep is this error, never a ``RecursionError``.

Every reader of such files goes through :func:`read_text` (and :func:`parse_toml` or the
JSON parser of ``leaderboard.schema``), so the guarantees are the same for all of them.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser from PyPI (tomllib is tomli, taken into the standard library)
    import tomli as tomllib

MiB = 1 << 20
RESULTS_LIMIT = 64 * MiB
"""The largest results file (``*.jsonl``) read: a whole 225-run board exported at once is
about 5 MiB (records are 3-30 KiB each)."""
DIAGNOSTICS_LIMIT = 16 * MiB
"""The largest diagnostics file read (PRISM's cursor traces are about 0.1 MiB)."""
TOML_LIMIT = 1 * MiB
"""The largest sweep file or ``retired.toml`` read (the board's sweep file is a few KiB)."""
MANIFEST_LIMIT = 16 * MiB
"""The largest site manifest read (the board's lists about 70 pages in 5 KiB)."""

MAX_DEPTH = 32
"""How deeply arrays and objects (tables) may nest in a file read here: results records
nest 5 levels, diagnostics 6, sweep files 3."""


class FileReadError(ValueError):
    """A file could not be read within bounds. ``path`` is the file, ``reason`` why, without
    the path (callers that list problems by path use it), and ``str()`` both."""

    def __init__(self, path: Path, reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{path}: {reason}")


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _mib(size: int) -> str:
    return f"{size / MiB:.1f} MiB" if size >= MiB else f"{size:,} bytes"


def regular_file_problem(path: Path, limit: int | None = None) -> str | None:
    """Why ``path`` cannot be read as a regular file of at most ``limit`` bytes (missing,
    a FIFO, a device, a symlink to one, too large), or None. Opens nothing."""
    try:
        st = os.stat(path)  # follows a symlink: what matters is what would be read
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if not stat.S_ISREG(st.st_mode):
        via = " (through a symlink)" if os.path.islink(path) else ""
        return f"is {_kind(st.st_mode)}{via}, not a regular file: not read"
    if limit is not None and st.st_size > limit:
        return f"is {_mib(st.st_size)}, more than the {_mib(limit)} such a file may hold: not read"
    return None


def read_bytes(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    Raises:
        FileReadError: missing or unreadable, not a regular file, or larger than ``limit``.
    """
    path = Path(path)
    problem = regular_file_problem(path, limit)
    if problem is not None:
        raise FileReadError(path, problem)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise FileReadError(path, f"cannot be read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)  # what was opened, in case the path changed since the check
        if not stat.S_ISREG(st.st_mode):
            raise FileReadError(path, f"is {_kind(st.st_mode)}, not a regular file: not read")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(limit + 1 - size, MiB))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise FileReadError(path, f"cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if size > limit:
        raise FileReadError(path, f"grew past the {_mib(limit)} such a file may hold while it was read: not read")
    return b"".join(chunks)


def read_text(path: Path, limit: int) -> str:
    """:func:`read_bytes` decoded as UTF-8 (FileReadError if it is not)."""
    data = read_bytes(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileReadError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def nesting_depth(value: Any, cap: int = MAX_DEPTH) -> int:
    """How many arrays and objects deep ``value`` nests (0 for a scalar), without recursion;
    counting stops a level past ``cap``."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            depth += 1
            deepest = max(deepest, depth)
            if depth <= cap:
                stack.extend((v, depth) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def too_deep(max_depth: int = MAX_DEPTH) -> str:
    return f"nested more than {max_depth} levels deep"


def parse_toml(text: str) -> dict[str, Any]:
    """The TOML document ``text``, nesting at most :data:`MAX_DEPTH` levels; a leading byte
    order mark is skipped (tomllib called it "Invalid statement (at line 1, column 1)").

    Raises:
        ValueError: not TOML (the parser's message), or nested too deeply (never a
            RecursionError, whatever the text).
    """
    try:
        data = tomllib.loads(text.removeprefix("\ufeff"))  # a byte order mark (Windows editors): not content
    except RecursionError:  # tomllib recurses once per level of [[[[ or {{{{
        raise ValueError(f"not valid TOML here ({too_deep()})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"not valid TOML ({exc})") from None
    if nesting_depth(data) > MAX_DEPTH:
        raise ValueError(f"not valid TOML here ({too_deep()})")
    return data


def read_toml(path: Path, limit: int = TOML_LIMIT) -> dict[str, Any]:
    """The TOML file at ``path``, read by :func:`read_text` and parsed by :func:`parse_toml`.

    Raises:
        FileReadError: the file cannot be read within bounds, is not TOML, or nests too deeply.
    """
    text = read_text(path, limit)
    try:
        return parse_toml(text)
    except ValueError as exc:
        raise FileReadError(path, str(exc)) from None
