"""Encodings as their papers run them, in the benchmark: each paper's setup sized for a
run's backbone, and how a run departs from its paper, in words a board can show. Both are
the encoding's own knowledge, declared on its paper card (:class:`pezoo.PaperCard`); this
module reads the cards and knows no encoding.

``paper_pe_options(pe, task, backbone)`` returns the options a paper used for ``pe`` on
``task``, with its sizes scaled to ``backbone`` (``pezoo.setups.paper_options``).
A spec's ``name{paper}`` (``harness.config.pe_spec``) asks for it.

One kind of departure is the benchmark's, not an encoding's: RoPE context extensions whose
papers fine-tune after scaling (position interpolation, YaRN), evaluated on the trained
weights as they are (``EXTENSION_DEPARTURES``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pezoo
from harness.config.backbone import BackboneConfig
from pezoo import ModelDims, RunFacts
from pezoo.setups import paper_options


def paper_pe_options(pe: str, task: str, backbone: BackboneConfig) -> dict[str, Any]:
    """The options ``pe``'s paper runs it with on ``task``, sized for ``backbone``
    (:func:`pezoo.setups.paper_options`). ValueError for an encoding without a paper setup."""
    return paper_options(pe, task, dims_of(backbone))


def dims_of(backbone: BackboneConfig) -> ModelDims:
    """The model size a paper card's setup and departures read."""
    return ModelDims(backbone.d_model, backbone.n_heads, backbone.n_layers)


def paper_of(pe: str) -> str | None:
    """The paper whose setup ``paper_pe_options`` follows for ``pe``, or None."""
    card = pezoo.card_of(pe)
    return card.paper if card.setup is not None else None


EXTENSION_DEPARTURES: dict[str, tuple[str, str]] = {
    "linear": (
        "Chen et al. 2023, “Extending Context Window of Large Language Models via Positional Interpolation”",
        "position interpolation applied to the trained weights as they are; the paper fine-tunes the model "
        "briefly after interpolating, at the extended length, which here would train on the lengths the board "
        "tests",
    ),
    "yarn": (
        "Peng et al. 2023, “YaRN: Efficient Context Window Extension of Large Language Models”",
        "YaRN applied to the trained weights as they are; the paper fine-tunes the model briefly after scaling, "
        "at the extended length, which here would train on the lengths the board tests",
    ),
}
"""RoPE context extensions that their papers follow with fine-tuning, which an
inference-time variant (the same weights evaluated differently) leaves out: rope_type ->
(paper, how). Dynamic NTK needs no fine-tuning by design and has no entry."""


def extra_input_badge(pe: str) -> str | None:
    """The badge of what ``pe`` reads beyond tokens and positions (``reads n``), or None:
    its base encoding's card's (a wrapper changes positions, not what the model reads)."""
    return pezoo.card_of(pe.rsplit(":", 1)[-1]).extra_input_badge


def extra_input(pe: str) -> str | None:
    """What ``pe`` (a registry name, wrapped or not) reads beyond tokens and positions, or None."""
    return pezoo.card_of(pe.rsplit(":", 1)[-1]).extra_input


def departure_paper(pe: str, eval_options: Mapping[str, Any] | None = None) -> str | None:
    """The paper a board row of ``pe`` (evaluated with ``eval_options``) is held to."""
    kind = _extension_kind(eval_options)
    if kind in EXTENSION_DEPARTURES:
        return EXTENSION_DEPARTURES[kind][0]
    return pezoo.card_of(pe).paper


def _extension_kind(eval_options: Mapping[str, Any] | None) -> str | None:
    scaling = (eval_options or {}).get("scaling")
    return scaling.get("rope_type") if isinstance(scaling, Mapping) else None


def departures(
    pe: str,
    task: str,
    options: Mapping[str, Any],
    backbone: BackboneConfig,
    eval_options: Mapping[str, Any] | None = None,
) -> list[str]:
    """How a run of ``pe`` on ``task`` with the effective ``options`` (the recorded ones
    with the stored defaults applied: ``harness.config.pe_spec.model_options``) and, for an
    inference-time variant, its ``eval_options``, departs from its paper's setup on that
    task, one sentence per difference (its card's ``departures``); ``[]`` when it follows
    the setup or the encoding declares none. The board shows these, so a method run
    unlike its paper says so."""
    kind = _extension_kind(eval_options)
    if kind in EXTENSION_DEPARTURES:
        return [EXTENSION_DEPARTURES[kind][1]]
    words = pezoo.card_of(pe).departures
    if words is None:
        return []
    run = RunFacts(pe, task, options, dims_of(backbone), backbone.causal, eval_options or {})
    return words(run)
