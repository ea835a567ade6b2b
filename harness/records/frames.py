"""Results as pandas DataFrames, read from the SQLite store: the algorithmic runs' metrics
(:func:`load`) and the language-modelling runs' scores (:func:`load_lm`)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pandas as pd

from harness.config import RunConfig
from harness.config.pe_spec import config_display_name, display_name, variant_display_name
from harness.config.precisions import evaluation_precision
from harness.records.store import Store
from harness.tasks.lm import LM_TASKS


def precision_label(config: dict) -> str:
    """How a stored config's run was trained and evaluated, when not plain fp32: ``bf16``,
    ``fp16``, ``fp32, eval bf16``; "" for fp32 (every run from before precision existed)."""
    trained = config.get("train", {}).get("precision", "fp32")
    evaluated = evaluation_precision(config.get("eval", {}).get("precision"), trained)
    if evaluated != trained:
        return f"{trained}, eval {evaluated}"
    return "" if trained == "fp32" else trained


def load(path: str | Path, *, status: str | None = "finished") -> pd.DataFrame:
    """Per-length metrics joined with their runs, as a pandas DataFrame.

    Columns: run_id, pe (the registry name), task, seed, preset, status, train_min,
    train_max, protocol, match (what exact match scores: ``trace`` or ``answer``),
    n_params, pe_params, pe_label (the name with its options, as tables show it:
    ``harness.config.pe_spec.display_name``; an inference-time variant's ``rope → yarn×4 L=10 (same
    weights)``; a run not in fp32 ends in its precision, ``rope [bf16]``), split, length, token_length, and
    the counts n, exact, tokens, tokens_right (``harness.records.counts``), with exact_match (exact / n) and
    token_accuracy (tokens_right / tokens) as exact ``fractions.Fraction`` values.

    The store is opened read-only (never created, migrated or changed), so this works on
    a read-only or full disk; a missing or unusable store raises ``StoreError``.
    """
    with Store(path, readonly=True) as store:
        rows = []
        for run in store.runs():
            if status is not None and run["status"] != status:
                continue
            base = {k: run[k] for k in ("run_id", "pe", "task", "seed", "preset", "status")}
            config = run["config"]
            trained = display_name(
                run["pe"], config.get("pe_options") or {}, task=run["task"], backbone=config.get("backbone")
            )
            base["pe_label"] = variant_display_name(trained, config.get("eval_pe_options"))
            precision = precision_label(config)
            if precision:  # a bf16 run is a row of its own beside the fp32 one, never pooled with it
                base["pe_label"] += f" [{precision}]"
            head = (config.get("backbone") or {}).get("head", "tied")  # records from before the option: tied
            if head != "tied":  # another model: a row of its own, as above
                base["pe_label"] += f" [{head} head]"
            base["train_min"] = run["config"]["train"].get("train_min", 1)
            base["train_max"] = run["config"]["train"]["train_max"]
            base["protocol"] = run["config"].get("protocol", "decoder")
            base["match"] = run["config"]["eval"].get("match", "trace")
            base["n_params"], base["pe_params"] = run["n_params"], run["pe_params"]
            for m in store.metrics(run["run_id"]):
                counts = {k: m[k] for k in m if k != "run_id"}
                fractions = {
                    "exact_match": Fraction(m["exact"], m["n"]),
                    "token_accuracy": Fraction(m["tokens_right"], m["tokens"]),
                }
                rows.append({**base, **counts, **fractions})
    columns = ["run_id", "pe", "task", "seed", "preset", "status", "train_min", "train_max", "protocol", "match"]
    columns += ["n_params", "pe_params", "pe_label"]
    columns += ["split", "length"]
    columns += ["token_length", "n", "exact", "tokens", "tokens_right", "exact_match", "token_accuracy"]
    return pd.DataFrame(rows, columns=columns)


LM_COLUMNS = ["run_id", "pe", "task", "seed", "preset", "pe_label", "mode", "length", "nats", "bytes", "bpb"]
LM_COLUMNS += ["reached", "note"]
"""The columns of :func:`load_lm`."""


def load_lm(path: str | Path) -> pd.DataFrame:
    """The finished language-modelling runs' scores, one row per (run, mode, length): run_id,
    pe, task, seed, preset, pe_label (as tables show it: a variant's name, a fine-tune's steps;
    a run not in fp32 ends in its precision), mode (``windows`` or ``tail``), length, the
    counts nats (a float sum) and bytes, bpb from them (None where not reached), reached and
    note (why not). Read-only, as :func:`load`."""
    with Store(path, readonly=True) as store:
        rows = []
        for run in store.runs():
            if run["status"] != "finished" or run["task"] not in LM_TASKS:
                continue
            record = store.record(run["run_id"])
            if record is None or record.lm is None:
                continue
            config = RunConfig.from_dict(record.config)
            label = config_display_name(config)
            precision = precision_label(dict(record.config))
            if precision:
                label += f" [{precision}]"
            base = {k: run[k] for k in ("run_id", "pe", "task", "seed", "preset")}
            for s in record.lm.scores:
                rows.append({**base, "pe_label": label, "mode": s.mode, "length": s.length, "nats": s.nats,
                             "bytes": s.n_bytes, "bpb": s.bpb, "reached": s.reached, "note": s.note})  # fmt: skip
    return pd.DataFrame(rows, columns=LM_COLUMNS)
