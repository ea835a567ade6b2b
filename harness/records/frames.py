"""Results as pandas DataFrames, read from the SQLite store: the algorithmic runs' metrics
(:func:`load`) and the language-modelling runs' scores (:func:`load_lm`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd

from harness.config import NEW_FIELD_DEFAULTS, RunConfig
from harness.config.pe_spec import config_display_name, display_name, identity_options, variant_display_name
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


FREE_WITHIN_A_ROW = frozenset({"seed", "preset"})
"""Config fields that may differ between the runs of one row: the seed (a row's seeds are
its runs) and the preset's name (a label: what it sets is compared field by field)."""


def settings(config: Mapping[str, Any]) -> dict[str, str]:
    """A stored config as ``{dotted field: value}`` over every setting, the fields added later
    filled in at their defaults (``harness.config.NEW_FIELD_DEFAULTS``: a record from before a
    field existed ran at its default) and the encoding's options as they enter the run's
    identity (``identity_options``); values as short text (``0.0003``, ``[0.9, 0.98]``)."""
    out: dict[str, str] = {}

    def walk(value: Any, key: str) -> None:
        if isinstance(value, Mapping) and value:
            for k in sorted(value):
                walk(value[k], f"{key}.{k}" if key else str(k))
        else:
            out[key] = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)

    body = dict(config)
    for section, defaults in NEW_FIELD_DEFAULTS.items():
        if isinstance(body.get(section), Mapping):
            body[section] = {**defaults, **body[section]}
    if isinstance(body.get("pe"), str) and isinstance(body.get("pe_options"), Mapping):
        body["pe_options"] = identity_options(body["pe"], body["pe_options"])
    walk(body, "")
    return out


def settings_apart(runs: Mapping[str, tuple[str, str, Mapping[str, Any]]]) -> dict[str, str]:
    """run_id -> its row's label, given run_id -> (task, label, stored config): runs of one
    task and label that differ in any setting but the seed end in the settings that set
    them apart (``rope [train.lr=0.0001]`` beside ``rope [train.lr=0.0003]``; a quick and a
    board run: ``[preset=board, train.steps=10000]``), so a row pools the seeds of one
    setting only and a row's seed is one run, never the metrics of two mixed together."""
    groups: dict[tuple[str, str], list[str]] = {}
    for run_id, (task, label, _config) in runs.items():
        groups.setdefault((task, label), []).append(run_id)
    out = {run_id: label for run_id, (_task, label, _config) in runs.items()}
    for ids in groups.values():
        if len(ids) < 2:
            continue
        flat = {run_id: settings(runs[run_id][2]) for run_id in ids}
        keys = sorted(set().union(*flat.values()))
        differing = [
            k for k in keys
            if k not in FREE_WITHIN_A_ROW and len({flat[r].get(k, "-") for r in ids}) > 1
        ]  # fmt: skip
        if differing and len({flat[r].get("preset", "-") for r in ids}) > 1:
            differing = ["preset", *differing]  # the name first: it says what most of the rest is
        for run_id in ids:
            if differing:
                shown = ", ".join(f"{k}={flat[run_id].get(k, '-')}" for k in differing)
                out[run_id] += f" [{shown}]"
    return out


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
        labelled: dict[str, tuple[str, str, Mapping[str, Any]]] = {}
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
            labelled[run["run_id"]] = (run["task"], base["pe_label"], config)
            for m in store.metrics(run["run_id"]):
                counts = {k: m[k] for k in m if k != "run_id"}
                fractions = {
                    "exact_match": Fraction(m["exact"], m["n"]),
                    "token_accuracy": Fraction(m["tokens_right"], m["tokens"]),
                }
                rows.append({**base, **counts, **fractions})
    labels = settings_apart(labelled)
    for row in rows:
        row["pe_label"] = labels[row["run_id"]]
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
        labelled: dict[str, tuple[str, str, Mapping[str, Any]]] = {}
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
            labelled[run["run_id"]] = (run["task"], label, record.config)
            for s in record.lm.scores:
                rows.append({**base, "pe_label": label, "mode": s.mode, "length": s.length, "nats": s.nats,
                             "bytes": s.n_bytes, "bpb": s.bpb, "reached": s.reached, "note": s.note})  # fmt: skip
    labels = settings_apart(labelled)
    for row in rows:
        row["pe_label"] = labels[row["run_id"]]
    return pd.DataFrame(rows, columns=LM_COLUMNS)
