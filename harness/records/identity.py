"""A run's identity and the scales it evaluates, on the plain dict a record holds:
:func:`config_run_id` (``RunConfig.run_id``'s rule written on the dict, so a record can be
checked without building a config) and :func:`evaluated_scales` (which scales a run of a
config evaluates, as its record must list them)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import harness.tasks as tasks
from harness.config import NEW_FIELD_DEFAULTS, RunConfig
from harness.config.pe_spec import identity_options

MAX_LISTED_SCALES = 100_000
"""A config that evaluates more scales than this is compared with its record's metrics by
count and range only (its scales are not listed: a hostile ``test_max`` must not take the
memory of a list of them)."""


def config_run_id(config: Mapping[str, Any]) -> str:
    """The run identity of a config dict: sha256 of its canonical JSON minus ``preset``, first 16 hex.

    The same definition as ``RunConfig.run_id`` (a test keeps the two in agreement), written
    here on the plain dict so a record can be checked without building a RunConfig.
    Fields added to the config after results were first published are left out at their
    default values (``harness.config.NEW_FIELD_DEFAULTS``), so older records keep their ids,
    and so are encoding options at what their absence meant in a stored run
    (``harness.config.pe_spec.identity_options``: ``randomized{randomize_eval=false}`` is the run
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


def evaluated_scales(cfg: RunConfig) -> list[tuple[str, int]]:
    """(split, scale) of every scale a run of ``cfg`` evaluates, in order (a task may lack some;
    a language-modelling run: its training length and its test lengths past it, in tokens)."""
    scales = [("train", n) for n in cfg.train_lengths()] + [("test", n) for n in cfg.test_lengths()]
    if cfg.is_lm:
        return scales
    task = tasks.create(cfg.task)
    return [(split, n) for split, n in scales if task.has_scale(n)]


def listed_scales(config: RunConfig) -> list[tuple[str, int]] | None:
    """:func:`evaluated_scales`, or None when the task is not installed here (which of the
    listed scales it has is then unknown) or the config evaluates more than
    ``MAX_LISTED_SCALES``."""
    if config.is_lm:
        return evaluated_scales(config)
    train, test = config.train, config.decode_eval
    test_count = -(-(test.test_max - train.train_max) // test.test_stride) + 1  # an upper bound
    if (train.train_max - train.train_min + 1) + test_count > MAX_LISTED_SCALES:
        return None
    if config.task not in tasks.available():
        return None
    try:
        return evaluated_scales(config)
    except Exception:  # a plugin task that fails to build here: as if not installed
        return None
