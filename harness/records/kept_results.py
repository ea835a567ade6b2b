"""Finished results the store could not take, kept as JSON until it can.

When recording a finished run fails because the store cannot be written (a full disk,
SQLite's "database or disk is full", an I/O error), the result is written atomically to
``<checkpoint_dir>/<run_id>.result.json`` (:func:`keep`), and the next ``bench`` of that
run records it without training (:func:`read`). The file is one serialisation of the run's
``harness.records.record.RunRecord``, read strictly: exactly the fields below, the run's own id
and config, and a record the record's validator passes (``harness.records.record.record_problems``:
numbers finite and in range, the run's own evaluated scales, diagnostics only of the shape
``harness.training.diagnostics`` writes). A file that is anything else is refused (and the run
trains), so the file can hold no more than the run itself would have recorded.

A valid record is not yet this run's result: anyone can write one (every metric 1.0).
The file is sealed with the store's own secret (``Store.seal_key``, made with the store
and kept only in it): ``seal`` is the HMAC-SHA256 under that key of the file's other
fields as canonical JSON (sorted keys, no spaces). Only a process that had the store
open can have sealed it, so a file written by hand, changed since, or kept beside
another store is refused like any other bad file.

    format        "pezoo-kept-result"
    version       2 (version 1 had no seal and metrics as float fractions: refused, the run trains)
    seal          64 hex digits, the HMAC above
    run_id        str, ``RunConfig.run_id()``
    config        ``RunConfig.to_dict()``
    provenance    {str: str}, and ``pe_options_resolved``
    started_at    float, Unix time
    metrics       [{"split", "length", "token_length", "n", "exact", "tokens", "tokens_right",
                  "trace_exact"}], one per evaluated scale, in order (counts: ``LengthMetrics``)
    final_loss, train_seconds, eval_seconds   float
    n_params      {"total": int, "pe": int}
    diagnostics   ``harness.training.diagnostics.encoding_diagnostics`` output, or null
    lm            a language-modelling run's scores (``LmScores.to_body``: its metrics are
                  then empty); present exactly when the run's task is a language-modelling one
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

from harness.config import RunConfig
from harness.config.numbers import number_problem
from harness.records.files import open_regular, write_atomically
from harness.records.lm_metrics import LmScores
from harness.records.metrics import LengthMetrics
from harness.records.record import RunRecord, record_problems

FORMAT = "pezoo-kept-result"
VERSION = 2
MAX_BYTES = 64 << 20
"""A kept result is a few kilobytes (diagnostics included); a larger file is refused unread."""

_FIELDS = {
    "format",
    "seal",
    "version",
    "run_id",
    "config",
    "provenance",
    "started_at",
    "metrics",
    "final_loss",
    "train_seconds",
    "eval_seconds",
    "n_params",
    "diagnostics",
}
_METRIC_FIELDS = {"split"} | {f.name for f in dataclasses.fields(LengthMetrics)}


class KeptResultError(ValueError):
    """A kept result file is unreadable, malformed, or not this run's; the message says why."""


def path_for(checkpoint: Path) -> Path:
    """``<run_id>.result.json`` next to the run's checkpoint ``<run_id>.pt``."""
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(checkpoint.name.removesuffix(".pt") + ".result.json")


def keep(path: Path, record: RunRecord, key: bytes) -> None:
    """Write ``record`` (a finished run's, not yet in the store) to ``path`` atomically,
    sealed with ``key`` (the store's ``Store.seal_key``).

    Raises:
        harness.records.files.WriteError: it could not be written (``disk_full`` says whether that
            was a full disk); nothing is left behind.
    """
    body = {
        "format": FORMAT,
        "version": VERSION,
        "run_id": record.run_id,
        "config": record.config,
        "provenance": dict(record.provenance),
        "started_at": float(record.started_at),
        "metrics": [{"split": split, **dataclasses.asdict(m)} for split, m in record.metrics],
        "final_loss": float(record.final_loss),
        "train_seconds": float(record.train_seconds),
        "eval_seconds": float(record.eval_seconds),
        "n_params": {"total": int(record.n_params), "pe": int(record.pe_params)},
        "diagnostics": record.diagnostics,
    }
    if record.lm is not None:
        body["lm"] = record.lm.to_body()
    text = json.dumps({**body, "seal": seal(body, key)}, sort_keys=True, allow_nan=False)
    write_atomically(Path(path), lambda f: f.write(text.encode()))


def seal(body: dict[str, Any], key: bytes) -> str:
    """The HMAC-SHA256 under ``key`` of ``body`` (a kept result's fields but ``seal``) as
    canonical JSON: sorted keys, no spaces."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hmac.new(key, canonical.encode(), hashlib.sha256).hexdigest()


def read(path: Path, cfg: RunConfig, key: bytes | None) -> RunRecord:
    """The kept result of ``cfg`` at ``path``, checked: sealed with ``key`` (the store's
    ``Store.seal_key``; None: a store without one, which no file can match).

    Raises:
        KeptResultError: unreadable, not strict JSON, not sealed with ``key``, a field
            missing or extra, another run's (run id, config), or not a valid record
            (``harness.records.record``).
    """
    path = Path(path)
    try:
        with open_regular(path) as f:  # a FIFO put there would block the reader forever
            raw = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise KeptResultError(f"kept result {path} is unreadable ({exc})") from None
    if len(raw) > MAX_BYTES:
        raise KeptResultError(f"kept result {path} is larger than {MAX_BYTES >> 20} MiB")
    try:
        body = json.loads(raw.decode("utf-8"), parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as exc:
        raise KeptResultError(f"kept result {path} is not strict JSON ({type(exc).__name__}: {exc})") from None
    try:
        _check_seal(body, key)
        return _record(body, cfg)
    except KeptResultError as exc:
        raise KeptResultError(f"kept result {path} {exc}") from None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("a key appears twice in one object")
    return dict(pairs)


def _check_seal(body: Any, key: bytes | None) -> None:
    if not isinstance(body, dict) or body.get("format") != FORMAT or body.get("version") != VERSION:
        raise KeptResultError(f"is not a {FORMAT} file of version {VERSION}")
    rest = {k: v for k, v in body.items() if k != "seal"}
    given = body.get("seal")
    if key is None or not isinstance(given, str) or not hmac.compare_digest(given, seal(rest, key)):
        raise KeptResultError(
            "is not sealed by this store (written or changed by hand, or kept beside another store): not "
            "this store's result"
        )


def _record(body: dict[str, Any], cfg: RunConfig) -> RunRecord:
    fields = _FIELDS | {"lm"} if cfg.is_lm else _FIELDS
    if set(body) != fields:
        raise KeptResultError(f"has fields {sorted(body)}, not {sorted(fields)}")
    run_id = cfg.run_id()
    if body["run_id"] != run_id:
        raise KeptResultError(f"is run {_short(body['run_id'])}'s, not {run_id}'s")
    config = body["config"]
    if config != json.loads(json.dumps(cfg.to_dict())):  # as JSON holds it: tuples become lists
        raise KeptResultError(f"holds a config that is not run {run_id}'s")
    rows, n_params = body["metrics"], body["n_params"]
    if not isinstance(rows, list) or not all(isinstance(r, dict) and set(r) == _METRIC_FIELDS for r in rows):
        raise KeptResultError(f"has metrics that are not a list of {sorted(_METRIC_FIELDS)}")
    for r in rows:  # logged, not recorded: checked here
        if r["trace_exact"] is not None:
            problem = number_problem("trace_exact", r["trace_exact"], integer=True, minimum=0, maximum=r["n"])
            if problem is not None:
                raise KeptResultError(f"has {problem} at scale {_short(r['length'])}")
    if not isinstance(n_params, dict) or set(n_params) != {"total", "pe"}:
        raise KeptResultError(f"has n_params {_short(n_params)}, not {{total, pe}} counts")
    lm = None
    if cfg.is_lm:
        if rows or not isinstance(body["lm"], dict):
            raise KeptResultError("is a language-modelling run's: its scores are under lm, its metrics empty")
        try:
            lm = LmScores.from_body(run_id, body["lm"], cfg.lm_eval)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise KeptResultError(f"is not a valid record: {exc}") from None
    record = RunRecord(
        run_id=run_id,
        config=config,
        provenance=body["provenance"],
        metrics=tuple((r["split"], LengthMetrics(**{k: v for k, v in r.items() if k != "split"})) for r in rows),
        final_loss=body["final_loss"],
        train_seconds=body["train_seconds"],
        eval_seconds=body["eval_seconds"],
        started_at=body["started_at"],
        finished_at=None,
        n_params=n_params["total"],
        pe_params=n_params["pe"],
        diagnostics=body["diagnostics"],
        lm=lm,
    )
    problems = record_problems(record.to_dict(), record.diagnostics)
    if problems:
        raise KeptResultError("is not a valid record: " + "; ".join(problems[:5]))
    return dataclasses.replace(
        record,
        started_at=float(record.started_at),
        final_loss=float(record.final_loss),
        train_seconds=float(record.train_seconds),
        eval_seconds=float(record.eval_seconds),
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
