"""PRISM's paper card: the paper's setup per task, how a run departs from it, the claim the
board tests, PRISM's look and its diagnostics (:mod:`pezoo.cards`).

Lee 2025, "Position as Probability: Self-Supervised Transformers that Think Past Their
Training for Length Extrapolation":

* §6.0.1: the copy branch on Reverse, SCAN-CoT and dyn_str_cpy, "enabled on a small
  subset — one out of every five query cursors", the key cursor paired with a copying
  query fixed to increment-only (absolute positions): ``copy_every=5``,
  ``copy_key="absolute"``; off on every other task.
* §6.2: one PRISM layer before the first Transformer layer, except Odds First and Stack
  Manipulation: two, before layers 1 and 4 of 5 (0-based ``layers=(0, 3)``). On a
  backbone of another depth the second layer keeps its relative height:
  ``round(3/5 · n_layers)`` (0-based), at least 1 and below ``n_layers``; a one-layer
  backbone has room for one PRISM layer only.
* §6.2: C = 4 (query, key) cursor pairs per head, kept at every size; the superposition
  width d_pe = 340 at the paper's token-embedding width of 192, scaled in proportion to
  ``d_model`` below that (``340 · d_model / 192`` rounded to an even number, at least
  2) and never above 340; the GRU's 100 hidden units kept.
* Everything else (the orthogonal W_hh of §6.3, γ initialised to 2, α's own AdamW group
  of §6.4) is already the encoding's default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from pezoo.cards import PaperCard, PaperClaim, PlotLook, RunFacts, TracePlots, option_departures
from pezoo.dims import ModelDims
from pezoo.encodings.prism.config import PRISMConfig
from pezoo.encodings.prism.diagnostics import trace
from pezoo.encodings.prism.recording import CursorRecording

PAPER = (
    "Lee 2025, “Position as Probability: Self-Supervised Transformers that Think Past Their Training "
    "for Length Extrapolation”"
)

PAPER_TASKS_WITH_COPY = ("reverse", "scan_cot", "dyn_str_cpy")
"""Tasks on which the PRISM paper enables the copy branch (§6.0.1)."""

PAPER_TASKS_WITH_TWO_LAYERS = ("odds_first", "stack_manipulation")
"""Tasks on which the PRISM paper inserts two PRISM layers (§6.2)."""

PRISM_PAPER_D_MODEL = 192
"""The PRISM model's token-embedding width (§6.2), which its d_pe = 340 goes with."""

PRISM_PAPER_D_PE = 340
PRISM_PAPER_N_LAYERS = 5
PRISM_PAPER_SECOND_LAYER = 3  # 0-based "before layer 4" of 5

PAPER_TRAINED_TO_40 = ("reverse", "odds_first", "stack_manipulation")
"""Tasks the PRISM paper reports only for models trained to length 40 (Figures 5, 8, 10), with a curriculum."""
PAPER_LR = 9e-5


def prism_d_pe(d_model: int) -> int:
    """d_pe for a backbone of width ``d_model``: the paper's 340 at d_model >= 192, else in
    proportion (``340 · d_model / 192``, rounded to the nearest even number, at least 2)."""
    if d_model >= PRISM_PAPER_D_MODEL:
        return PRISM_PAPER_D_PE
    return max(2, 2 * round(PRISM_PAPER_D_PE * d_model / PRISM_PAPER_D_MODEL / 2))


def prism_layers(task: str, n_layers: int) -> list[int]:
    """0-based layers the PRISM layers sit before: ``[0]``, or on the two-layer tasks
    ``[0, round(3/5 · n_layers)]`` (``[0, 3]`` at the paper's 5 layers), clamped to
    ``1..n_layers-1`` (``[0]`` when the backbone has one layer)."""
    if task not in PAPER_TASKS_WITH_TWO_LAYERS or n_layers < 2:
        return [0]
    second = round(PRISM_PAPER_SECOND_LAYER * n_layers / PRISM_PAPER_N_LAYERS)
    return [0, min(max(second, 1), n_layers - 1)]


def prism_paper_options(task: str, dims: ModelDims) -> dict[str, Any]:
    """The PRISM paper's options for ``task`` on a model of ``dims`` (module docstring)."""
    options: dict[str, Any] = {
        "n_cursors": 4,
        "d_pe": prism_d_pe(dims.d_model),
        "gru_hidden": 100,
        "layers": prism_layers(task, dims.n_layers),
    }
    if task in PAPER_TASKS_WITH_COPY:
        options.update(copy_every=5, copy_key="absolute")
    return options


def _count(layers: Any, noun: str) -> str:
    n = len(layers)
    return f"{'one' if n == 1 else 'two' if n == 2 else n} {noun}{'' if n == 1 else 's'}"


def _layers(layers: Any) -> str:
    return " and ".join(str(int(i) + 1) for i in layers)  # 1-based, as the paper counts


OPTION_WORDS: dict[str, Callable[[Any, Any], str]] = {
    "n_cursors": lambda run, paper: f"C = {run} cursor pairs per head (the paper: {paper}, §6.2)",
    "d_pe": lambda run, paper: f"d_pe = {run} (the paper's 340 scaled to this model: {paper}, §6.2)",
    "gru_hidden": lambda run, paper: f"a GRU of {run} hidden units (the paper: {paper}, §6.2)",
    "layers": lambda run, paper: (
        f"{_count(run, 'PRISM layer')} before layer{'s' if len(run) > 1 else ''} {_layers(run)} "
        f"(the paper: {_count(paper, 'PRISM layer')} at this depth, before layers {_layers(paper)}, §6.2)"
    ),
    "copy_every": lambda run, paper: (
        "no copy branch (the paper enables it on this task, §6.0.1)"
        if not run
        else f"the copy branch on every {run}th query cursor"
        + (" (the paper: not on this task, §6.0.1)" if not paper else f" (the paper: every {paper}th, §6.0.1)")
    ),
    "copy_key": lambda run, paper: f"copy keys {run!r} (the paper: {paper!r}, §6.0.1)",
}
"""How each option of the paper's setup is worded where a run sets it otherwise."""


def departures(run: RunFacts) -> list[str]:
    """How the run's options depart from the paper's setup on its task (one sentence each)."""
    paper = prism_paper_options(run.task, run.dims)
    out = option_departures(run, paper, PRISMConfig, OPTION_WORDS)  # PRISM's defaults are its config's
    if "copy_every" not in paper and run.options.get("copy_every"):
        out.append(OPTION_WORDS["copy_every"](run.options["copy_every"], 0))
    return out


def training_departures(run: RunFacts) -> list[str]:
    """The training, reporting and capacity differences no option shows."""
    out: list[str] = []
    n = run.train_max
    if run.task in PAPER_TRAINED_TO_40 and n < 40:
        out.append(
            f"trained to scale {n}; the paper reports {run.task} only for models trained to 40, with a length "
            "curriculum (scales to 5 for 5k steps, to 10 for 5k, then 10 more every 10k steps; §6.4, Figures 5, "
            "8 and 10): a setting the paper never ran"
        )
    if run.lr != PAPER_LR:
        out.append(f"learning rate {run.lr:g}; the paper's peak is 9e-5, over 150k steps of batch 100 (§6.4)")
    if run.select == "final":
        out.append(
            "evaluated once, on the final weights; the paper evaluates every 1000 steps and reports the mean of "
            "the top three accuracies (§6.1)"
        )
    width = run.dims.head_dim
    cursors, d_pe = run.recorded_options.get("n_cursors"), run.recorded_options.get("d_pe")
    if width and isinstance(cursors, int) and isinstance(d_pe, int):
        wide = width + cursors * d_pe
        extra = f" and {run.pe_params / 1000:.0f}k parameters" if isinstance(run.pe_params, int) else ""
        out.append(
            f"its layers' queries and keys are {wide} wide per head instead of {width} ({wide / width:.0f}×: the "
            f"{cursors} position streams of d_pe = {d_pe} concatenated onto them){extra} that no other row has: "
            "a capacity confound"
        )
    return out


def cursor_trajectories(pe: nn.Module, forward: Callable[[], Any]) -> list[dict[str, Any]] | None:
    """Per PRISM layer, the mode (most likely offset) of every query and key cursor after
    each token of the one example ``forward`` runs, and the probability mass at that
    mode (rounded to 1e-3): the paper's cursor-trajectory figures. None when ``pe`` is
    not a PRISM encoding.

    Returns:
        [{"layer", "support", "query_modes", "key_modes": [[[int]]] (h, c, s),
        "query_confidence", "key_confidence": [[[float]]] (h, c, s)}].
    """
    if not isinstance(pe, CursorRecording):  # PRISM is the encoding that records its cursors
        return None
    with trace(pe) as traces:
        forward()
    layers = []
    for tr in traces():
        modes, confidence = tr.modes[0], tr.confidence[0]  # (2, h, c, s)
        layers.append(
            {
                "layer": tr.layer,
                "support": tr.support,
                "query_modes": modes[0].tolist(),
                "key_modes": modes[1].tolist(),
                "query_confidence": confidence[0].mul(1000).round().div(1000).tolist(),
                "key_confidence": confidence[1].mul(1000).round().div(1000).tolist(),
            }
        )
    return layers


def cursor_plots(diagnostics: list[dict[str, Any]]) -> list[tuple[str, list[tuple[str, list[float]]]]]:
    """One plot per layer and side (query, key) of :func:`cursor_trajectories`: the mode
    offset of each head's cursors after each token, one line per head and cursor."""
    plots = []
    for layer in diagnostics:
        for side in ("query", "key"):
            modes = layer[f"{side}_modes"]  # (h, c, s)
            lines = [
                (f"h{h} c{c}", trajectory) for h, cursors in enumerate(modes) for c, trajectory in enumerate(cursors)
            ]
            plots.append((f"layer {layer['layer']}: {side} cursors", lines))
    return plots


CURSOR_PLOTS = TracePlots(
    heading="PRISM cursors",
    caption="What each trained PRISM model's cursors do on the first evaluation example at the largest test scale "
    "(teacher-forced): the mode (most likely offset) of every query and key cursor after each token, one line per "
    "head and cursor. A cursor that counts tokens climbs one offset per token; a reset drops it back to 0.",
    plots=cursor_plots,
    y_label="mode offset",
)


CLAIM = PaperClaim(
    order=10,
    source=f"{PAPER}, abstract and §1",
    says="PRISM extrapolates accurately far beyond the training length (up to 10×, copy variants up to 15×).",
    test="holds: prism{{paper}} keeps exact match ≥ {em_ok} at every tested scale beyond N on every seed, on a "
    "table tested to 10× N; the same on a table tested less far reads “holds to the tested k×; claimed 10×: "
    "untested” (outcome partly), or “… claimed 10×: see the table tested to T” where a table of the same task "
    "tests it; partly: its weakest seed keeps it to at least {partly_multiple}× N and its "
    "EM>N is not below NoPE's by the permutation test; otherwise does not hold; no contrast where it did not fit.",
    rule="reach",
    against=("nope",),  # not below NoPE: the floor a partly verdict must clear
    row="prism{paper}",
    multiple=10,
)

CARD = PaperCard(
    paper=PAPER,
    setup=prism_paper_options,
    departures=departures,
    training_departures=training_departures,
    claims=(CLAIM,),
    look=PlotLook("#009E73", ""),  # bluish green, solid
    diagnostics=cursor_trajectories,
    diagnostics_plots=CURSOR_PLOTS,
)
