"""Finished results the store could not take, kept as JSON until it can.

When recording a finished run fails because the store cannot be written (a full disk,
SQLite's "database or disk is full", an I/O error), the result is written atomically to
``<checkpoint_dir>/<run_id>.result.json`` (:func:`keep`), and the next ``bench`` of that
run records it without training (:func:`read`). The file is plain JSON, read strictly:
exactly the fields below, the run's id and config, the run's own evaluated scales, numbers
finite and in range, diagnostics only of the shape ``harness.diagnostics`` writes. A file
that is anything else is refused (and the run trains), so the file can hold no more than
the run itself would have recorded.

    format        "pezoo-kept-result"
    version       1
    run_id        str, ``RunConfig.run_id()``
    config        ``RunConfig.to_dict()``
    provenance    {str: str | int | float | bool | None}
    started_at    float, Unix time
    metrics       [{"split", "length", "token_length", "n", "exact_match", "token_accuracy",
                  "trace_exact_match"}], one per evaluated scale, in order
    final_loss, train_seconds, eval_seconds   float
    n_params      {"total": int, "pe": int}
    diagnostics   ``harness.diagnostics.prism_trajectories`` output, or null
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import harness.tasks as tasks
from harness import diagnostics as diag
from harness.config import RunConfig, is_finite_number
from harness.evaluate import LengthMetrics
from harness.files import open_regular, write_atomically
from harness.tasks.vocab import VOCAB_SIZE, decode

FORMAT = "pezoo-kept-result"
VERSION = 1
MAX_BYTES = 64 << 20
"""A kept result is a few kilobytes (diagnostics included); a larger file is refused unread."""

_FIELDS = {
    "format",
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
_LAYER_FIELDS = {"layer", "support", "query_modes", "key_modes", "query_confidence", "key_confidence"}


class KeptResultError(ValueError):
    """A kept result file is unreadable, malformed, or not this run's; the message says why."""


def path_for(checkpoint: Path) -> Path:
    """``<run_id>.result.json`` next to the run's checkpoint ``<run_id>.pt``."""
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(checkpoint.name.removesuffix(".pt") + ".result.json")


def keep(path: Path, cfg: RunConfig, result: Any) -> None:
    """Write ``result`` (a finished ``harness.run.RunResult`` of ``cfg``) to ``path`` atomically.

    Raises:
        harness.files.WriteError: it could not be written (``disk_full`` says whether that
            was a full disk); nothing is left behind.
    """
    body = {
        "format": FORMAT,
        "version": VERSION,
        "run_id": cfg.run_id(),
        "config": cfg.to_dict(),
        "provenance": dict(result.provenance),
        "started_at": float(result.started_at),
        "metrics": [{"split": split, **dataclasses.asdict(m)} for split, m in result.metrics],
        "final_loss": float(result.final_loss),
        "train_seconds": float(result.train_seconds),
        "eval_seconds": float(result.eval_seconds),
        "n_params": {"total": int(result.n_params["total"]), "pe": int(result.n_params["pe"])},
        "diagnostics": result.diagnostics,
    }
    text = json.dumps(body, sort_keys=True, allow_nan=False)
    write_atomically(Path(path), lambda f: f.write(text.encode()))


def read(path: Path, cfg: RunConfig) -> dict[str, Any]:
    """The kept result of ``cfg`` at ``path``, checked, as ``harness.run.RunResult`` keyword
    arguments (status ``finished``).

    Raises:
        KeptResultError: unreadable, not strict JSON, a field missing, extra or out of
            range, or another run's (run id, config, evaluated scales).
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
        return _check(body, cfg)
    except KeptResultError as exc:
        raise KeptResultError(f"kept result {path} {exc}") from None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("a key appears twice in one object")
    return dict(pairs)


def _check(body: Any, cfg: RunConfig) -> dict[str, Any]:
    if not isinstance(body, dict) or body.get("format") != FORMAT or body.get("version") != VERSION:
        raise KeptResultError(f"is not a {FORMAT} file of version {VERSION}")
    if set(body) != _FIELDS:
        raise KeptResultError(f"has fields {sorted(body)}, not {sorted(_FIELDS)}")
    run_id = cfg.run_id()
    if body["run_id"] != run_id:
        raise KeptResultError(f"is run {_short(body['run_id'])}'s, not {run_id}'s")
    if body["config"] != json.loads(json.dumps(cfg.to_dict())):  # as JSON holds it: tuples become lists
        raise KeptResultError(f"holds a config that is not run {run_id}'s")
    provenance = body["provenance"]
    if not isinstance(provenance, dict) or not all(
        isinstance(k, str)
        and len(k) <= 100
        and (v is None or isinstance(v, bool | int | float) or _short_str(v) or _resolved_options(k, v))
        for k, v in provenance.items()
    ):
        raise KeptResultError("has a provenance that is not {name: short string or number}")
    for name in ("started_at", "final_loss", "train_seconds", "eval_seconds"):
        if not _number(body[name], low=None if name == "final_loss" else 0.0):
            raise KeptResultError(f"has {name} {_short(body[name])}, not a finite number")
    n_params = body["n_params"]
    if not isinstance(n_params, dict) or set(n_params) != {"total", "pe"} or not all(map(_count, n_params.values())):
        raise KeptResultError(f"has n_params {_short(n_params)}, not {{total, pe}} counts")
    metrics = _metrics(body["metrics"], cfg)
    if body["diagnostics"] is not None:
        _check_diagnostics(body["diagnostics"], cfg)
    return {
        "run_id": run_id,
        "status": "finished",
        "provenance": provenance,
        "started_at": float(body["started_at"]),
        "metrics": metrics,
        "final_loss": float(body["final_loss"]),
        "train_seconds": float(body["train_seconds"]),
        "eval_seconds": float(body["eval_seconds"]),
        "n_params": dict(n_params),
        "diagnostics": body["diagnostics"],
    }


def evaluated_scales(cfg: RunConfig) -> list[tuple[str, int]]:
    """(split, scale) of every scale a run of ``cfg`` evaluates, in order (a task may lack some)."""
    task = tasks.create(cfg.task)
    scales = [("train", n) for n in cfg.train_lengths()] + [("test", n) for n in cfg.test_lengths()]
    return [(split, n) for split, n in scales if task.has_scale(n)]


def _metrics(rows: Any, cfg: RunConfig) -> tuple[tuple[str, LengthMetrics], ...]:
    want = evaluated_scales(cfg)
    if not isinstance(rows, list) or not all(isinstance(r, dict) and set(r) == _METRIC_FIELDS for r in rows):
        raise KeptResultError(f"has metrics that are not a list of {sorted(_METRIC_FIELDS)}")
    if [(r["split"], r["length"]) for r in rows] != want:
        raise KeptResultError("has metrics for other scales than the run evaluates")
    out = []
    for r in rows:
        if not (_count(r["n"]) and r["n"] > 0 and _number(r["token_length"], low=0.0)):
            raise KeptResultError(f"has metrics with a bad n or token_length at scale {r['length']}")
        for name in ("exact_match", "token_accuracy", "trace_exact_match"):
            if not (r[name] is None and name == "trace_exact_match") and not _number(r[name], low=0.0, high=1.0):
                raise KeptResultError(f"has {name} {_short(r[name])} at scale {r['length']}, not in [0, 1]")
        fields = {k: v for k, v in r.items() if k != "split"}
        out.append((r["split"], LengthMetrics(**fields)))
    return tuple(out)


def _check_diagnostics(body: Any, cfg: RunConfig) -> None:
    """The shape ``harness.diagnostics.prism_trajectories`` returns for ``cfg``, nothing else."""
    test_scales = [n for split, n in evaluated_scales(cfg) if split == "test"]
    vocabulary = set(decode(range(VOCAB_SIZE)))
    ok = (
        isinstance(body, dict)
        and set(body) == {"version", "scale", "train_max", "tokens", "layers"}
        and body["version"] == diag.VERSION
        and bool(test_scales)
        and body["scale"] == test_scales[-1]
        and body["train_max"] == cfg.train.train_max
        and isinstance(body["tokens"], list)
        and all(isinstance(t, str) and t in vocabulary for t in body["tokens"])
        and isinstance(body["layers"], list)
    )
    if not ok:
        raise KeptResultError("has diagnostics that are not this run's cursor trajectories")
    for layer in body["layers"]:
        if not (isinstance(layer, dict) and set(layer) == _LAYER_FIELDS and _count(layer["layer"])):
            raise KeptResultError("has a diagnostics layer of another shape")
        support = layer["support"]
        if not _count(support):
            raise KeptResultError("has a diagnostics layer without a support size")
        for name in ("query_modes", "key_modes"):
            if not _nested(layer[name], 3, lambda v, p=support: _is_int(v) and abs(v) <= p):
                raise KeptResultError(f"has diagnostics {name} that are not (h, c, s) offsets within ±{support}")
        for name in ("query_confidence", "key_confidence"):
            if not _nested(layer[name], 3, lambda v: _number(v, low=0.0, high=1.0)):
                raise KeptResultError(f"has diagnostics {name} that are not (h, c, s) probabilities")


def _nested(value: Any, depth: int, leaf: Any) -> bool:
    if depth == 0:
        return leaf(value)
    return isinstance(value, list) and all(_nested(v, depth - 1, leaf) for v in value)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _count(v: Any) -> bool:
    return _is_int(v) and 0 <= v < 2**63


def _number(v: Any, *, low: float | None = None, high: float | None = None) -> bool:
    if not is_finite_number(v):
        return False
    return (low is None or v >= low) and (high is None or v <= high)


def _resolved_options(key: str, value: Any) -> bool:
    """``pe_options_resolved`` (``harness.provenance.resolved_pe_options``): an object of
    option names to JSON values, small."""
    return (
        key == "pe_options_resolved"
        and isinstance(value, dict)
        and all(isinstance(k, str) for k in value)
        and len(json.dumps(value)) <= 65536
    )


def _short_str(v: Any) -> bool:
    return isinstance(v, str) and len(v) <= 1000


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
