"""Paper cards: what an encoding's paper says, declared beside the encoding's class.

An encoding owns its knowledge (as timm keeps each family's ``default_cfgs`` in the
family's file). Besides its maths and options, that is what its paper does and claims,
which the benchmark and the leaderboard need and must not hard-code:

* its **setup** per task (the options its paper runs it with, sized for a model);
* the paper a board row is **held to**, and how a run **departs** from it, in words;
* what it **reads** beyond the tokens and their positions (a board must say so);
* the **claims** its paper makes, with the contrast that tests them (on the algorithmic
  tasks, ``claims``; on the language-modelling track, ``lm_claims``, whose rows are
  :class:`LmRowSelector` data);
* its **look** on plots (pinned, or derived from its name where it has none), and the
  **family** plots group it in (:data:`FAMILIES`: declared, or derived from the hooks its
  class does its own work in, ``pezoo.family_of``);
* its **diagnostics** (what a trained model's encoding did, kept with the run).

A :class:`PaperCard` is declared with the class, ``@register("name", card=PaperCard(...))``,
and read by name with :func:`pezoo.card_of` (``randomized:<base>`` reads its wrapper's).
Every field is optional: an encoding without a paper setup, departures or claims declares
nothing, and the harness and the leaderboard read the empty card.

The departure functions read a :class:`RunFacts`, the few facts of a finished run that a
paper's setup speaks about (its task, options, model size, learning rate, training
lengths, ...), built by the harness from its record: pezoo never reads a harness record.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pezoo.dims import ModelDims

__all__ = [
    "FAMILIES",
    "LmPaperClaim",
    "LmRowSelector",
    "PaperCard",
    "PaperClaim",
    "PlotLook",
    "RunFacts",
    "TracePlots",
    "option_departures",
]

Setup = Callable[[str, ModelDims], dict[str, Any]]
"""(task, model size) -> the options the paper runs the encoding with on that task."""


@dataclass(frozen=True)
class RunFacts:
    """What a finished run was, as far as a paper's setup speaks about it.

    Attributes:
        pe: the registry name the run trained (``randomized:ape``).
        task: the task's registry name.
        options: the encoding's effective options (the recorded ones with the stored
            defaults applied).
        dims: the backbone's size.
        causal: whether the backbone is a decoder (an encoder's batches hold one length).
        eval_options: an inference-time variant's options ({} for the trained run).
        recorded_options: the options as recorded (without stored defaults).
        lr: the peak learning rate.
        train_max, test_max: the largest training and test scales.
        pack: instances packed per training row (0: one per row).
        select: which weights were evaluated (``final`` or a selection rule).
        pe_params: the encoding's parameter count, where recorded.
        token_lengths: the token length of each evaluated scale, where recorded.
    """

    pe: str
    task: str
    options: Mapping[str, Any]
    dims: ModelDims
    causal: bool = True
    eval_options: Mapping[str, Any] = field(default_factory=dict)
    recorded_options: Mapping[str, Any] = field(default_factory=dict)
    lr: float = 0.0
    train_max: int = 0
    test_max: int = 0
    pack: int = 0
    select: str = "final"
    pe_params: int | None = None
    token_lengths: tuple[float, ...] = ()


Departures = Callable[[RunFacts], list[str]]
"""RunFacts -> how the run departs from the paper, one sentence per difference."""


@dataclass(frozen=True)
class PaperClaim:
    """A claim an encoding's paper makes about extrapolation, and the contrast that tests it.

    The board applies a named ``rule`` (the leaderboard's table of rules: ``reach``,
    ``above_strongest``, ``leads``, ``above_base``, ``collapses``) with ``row``,
    ``against`` and ``params`` to each table; ``test`` says that rule in words, with the
    board's thresholds as ``{em_ok}``, ``{partly_multiple}`` and ``{collapsed}``.

    Attributes:
        order: the claim's place on the pages (claims are shown by it).
        source: the paper and where it says so.
        says: the claim, in one sentence.
        test: how the board checks it, in one sentence.
        rule: the leaderboard rule that checks it.
        row: the board row (label) the claim is about.
        against: the rows it is contrasted with (competitors, a base).
        tasks: the tasks it is about; None: every task the rows are on.
        multiple: the multiple of N a reach claim names, else None.
        params: the rule's further words or settings.
    """

    order: int
    source: str
    says: str
    test: str
    rule: str
    row: str
    against: tuple[str, ...] = ()
    tasks: tuple[str, ...] | None = None
    multiple: float | None = None
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LmRowSelector:
    """A row of the language-modelling board (``leaderboard.lm_board``), as data: the board
    takes the row whose run matches every field.

    Attributes:
        pe: the encoding's registry name.
        options: options the run trained with, each with this value (None: not set).
        has: options the run set, whatever their value.
        variant: None: a trained row (no inference-time variant); else the evaluation
            options the variant sets, each with this value (a mapping value: those of its
            keys, as deep as given).
        finetuned: with a variant: whether it was fine-tuned before evaluation.
    """

    pe: str
    options: Mapping[str, Any] = field(default_factory=dict)
    has: tuple[str, ...] = ()
    variant: Mapping[str, Any] | None = None
    finetuned: bool = False


@dataclass(frozen=True)
class LmPaperClaim:
    """A language-modelling claim an encoding's paper makes, and the contrast that tests it.

    The LM board (``leaderboard.lm_board``) applies the named ``rule`` (its table of rules:
    ``reach``, ``blowup``, ``below``; ``docs/lm.md`` words each) to each corpus's rows.

    Attributes:
        order: the claim's place in the LM section (claims are shown by it).
        key: a stable identifier.
        source: the paper and where it says so (table, section).
        says: the claim, in one sentence.
        rule: the LM board rule that checks it.
        row: the row the claim is about.
        multiple: the multiple of L the claim names: a ``reach`` or ``blowup`` claim's
            threshold; for a ``below`` claim, the length it was made at (0: none named). The
            board judges it there, or says the table tested less.
        against: the rows a ``below`` claim compares with (the strongest is taken).
    """

    order: int
    key: str
    source: str
    says: str
    rule: str
    row: LmRowSelector
    multiple: float = 0.0
    against: tuple[LmRowSelector, ...] = ()


FAMILIES: dict[str, str] = {
    "qk": "queries and keys transformed (RoPE-like)",
    "bias": "a bias on attention scores (ALiBi-like)",
    "embedding": "positions in the token embeddings (APE-like)",
    "attention": "attention's normalisation changed",
    "none": "no position information",
    "other": "elsewhere",
}
"""The families plots group encodings in, by where an encoding puts position (the hooks of
``pezoo.interface``), in the order plots show them: key -> what it is, in a few words.
``pezoo.family_of`` gives an encoding's."""


@dataclass(frozen=True)
class PlotLook:
    """A pinned look on plots: stroke colour, SVG dash pattern ('' solid), marker."""

    colour: str
    dash: str
    marker: str = "circle"


@dataclass(frozen=True)
class TracePlots:
    """How a board shows what :attr:`PaperCard.diagnostics` recorded of a trained run.

    Attributes:
        heading: the section's heading (``PRISM cursors``).
        caption: a sentence or two on what the plots show and how to read them.
        plots: ``diagnostics -> [(plot title, [(line label, [y per token])])]``: the lines
            of each plot, x being the token index.
        y_label: the plots' y axis.
    """

    heading: str
    caption: str
    plots: Callable[[Any], list[tuple[str, list[tuple[str, list[float]]]]]]
    y_label: str


@dataclass(frozen=True)
class PaperCard:
    """An encoding's paper knowledge (module docstring). Every field is optional.

    Attributes:
        paper: the paper its runs are held to (title and authors), or None.
        setup: ``(task, dims) -> options`` of its paper's per-task setup, or None.
        departures: ``RunFacts -> [sentence]``: how a run's options (and the evaluation
            options of an inference-time variant) depart from the paper.
        training_departures: ``RunFacts -> [sentence]``: how the trained run departs in
            what the options do not show (training length, learning rate, packing,
            reporting, capacity); read for trained runs only.
        extra_input: what the encoding reads beyond the tokens and their positions, in
            a sentence, or None; ``extra_input_badge`` the same in two words.
        claims: its paper's claims the board tests.
        lm_claims: its paper's language-modelling claims the LM section tests.
        lm_departures: ``RunFacts -> [sentence]``: how a language-modelling run departs
            from its paper's LM setup, taken at the paper's ratios to the training length
            (``train_max``: L); the LM section names each row that departs, and says how.
        look: its pinned plot look, or None (derived from its name).
        family: the key of :data:`FAMILIES` plots group it in, or None: derived from the hooks
            its class does its own work in (``pezoo.family_of``); declared only where they
            mislead (a wrapper class, whose inner encoding's hooks it only passes on).
        diagnostics: ``(encoding, forward) -> JSON-able | None``: what a trained
            encoding did while ``forward()`` ran it on one example (PRISM's cursor
            trajectories), or None.
        diagnostics_plots: how a board draws those diagnostics (:class:`TracePlots`); a board
            shows the diagnostics of encodings that have both.
        run_defaults: options a benchmark writes into every new run unless given (its
            paper's procedure, where the encoding's own default differs for old reasons).
        stored_defaults: what each of those options meant in runs stored before it existed.
        inference_options: the options an inference-time variant may change: those that
            change what the encoding computes from positions, not its parameters.
        shown_as: the name tables show the bare registry name as (an alias), or None.
        variant_labels: per inference option, ``value -> short label`` for tables naming
            an inference-time variant (RoPE's ``scaling`` as ``yarn×4 L=10``), None
            where the plain ``key=value`` serves.
    """

    paper: str | None = None
    setup: Setup | None = None
    departures: Departures | None = None
    training_departures: Departures | None = None
    extra_input: str | None = None
    extra_input_badge: str | None = None
    claims: tuple[PaperClaim, ...] = ()
    lm_claims: tuple[LmPaperClaim, ...] = ()
    lm_departures: Departures | None = None
    look: PlotLook | None = None
    family: str | None = None
    diagnostics: Callable[..., Any] | None = None
    diagnostics_plots: TracePlots | None = None
    run_defaults: Mapping[str, Any] = field(default_factory=dict)
    stored_defaults: Mapping[str, Any] = field(default_factory=dict)
    inference_options: tuple[str, ...] = ()
    shown_as: str | None = None
    variant_labels: Mapping[str, Callable[[Any], str | None]] = field(default_factory=dict)


def _default(factory: Any, key: str) -> Any:
    """The encoding's own default for ``key`` (its factory's signature), or None."""
    try:
        parameter = inspect.signature(factory).parameters.get(key)
    except (TypeError, ValueError):
        return None
    return None if parameter is None or parameter.default is inspect.Parameter.empty else parameter.default


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def option_departures(
    run: RunFacts,
    paper: Mapping[str, Any],
    factory: Any,
    words: Mapping[str, Callable[[Any, Any], str]],
    *,
    same: Callable[[str], bool] = lambda key: False,
) -> list[str]:
    """One sentence per option of the paper's setup ``paper`` that the run set otherwise:
    ``words[key](run value, paper value)``, or ``key = run (the paper: paper)``. An option
    the run did not set takes ``factory``'s default; ``same(key)`` True counts it as the
    paper's whatever its value (an option that cannot matter for this run)."""
    out = []
    for key, wanted in paper.items():
        value = run.options.get(key, _default(factory, key))
        if _same_value(value, wanted) or same(key):
            continue
        describe = words.get(key)
        out.append(describe(value, wanted) if describe else f"{key} = {value!r} (the paper: {wanted!r})")
    return out
