"""Encodings as their papers run them, in the benchmark: each paper's setup sized for a
run's backbone (the setups themselves are pezoo's: :mod:`pezoo.setups`), and how a run
departs from its paper, in words a board can show.

``paper_pe_options(pe, task, backbone)`` returns the options a paper used for ``pe`` on
``task``, with its sizes scaled to ``backbone`` (``pezoo.setups.paper_options``).
``pezoo bench --pe 'prism{paper}'`` (``harness.pe_spec``) asks for it, and the ``prism``
preset applies it by default.

Hard-ALiBi's head split is held to the Turing Programs model's (§3.1.1: 16 heads, M = 6
windowed, 10 NoPE); a smaller backbone keeps M = min(6, H - 1) and says so.

Departures no option shows are stated too (:func:`departures`): xPos without the
blockwise causal attention its paper uses at inference (``STANDING_DEPARTURES``), and
RoPE context extensions whose papers fine-tune after scaling (position interpolation,
YaRN) evaluated on the trained weights as they are (``EXTENSION_DEPARTURES``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from harness.backbone import BackboneConfig
from pezoo.registry import ModelDims
from pezoo.setups import has_paper_setup, paper_options, setup_key


def paper_pe_options(pe: str, task: str, backbone: BackboneConfig) -> dict[str, Any]:
    """The options ``pe``'s paper runs it with on ``task``, sized for ``backbone``
    (:func:`pezoo.setups.paper_options`). ValueError for an encoding without a paper setup."""
    return paper_options(pe, task, ModelDims(backbone.d_model, backbone.n_heads, backbone.n_layers))


# --------------------------------------------------------------------------------------
# How a run departs from its paper's setup, in words a board can show
# --------------------------------------------------------------------------------------

_PRISM_WORDS: dict[str, Callable[[Any, Any], str]] = {
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

_RANDOMIZED_WORDS: dict[str, Callable[[Any, Any], str]] = {
    "randomize_eval": lambda run, paper: (
        "evaluated on plain positions 0..n-1, which it never saw in training; the paper draws random "
        "sorted positions at test time too (§3)"
        if not run
        else "random positions at evaluation although the paper evaluates on plain ones"
    ),
    "draw": lambda run, paper: (
        "trained on one position draw per batch, for its longest row: a shorter row of n tokens took "
        "that draw's first n positions, which crowd the start of the range, where the paper draws each "
        "sequence's n positions from all of it (§3; its batches have one length)"
        if run == "per_batch"
        else f"positions drawn {run!r} (the paper: each sequence's from the whole range, §3)"
    ),
}


def _count(layers: Any, noun: str) -> str:
    n = len(layers)
    return f"{'one' if n == 1 else 'two' if n == 2 else n} {noun}{'' if n == 1 else 's'}"


def _layers(layers: Any) -> str:
    return " and ".join(str(int(i) + 1) for i in layers)  # 1-based, as the paper counts


def _option_default(pe: str, key: str) -> Any:
    """The encoding's own default for ``key`` (its factory's signature), or None."""
    import inspect

    import pezoo

    factory: Any = pezoo.RandomizedPE if pe.startswith("randomized:") else pezoo.get(pe)
    try:
        parameter = inspect.signature(factory).parameters.get(key)
    except (TypeError, ValueError):
        return None
    return None if parameter is None or parameter.default is inspect.Parameter.empty else parameter.default


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    return a == b


PAPERS: dict[str, str] = {
    "prism": "Lee 2025, “Position as Probability: Self-Supervised Transformers that Think Past Their Training "
    "for Length Extrapolation”",
    "randomized": "Ruoss et al. 2023, “Randomized Positional Encodings Boost Length Generalization of Transformers”",
}
"""The paper each setup in PAPER_SETUPS follows (the § numbers in :func:`departures` are its)."""


def paper_of(pe: str) -> str | None:
    """The paper whose setup ``paper_pe_options`` follows for ``pe``, or None."""
    return PAPERS.get(setup_key(pe))


STANDING_DEPARTURES: dict[str, tuple[str, str]] = {
    "xpos": (
        "Sun et al. 2023, “A Length-Extrapolatable Transformer”",
        "evaluated with plain causal attention, where the paper evaluates xPos with blockwise causal attention "
        "(the option blockwise: each query sees its own block of training length and the block before; "
        "docs/encodings/xpos.md)",
    ),
}
"""Encodings whose runs depart from their paper unless an option says otherwise:
registry name -> (paper, how); :data:`FOLLOWS_PAPER_WITH` names that option."""

FOLLOWS_PAPER_WITH: dict[str, str] = {"xpos": "blockwise"}
"""Per encoding of :data:`STANDING_DEPARTURES`, the evaluation option under which a run
follows its paper after all (an inference-time variant, ``xpos@{blockwise=24}``)."""

TRAINED_WITH_EVAL_OPTION: dict[str, str] = {
    "xpos": "trained with blockwise attention as well; the paper trains with full causal attention and uses blockwise "
    "causal attention at evaluation only (the same where every training sequence fits in one block)",
}
"""The departure of a run that *trained* with its :data:`FOLLOWS_PAPER_WITH` option set."""

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


EXTRA_INPUTS: dict[str, str] = {
    "learned_prf_sh": "reads each example's instance scale n as an input (the scale hint of Chen, Liang, Lin, "
    "“On the Limitations and Capabilities of Position Embeddings for Length Generalization”, §VII-A), which the "
    "harness passes in training and evaluation; the other encodings see only the tokens and their positions",
}
"""Encodings that read more than the tokens and their positions (as their papers do): a
board must say so, or a reader compares them with the others as equals."""


EXTRA_INPUT_BADGES: dict[str, str] = {"learned_prf_sh": "reads n"}
"""The same, in the two words a table row carries beside the encoding's name."""


def extra_input_badge(pe: str) -> str | None:
    """The badge of what ``pe`` reads beyond tokens and positions (``reads n``), or None."""
    return EXTRA_INPUT_BADGES.get(pe.rsplit(":", 1)[-1])


def extra_input(pe: str) -> str | None:
    """What ``pe`` (a registry name, wrapped or not) reads beyond tokens and positions, or None."""
    return EXTRA_INPUTS.get(pe.rsplit(":", 1)[-1])


HARD_ALIBI_PAPER = (
    "Hou et al., “Universal Length Generalization with Turing Programs”, §3.1.1, after Jelassi et al. 2024, "
    "“Repeat After Me”"
)
HARD_ALIBI_PAPER_HEADS = 16
"""Heads per layer in the Turing Programs model, of which M = 6 windowed (its best M for addition)."""


def _hard_alibi_departures(options: Mapping[str, Any], backbone: BackboneConfig) -> list[str]:
    """Hard-ALiBi's head split against the paper's (M = 6 windowed heads of 16, 10 NoPE)."""
    from pezoo.encodings.hard_alibi import PAPER_BEST_MASKED_HEADS, default_masked_heads

    heads = backbone.n_heads
    masked = options.get("n_masked")
    masked = default_masked_heads(heads) if masked is None else int(masked)
    if (heads, masked) == (HARD_ALIBI_PAPER_HEADS, PAPER_BEST_MASKED_HEADS):
        return []
    nope = heads - masked
    return [
        f"{heads} heads per layer: {masked} windowed (windows 1..{masked}) and {nope} NoPE "
        f"head{'s' if nope != 1 else ''}, where the paper's model has {HARD_ALIBI_PAPER_HEADS}: "
        f"{PAPER_BEST_MASKED_HEADS} windowed (its best M for addition) and "
        f"{HARD_ALIBI_PAPER_HEADS - PAPER_BEST_MASKED_HEADS} NoPE; the windows follow that addition setup, "
        "not Jelassi et al.'s own copy experiments"
    ]


def departure_paper(pe: str, eval_options: Mapping[str, Any] | None = None) -> str | None:
    """The paper a board row of ``pe`` (evaluated with ``eval_options``) is held to."""
    kind = _extension_kind(eval_options)
    if kind in EXTENSION_DEPARTURES:
        return EXTENSION_DEPARTURES[kind][0]
    if pe == "hard_alibi":
        return HARD_ALIBI_PAPER
    return paper_of(pe) or STANDING_DEPARTURES.get(pe, (None, ""))[0]


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
    with the stored defaults applied: ``harness.pe_spec.model_options``) and, for an
    inference-time variant, its ``eval_options``, departs from its paper's setup on that
    task, one sentence per difference; ``[]`` when it follows the setup or the encoding
    has none here. The board shows these, so a method run unlike its paper says so."""
    kind = _extension_kind(eval_options)
    if kind in EXTENSION_DEPARTURES:
        return [EXTENSION_DEPARTURES[kind][1]]
    if pe in STANDING_DEPARTURES:
        remedy = FOLLOWS_PAPER_WITH.get(pe)
        if remedy is not None and options.get(remedy) is not None:
            return [TRAINED_WITH_EVAL_OPTION[pe]]
        if remedy is not None and (eval_options or {}).get(remedy) is not None:
            return []
        return [STANDING_DEPARTURES[pe][1]]
    if pe == "hard_alibi":
        return _hard_alibi_departures(options, backbone)
    if not has_paper_setup(pe):
        return []
    paper = paper_pe_options(pe, task, backbone)
    words = _PRISM_WORDS if setup_key(pe) == "prism" else _RANDOMIZED_WORDS
    out = []
    for key, wanted in paper.items():
        run = options.get(key, _option_default(pe, key))
        if _same_value(run, wanted) or (key == "draw" and not backbone.causal):
            continue  # an encoder's batches hold one length, so no rows are padded and both draws agree
        describe = words.get(key)
        out.append(describe(run, wanted) if describe else f"{key} = {run!r} (the paper: {wanted!r})")
    if setup_key(pe) == "prism" and "copy_every" not in paper and options.get("copy_every"):
        out.append(_PRISM_WORDS["copy_every"](options["copy_every"], 0))
    return out
