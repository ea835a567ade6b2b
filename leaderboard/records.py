"""The published records as the board reads them: each run's label, the per-length frame
of a set of runs, and the check that the runs of one table share one protocol (and the
runs of one row one way of being made: ``leaderboard.making``).

An "encoding" on the board is the registry name, with its options appended when a run
set any (``rope{base=500}``), so differently configured runs are never pooled; an
inference-time variant of a trained run is named after both (``rope → yarn×4 L=10 (same
weights)``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import pandas as pd

from harness.config import NEW_FIELD_DEFAULTS
from harness.config.pe_spec import display_name, variant_display_name
from leaderboard.making import ONE_WAY, Making, making_of
from leaderboard.schema import Record

FRAME_COLUMNS = [
    "run_id",
    "pe",
    "encoding",
    "task",
    "seed",
    "preset",
    "train_max",
    "test_range",
    "split",
    "length",
    "token_length",
    "n",
    "exact",
    "tokens",
    "tokens_right",
    "exact_match",
    "token_accuracy",
]
PROTOCOL_FREE_KEYS = ("pe", "pe_options", "eval_pe_options", "seed")
"""Config keys that may differ between runs compared in one (preset, task) table."""


class BoardError(ValueError):
    """The records cannot be put on one board (e.g. a preset label reused for two protocols)."""


SIZED_TO_TRAINING: dict[str, tuple[str, ...]] = {"fope": ("train_length",), "hybrid": ("window",)}
"""Encoding options the board sizes to the task's longest training sequence
(leaderboard/board-frontier.toml: FoPE's clipping length, the RNoPE-SWA hybrid's window),
named ``L`` in a row's label where they equal it: one encoding is then one row across tasks
whose sequences differ (``fope{train_length=L}``: 24 tokens on copy, 25 on
stack_manipulation, 44 on mqar), not one row per length that the at-a-glance grid could
never order."""

SIZED_KEY = "L in a row's name: the task's longest training sequence in tokens (<bos> and <eos> included)"
"""The key to :data:`SIZED_TO_TRAINING`'s ``L``, quoted under the grids that show one."""


def training_length(task: str, train_max: int) -> int | None:
    """``L``: tokens in the task's longest training sequence at scale ``train_max`` (a
    language-modelling task's: its window, ``train_max`` bytes); None for a task this
    harness does not have."""
    from harness.tasks.data import longest_training_tokens
    from harness.tasks.lm import LM_TASKS

    if task in LM_TASKS:
        return train_max
    try:
        return longest_training_tokens(task, train_max)
    except (KeyError, ValueError):
        return None


def sized_to_training(pe: str, pe_options: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, str]:
    """The options of a run of ``pe`` (config dict ``config``) that equal its task's
    :func:`training_length`, as ``{key: "L"}``."""
    keys = [k for k in SIZED_TO_TRAINING.get(pe, ()) if isinstance(pe_options.get(k), int)]
    task, train_max = config.get("task"), (config.get("train") or {}).get("train_max")
    if not keys or not isinstance(task, str) or not isinstance(train_max, int):
        return {}
    longest = training_length(task, train_max)
    return {k: "L" for k in keys if pe_options[k] == longest}


def encoding_label(pe: str, pe_options: Mapping[str, Any], config: Mapping[str, Any] | None = None) -> str:
    """The board's name for an encoding run: its spec as ``harness.config.pe_spec.display_name``
    writes it (``rope``, ``randomized:ape``, ``prism{paper}``,
    ``randomized:ape{randomize_eval=false}`` for a run evaluated on plain positions),
    with the paper setup recognised when ``config`` (the record's) gives task and backbone,
    and options sized to the task's training sequences named ``L`` (:data:`SIZED_TO_TRAINING`)."""
    task = backbone = None
    symbolic: dict[str, str] = {}
    if config is not None:
        task, backbone = config.get("task"), config.get("backbone")
        symbolic = sized_to_training(pe, pe_options, config)
    try:
        return display_name(pe, pe_options, task=task, backbone=backbone, symbolic=symbolic)
    except (TypeError, ValueError, KeyError):  # a plugin's options the registry cannot read
        return pe if not pe_options else f"{pe} {json.dumps(pe_options, sort_keys=True)}"


def record_label(data: Mapping[str, Any]) -> str:
    """:func:`encoding_label` of one record's data; an inference-time variant's (a trained
    run evaluated with ``config.eval_pe_options``) as ``rope → yarn×4 L=10 (same weights)``
    (``harness.config.pe_spec.variant_display_name``)."""
    config = data["config"]
    label = encoding_label(data["pe"], config.get("pe_options") or {}, config)
    return variant_display_name(label, config.get("eval_pe_options"))


def frame(records: Iterable[Record]) -> pd.DataFrame:
    """Per-length rows (the columns of ``harness.records.frames.load``, ``pe`` = board label, plus
    ``encoding`` = registry name), sorted by preset, task, label, seed, length. The
    metrics are the records' counts, with ``exact_match`` and ``token_accuracy`` their
    exact ``fractions.Fraction``."""
    rows = []
    for rec in records:
        d = rec.data
        base = {
            "run_id": d["run_id"],
            "pe": record_label(d),
            "encoding": d["pe"],
            "task": d["task"],
            "seed": d["seed"],
            "preset": d["preset"],
            "train_max": d["config"]["train"]["train_max"],
            "test_range": test_range(d),
        }
        for m in d["metrics"]:  # the counts, and their fractions exactly (harness.records.counts)
            fractions = {
                "exact_match": Fraction(m["exact"], m["n"]),
                "token_accuracy": Fraction(m["tokens_right"], m["tokens"]),
            }
            rows.append({**base, **m, **fractions})
    df = pd.DataFrame(rows, columns=FRAME_COLUMNS)
    return df.sort_values(["preset", "task", "test_range", "pe", "seed", "length"], kind="stable").reset_index(
        drop=True
    )


def test_range(data: Mapping[str, Any]) -> int:
    """A record's largest planned test scale (``config.eval.test_max``): runs tested to 100
    make a table of their own beside the ones tested to 40 on the same task and preset."""
    return int(data["config"]["eval"]["test_max"])


def check_protocols(records: Sequence[Record]) -> None:
    """Raise BoardError if two runs of one (preset, task) differ in more than encoding and
    seed, or if the runs of one row were made in more than one way (``leaderboard.making``:
    on a CPU and on a GPU, exact match decoded and read off, TF32 on and off).

    (One encoding and seed twice under one protocol cannot happen: it is the same run_id,
    which reading the results already refuses.)
    """
    first: dict[tuple[str, str, int], tuple[dict[str, Any], Record]] = {}
    problems = []
    for rec in records:
        d = rec.data
        protocol = {k: v for k, v in _with_later_defaults(d["config"]).items() if k not in PROTOCOL_FREE_KEYS}
        key = (d["preset"], d["task"], test_range(d))
        if key not in first:
            first[key] = (protocol, rec)
        elif protocol != first[key][0]:
            other = first[key][1]
            differ = sorted(_differing_keys(protocol, first[key][0]))
            problems.append(
                f"{rec.path}:{rec.line} and {other.path}:{other.line}: preset {d['preset']!r} on task {d['task']!r} "
                f"with different protocols ({', '.join(differ)}): a table holds one protocol, so runs with "
                "other settings go to a results folder of their own (`pezoo leaderboard export --out DIR`), or "
                "are re-run with the preset's settings"
            )
    seen: dict[tuple[str, str, str, int, int], Record] = {}
    for rec in records:  # e.g. `randomized` and `randomized:ape`: one encoding, two run ids
        d = rec.data
        run_key = (d["preset"], d["task"], record_label(d), d["seed"], test_range(d))
        if run_key in seen:
            other = seen[run_key]
            problems.append(
                f"{rec.path}:{rec.line} and {other.path}:{other.line}: two runs of {run_key[2]!r} on task "
                f"{run_key[1]!r}, seed {run_key[3]}, preset {run_key[0]!r} (run ids {d['run_id']} and "
                f"{other.data['run_id']}); publish one of them"
            )
        seen.setdefault(run_key, rec)
    problems += _mixed_rows(records)
    if problems:
        raise BoardError("results that cannot share a board:\n  " + "\n  ".join(problems))


def _mixed_rows(records: Sequence[Record]) -> list[str]:
    """One problem per row whose runs were made in more than one way (``leaderboard.making``:
    the kind of device, how exact match was computed, TF32), naming a run of each way."""
    first: dict[tuple[str, str, int, str], dict[tuple[str, str, str], tuple[Making, Record]]] = {}
    for rec in records:
        d = rec.data
        made = making_of(d)
        ways = first.setdefault((d["preset"], d["task"], test_range(d), record_label(d)), {})
        ways.setdefault(made.key, (made, rec))
    problems = []
    for (preset, task, _, label), ways in first.items():
        if len(ways) < 2:
            continue
        (made, rec), *others = ways.values()
        for other_made, other in others:
            problems.append(
                f"{other.path}:{other.line} and {rec.path}:{rec.line}: the row {label!r} of preset {preset!r} on task "
                f"{task!r} has runs made two ways (seed {other.data['seed']} {other_made.sentence()}; seed "
                f"{rec.data['seed']} {made.sentence()}). {ONE_WAY}: publish the runs made the other "
                "way in a results folder of their own (`pezoo leaderboard export --out DIR`) and compare the two "
                "tables (`pezoo leaderboard compare`), or train all of the row's seeds one way"
            )
    return problems


def _with_later_defaults(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with the fields added after results were first published filled in at
    their defaults, so a record written before they existed compares equal to one written
    after (``harness.config.NEW_FIELD_DEFAULTS``)."""
    out = dict(config)
    for section, defaults in NEW_FIELD_DEFAULTS.items():
        if isinstance(out.get(section), Mapping):
            out[section] = {**defaults, **out[section]}
    return out


def _differing_keys(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> list[str]:
    out = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += _differing_keys(va, vb, f"{prefix}{k}.")
        elif va != vb:
            out.append(f"{prefix}{k}")
    return out


def train_steps(records: Iterable[Record]) -> tuple[int, ...]:
    """The training steps the ``records`` ran, each once, sorted."""
    return tuple(sorted({int(rec.data["config"]["train"]["steps"]) for rec in records}))
