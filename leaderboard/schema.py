"""The published results format: JSON Lines, one finished run per line, schema version 2.

A results file (``leaderboard/results/*.jsonl``) is what gets committed and contributed;
the local SQLite store never is. Each line is one JSON object, written canonically
(sorted keys, no spaces, UTF-8, no NaN): the plain form of the run's record
(``harness.records.record.RunRecord.to_dict``, whose keys and rules ``harness.records.record`` gives, with
``timings.finished_at`` set: a published run has been recorded) and two more keys:

    schema_version  2
    checksum        "sha256:" + hex digest of the canonical JSON of every other key

Schema 2 keeps each scale's metrics as counts (``exact`` of ``n`` examples, ``tokens_right``
of ``tokens``); schema 1 kept them as float32 means (``exact_match``, ``token_accuracy``),
so 90 of 100 read 0.8999999761581421. A schema-1 file is refused with the way on:
:func:`migrate_line` (``pezoo leaderboard migrate``) recovers its counts exactly
(``harness.records.recount``) and keeps each run's id; only the metrics and the checksum change.

The checksum is a guard against accidental or hand edits, not a signature: a file whose
line no longer matches its checksum is rejected with its path, line and reason. The
record itself is checked by the harness's one validator (``harness.records.record.record_problems``),
which reports every problem it finds.

Whatever a file holds (any JSON, nesting, NaN, huge integers, bytes that are not UTF-8),
:func:`validate_record` and :func:`read_file` return reasons and :func:`read_results` and
:func:`read_diagnostics` raise :class:`ResultsError` (a ValueError) naming the file and
line; no other exception escapes them (hypothesis tests feed them random JSON).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config.numbers import is_int, shown
from harness.records.inputs import DIAGNOSTICS_LIMIT, MAX_DEPTH, RESULTS_LIMIT, FileReadError, nesting_depth, read_text
from harness.records.record import KEYS, LM_KEYS, RunRecord, diagnostics_problem, record_problems
from harness.records.record_fields import key_problems
from harness.tasks.lm import LM_TASKS

SCHEMA_VERSION = 2
SUFFIX = ".jsonl"

RECORD_KEYS = tuple(sorted((*KEYS, "checksum", "schema_version")))
_CHECKSUM = re.compile(r"sha256:[0-9a-f]{64}")


class ResultsError(ValueError):
    """One or more results files are malformed; ``problems`` holds (path, line, reason)."""

    def __init__(self, problems: list[tuple[Path, int, str]]) -> None:
        self.problems = problems
        shown = [f"{path}:{line}: {reason}" for path, line, reason in problems[:50]]
        if len(problems) > 50:
            shown.append(f"... and {len(problems) - 50} more")
        super().__init__("invalid results file(s):\n  " + "\n  ".join(shown))


@dataclass(frozen=True)
class Record:
    """One validated published run and where it was read from (``line`` is 1-based).

    ``data`` is the line's JSON object; :attr:`record` is the run's ``RunRecord``."""

    data: Mapping[str, Any]
    path: Path
    line: int

    @property
    def run_id(self) -> str:
        return self.data["run_id"]

    @property
    def record(self) -> RunRecord:
        return RunRecord.from_dict(self.data)


# --------------------------------------------------------------------------------------
# Canonical form and checksum
# --------------------------------------------------------------------------------------


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 kept, NaN/inf refused: one value, one text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def checksum(record: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``record`` without its ``checksum`` key."""
    body = {k: v for k, v in record.items() if k != "checksum"}
    return "sha256:" + hashlib.sha256(canonical_json(body).encode()).hexdigest()


def seal(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` with its checksum set (any old checksum replaced)."""
    out = {k: v for k, v in record.items() if k != "checksum"}
    out["checksum"] = checksum(out)
    return out


def to_line(record: Mapping[str, Any]) -> str:
    """The line a record is published as (no trailing newline)."""
    return canonical_json(record)


def to_published(record: RunRecord) -> dict[str, Any]:
    """The sealed results-file object of a run's record."""
    return seal({"schema_version": SCHEMA_VERSION, **record.to_dict()})


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------


def validate_record(record: Any) -> list[str]:
    """Every reason ``record`` (a parsed line) is not a valid schema-1 record; empty if valid."""
    if not isinstance(record, dict):
        return [f"a line must be a JSON object, got {type(record).__name__}"]
    version = record.get("schema_version")
    if not (is_int(version) and version == SCHEMA_VERSION):  # 1.0 and true equal 1 in Python, not here
        if is_int(version) and version > SCHEMA_VERSION:
            return [f"schema_version {version} is newer than this pezoo reads ({SCHEMA_VERSION}); upgrade pezoo"]
        if is_int(version) and version == 1:
            return [
                "schema_version 1 keeps metrics as float fractions; `pezoo leaderboard migrate` rewrites the file with "
                f"their counts (schema {SCHEMA_VERSION}), keeping every run id"
            ]
        return [f"schema_version must be {SCHEMA_VERSION} (an integer), got {shown(version)}"]
    # a language-modelling record: passkey and positions beside its metrics
    lm = isinstance(record.get("task"), str) and record["task"] in LM_TASKS
    problems = key_problems({k: v for k, v in record.items() if not (lm and k in LM_KEYS)}, RECORD_KEYS, "record")
    if problems:
        return problems
    problems = record_problems({k: v for k, v in record.items() if k not in ("schema_version", "checksum")})
    timings = record["timings"]
    if isinstance(timings, dict) and "finished_at" in timings and timings["finished_at"] is None:
        problems.append("timings.finished_at must be a number (a published run has been recorded), got None")
    check = record["checksum"]
    if not (isinstance(check, str) and _CHECKSUM.fullmatch(check)):
        problems.append("checksum must be 'sha256:' and 64 hex digits")
    elif not problems and check != checksum(record):
        problems.append("checksum mismatch: the line was edited after export (re-export it from the store)")
    return problems


# --------------------------------------------------------------------------------------
# Reading files
# --------------------------------------------------------------------------------------


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed (metrics must be finite numbers)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: no literal inf, but a float too large to be one
        raise ValueError(f"{text[:40]} is out of range for a number (metrics must be finite numbers)")
    return value


def parse_json(text: str) -> Any:
    """The JSON value of ``text``: NaN and infinities refused (the literals, and numbers too
    large for a float), nesting at most MAX_DEPTH levels; ValueError says what is wrong (never
    RecursionError, whatever the text)."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError(f"not valid JSON here (nested more than {MAX_DEPTH} levels deep)") from None
    except ValueError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    if nesting_depth(value) > MAX_DEPTH:
        raise ValueError(f"not valid JSON here (nested more than {MAX_DEPTH} levels deep)")
    return value


FILE_NAME = re.compile(r"^(?P<preset>[A-Za-z0-9_.-]+)-(?P<day>\d{8})-(?P<digest>[0-9a-f]{12})\.jsonl$")
"""``<preset>-<YYYYMMDD>-<digest>.jsonl``, as ``pezoo leaderboard export`` names a file."""


def run_ids_digest(run_ids: Iterable[str]) -> str:
    """The 12 hex digits a results file's name carries: the sha256 of its sorted run ids,
    so a line removed from (or added to) a file after export shows."""
    return hashlib.sha256(",".join(sorted(run_ids)).encode()).hexdigest()[:12]


def file_name_problem(name: str) -> str | None:
    """Why a file name cannot name a published file, or None: its bytes must be UTF-8 (the
    site links to every results file by name) and it may hold no control characters."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # bytes that are not UTF-8 reach Python as lone surrogates
        return "the file name is not valid UTF-8; rename the file"
    if any(unicodedata.category(ch) == "Cc" for ch in name):
        return "the file name holds control characters; rename the file"
    return None


def _name_problem(path: Path, records: list[Record]) -> str | None:
    """Why the file's name does not fit its runs, if it does not."""
    match = FILE_NAME.match(path.name)
    if match is None:  # not named by export (a hand-made file): nothing to compare with
        return None
    if match["digest"] != run_ids_digest(r.run_id for r in records):
        return (
            f"holds other runs than it was exported with (its name's digest {match['digest']} is of other run "
            f"ids than its {len(records)} lines': a line was removed or added after export; the file's "
            "history in git shows which)"
        )
    return None


def read_file(path: Path) -> tuple[list[Record], list[tuple[Path, int, str]]]:
    """Validated records of one results file, and every problem found (path, line, reason):
    each line's, and the file's own (line 0) when its name's digest is not of its runs."""
    problems: list[tuple[Path, int, str]] = []
    records: list[Record] = []
    if (why := file_name_problem(path.name)) is not None:
        return [], [(path, 0, why)]
    try:  # a regular file within RESULTS_LIMIT: a FIFO, a device, a 6 GB sparse file are refused unread
        text = read_text(path, RESULTS_LIMIT)
    except FileReadError as exc:
        return [], [(path, 0, exc.reason)]
    if not text:
        return [], [(path, 0, "empty file (a results file holds at least one run)")]
    if not text.endswith("\n"):
        problems.append((path, text.count("\n") + 1, "the last line must end with a newline"))
    for number, line in enumerate(text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"), start=1):
        if not line.strip():
            problems.append((path, number, "empty line"))
            continue
        try:
            value = parse_json(line)
        except ValueError as exc:
            problems.append((path, number, str(exc)))
            continue
        reasons = validate_record(value)
        if not reasons and line != to_line(value):
            reasons = [_not_canonical(line, to_line(value))]
        problems += [(path, number, reason) for reason in reasons]
        if not reasons:
            records.append(Record(value, path, number))
    if not problems and (why := _name_problem(path, records)) is not None:
        problems.append((path, 0, why))
    return records, problems


def _not_canonical(line: str, canonical: str) -> str:
    """Why a valid line that is not ``canonical`` is refused: its line ending, or an edit."""
    if line.rstrip("\r") == canonical:
        return (
            "ends with a carriage return (CRLF line endings, as git's core.autocrlf or a Windows editor "
            "writes them): results files end lines with LF alone; check the file out again "
            "(git config core.autocrlf false) or convert it (dos2unix)"
        )
    return "not in canonical form (sorted keys, no spaces): the line was edited after export"


def weights_problems(records: Iterable[Record]) -> list[tuple[Path, int, str]]:
    """Problems of the runs among ``records`` that evaluated another run's kept weights
    (provenance ``weights_from``: an inference-time variant, or another test range of a
    finished run): the run whose weights they evaluated must be among ``records``, be
    their trained run (a variant) or have trained exactly as they would (the same
    ``RunConfig.training_id``), and have recorded the final loss they carry."""
    from harness.config import RunConfig

    by_id = {r.run_id: r for r in records}
    problems = []
    for rec in by_id.values():
        source = rec.data["provenance"].get("weights_from")
        if source is None:
            continue
        where = f"run {rec.run_id} evaluated the kept weights of run {shown(source)} (provenance weights_from)"
        trained = by_id.get(source)
        if trained is None:
            problems.append((rec.path, rec.line, f"{where}, which is not published: publish that run with it"))
            continue
        cfg, other = RunConfig.from_dict(rec.data["config"]), RunConfig.from_dict(trained.data["config"])
        if cfg.is_variant:
            same = cfg.trained_config().run_id() == source
        else:
            same = cfg.training_id() is not None and cfg.training_id() == other.training_id()
        if not same:
            problems.append((rec.path, rec.line, f"{where}, which did not train as this run would"))
        elif rec.data["final_loss"] != trained.data["final_loss"]:
            problems.append((rec.path, rec.line, f"{where}, but its final_loss is not that run's"))
    return problems


def results_files(directory: Path) -> list[Path]:
    """The ``*.jsonl`` entries directly under ``directory`` but folders, sorted by name (none
    if it is missing): a FIFO, a device or a dangling link of that name is listed too, so
    that :func:`read_file` reports it rather than the board silently lacking it."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.name.endswith(SUFFIX) and not p.is_dir())


def read_results(directory: Path) -> list[Record]:
    """Every record under ``directory``, validated, each run once; raises ResultsError listing all problems.

    Files other than ``*.jsonl`` are not read. A run_id that occurs twice (in one file or
    across files) is a problem at its second occurrence.
    """
    problems: list[tuple[Path, int, str]] = []
    seen: dict[str, Record] = {}
    for path in results_files(directory):
        records, file_problems = read_file(path)
        problems += file_problems
        for rec in records:
            first = seen.get(rec.run_id)
            if first is not None:
                problems.append((path, rec.line, f"run {rec.run_id} is already published at {first.path}:{first.line}"))
            else:
                seen[rec.run_id] = rec
    if not problems:
        problems += weights_problems(seen.values())
    if problems:
        raise ResultsError(problems)
    return sorted(seen.values(), key=sort_key)


def sort_key(rec: Record) -> tuple[str, str, str, int, str]:
    d = rec.data
    return (d["preset"], d["task"], d["pe"], d["seed"], d["run_id"])


def iter_lines(records: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    for record in records:
        yield to_line(record) + "\n"


# --------------------------------------------------------------------------------------
# Diagnostics files: <results>/diagnostics/<run_id>.json, one per published run that has
# them (PRISM's cursor trajectories, ``harness.training.diagnostics``); optional, never required.
# Their format and its check are the run record's (``harness.records.record.diagnostics_problem``).
# --------------------------------------------------------------------------------------

DIAGNOSTICS_DIR = "diagnostics"


def read_diagnostics(directory: Path, runs: Iterable[str | Record]) -> dict[str, dict[str, Any]]:
    """run_id -> diagnostics of every ``<directory>/diagnostics/<run_id>.json``, each checked
    by ``harness.records.record.diagnostics_problem`` against its record.

    Args:
        directory: the results folder.
        runs: the published runs (their records; bare run ids check less: no record to
            compare with).

    Raises:
        ResultsError: a file (path and reason) that cannot be read, is not a valid
            diagnostics object, or belongs to no run of ``runs``.
    """
    records: dict[str, Mapping[str, Any] | None] = {}
    for run in runs:
        if isinstance(run, Record):
            records[run.run_id] = run.data
        else:
            records.setdefault(run, None)
    folder = directory / DIAGNOSTICS_DIR
    if not folder.is_dir():
        return {}
    out, problems = {}, []
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or not path.name.endswith(".json"):
            continue  # not a diagnostics file (a temporary file of an export in progress)
        run_id = path.name[: -len(".json")]
        if run_id not in records:
            problems.append((path, 0, f"no published run has run_id {shown(run_id)} (diagnostics belong to a run)"))
            continue
        try:  # a regular file within DIAGNOSTICS_LIMIT (a symlink to /dev/zero, a FIFO: refused unread)
            text = read_text(path, DIAGNOSTICS_LIMIT)
        except FileReadError as exc:
            problems.append((path, 0, exc.reason))
            continue
        try:
            body = parse_json(text)
        except ValueError as exc:
            problems.append((path, 1, f"unreadable diagnostics: {exc}"))
            continue
        record = records[run_id]
        problem = diagnostics_problem(body, record["config"] if record is not None else None)
        if problem:
            problems.append((path, 1, problem))
        else:
            out[run_id] = body
    if problems:
        raise ResultsError(problems)
    return out


# --------------------------------------------------------------------------------------
# Migration from schema 1 (metrics as floats) to schema 2 (counts)
# --------------------------------------------------------------------------------------


def migrate_line(line: str) -> str:
    """A schema-1 results line as its schema-2 line: each metric's counts recovered exactly
    (``harness.records.recount.recount``), the checksum of the new body; everything else (run id,
    config, provenance, timings) as it was. A line already at schema 2 is returned as it is.

    Raises:
        ValueError: the line is not a valid schema-1 or schema-2 record, or a metric is not
            a count over its total (then nothing of the file should be written).
    """
    from harness.records.recount import recount

    data = parse_json(line)  # NaN, infinities and deep nesting refused as `check` refuses them
    if isinstance(data, dict) and data.get("schema_version") == SCHEMA_VERSION and is_int(data["schema_version"]):
        problems = validate_record(data)
        if problems:
            raise ValueError("; ".join(problems[:3]))
        return line
    if not (isinstance(data, dict) and is_int(data.get("schema_version")) and data["schema_version"] == 1):
        raise ValueError("not a schema-1 record")
    if data.get("checksum") != checksum(data):
        raise ValueError("its checksum does not match: the line was edited after export; not migrated")
    config = data.get("config")
    if not isinstance(config, dict) or not isinstance(data.get("metrics"), list):
        raise ValueError("a schema-1 record needs a config and metrics")
    metrics = [recount(m, config) for m in data["metrics"]]
    out = seal({**data, "schema_version": SCHEMA_VERSION, "metrics": metrics})
    problems = validate_record(out)
    if problems:
        raise ValueError("; ".join(problems[:3]))
    return to_line(out)
