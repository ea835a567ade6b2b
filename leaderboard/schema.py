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
    config          the full run configuration (``RunConfig.to_dict()``): it must build a
                    ``RunConfig`` (keys, types, ranges) whose ``run_id()`` is ``run_id``
    provenance      commit, device, torch, pezoo (strings, required) and any other
                    string-valued keys the harness records (python, platform, cpu;
                    code_by_step and machine_by_step for a run resumed under another
                    commit or on another machine; weights_from for a variant;
                    plugins for a plugin's encoding or task code), and
                    pe_options_resolved: an object, every option the encoding was
                    built with, defaults included (``pezoo.resolved_options``)
    params          {"total": int, "pe": int} parameter counts (every integer of a record
                    fits SQLite's signed 64 bits)
    timings         {"train_seconds", "eval_seconds", "started_at", "finished_at"}:
                    seconds, and Unix times of the run, none past 9999-12-31
                    (``MAX_UNIX_TIME``: a page shows the date)
    final_loss      the last training loss (finite, >= 0)
    metrics         one object per evaluated scale, sorted by length: split ("train" for
                    1..N, "test" beyond N), length, token_length, n (examples),
                    exact_match and token_accuracy in [0, 1]; exactly the scales the
                    config evaluates (``harness.kept_results.evaluated_scales``), each
                    over ``eval.samples`` examples
    checksum        "sha256:" + hex digest of the canonical JSON of every other key

The checksum is a guard against accidental or hand edits, not a signature: a file whose
line no longer matches its checksum is rejected with its path, line and reason. The
validator is hand-written (no schema library) and reports every problem it finds.

Whatever a file holds (any JSON, nesting, NaN, huge integers, bytes that are not UTF-8),
:func:`validate_record` and :func:`read_file` return reasons and :func:`read_results` and
:func:`read_diagnostics` raise :class:`ResultsError` (a ValueError) naming the file and
line; no other exception escapes them (hypothesis tests feed them random JSON).
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

import harness.tasks as tasks
from harness.config import INT64_MAX, NEW_FIELD_DEFAULTS, RunConfig, is_finite_number, shown
from harness.kept_results import evaluated_scales
from harness.pe_spec import identity_options
from harness.reading import DIAGNOSTICS_LIMIT, MAX_DEPTH, RESULTS_LIMIT, FileReadError, nesting_depth, read_text

SCHEMA_VERSION = 1
MAX_UNIX_TIME = 253_402_300_799.0
"""9999-12-31 23:59:59 UTC: the latest time a record may carry (a page shows its date)."""
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
    default values (``harness.config.NEW_FIELD_DEFAULTS``), so older records keep their ids,
    and so are encoding options at what their absence meant in a stored run
    (``harness.pe_spec.identity_options``: ``randomized{randomize_eval=false}`` is the run
    stored as ``randomized`` with no options).
    """
    body = {k: v for k, v in config.items() if k != "preset"}
    if isinstance(body.get("pe"), str) and isinstance(body.get("pe_options"), Mapping):
        body["pe_options"] = identity_options(body["pe"], body["pe_options"])
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


def _is_int(v: Any) -> TypeGuard[int]:
    """An int (not a bool) SQLite can store: within the signed 64-bit range."""
    return isinstance(v, int) and not isinstance(v, bool) and -INT64_MAX - 1 <= v <= INT64_MAX


def _is_number(v: Any) -> bool:
    """A finite int or float (not a bool); an int too large for a float is not finite."""
    return is_finite_number(v)


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
    if not (_is_int(version) and version == SCHEMA_VERSION):  # 1.0 and true equal 1 in Python, not here
        if _is_int(version) and version > SCHEMA_VERSION:
            return [f"schema_version {version} is newer than this pezoo reads ({SCHEMA_VERSION}); upgrade pezoo"]
        return [f"schema_version must be {SCHEMA_VERSION} (an integer), got {shown(version)}"]
    problems = _keys(record, RECORD_KEYS, "record")
    if problems:
        return problems

    config = record["config"]
    if not isinstance(config, dict):
        return ["config must be an object"]
    try:
        run_config: RunConfig | None = RunConfig.from_dict(config)
    except ValueError as exc:
        problems.append(f"config: {exc}")
        run_config = None
    for key, check, what in (
        ("pe", lambda v: isinstance(v, str) and v, "a non-empty string"),
        ("task", lambda v: isinstance(v, str) and v, "a non-empty string"),
        ("preset", lambda v: isinstance(v, str) and v, "a non-empty string"),
        ("seed", _is_int, "an integer"),
    ):
        if not check(record[key]):
            problems.append(f"{key} must be {what}, got {shown(record[key])}")
        elif config.get(key) != record[key]:
            problems.append(f"{key} is {shown(record[key])} but config.{key} is {shown(config.get(key))}")
    if record["status"] != "finished":
        problems.append(f"status must be 'finished' (only finished runs are published), got {shown(record['status'])}")
    train_max = run_config.train.train_max if run_config is not None else None

    run_id = record["run_id"]
    if not (isinstance(run_id, str) and _HEX16.fullmatch(run_id)):
        problems.append(f"run_id must be 16 lowercase hex digits, got {shown(run_id)}")
    elif config_run_id(config) != run_id:
        problems.append(f"run_id {run_id} does not match its config (which hashes to {config_run_id(config)})")
    elif run_config is not None and run_config.run_id() != run_id:
        # the dict hashes to the id, but the run it describes does not: a field left out
        # (filled with its default when the harness reads it) or written in another form
        problems.append(
            f"config does not describe run {run_id} as the harness writes it (a field left out, or a number "
            f"in another form such as 1 for 1.0): it reads as run {run_config.run_id()}; export records from a "
            "store rather than writing them"
        )

    prov = record["provenance"]
    if not isinstance(prov, dict):
        problems.append("provenance must be an object")
    else:
        missing = [k for k in PROVENANCE_REQUIRED if k not in prov]
        if missing:
            problems.append(f"provenance: missing key(s) {', '.join(missing)}")
        bad = sorted(k for k, v in prov.items() if not isinstance(v, str) and k != "pe_options_resolved")
        if bad:
            problems.append(f"provenance: value(s) of {', '.join(bad)} must be strings")
        if "pe_options_resolved" in prov and not isinstance(prov["pe_options_resolved"], dict):
            problems.append("provenance: pe_options_resolved must be an object (option: value)")
        elif isinstance(prov.get("pe_options_resolved"), dict):
            given = run_config.eval_options() if run_config is not None else {}
            differ = sorted(k for k, v in given.items() if prov["pe_options_resolved"].get(k, v) != v)
            if differ:
                problems.append(f"provenance: pe_options_resolved contradicts the config's options {', '.join(differ)}")

    params = record["params"]
    if not isinstance(params, dict):
        problems.append("params must be an object")
    else:
        problems += _keys(params, PARAM_KEYS, "params")
        for k in PARAM_KEYS:
            if k in params and not (_is_int(params[k]) and params[k] >= 0):
                problems.append(f"params.{k} must be a non-negative integer (64-bit), got {shown(params[k])}")
        if all(_is_int(params.get(k)) for k in PARAM_KEYS) and params["pe"] > params["total"]:
            problems.append(f"params.pe ({params['pe']}) cannot exceed params.total ({params['total']})")

    timings = record["timings"]
    if not isinstance(timings, dict):
        problems.append("timings must be an object")
    else:
        problems += _keys(timings, TIMING_KEYS, "timings")
        bad = [k for k in TIMING_KEYS if k in timings and not (_is_number(timings[k]) and timings[k] >= 0)]
        problems += [f"timings.{k} must be a non-negative number" for k in bad]
        late = [k for k in TIMING_KEYS if k in timings and k not in bad and timings[k] > MAX_UNIX_TIME]
        problems += [
            f"timings.{k} is {shown(timings[k])}: beyond {MAX_UNIX_TIME:.0f} (9999-12-31, the last date a page shows)"
            for k in late
        ]
        bad += late
        if not bad and set(TIMING_KEYS) <= set(timings) and timings["finished_at"] < timings["started_at"]:
            problems.append("timings: finished_at is before started_at")

    if not (_is_number(record["final_loss"]) and record["final_loss"] >= 0):
        problems.append(f"final_loss must be a finite number >= 0 (a cross-entropy), got {shown(record['final_loss'])}")

    problems += _validate_metrics(record["metrics"], train_max)
    if run_config is not None and not problems:
        problems += _scale_problems(record["metrics"], run_config)

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
            problems.append(f"{where}.length must be an integer >= 1 (64-bit), got {shown(length)}")
            continue
        lengths.append(length)
        if m["split"] not in ("train", "test"):
            problems.append(f"{where}.split must be 'train' or 'test', got {shown(m['split'])}")
        elif train_max is not None and (m["split"] == "train") != (length <= train_max):
            problems.append(f"{where}: length {length} is marked {m['split']!r} but train_max is {train_max}")
        if not (_is_int(m["n"]) and m["n"] >= 1):
            problems.append(f"{where}.n must be an integer >= 1 (64-bit), got {shown(m['n'])}")
        if not (_is_number(m["token_length"]) and 0 < m["token_length"] <= INT64_MAX):
            problems.append(
                f"{where}.token_length must be a positive number of at most {INT64_MAX}, got {shown(m['token_length'])}"
            )
        for key in ("exact_match", "token_accuracy"):
            if not (_is_number(m[key]) and 0.0 <= m[key] <= 1.0):
                problems.append(f"{where}.{key} must be a number in [0, 1], got {shown(m[key])}")
    if lengths != sorted(set(lengths)):
        problems.append("metrics must be sorted by length, each length once")
    return problems


MAX_LISTED_SCALES = 100_000
"""A config that evaluates more scales than this is compared with its record's metrics by
count and range only (its scales are not listed: a hostile ``test_max`` must not take the
memory of a list of them)."""


def _evaluated_scales(config: RunConfig) -> list[tuple[str, int]] | None:
    """(split, scale) of every scale a run of ``config`` evaluates, in order, as the harness
    lists them (``harness.kept_results.evaluated_scales``: ``RunConfig.train_lengths`` and
    ``test_lengths``, less the scales its task has no instance of); None when the task is
    not installed here (which of the listed scales it has is then unknown) or the config
    evaluates more than ``MAX_LISTED_SCALES``."""
    train, test = config.train, config.eval
    test_count = -(-(test.test_max - train.train_max) // test.test_stride) + 1  # an upper bound
    if (train.train_max - train.train_min + 1) + test_count > MAX_LISTED_SCALES:
        return None
    if config.task not in tasks.available():
        return None
    try:
        return evaluated_scales(config)
    except Exception:  # a plugin task that fails to build here: as if not installed
        return None


def _scale_problems(metrics: list[dict[str, Any]], config: RunConfig) -> list[str]:
    """Why the (already well-formed) ``metrics`` are not those a run of ``config`` records:
    exactly the scales it evaluates (each once, which ``_validate_metrics`` checked), each
    over ``eval.samples`` examples. For a task not installed here, each scale must be one
    of those its config lists."""
    problems = []
    samples = config.eval.samples
    wrong_n = sorted({m["length"] for m in metrics if m["n"] != samples})
    if wrong_n:
        problems.append(
            f"metrics at scale(s) {_scales_text(wrong_n)} count other than eval.samples = {samples} examples "
            "(every scale is evaluated on that many)"
        )
    expected = _evaluated_scales(config)
    got = [(m["split"], m["length"]) for m in metrics]
    if expected is not None:
        missing = sorted({n for _, n in expected} - {n for _, n in got})
        extra = sorted({n for _, n in got} - {n for _, n in expected})
    else:  # not installed, or too many to list: each scale must be one the config lists
        train, test = config.train, config.eval
        lo = train.train_max + 1

        def listed(n: int) -> bool:
            return train.train_min <= n <= train.train_max or (
                lo <= n <= test.test_max and ((n - lo) % test.test_stride == 0 or n == test.test_max)
            )

        missing, extra = [], sorted(n for _, n in got if not listed(n))
    if extra:
        problems.append(
            f"metrics at scale(s) {_scales_text(extra)} that its config does not evaluate (train "
            f"{config.train.train_min}..{config.train.train_max}, test up to {config.eval.test_max} every "
            f"{config.eval.test_stride})"
        )
    if missing:
        problems.append(
            f"metrics missing at scale(s) {_scales_text(missing)} that its config evaluates: a record keeps every "
            "scale its run evaluated"
        )
    return problems


def _scales_text(scales: list[int], most: int = 8) -> str:
    shown_ = ", ".join(str(n) for n in scales[:most])
    return shown_ + (f" and {len(scales) - most} more" if len(scales) > most else "")


# --------------------------------------------------------------------------------------
# Reading files
# --------------------------------------------------------------------------------------


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed (metrics must be finite numbers)")


def parse_json(text: str) -> Any:
    """The JSON value of ``text``: NaN and infinities refused, nesting at most MAX_DEPTH
    levels; ValueError says what is wrong (never RecursionError, whatever the text)."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
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
            reasons = ["not in canonical form (sorted keys, no spaces): the line was edited after export"]
        problems += [(path, number, reason) for reason in reasons]
        if not reasons:
            records.append(Record(value, path, number))
    if not problems and (why := _name_problem(path, records)) is not None:
        problems.append((path, 0, why))
    return records, problems


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
DIAGNOSTICS_KEYS = ("layers", "scale", "tokens", "train_max", "version")
LAYER_KEYS = ("key_confidence", "key_modes", "layer", "query_confidence", "query_modes", "support")


def _grid(value: Any, s: int) -> bool:
    """``value`` is a non-empty (heads, cursors, s) nest of lists."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(c, list) and c and all(isinstance(m, list) and len(m) == s for m in c) for c in value)
    )


def _layer_problem(layer: Any, index: int, s: int) -> str | None:
    where = f"layers[{index}]"
    if not isinstance(layer, dict):
        return f"{where} must be an object"
    for key in ("query_modes", "key_modes"):
        if not _grid(layer.get(key), s):
            return f"{where}: {key} must be (heads, cursors, {s})"
    problems = _keys(layer, LAYER_KEYS, where)
    if problems:
        return problems[0]
    if not (_is_int(layer["layer"]) and layer["layer"] >= 0):
        return f"{where}: layer must be an integer >= 0"
    support = layer["support"]
    if not (_is_int(support) and support >= 1):
        return f"{where}: support must be an integer >= 1, got {shown(support)}"
    for side in ("query", "key"):
        modes, confidence = layer[f"{side}_modes"], layer[f"{side}_confidence"]
        values = [m for c in modes for trajectory in c for m in trajectory]
        if not all(_is_int(m) and -support <= m <= support for m in values):
            return f"{where}: {side}_modes must be integer offsets in -{support}..{support}"
        shape = [[len(t) for t in c] for c in modes]
        if not (_grid(confidence, s) and [[len(t) for t in c] for c in confidence] == shape):
            return f"{where}: {side}_confidence must have the shape of {side}_modes"
        if not all(_is_number(p) and 0 <= p <= 1 for c in confidence for t in c for p in t):
            return f"{where}: {side}_confidence must be probabilities in [0, 1]"
    return None


def diagnostics_problem(body: Any, record: Mapping[str, Any] | None = None) -> str | None:
    """Why ``body`` is not a diagnostics object the site can draw (of the run of ``record``,
    when given), or None.

    A version-1 object holds exactly ``version`` (1), ``scale`` (the test scale traced, an
    integer above ``train_max``), ``train_max`` (the run's, an integer >= 1), ``tokens``
    (s strings) and ``layers``: one or more objects of ``layer`` (index >= 0), ``support``
    P (>= 1), ``query_modes`` / ``key_modes`` ((heads, cursors, s) integer offsets in
    -P..P) and ``query_confidence`` / ``key_confidence`` (the same shape, probabilities).
    """
    if not isinstance(body, dict) or not (_is_int(body.get("version")) and body["version"] == 1):
        return "not a version-1 diagnostics object"
    tokens, layers = body.get("tokens"), body.get("layers")
    if not isinstance(tokens, list) or not isinstance(layers, list) or not layers:
        return "needs a token list and at least one layer"
    if not tokens or not all(isinstance(t, str) for t in tokens):
        return "tokens must be a non-empty list of strings"
    for index, layer in enumerate(layers):
        problem = _layer_problem(layer, index, len(tokens))
        if problem:
            return problem
    problems = _keys(body, DIAGNOSTICS_KEYS, "diagnostics")
    if problems:
        return problems[0]
    scale, train_max = body["scale"], body["train_max"]
    for key, value in (("scale", scale), ("train_max", train_max)):
        if not (_is_int(value) and value >= 1):
            return f"{key} must be an integer >= 1, got {shown(value)}"
    if scale <= train_max:
        return f"scale {scale} must exceed train_max {train_max} (the trace is of a test scale)"
    if record is not None:
        train = record["config"]["train"]
        test_max = record["config"].get("eval", {}).get("test_max")
        if train_max != train["train_max"]:
            return f"train_max {train_max} is not its run's ({train['train_max']})"
        if test_max is not None and scale > test_max:
            return f"scale {scale} is beyond its run's largest test scale ({test_max})"
    return None


def read_diagnostics(directory: Path, runs: Iterable[str | Record]) -> dict[str, dict[str, Any]]:
    """run_id -> diagnostics of every ``<directory>/diagnostics/<run_id>.json``, each checked
    by :func:`diagnostics_problem` against its record.

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
        problem = diagnostics_problem(body, records[run_id])
        if problem:
            problems.append((path, 1, problem))
        else:
            out[run_id] = body
    if problems:
        raise ResultsError(problems)
    return out
