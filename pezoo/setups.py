"""Encodings as their papers run them: the options of each paper's setup, per task.

``paper_options(pe, task, dims)`` returns the options a paper used for ``pe`` on ``task``,
with its sizes scaled to a model of ``dims`` where that model is smaller than the paper's
(docs/prism.md, "The paper's setup"). A spec asks for it with ``prism{paper}``
(:mod:`pezoo.spec`); ``pezoo.hf.use_encoding`` and the benchmark (``pezoo bench``, whose
``prism`` preset applies it by default) both read it here.

PRISM (Lee 2025, "Position as Probability: Self-Supervised Transformers that Think Past
Their Training for Length Extrapolation"):

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

Randomized PE (Ruoss et al. 2023, §3): random positions at test time too
(``randomize_eval=True``, also the harness's default for every randomized run); each
training row's positions a sorted uniform subset of its own length (``draw="per_length"``:
the paper's batches have one length, the harness pads rows of several, and one draw per
length gives each row the paper's distribution); L = 2048 as in the paper's §4 (the
wrapper's default).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pezoo.registry import ModelDims

PAPER_TASKS_WITH_COPY = ("reverse", "scan_cot", "dyn_str_cpy")
"""Tasks on which the PRISM paper enables the copy branch (§6.0.1)."""

PAPER_TASKS_WITH_TWO_LAYERS = ("odds_first", "stack_manipulation")
"""Tasks on which the PRISM paper inserts two PRISM layers (§6.2)."""

PRISM_PAPER_D_MODEL = 192
"""The PRISM model's token-embedding width (§6.2), which its d_pe = 340 goes with."""

PRISM_PAPER_D_PE = 340
PRISM_PAPER_N_LAYERS = 5
PRISM_PAPER_SECOND_LAYER = 3  # 0-based "before layer 4" of 5


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


def randomized_paper_options(task: str, dims: ModelDims) -> dict[str, Any]:
    """Ruoss et al. §3: random sorted positions at evaluation too, and every training
    sequence's positions a uniform sorted subset of its own length (the paper's batches
    have one length; the harness's padded rows get one draw per length)."""
    return {"draw": "per_length", "randomize_eval": True}


PAPER_SETUPS: dict[str, Callable[[str, ModelDims], dict[str, Any]]] = {
    "prism": prism_paper_options,
    "randomized": randomized_paper_options,
}
"""Encodings (registry names; ``randomized:<base>`` uses ``randomized``) with a per-task paper setup."""


def setup_key(pe: str) -> str:
    """The :data:`PAPER_SETUPS` key of ``pe``: ``randomized:<base>`` is ``randomized``'s."""
    return "randomized" if pe.startswith("randomized:") else pe


def has_paper_setup(pe: str) -> bool:
    """Whether :func:`paper_options` knows ``pe``'s paper setup."""
    return setup_key(pe) in PAPER_SETUPS


def paper_options(pe: str, task: str, dims: ModelDims) -> dict[str, Any]:
    """The options ``pe``'s paper runs it with on ``task``, sized for a model of ``dims``
    (module docstring; ``task=""``: the setup of a task the paper singles out for none).
    ValueError for an encoding without a paper setup here."""
    key = setup_key(pe)
    if key not in PAPER_SETUPS:
        have = ", ".join([*PAPER_SETUPS, "randomized:<base>"])
        raise ValueError(
            f"no paper setup is defined for encoding {pe!r} (its defaults are what the benchmark runs); "
            f"encodings with one: {have}"
        )
    return PAPER_SETUPS[key](task, dims)
