"""Export finished runs from the local SQLite store to append-only results files, and
import published runs back into a store.

Each export writes at most one new file per preset, named
``<preset>-<YYYYMMDD>-<digest>.jsonl`` (the UTC date of the newest run in it and a hash of
its run ids), holding only runs not yet published under the results folder. An existing
results file is never opened for writing: a new file is written under a temporary name
and hard-linked into place, which fails rather than replace a file of the same name.
Exporting the same store twice therefore adds nothing the second time.

Import is the way back: it gives a store (a new machine's, a contributor's) every published
run as finished, so `pezoo bench` and `pezoo sweep plan` skip what the board already has.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import sqlite3
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.lm.record import LmRecord
from harness.records.inputs import RESULTS_LIMIT, read_text
from harness.records.record import RunRecord, diagnostics_problem
from harness.records.store import Store
from harness.tasks.lm import LM_TASKS
from leaderboard.board import retire
from leaderboard.lm_results import LmResultsError, Located, read_lm_results, set_problems
from leaderboard.plans import read_plans
from leaderboard.records import BoardError, check_protocols
from leaderboard.retired import RetiredFileError, read_retirements
from leaderboard.schema import (
    DIAGNOSTICS_DIR,
    SUFFIX,
    Record,
    ResultsError,
    iter_lines,
    parse_json,
    read_diagnostics,
    read_results,
    run_ids_digest,
    to_published,
    validate_record,
    weights_problems,
)


class ExportError(RuntimeError):
    """The store cannot be exported (missing, or a run that would not make a valid record)."""


@dataclass(frozen=True)
class ExportSummary:
    """What an export did: new files with their run counts, and what it left out."""

    written: list[tuple[Path, int]] = field(default_factory=list)
    already_published: int = 0
    not_finished: int = 0
    diagnostics: int = 0


@dataclass(frozen=True)
class ImportSummary:
    """What an import did: runs added to the store, runs it already held finished, and
    how many of the added runs came with diagnostics."""

    imported: int = 0
    already_in_store: int = 0
    diagnostics: int = 0
    differing: tuple[str, ...] = ()
    """Run ids among ``already_in_store`` whose record in the store is not the published one
    (the store's is kept)."""


def file_name(preset: str, records: Sequence[Mapping[str, Any]]) -> str:
    """``<preset>-<YYYYMMDD>-<12 hex>.jsonl`` for a batch of records of one preset."""
    newest = max(r["timings"]["finished_at"] for r in records)
    day = dt.datetime.fromtimestamp(newest, tz=dt.timezone.utc).strftime("%Y%m%d")
    digest = run_ids_digest(r["run_id"] for r in records)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", preset)
    return f"{safe}-{day}-{digest}{SUFFIX}"


def write_new_file(path: Path, records: Sequence[Mapping[str, Any]]) -> None:
    """Write ``records`` to ``path``, which must not exist yet (FileExistsError otherwise)."""
    write_new_text(path, "".join(iter_lines(records)))


def export(store_path: Path, out_dir: Path) -> ExportSummary:
    """Publish every finished run of the store not yet under ``out_dir``.

    Raises:
        ExportError: no store at ``store_path``, or a run that fails the schema.
        ResultsError: an existing results file under ``out_dir`` is malformed (nothing is
            written: deduplication needs to read every published run).
    """
    if not store_path.is_file():
        raise ExportError(f"no results store at {store_path}; run `pezoo bench` first")
    problem = shadowing_problem(out_dir)
    if problem:
        raise ExportError(problem)
    with exporting(out_dir):
        return _export(store_path, out_dir)


PACKAGES = ("pezoo", "harness", "leaderboard")
"""The top-level packages this distribution installs: a folder of one of these names where
Python looks for modules shadows the installed package."""


def shadowing_problem(out_dir: Path, cwd: Path | None = None) -> str | None:
    """Why writing results to ``out_dir`` would make a folder that shadows an installed
    package, or None.

    The default ``--out leaderboard/results`` is meant for a checkout, where ``./leaderboard``
    *is* the package. Run anywhere else, it created ``./leaderboard/``, which ``python -m
    harness.cli`` (the current folder first on ``sys.path``) then imported as the
    ``leaderboard`` package, without its templates. So a folder named after one of
    :data:`PACKAGES`, in the current folder or on ``sys.path``, is refused when export would
    create it, or when it exists and is no package (no ``__init__.py``: a previous export's).
    """
    here = (cwd or Path.cwd()).resolve()
    roots = {here} | {Path(p).resolve() for p in sys.path if p}
    target = out_dir if out_dir.is_absolute() else here / out_dir
    target = Path(os.path.normpath(target))
    for folder in (target, *target.parents):
        if folder.name not in PACKAGES or folder.parent not in roots:
            continue
        if folder.is_dir() and (folder / "__init__.py").is_file():
            return None  # the package's own folder (a checkout): results beside its modules
        state = "is a folder that is no package" if folder.exists() else "would be created"
        return (
            f"refusing to export to {out_dir}: {folder} {state}, named like the installed {folder.name!r} "
            f"package where Python looks for modules ({folder.parent}), so `python -m harness.cli` there "
            f"would import it instead of the package; pass --out to a folder of another name "
            f"(e.g. --out results), or run from the pezoo checkout"
        )
    return None


@contextlib.contextmanager
def exporting(out_dir: Path) -> Iterator[None]:
    """Hold the results folder for one export at a time: two exports at once (two
    terminals, or a script beside a person) would each read the same published runs and
    both write a new file of the same records, which ``leaderboard check`` then rejects as
    duplicates. The second export waits for the first (:func:`folder_lock`)."""
    with folder_lock(out_dir):
        yield


@contextlib.contextmanager
def folder_lock(out_dir: Path) -> Iterator[None]:
    """Hold ``out_dir`` (a results folder being exported to, a site folder being built)
    for one writer at a time: an exclusive ``flock`` on the folder's parent directory (no
    lock file to leave behind or commit), so an export and a build of the same board's
    folders wait for each other too. Where ``fcntl`` does not exist (Windows), writers
    are not serialised."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Linux or macOS
        yield
        return
    parent = out_dir.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


LM_FOLDER = "lm"
"""The subfolder of the results folder that holds the language-modelling runs (the LM page's,
``leaderboard.lm_results``); the board's runs are the folder's own files."""


def _export(store_path: Path, out_dir: Path) -> ExportSummary:
    existing = read_results(out_dir)
    try:
        lm_existing = read_lm_results(out_dir / LM_FOLDER)
    except LmResultsError as exc:
        raise ExportError(f"nothing written: the published LM results do not read:\n  {exc}") from None
    published = {r.run_id for r in existing} | {r.run_id for r in lm_existing}
    batches: dict[str, list[dict[str, Any]]] = {}
    lm_batches: dict[str, list[dict[str, Any]]] = {}
    already = unfinished = 0
    problems = []
    with Store(store_path, readonly=True) as store:
        for run in store.runs():
            if run["status"] != "finished":
                unfinished += 1
                continue
            if run["run_id"] in published:
                already += 1
                continue
            stored = store.record(run["run_id"])
            if stored is None:  # no longer finished since it was listed
                unfinished += 1
                continue
            record = to_published(stored)
            reasons = validate_record(record)
            if reasons:
                problems.append(f"run {run['run_id']} ({run['pe']} on {run['task']}): {'; '.join(reasons)}")
                continue
            (lm_batches if record["task"] in LM_TASKS else batches).setdefault(record["preset"], []).append(record)
    if problems:
        raise ExportError("these runs do not make valid results records:\n  " + "\n  ".join(problems))
    _check_one_protocol_per_table(existing, batches, out_dir)
    _check_weights_sources(existing, batches, out_dir)
    _check_lm_set(lm_existing, lm_batches, out_dir / LM_FOLDER)
    written = []
    for folder, grouped in ((out_dir, batches), (out_dir / LM_FOLDER, lm_batches)):
        if grouped:
            folder.mkdir(parents=True, exist_ok=True)
        for preset in sorted(grouped):
            records = sorted(grouped[preset], key=lambda r: (r["task"], r["pe"], r["seed"], r["run_id"]))
            path = folder / file_name(preset, records)
            write_new_file(path, records)
            written.append((path, len(records)))
    return ExportSummary(written, already, unfinished, export_diagnostics(store_path, out_dir))


def _check_one_protocol_per_table(
    existing: Sequence[Record], batches: Mapping[str, Sequence[Mapping[str, Any]]], out_dir: Path
) -> None:
    """ExportError, before anything is written, if the new runs would put two protocols in
    one board table (``leaderboard.records.check_protocols``, after the tables and rows that
    ``retired.toml`` next to ``out_dir`` retires): ``check`` would pass such a file and
    ``build`` refuse it."""
    new = [
        Record(record, out_dir / file_name(preset, records), line)
        for preset, records in batches.items()
        for line, record in enumerate(records, start=1)
    ]
    if not new:
        return
    try:
        kept, _, _ = retire([*existing, *new], read_plans(out_dir.parent), read_retirements(out_dir.parent))
        check_protocols(kept)
    except (BoardError, RetiredFileError) as exc:
        raise ExportError(f"nothing written: the new runs would make a board that `build` refuses:\n{exc}") from None


def _check_lm_set(
    existing: Sequence[LmRecord], batches: Mapping[str, Sequence[Mapping[str, Any]]], folder: Path
) -> None:
    """ExportError, before anything is written, if the new language-modelling runs would make
    a set the LM page refuses (``leaderboard.lm_results.set_problems``: one protocol and one
    corpus per table, a variant's trained run published with it, one record per row and seed)."""
    new = [
        Located(LmRecord.of_run(RunRecord.from_dict(record)), folder / file_name(preset, records), line)
        for preset, records in batches.items()
        for line, record in enumerate(records, start=1)
    ]
    if not new:
        return
    problems = set_problems([*(Located(r) for r in existing), *new])
    if problems:
        raise ExportError(f"nothing written: the new LM runs would make results the LM page refuses:\n  "
                          f"{LmResultsError(problems)}")  # fmt: skip


def _check_weights_sources(
    existing: Sequence[Record], batches: Mapping[str, Sequence[Mapping[str, Any]]], out_dir: Path
) -> None:
    """ExportError, before anything is written, if a new run evaluated the kept weights of
    a run that is neither published nor exported with it, or does not match that run
    (``leaderboard.schema.weights_problems``): ``check`` would refuse the files."""
    new = [
        Record(record, out_dir / file_name(preset, records), line)
        for preset, records in batches.items()
        for line, record in enumerate(records, start=1)
    ]
    problems = [reason for _, _, reason in weights_problems([*existing, *new])]
    if problems:
        raise ExportError(
            "nothing written: runs evaluated on kept weights whose run is in neither the store (finished) nor the "
            "results, or is not the run they say:\n  " + "\n  ".join(problems)
        )


def export_diagnostics(store_path: Path, out_dir: Path) -> int:
    """Write ``<out_dir>/diagnostics/<run_id>.json`` for every published run whose store
    entry has diagnostics and no file yet (existing files are never changed). Returns how many."""
    published = {r.run_id for r in read_results(out_dir)}
    count = 0
    with Store(store_path, readonly=True) as store:
        for run_id in sorted(published):
            path = out_dir / DIAGNOSTICS_DIR / f"{run_id}.json"
            if path.exists():
                continue
            body = store.diagnostics(run_id)
            if body is None or diagnostics_problem(body):  # the site could not draw it
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            write_new_text(path, json.dumps(body, sort_keys=True, separators=(",", ":")) + "\n")
            count += 1
    return count


def write_new_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, which must not exist yet (FileExistsError otherwise)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)  # atomic, and refuses to replace an existing file
    finally:
        tmp.unlink(missing_ok=True)


def _lm_runs(folder: Path) -> list[Record]:
    """The language-modelling runs of the one harness under ``folder`` (``results/lm``), as
    results-file records to import; the folder is checked whole first, as the LM page reads it
    (ResultsError naming each problem). The records the track published before it ran in the
    one harness (``LmRecord`` lines) are no runs of this store's kind and are not imported."""
    try:
        read_lm_results(folder)
    except LmResultsError as exc:
        raise ResultsError([(path or folder, line, reason) for path, line, reason in exc.problems]) from None
    found = []
    for path in sorted(p for p in folder.glob(f"*{SUFFIX}") if p.is_file()) if folder.is_dir() else []:
        for number, line in enumerate(read_text(path, RESULTS_LIMIT).splitlines(), start=1):
            value = parse_json(line) if line.strip() else None
            if isinstance(value, dict) and "schema_version" in value:
                found.append(Record(value, path, number))
    return found


def import_results(results_dir: Path, store_path: Path) -> ImportSummary:
    """Add every published run under ``results_dir`` (with its diagnostics file, if any) to
    the store at ``store_path`` (created if missing) as finished, unless it is there already.

    All or nothing: every file is validated before the store is opened, and the runs are
    written in one transaction, so a run that cannot be stored leaves the store as it was.

    Raises:
        ResultsError: a results or diagnostics file is malformed, or a record cannot be
            stored (its path and line); nothing is imported.
    """
    records = read_results(results_dir) + _lm_runs(results_dir / LM_FOLDER)
    diagnostics = read_diagnostics(results_dir, records)
    current: list[Record] = []  # the record being written, to name it if the write fails

    def rows() -> Iterator[RunRecord]:
        for rec in records:
            current[:] = [rec]
            yield RunRecord.from_dict(rec.data, diagnostics.get(rec.run_id))

    with Store(store_path) as store:
        try:
            added = store.insert_finished_runs(rows())
        except (OverflowError, sqlite3.IntegrityError, sqlite3.InterfaceError) as exc:
            rec = current[0]
            reason = f"run {rec.run_id} cannot be stored ({exc}); nothing was imported"
            raise ResultsError([(rec.path, rec.line, reason)]) from None
        differing = tuple(
            rec.run_id
            for rec, new in zip(records, added, strict=True)
            if not new and _stored_differs(store, rec, diagnostics.get(rec.run_id))
        )
    imported = sum(added)
    with_diagnostics = sum(1 for rec, new in zip(records, added, strict=True) if new and rec.run_id in diagnostics)
    return ImportSummary(imported, len(added) - imported, with_diagnostics, differing)


def _stored_differs(store: Store, rec: Record, diagnostics: Mapping[str, Any] | None) -> bool:
    """Whether the store's record of a run it holds finished is not the published one
    (its numbers, provenance, timings, or diagnostics where both have them)."""
    stored = store.record(rec.run_id)
    if stored is None:
        return True
    if to_published(stored) != rec.data:
        return True
    return diagnostics is not None and stored.diagnostics is not None and stored.diagnostics != diagnostics
