"""The published results format: JSON Lines, one finished run per line, schema version 1.

A results file (``leaderboard/results/*.jsonl``) is what gets committed and contributed;
the local SQLite store never is. Each line is one JSON object, written canonically
(sorted keys, no spaces, UTF-8, no NaN) with these keys and nothing else:

    schema_version  1
    run_id          16 hex digits: sha256 of the canonical config JSON without ``preset``
                    (the definition of ``harness.config.RunConfig.run_id``), first 16
    pe, task        encoding and task registry names (equal to the config's)
    seed            int (equal to the config's)
    preset          the protocol label (equal to the config's)
    status          "finished" (only finished runs are published)
    config          the full run configuration (``RunConfig.to_dict()``)
    provenance      commit, device, torch, pezoo (strings, required) and any other
                    string-valued keys the harness records (python, platform, ...)
    params          {"total": int, "pe": int} parameter counts
    timings         {"train_seconds", "eval_seconds", "started_at", "finished_at"}:
                    seconds, and Unix times of the run
    final_loss      the last training loss
    metrics         one object per evaluated scale, sorted by length: split ("train" for
                    1..N, "test" beyond N), length, token_length, n (examples),
                    exact_match and token_accuracy in [0, 1]
    checksum        "sha256:" + hex digest of the canonical JSON of every other key

The checksum is a guard against accidental or hand edits, not a signature: a file whose
line no longer matches its checksum is rejected with its path, line and reason. The
validator is hand-written (no schema library) and reports every problem it finds.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config import NEW_FIELD_DEFAULTS

SCHEMA_VERSION = 1
SUFFIX = ".jsonl"

RECORD_KEYS = (
    "checksum",
    "config",
    "final_loss",
    "metrics",
    "params",
    "pe",
    "preset",
    "provenance",
    "run_id",
    "schema_version",
    "seed",
    "status",
    "task",
    "timings",
)
METRIC_KEYS = ("exact_match", "length", "n", "split", "token_accuracy", "token_length")
PARAM_KEYS = ("pe", "total")
TIMING_KEYS = ("eval_seconds", "finished_at", "started_at", "train_seconds")
PROVENANCE_REQUIRED = ("commit", "device", "pezoo", "torch")
_HEX16 = re.compile(r"[0-9a-f]{16}")
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
    """One validated published run and where it was read from (``line`` is 1-based)."""

    data: Mapping[str, Any]
    path: Path
    line: int

    @property
    def run_id(self) -> str:
        return self.data["run_id"]


# --------------------------------------------------------------------------------------
# Canonical form, checksum, run identity
# --------------------------------------------------------------------------------------


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 kept, NaN/inf refused: one value, one text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def checksum(record: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``record`` without its ``checksum`` key."""
    body = {k: v for k, v in record.items() if k != "checksum"}
    return "sha256:" + hashlib.sha256(canonical_json(body).encode()).hexdigest()


def config_run_id(config: Mapping[str, Any]) -> str:
    """The run identity of a config dict: sha256 of its canonical JSON minus ``preset``, first 16 hex.

    The same definition as ``RunConfig.run_id`` (a test keeps the two in agreement), written
    here on the plain dict so a results file can be checked without building a RunConfig.
    Fields added to the config after results were first published are left out at their
    default values (``harness.config.NEW_FIELD_DEFAULTS``), so older records keep their ids.
    """
    body = {k: v for k, v in config.items() if k != "preset"}
    for section, defaults in NEW_FIELD_DEFAULTS.items():
        if isinstance(body.get(section), Mapping):
            kept = {k: v for k, v in body[section].items() if not (k in defaults and v == defaults[k])}
            body[section] = kept
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def seal(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` with its checksum set (any old checksum replaced)."""
    out = {k: v for k, v in record.items() if k != "checksum"}
    out["checksum"] = checksum(out)
    return out


def to_line(record: Mapping[str, Any]) -> str:
    """The line a record is published as (no trailing newline)."""
    return canonical_json(record)


def record_from_store(run: Mapping[str, Any], metrics: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The sealed results record of a finished store run (``Store.run``) and its ``Store.metrics``."""
    rows = sorted(metrics, key=lambda m: m["length"])
    record = {
        "schema_version": SCHEMA_VERSION,
        "run_id": run["run_id"],
        "pe": run["pe"],
        "task": run["task"],
        "seed": run["seed"],
        "preset": run["preset"],
        "status": run["status"],
        "config": run["config"],
        "provenance": run["provenance"],
        "params": {"total": run["n_params"], "pe": run["pe_params"]},
        "timings": {k: run[k] for k in TIMING_KEYS},
        "final_loss": run["final_loss"],
        "metrics": [{k: m[k] for k in METRIC_KEYS} for m in rows],
    }
    return seal(record)


def store_run_from_record(record: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The inverse of :func:`record_from_store`: the ``Store.run`` and ``Store.metrics``
    shapes of a validated published record (for ``Store.insert_finished``)."""
    run = {k: record[k] for k in ("run_id", "pe", "task", "seed", "preset", "config", "provenance", "final_loss")}
    run.update(record["timings"])
    run["n_params"], run["pe_params"] = record["params"]["total"], record["params"]["pe"]
    return run, [dict(m) for m in record["metrics"]]


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def _keys(obj: Mapping[str, Any], expected: Iterable[str], where: str) -> list[str]:
    expected = sorted(expected)
    problems = []
    missing = sorted(set(expected) - set(obj))
    unknown = sorted(set(obj) - set(expected))
    if missing:
        problems.append(f"{where}: missing key(s) {', '.join(missing)}")
    if unknown:
        problems.append(f"{where}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(expected)}")
    return problems


def validate_record(record: Any) -> list[str]:
    """Every reason ``record`` (a parsed line) is not a valid schema-1 record; empty if valid."""
    if not isinstance(record, dict):
        return [f"a line must be a JSON object, got {type(record).__name__}"]
    version = record.get("schema_version")
    if version != SCHEMA_VERSION:
        if _is_int(version) and version > SCHEMA_VERSION:
            return [f"schema_version {version} is newer than this pezoo reads ({SCHEMA_VERSION}); upgrade pezoo"]
        return [f"schema_version must be {SCHEMA_VERSION}, got {version!r}"]
    problems = _keys(record, RECORD_KEYS, "record")
    if problems:
        return problems

    config = record["config"]
    if not isinstance(config, dict):
        return ["config must be an object"]
    for key, check, what in (
        ("pe", lambda v: isinstance(v, str) and v, "a non-empty string"),
        ("task", lambda v: isinstance(v, str) and v, "a non-empty string"),
        ("preset", lambda v: isinstance(v, str) and v, "a non-empty string"),
        ("seed", _is_int, "an integer"),
    ):
        if not check(record[key]):
            problems.append(f"{key} must be {what}, got {record[key]!r}")
        elif config.get(key) != record[key]:
            problems.append(f"{key} is {record[key]!r} but config.{key} is {config.get(key)!r}")
    if record["status"] != "finished":
        problems.append(f"status must be 'finished' (only finished runs are published), got {record['status']!r}")
    train_max = config.get("train", {}).get("train_max") if isinstance(config.get("train"), dict) else None
    if not _is_int(train_max):
        problems.append("config.train.train_max must be an integer")
        train_max = None

    run_id = record["run_id"]
    if not (isinstance(run_id, str) and _HEX16.fullmatch(run_id)):
        problems.append(f"run_id must be 16 lowercase hex digits, got {run_id!r}")
    elif config_run_id(config) != run_id:
        problems.append(f"run_id {run_id} does not match its config (which hashes to {config_run_id(config)})")

    prov = record["provenance"]
    if not isinstance(prov, dict):
        problems.append("provenance must be an object")
    else:
        missing = [k for k in PROVENANCE_REQUIRED if k not in prov]
        if missing:
            problems.append(f"provenance: missing key(s) {', '.join(missing)}")
        bad = sorted(k for k, v in prov.items() if not isinstance(v, str))
        if bad:
            problems.append(f"provenance: value(s) of {', '.join(bad)} must be strings")

    params = record["params"]
    if not isinstance(params, dict):
        problems.append("params must be an object")
    else:
        problems += _keys(params, PARAM_KEYS, "params")
        for k in PARAM_KEYS:
            if k in params and not (_is_int(params[k]) and params[k] >= 0):
                problems.append(f"params.{k} must be a non-negative integer, got {params[k]!r}")

    timings = record["timings"]
    if not isinstance(timings, dict):
        problems.append("timings must be an object")
    else:
        problems += _keys(timings, TIMING_KEYS, "timings")
        bad = [k for k in TIMING_KEYS if k in timings and not (_is_number(timings[k]) and timings[k] >= 0)]
        problems += [f"timings.{k} must be a non-negative number" for k in bad]
        if not bad and set(TIMING_KEYS) <= set(timings) and timings["finished_at"] < timings["started_at"]:
            problems.append("timings: finished_at is before started_at")

    if not _is_number(record["final_loss"]):
        problems.append(f"final_loss must be a finite number, got {record['final_loss']!r}")

    problems += _validate_metrics(record["metrics"], train_max)

    check = record["checksum"]
    if not (isinstance(check, str) and _CHECKSUM.fullmatch(check)):
        problems.append("checksum must be 'sha256:' and 64 hex digits")
    elif not problems and check != checksum(record):
        problems.append("checksum mismatch: the line was edited after export (re-export it from the store)")
    return problems


def _validate_metrics(metrics: Any, train_max: int | None) -> list[str]:
    if not isinstance(metrics, list) or not metrics:
        return ["metrics must be a non-empty list"]
    problems: list[str] = []
    lengths: list[int] = []
    for i, m in enumerate(metrics):
        where = f"metrics[{i}]"
        if not isinstance(m, dict):
            problems.append(f"{where} must be an object")
            continue
        key_problems = _keys(m, METRIC_KEYS, where)
        if key_problems:
            problems += key_problems
            continue
        length = m["length"]
        if not (_is_int(length) and length >= 1):
            problems.append(f"{where}.length must be an integer >= 1, got {length!r}")
            continue
        lengths.append(length)
        if m["split"] not in ("train", "test"):
            problems.append(f"{where}.split must be 'train' or 'test', got {m['split']!r}")
        elif train_max is not None and (m["split"] == "train") != (length <= train_max):
            problems.append(f"{where}: length {length} is marked {m['split']!r} but train_max is {train_max}")
        if not (_is_int(m["n"]) and m["n"] >= 1):
            problems.append(f"{where}.n must be an integer >= 1, got {m['n']!r}")
        if not (_is_number(m["token_length"]) and m["token_length"] > 0):
            problems.append(f"{where}.token_length must be a positive number, got {m['token_length']!r}")
        for key in ("exact_match", "token_accuracy"):
            if not (_is_number(m[key]) and 0.0 <= m[key] <= 1.0):
                problems.append(f"{where}.{key} must be a number in [0, 1], got {m[key]!r}")
    if lengths != sorted(set(lengths)):
        problems.append("metrics must be sorted by length, each length once")
    return problems


# --------------------------------------------------------------------------------------
# Reading files
# --------------------------------------------------------------------------------------


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed (metrics must be finite numbers)")


def read_file(path: Path) -> tuple[list[Record], list[tuple[Path, int, str]]]:
    """Validated records of one results file, and every problem found (path, line, reason)."""
    problems: list[tuple[Path, int, str]] = []
    records: list[Record] = []
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        return [], [(path, 0, f"not UTF-8 text ({exc.reason} at byte {exc.start})")]
    except OSError as exc:
        return [], [(path, 0, f"cannot be read ({exc.strerror})")]
    if not text:
        return [], [(path, 0, "empty file (a results file holds at least one run)")]
    if not text.endswith("\n"):
        problems.append((path, text.count("\n") + 1, "the last line must end with a newline"))
    for number, line in enumerate(text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"), start=1):
        if not line.strip():
            problems.append((path, number, "empty line"))
            continue
        try:
            value = json.loads(line, parse_constant=_refuse_constant)
        except ValueError as exc:
            problems.append((path, number, f"not valid JSON ({exc})"))
            continue
        reasons = validate_record(value)
        if not reasons and line != to_line(value):
            reasons = ["not in canonical form (sorted keys, no spaces): the line was edited after export"]
        problems += [(path, number, reason) for reason in reasons]
        if not reasons:
            records.append(Record(value, path, number))
    return records, problems


def results_files(directory: Path) -> list[Path]:
    """The ``*.jsonl`` files directly under ``directory``, sorted by name (none if it is missing)."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.is_file() and p.name.endswith(SUFFIX))


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
# them (PRISM's cursor trajectories, ``harness.diagnostics``); optional, never required.
# --------------------------------------------------------------------------------------

DIAGNOSTICS_DIR = "diagnostics"


def diagnostics_problem(body: Any) -> str | None:
    """Why ``body`` is not a diagnostics object the site can draw, or None."""
    if not isinstance(body, dict) or body.get("version") != 1:
        return "not a version-1 diagnostics object"
    if not isinstance(body.get("tokens"), list) or not isinstance(body.get("layers"), list) or not body["layers"]:
        return "needs a token list and at least one layer"
    s = len(body["tokens"])
    for layer in body["layers"]:
        for key in ("query_modes", "key_modes"):
            modes = layer.get(key) if isinstance(layer, dict) else None
            ok = (
                isinstance(modes, list)
                and modes
                and all(isinstance(c, list) and all(isinstance(m, list) and len(m) == s for m in c) for c in modes)
            )
            if not ok:
                where = layer.get("layer") if isinstance(layer, dict) else "?"
                return f"layer {where}: {key} must be (heads, cursors, {s})"
    return None


def read_diagnostics(directory: Path, run_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """run_id -> diagnostics for the runs of ``run_ids`` that have a file; raises
    ResultsError (path and reason) for a file that is not valid."""
    folder = directory / DIAGNOSTICS_DIR
    out, problems = {}, []
    for run_id in sorted(set(run_ids)):
        path = folder / f"{run_id}.json"
        if not path.is_file():
            continue
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append((path, 1, f"unreadable diagnostics ({exc})"))
            continue
        problem = diagnostics_problem(body)
        if problem:
            problems.append((path, 1, problem))
        else:
            out[run_id] = body
    if problems:
        raise ResultsError(problems)
    return out
