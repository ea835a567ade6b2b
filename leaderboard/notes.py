"""The notes beside the tables on how rows were run, which their numbers do not say.

Each is computed from the published records a page shows, and printed on the site and in
the README under the rule that introduces it:

* **run unlike their papers** (:func:`departures`, ``DEPARTURES_RULE``): a method run
  unlike its paper's setup, beyond the small model and short training every row shares,
  and on which tasks (``harness.config.protocols.departures``);
* **extra inputs** (:func:`extra_inputs`, ``EXTRA_INPUTS_RULE``): a row whose encoding
  reads more than the tokens and their positions (its encoding's paper card, ``extra_input``);
* **set up per task** (:func:`per_task_setups`, ``PER_TASK_RULE``): a row whose options
  change from task to task, as its paper's per-task setup does, while every other row
  runs one configuration everywhere.

The fourth note, on tables and rows that have left the board, belongs to the board itself
(``leaderboard.board.RETIRED_RULE``): retiring them is part of assembling it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pezoo
from harness.config.pe_spec import model_options
from harness.config.protocols import departure_paper, dims_of, extra_input
from harness.config.protocols import departures as protocol_departures
from harness.training.backbone import BackboneConfig
from leaderboard.records import record_label
from leaderboard.schema import Record
from pezoo import RunFacts
from pezoo.spec import format_value


@dataclass(frozen=True)
class Departure:
    """One board label run unlike its paper: the paper, and each difference with where it
    applies: groups of tasks, each group's presets named when the board shows several
    (``("addition, odds_first (preset quick)", "copy (presets board, quick)")``), to be
    joined with "; "."""

    label: str
    paper: str
    differences: tuple[tuple[str, tuple[str, ...]], ...]


def departures(records: Iterable[Record]) -> list[Departure]:
    """How the board's runs depart from their papers' setups
    (``harness.config.protocols.departures``): per label, each difference with the tasks it
    applies to, in label order; labels that follow their papers are left out."""
    records = list(records)
    found: dict[str, dict[str, set[tuple[str, str]]]] = {}
    papers: dict[str, str] = {}
    for rec in records:
        d = rec.data
        options = d["config"].get("pe_options") or {}
        try:
            backbone = BackboneConfig(**d["config"]["backbone"])
            eval_options = d["config"].get("eval_pe_options") or {}
            texts = protocol_departures(d["pe"], d["task"], model_options(d["pe"], options), backbone, eval_options)
        except (TypeError, ValueError, KeyError):
            continue
        paper = departure_paper(d["pe"], eval_options)
        if not eval_options:  # a variant shares its trained run's training: that row says it
            texts = [*texts, *protocol_departures_of(d)]
        for text in texts:
            found.setdefault(record_label(d), {}).setdefault(text, set()).add((d["preset"], d["task"]))
            papers[record_label(d)] = paper or d["pe"]
    several = len({rec.data["preset"] for rec in records}) > 1

    def where(pairs: set[tuple[str, str]]) -> tuple[str, ...]:
        by_preset: dict[str, set[str]] = {}
        for preset, task in pairs:
            by_preset.setdefault(preset, set()).add(task)
        if not several:
            return (", ".join(sorted(t for _, t in pairs)),)
        presets_of: dict[tuple[str, ...], list[str]] = {}
        for preset, tasks in sorted(by_preset.items()):
            presets_of.setdefault(tuple(sorted(tasks)), []).append(preset)
        return tuple(
            ", ".join(tasks) + (" (preset " if len(presets) == 1 else " (presets ") + ", ".join(presets) + ")"
            for tasks, presets in presets_of.items()
        )

    return [
        Departure(label, papers[label], tuple((text, where(pairs)) for text, pairs in by_text.items()))
        for label, by_text in sorted(found.items())
    ]


def run_facts(data: Mapping[str, Any]) -> RunFacts:
    """The facts of one record's run that a paper card's departures read
    (:class:`pezoo.RunFacts`); KeyError or TypeError for a record without them."""
    config = data["config"]
    train, evaluate = config["train"], config["eval"]
    backbone = BackboneConfig(**config["backbone"])
    recorded = config.get("pe_options") or {}
    params = (data.get("params") or {}).get("pe")
    return RunFacts(
        pe=str(data["pe"]),
        task=str(data["task"]),
        options=model_options(data["pe"], recorded),
        dims=dims_of(backbone),
        causal=backbone.causal,
        eval_options=config.get("eval_pe_options") or {},
        recorded_options=recorded,
        lr=float(train["lr"]),
        train_max=int(train["train_max"]),
        test_max=int(evaluate["test_max"]),
        pack=int(train.get("pack", 0) or 0),
        select=str(evaluate.get("select", "final")),
        pe_params=params if isinstance(params, int) else None,
        token_lengths=tuple(float(m.get("token_length", 0)) for m in data.get("metrics", ())),
    )


def protocol_departures_of(data: Mapping[str, Any]) -> list[str]:
    """How one record's run departs from its paper in what the options do not show: the
    training (length, curriculum, learning rate, packing), the reporting, the model's
    extra capacity, the paper's task family and architecture: its encoding's card's
    ``training_departures`` over the record's facts (:func:`run_facts`); ``[]`` for an
    encoding whose paper sets none of these here."""
    words = pezoo.card_of(str(data["pe"])).training_departures
    return [] if words is None else words(run_facts(data))


def common_departure(records: Iterable[Record]) -> str | None:
    """``Every row trains at one learning rate (1e-3) ...``: what no row's own note says
    because it holds for them all, or None without records."""
    lrs = sorted({float(r.data["config"]["train"]["lr"]) for r in records})
    if not lrs:
        return None
    said = " or ".join(f"{lr:g}" for lr in lrs)
    return (
        f"Every row trains at the same learning rate ({said}), whatever its paper used or tuned (PRISM 9e-5, "
        "Turing Programs 7e-5, Ruoss et al. the best of 1e-4, 3e-4 and 5e-4), and is evaluated once, on its final "
        "weights."
    )


def extra_inputs(records: Iterable[Record]) -> list[tuple[str, str, tuple[str, ...]]]:
    """(label, what it reads beyond tokens and positions, tasks) for every board row that
    reads more (its encoding's paper card, ``extra_input``), in label order."""
    found: dict[str, tuple[str, set[str]]] = {}
    for rec in records:
        text = extra_input(rec.data["pe"])
        if text is not None:
            found.setdefault(record_label(rec.data), (text, set()))[1].add(rec.data["task"])
    return [(label, text, tuple(sorted(tasks))) for label, (text, tasks) in sorted(found.items())]


EXTRA_INPUTS_RULE = "Rows that read more than the tokens and their positions, and what:"


@dataclass(frozen=True)
class PerTaskSetup:
    """A board row whose options change from task to task (a paper's per-task setup, e.g.
    ``prism{paper}``): per task, its options and its positional parameters."""

    label: str
    preset: str
    tasks: tuple[tuple[str, str, int | None], ...]  # (task, options as written, positional parameters)

    def sentence(self) -> str:
        """``copy: d_pe=226, layers=[0], n_cursors=4 (75k positional parameters); ...``."""
        parts = []
        for task, options, params in self.tasks:
            count = "" if params is None else f" ({_thousands(params)} positional parameters)"
            parts.append(f"{task}: {options}{count}")
        return "; ".join(parts)


def _thousands(n: int) -> str:
    return f"{n / 1000:.0f}k" if n >= 1000 else str(n)


def per_task_setups(records: Iterable[Record]) -> list[PerTaskSetup]:
    """The rows whose recorded options differ between the tasks of one preset, in label
    order: a reader comparing rows must know that one of them was set up per task while
    every other runs one configuration everywhere."""
    found: dict[tuple[str, str], dict[str, tuple[str, int | None]]] = {}
    for rec in records:
        config = rec.data["config"]
        if config.get("eval_pe_options"):  # a variant: its trained run's row says it
            continue
        options = config.get("pe_options") or {}
        written = ", ".join(f"{k}={format_value(v)}" for k, v in sorted(options.items())) or "defaults"
        params = rec.data.get("params", {}).get("pe")
        by_task = found.setdefault((record_label(rec.data), rec.data["preset"]), {})
        by_task[rec.data["task"]] = (written, int(params) if isinstance(params, int) else None)
    out = []
    for (label, preset), by_task in sorted(found.items()):
        if len({options for options, _ in by_task.values()}) > 1:
            out.append(PerTaskSetup(label, preset, tuple((t, *by_task[t]) for t in sorted(by_task))))
    return out


PER_TASK_RULE = (
    "Rows whose options change from task to task, as their papers' per-task setups do; every other row runs one "
    "configuration on every task:"
)


DEPARTURES_RULE = (
    "Where a method on this board was run unlike its paper (beyond the small model and short training said above), "
    "and how:"
)
