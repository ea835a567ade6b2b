"""Encodings as their papers run them: the per-task options of each paper's setup.

``paper_pe_options(pe, task, backbone)`` returns the options a paper used for ``pe`` on
``task``, with its sizes scaled to ``backbone`` where the backbone is smaller than the
paper's model (docs/prism.md, "The paper's setup"). ``pezoo bench --pe 'prism{paper}'``
(``harness.pe_spec``) asks for it, and the ``prism`` preset applies it by default.

PRISM (Lee 2025, "PRISM: Position as Probability"):

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
(``randomize_eval=True``, also the harness's default for every randomized run);
L = 2048 as in the paper's §4 (the wrapper's default).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.backbone import BackboneConfig

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


def prism_paper_options(task: str, backbone: BackboneConfig) -> dict[str, Any]:
    """The PRISM paper's options for ``task`` on ``backbone`` (module docstring)."""
    options: dict[str, Any] = {
        "n_cursors": 4,
        "d_pe": prism_d_pe(backbone.d_model),
        "gru_hidden": 100,
        "layers": prism_layers(task, backbone.n_layers),
    }
    if task in PAPER_TASKS_WITH_COPY:
        options.update(copy_every=5, copy_key="absolute")
    return options


def randomized_paper_options(task: str, backbone: BackboneConfig) -> dict[str, Any]:
    """Ruoss et al. §3: random sorted positions at evaluation too."""
    return {"randomize_eval": True}


PAPER_SETUPS: dict[str, Callable[[str, BackboneConfig], dict[str, Any]]] = {
    "prism": prism_paper_options,
    "randomized": randomized_paper_options,
}
"""Encodings (registry names; ``randomized:<base>`` uses ``randomized``) with a per-task paper setup."""


def _setup_key(pe: str) -> str:
    return "randomized" if pe.startswith("randomized:") else pe


def has_paper_setup(pe: str) -> bool:
    """Whether ``paper_pe_options`` knows ``pe``'s paper setup."""
    return _setup_key(pe) in PAPER_SETUPS


def paper_pe_options(pe: str, task: str, backbone: BackboneConfig) -> dict[str, Any]:
    """The options ``pe``'s paper runs it with on ``task``, sized for ``backbone``
    (module docstring). ValueError for an encoding without a paper setup here."""
    key = _setup_key(pe)
    if key not in PAPER_SETUPS:
        have = ", ".join([*PAPER_SETUPS, "randomized:<base>"])
        raise ValueError(
            f"no paper setup is defined for encoding {pe!r} (its defaults are what the benchmark runs); "
            f"encodings with one: {have}"
        )
    return PAPER_SETUPS[key](task, backbone)
