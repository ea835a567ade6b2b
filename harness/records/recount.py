"""Counts recovered from a metric stored as a float fraction (records before counts).

Results written before metrics were counts (results-file schema 1, store schema 2) hold
each scale's exact match and per-token accuracy as a float32 mean. The counts behind them
are recovered exactly, without re-running anything:

* examples right: ``round(exact_match × n)`` (a float32 mean of n ones and zeros is
  within far less than ½ / n of the count's fraction);
* tokens scored: the scale's evaluation examples are made again (they depend only on
  the task, scale, seed and sample count: ``harness.tasks.data.evaluation_set``) and their
  scored tokens summed as evaluation counts them (``harness.tasks.data.collate``);
* tokens right: ``round(token_accuracy × tokens)``. The float was the mean over examples
  of each one's fraction, which is tokens right over tokens where every example of the
  scale scores as many tokens (every task of the board): there the count is exact and
  checked (``harness.records.counts.recover``). Where the examples score different numbers of
  tokens (addition's answers of one or two more digits), that mean is not a count over
  the tokens: the nearest count is taken, and the value moves by less than half a token
  over the scale's tokens (the retired quick addition table, off the board).

Each recovery is checked: a value that is not a count over its total is an error, never
rounded into one.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import harness.tasks as tasks
from harness.records.counts import recover
from harness.tasks.data import collate, evaluation_set


class RecountError(ValueError):
    """A stored fraction whose counts cannot be recovered; the message says which and why."""


@functools.lru_cache(maxsize=65_536)
def scored_tokens(task: str, scale: int, samples: int, seed: int, protocol: str = "decoder") -> tuple[int, bool]:
    """Tokens scored over the evaluation examples of (task, scale, seed), and whether every
    example scores as many (then a mean of per-example fractions is tokens right over tokens)."""
    if task not in tasks.available():
        raise RecountError(f"task {task!r} is not installed here: its evaluation examples cannot be counted")
    batch = collate(evaluation_set(tasks.create(task), scale, samples, seed), protocol)
    per_example = batch.scored.sum(-1)  # (n,)
    return int(per_example.sum().item()), bool((per_example == per_example[0]).all().item())


def recount(metric: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """A metric entry of the float form (``exact_match``, ``token_accuracy``) in the count
    form (``exact``, ``tokens``, ``tokens_right``) of ``harness.records.record_fields.METRIC_KEYS``."""
    length, n = metric["length"], metric["n"]
    where = f"scale {length}"
    samples = config["eval"]["samples"]
    try:
        exact = recover(metric["exact_match"], n, f"exact match at {where}")
        protocol = config.get("protocol", "decoder")
        if n % samples == 0:  # a top3 record's n covers each picked evaluation of the same examples
            tokens, uniform = scored_tokens(config["task"], length, samples, config["seed"], protocol)
            tokens *= n // samples
        else:  # n examples of the scale's stream (its first n are the same whatever the sample count)
            tokens, uniform = scored_tokens(config["task"], length, n, config["seed"], protocol)
        if uniform:
            tokens_right = recover(metric["token_accuracy"], tokens, f"token accuracy at {where}")
        else:  # a mean of per-example fractions of different sizes: the nearest count
            tokens_right = min(tokens, max(0, round(metric["token_accuracy"] * tokens)))
    except (ValueError, KeyError) as e:
        raise RecountError(str(e)) from e
    out = {k: v for k, v in metric.items() if k not in ("exact_match", "token_accuracy")}
    return {**out, "exact": exact, "tokens": tokens, "tokens_right": tokens_right}
