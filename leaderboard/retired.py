"""Tables and rows that have left the board: a (preset, task) superseded by a later
protocol's table or withdrawn with its task, and rows replaced by a corrected run.

A board is re-run under a new protocol one task at a time (docs/leaderboard.md). While
both are published, a task has two tables that rank the same encodings under different
training, and a reader cannot tell which one the board stands behind. Once the new
protocol's table for a task is complete, the old one leaves the board. It is named in
``leaderboard/retired.toml``, next to the sweep files::

    [[retired]]
    preset = "quick"            # the table that leaves the board ...
    task = "copy"
    superseded_by = "board"     # ... because this preset's table for the task is complete
    why = "3000 steps rank learning speed, not extrapolation (docs/protocol-study.md)"

A single row can leave the board too, when a corrected run of it replaces it (a variant
run with a wrong option, say). It is named by the label the board shows, and its
successor must be published on every task and seed it was::

    [[retired_row]]
    preset = "board"
    row = "rope → dynamic×4 L=22 (same weights)"        # the row that leaves the board ...
    superseded_by = "rope → dynamic×4 L=24 (same weights)"  # ... for this one
    why = "L = 22 is shorter than the 24-token training sequences"

A table can also leave the board with nothing replacing it, when the board no longer
plans its task (a task dropped for the compute it would take, say) and the old protocol's
table would otherwise stand alone for it. It is withdrawn, with the reason::

    [[withdrawn]]
    preset = "quick"
    task = "addition"
    why = "the board's protocol on addition costs more than this machine has"

The results files are append-only and stay as they are: the retired runs remain published
(``leaderboard check`` validates them, ``leaderboard import`` still counts them as done, so
a sweep does not train them again); the board leaves them out and says which tables it
left out and why. A retirement holds only while the superseding table is complete by its
sweep file's plan: :func:`leaderboard.board.assemble` refuses one that would leave a task
with no complete table, and one that matches no published run (a typo); it refuses a
withdrawal while a sweep file still plans the task under another preset, or another
preset's runs on it are published (that table, once complete, supersedes it: a
``[[retired]]`` entry).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.records.inputs import FileReadError, read_toml

RETIRED_FILE = "retired.toml"
"""The file, next to the results folder, that lists the retired tables (not a sweep file)."""

_KEYS = ("preset", "task", "superseded_by", "why")
_ROW_KEYS = ("preset", "row", "superseded_by", "why")
_WITHDRAWN_KEYS = ("preset", "task", "why")
_ARRAYS = {"retired": _KEYS, "retired_row": _ROW_KEYS, "withdrawn": _WITHDRAWN_KEYS}


class RetiredFileError(ValueError):
    """``retired.toml`` cannot be read: not TOML, an unknown or missing key, a repeated table."""


@dataclass(frozen=True)
class Retirement:
    """One retired table: ``preset`` on ``task``, superseded by ``superseded_by``'s table for
    the same task, or withdrawn with no table replacing it (``superseded_by`` None), for the
    reason ``why`` (one sentence the board prints)."""

    preset: str
    task: str
    superseded_by: str | None
    why: str


@dataclass(frozen=True)
class RowRetirement:
    """One retired row: the runs of ``preset`` whose board label is ``row``, superseded by
    the row labelled ``superseded_by``, for the reason ``why``."""

    preset: str
    row: str
    superseded_by: str
    why: str


def read_retirements(folder: Path) -> tuple[Retirement | RowRetirement, ...]:
    """The retirements listed in ``folder / RETIRED_FILE``; none when the file does not exist.

    Raises:
        RetiredFileError: the file exists but is not a valid list of retirements.
    """
    path = folder / RETIRED_FILE
    if not (path.exists() or path.is_symlink()):
        return ()
    try:  # a regular file of bounded size and nesting: a FIFO or [[[[... is an error, not a hang
        data = read_toml(path)
    except FileReadError as exc:
        raise RetiredFileError(f"{path}: {exc.reason}") from None
    return parse_retirements(data, str(path))


def parse_retirements(data: object, where: str = RETIRED_FILE) -> tuple[Retirement | RowRetirement, ...]:
    """Retirements from the parsed TOML ``data`` (``{"retired": [{...}, ...], "retired_row":
    [...], "withdrawn": [...]}``); ``where`` names the file in errors."""
    extra = sorted(set(data) - set(_ARRAYS)) if isinstance(data, dict) else []
    if not isinstance(data, dict) or extra:
        raise RetiredFileError(
            f"{where}: only [[retired]], [[retired_row]] and [[withdrawn]] tables belong here "
            f"(found {', '.join(extra)})"
        )
    out: list[Retirement | RowRetirement] = []
    for array, keys in _ARRAYS.items():
        entries = data.get(array, [])
        if not isinstance(entries, list):
            raise RetiredFileError(f"{where}: {array!r} must be an array of tables ([[{array}]])")
        for i, entry in enumerate(entries, start=1):
            out.append(_entry(entry, keys, out, f"{where}, [[{array}]] #{i}"))
    return tuple(out)


def _entry(
    entry: object, keys: tuple[str, ...], seen: list[Retirement | RowRetirement], at: str
) -> Retirement | RowRetirement:
    """One [[retired]], [[retired_row]] or [[withdrawn]] table, checked against those before it."""
    if not isinstance(entry, dict):
        raise RetiredFileError(f"{at}: not a table")
    unknown = sorted(set(entry) - set(keys))
    missing = [k for k in keys if k not in entry]
    if unknown or missing:
        parts = ([f"unknown key(s) {', '.join(unknown)}"] if unknown else []) + (
            [f"missing {', '.join(missing)}"] if missing else []
        )
        raise RetiredFileError(f"{at}: {'; '.join(parts)} (the keys are {', '.join(keys)})")
    bad = [k for k in keys if not isinstance(entry[k], str) or not entry[k].strip()]
    if bad:
        raise RetiredFileError(f"{at}: {', '.join(bad)} must be non-empty text")
    if keys == _ROW_KEYS:
        row = RowRetirement(*(entry[k].strip() for k in keys))
        if row.row == row.superseded_by:
            raise RetiredFileError(f"{at}: row {row.row!r} cannot supersede itself")
        if any(isinstance(o, RowRetirement) and (o.preset, o.row) == (row.preset, row.row) for o in seen):
            raise RetiredFileError(f"{at}: row {row.row!r} of preset {row.preset!r} is retired twice")
        return row
    if keys == _WITHDRAWN_KEYS:
        r = Retirement(entry["preset"].strip(), entry["task"].strip(), None, entry["why"].strip())
    else:
        r = Retirement(*(entry[k].strip() for k in keys))
    if r.preset == r.superseded_by:
        raise RetiredFileError(f"{at}: preset {r.preset!r} cannot supersede itself")
    if any(isinstance(o, Retirement) and (o.preset, o.task) == (r.preset, r.task) for o in seen):
        raise RetiredFileError(f"{at}: preset {r.preset!r} on {r.task!r} is retired or withdrawn twice")
    return r
