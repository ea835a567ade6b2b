"""The notes beside the tables on how rows were run, which their numbers do not say.

Each is computed from the published records a page shows, and printed on the site and in
the README under the rule that introduces it:

* **run unlike their papers** (:func:`departures`, ``DEPARTURES_RULE``): a method run
  unlike its paper's setup, beyond the small model and short training every row shares,
  and on which tasks (``harness.protocols.departures``);
* **extra inputs** (:func:`extra_inputs`, ``EXTRA_INPUTS_RULE``): a row whose encoding
  reads more than the tokens and their positions (``harness.protocols.EXTRA_INPUTS``);
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

from harness.backbone import BackboneConfig
from harness.pe_spec import model_options
from harness.protocols import departure_paper, extra_input
from harness.protocols import departures as protocol_departures
from leaderboard.records import record_label
from leaderboard.schema import Record
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
    (``harness.protocols.departures``): per label, each difference with the tasks it
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
            extra = protocol_departures_of(d)
            texts = [*texts, *extra]
            paper = paper or (LEARNED_PRF_PAPER if extra and d["pe"].startswith("learned_prf") else None)
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


PRISM_TRAINED_TO_40 = ("reverse", "odds_first", "stack_manipulation")
"""Tasks the PRISM paper reports only for models trained to length 40 (Figures 5, 8, 10), with a curriculum."""
PRISM_LR = 9e-5
HARD_ALIBI_LR = 7e-5
LEARNED_PRF_PAPER = (
    "Chen, Liang, Lin, “On the Limitations and Capabilities of Position Embeddings for Length Generalization”"
)


def protocol_departures_of(data: Mapping[str, Any]) -> list[str]:
    """How one record's run departs from its paper in what the options do not show: the
    training (length, curriculum, learning rate, packing), the reporting, the model's
    extra capacity, the paper's task family and architecture. Read off the record's config
    and parameter counts; ``[]`` for an encoding whose paper sets none of these here."""
    pe, task = str(data["pe"]), str(data["task"])
    config = data["config"]
    train, evaluate, backbone = config["train"], config["eval"], config.get("backbone", {})
    lr, n = float(train["lr"]), int(train["train_max"])
    out: list[str] = []
    if pe == "prism":
        if task in PRISM_TRAINED_TO_40 and n < 40:
            out.append(
                f"trained to scale {n}; the paper reports {task} only for models trained to 40, with a length "
                "curriculum (scales to 5 for 5k steps, to 10 for 5k, then 10 more every 10k steps; §6.4, Figures 5, "
                "8 and 10): a setting the paper never ran"
            )
        if lr != PRISM_LR:
            out.append(f"learning rate {lr:g}; the paper's peak is 9e-5, over 150k steps of batch 100 (§6.4)")
        if evaluate.get("select", "final") == "final":
            out.append(
                "evaluated once, on the final weights; the paper evaluates every 1000 steps and reports the mean of "
                "the top three accuracies (§6.1)"
            )
        options = config.get("pe_options") or {}
        heads = int(backbone.get("n_heads") or 0)
        width = int(backbone.get("d_model") or 0) // heads if heads else 0
        cursors, d_pe = options.get("n_cursors"), options.get("d_pe")
        params = (data.get("params") or {}).get("pe")
        if width and isinstance(cursors, int) and isinstance(d_pe, int):
            wide = width + cursors * d_pe
            extra = f" and {params / 1000:.0f}k parameters" if isinstance(params, int) else ""
            out.append(
                f"its layers' queries and keys are {wide} wide per head instead of {width} ({wide / width:.0f}×: the "
                f"{cursors} position streams of d_pe = {d_pe} concatenated onto them){extra} that no other row has: "
                "a capacity confound"
            )
    elif pe.startswith("randomized:") or pe == "randomized":
        options = config.get("pe_options") or {}
        lengths = [float(m.get("token_length", 0)) for m in data.get("metrics", ())]
        longest = round(max(lengths)) if lengths and max(lengths) > 0 else 2 * int(evaluate["test_max"]) + 4
        big = int(options.get("max_length", 2048))
        out.append(
            f"L = {big}, about {big / longest:.0f}× the longest test sequence here (~{longest} tokens); the paper's "
            "L = 2048 is about 4× its longest test length M = 500, its ablation spans 2–16× (Appendix B.1), and it "
            "warns that L much larger than M leaves too few positions seen in training (§3)"
        )
        out.append(
            "a decoder trained and tested with greedy autoregressive decoding on pezoo's digit tasks; the paper's "
            "model is an encoder that outputs the whole answer at once, on the Chomsky-hierarchy tasks of Delétang "
            "et al. (§4), reporting the best of 10 seeds and 3 learning rates (§4, Appendix A)"
        )
    elif pe == "hard_alibi":
        if not int(train.get("pack", 0) or 0):
            out.append(
                "trained on one instance per row; the paper packs each 500-token training context with independent "
                "instances and evaluates with a sliding window (§3.1.1)"
            )
        if lr != HARD_ALIBI_LR:
            out.append(f"learning rate {lr:g}; the paper's is 7e-5 with linear decay over 200k steps (§3.1.1)")
        out.append(
            "its first windowed head has m = 1: by the paper's masking (b(i, j) = −∞ for j ≤ i − m, §2) it attends "
            "to its own position only, so one head per layer brings in nothing from other tokens"
        )
    elif pe in ("learned_prf", "learned_prf_sh"):
        out.append(
            "the relation function's network (raw features [i, j, i − j] scaled by 1/16, a ReLU MLP of 2 × 64, a "
            "softmax over 16 or 32 slots) is pezoo's own design: the paper defines LBPE(i, j) = Pᵀφθ(i, j) (§VII-B) "
            "and leaves its network to an online appendix this project does not have"
        )
    return out


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
    reads more (``harness.protocols.EXTRA_INPUTS``), in label order."""
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
