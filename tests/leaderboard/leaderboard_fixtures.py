"""Helpers for the leaderboard tests: tiny real runs, and hand-made records with chosen metrics."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

import torch

from harness.config import RunConfig, preset_config
from harness.execution.run import execute
from harness.records.store import Store
from leaderboard.schema import FILE_NAME, SUFFIX, run_ids_digest

# (preset label, pe, task, seed, overrides): real smoke-preset runs, as small as they go.
TINY = {"train": {"steps": 4}, "eval": {"samples": 4}}
TINIER = {"train": {"steps": 2}, "eval": {"samples": 2}}
RUNS = [
    ("smoke", "nope", "copy", 0, TINY),
    ("smoke", "nope", "copy", 1, TINY),
    ("smoke", "rope", "copy", 0, TINY),
    ("smoke", "rope", "copy", 1, TINY),
    ("smoke", "nope", "reverse", 0, TINY),
    ("smoke-2step", "nope", "copy", 0, TINIER),  # a second protocol label, for the preset filter
]


def run_config(label: str, pe: str, task: str, seed: int, overrides: Mapping[str, Mapping[str, Any]]) -> RunConfig:
    cfg = preset_config("smoke", pe=pe, task=task, seed=seed, overrides=overrides)
    return RunConfig.from_dict({**cfg.to_dict(), "preset": label})


def run_tiny_bench(store_path: Path, runs: list = RUNS) -> list[str]:
    """Train and evaluate ``runs`` for real on CPU into the store; returns their run ids.

    One intra-op thread: these models are tiny, and on a shared 2-core machine two threads
    per op cost ~10x more in synchronisation than they save.
    """
    ids = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with Store(store_path) as store:
            for label, pe, task, seed, overrides in runs:
                outcome = execute(run_config(label, pe, task, seed, overrides), store, torch.device("cpu"))
                assert outcome.status in ("finished", "cached"), outcome
                ids.append(outcome.run_id)
    finally:
        torch.set_num_threads(threads)
    return ids


def unfinish(store_path: Path, run_id: str, status: str = "interrupted") -> None:
    """Make a finished run look like an attempt that never finished (the store's API never
    turns a finished run back), as a killed process leaves it: no metrics, not finished."""
    db = sqlite3.connect(store_path)
    try:
        with db:
            db.execute("DELETE FROM metrics WHERE run_id=?", (run_id,))
            db.execute("UPDATE runs SET status=?, error='killed' WHERE run_id=?", (status, run_id))
    finally:
        db.close()


def sha256_of_canonical(record: Mapping[str, Any]) -> str:
    """The checksum rule of the schema, written out independently."""
    body = {k: v for k, v in record.items() if k != "checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


LATER_DEFAULTS = {
    "eval": {
        "every": 0,
        "start_below_loss": None,
        "select": "final",
        "window": 0,
        "window_jump": 20,
        "match": "trace",
        "precision": None,
    },
    "train": {"schedule": "cosine", "pack": 0, "pack_loss": "all", "precision": "fp32"},
    "backbone": {"head": "tied"},
}
"""Config fields added after the first results were published: left out of the run id at these values."""


def without_later_defaults(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` without the later fields that sit at their defaults (the run-id rule)."""
    out = dict(config)
    for section, later in LATER_DEFAULTS.items():
        out[section] = {k: v for k, v in out[section].items() if not (k in later and later[k] == v)}
    return out


def make_record(
    pe: str,
    task: str,
    seed: int,
    em: Mapping[int, float],
    tok: Mapping[int, float] | None = None,
    *,
    preset: str = "smoke",
    train_max: int = 5,
    steps: int = 20,
    device: str = "cpu:test x2 threads",
    finished_at: float = 1_700_000_000.0,
    eval_options: Mapping[str, Any] | None = None,
    train_options: Mapping[str, Any] | None = None,
    provenance: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A valid results record with chosen per-length metrics (not from a real run: for the
    board's arithmetic and the validator, where the numbers must be known in advance).

    The metrics are kept as counts (results schema 2): each scale is over
    ``COUNT_SAMPLES`` examples and as many scored tokens, so a value with up to four
    decimals is exactly ``count / COUNT_SAMPLES``; a value given as a ``Fraction`` must be
    a count over that too. ``provenance`` adds to (or replaces) the record's provenance
    fields: ``{"exact_match_by": "teacher-forced read-off", "tf32": "on"}`` for a GPU run."""
    test_max = max(em)
    eval_options = {"samples": COUNT_SAMPLES, **(eval_options or {})}
    samples = int(eval_options["samples"])
    cfg = preset_config(
        "smoke",
        pe=pe,
        task=task,
        seed=seed,
        overrides={
            "train": {"train_max": train_max, "steps": steps, **(train_options or {})},
            "eval": {"test_max": test_max, **(eval_options or {})},
        },
    )
    config = {**cfg.to_dict(), "preset": preset}
    config["train"]["betas"] = list(config["train"]["betas"])
    body = {k: v for k, v in config.items() if k != "preset"}
    body = without_later_defaults(body)
    run_id = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
    tok = tok or {n: min(1.0, v + 0.05) for n, v in em.items()}
    record = {
        "schema_version": 2,
        "run_id": run_id,
        "pe": cfg.pe,  # the registry name: a spec's options are in the config, as a real record has them
        "task": task,
        "seed": seed,
        "preset": preset,
        "status": "finished",
        "config": config,
        "provenance": {
            "commit": "0" * 40,
            "device": device,
            "torch": "2.13.0",
            "pezoo": "0.1.0",
            "python": "3.11",
            **(provenance or {}),
        },
        "params": {"total": 1000, "pe": 0},
        "timings": {
            "train_seconds": 1.5,
            "eval_seconds": 0.5,
            "started_at": finished_at - 2,
            "finished_at": finished_at,
        },
        "final_loss": 0.25,
        "metrics": [
            {
                "split": "train" if n <= train_max else "test",
                "length": n,
                "token_length": float(2 * n + 3),
                "n": samples,
                "exact": _count(em[n], samples),
                "tokens": samples,
                "tokens_right": _count(tok[n], samples),
            }
            for n in sorted(em)
        ],
    }
    record["checksum"] = sha256_of_canonical(record)
    return record


COUNT_SAMPLES = 10_000
"""Examples (and scored tokens) per scale in :func:`make_record`'s records."""


def _count(value: Any, total: int) -> int:
    """``value × total`` as the whole count it must be (a fixture's numbers are chosen so)."""
    count = round(Fraction(value) * total) if isinstance(value, Fraction) else round(value * total)
    if abs(float(value) * total - count) > 1e-6:
        raise ValueError(f"{value!r} is not a count over {total}")
    return count


def write_jsonl(path: Path, records: list[Mapping[str, Any]]) -> Path:
    """Write ``records`` as a results file. A name in export's pattern gets the digest of
    its records' run ids (as export names it; ``check`` verifies it), and that path is
    returned: ``smoke-20261124-000000000000.jsonl`` becomes ``smoke-20261124-<digest>.jsonl``."""
    match = FILE_NAME.match(path.name)
    if match is not None and all(isinstance(r, Mapping) and isinstance(r.get("run_id"), str) for r in records):
        digest = run_ids_digest(str(r["run_id"]) for r in records)
        path = path.with_name(f"{match['preset']}-{match['day']}-{digest}{SUFFIX}")
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n" for r in records]
    path.write_text("".join(lines), encoding="utf-8")
    return path
