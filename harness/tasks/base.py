"""The Task interface and the task registry.

A task generates instances of a given *scale* n (its own notion of length: digits of an
operand, string length, ...) from a seeded ``random.Random``. An instance is a prompt
and a target (completion), both token strings in the shared vocabulary; the harness
lays it out as ``prompt = target <eos>`` and puts loss only on ``target <eos>``.

Besides sampling, a task says what its source paper needs to score it: the metric, the
default train/test scales, the vocabulary it writes in, and, for the randomized-PE
paper's encoder protocol, ``output_length(n)`` and a per-target-token accuracy mask
(``Example.mask``). Each task also carries the PE-solvability label of the
positional-limitations paper's analysis (Chen, Liang & Lin, §III and §V), one of
``PE_SOLVABILITY``.
"""

from __future__ import annotations

import inspect
import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from harness.tasks import vocab
from harness.tasks.lm import LM_TASKS
from pezoo import CoupledSegment, Coupling, Registry

# PE-solvability labels (Chen, Liang & Lin, "On the Limitations and Capabilities of Position
# Embeddings for Length Generalization", §III-§VII; the labels are our reading of their
# definitions of CRC and canonical CRs (§III) and of their theorems (§V).
PE_SOLVABLE = "pe_solvable"
"""Bounded operator set and canonical as formatted: some plain PRF characterizes it (Thm 3)."""
PE_SOLVABLE_WITH_SCALE_HINT = "pe_solvable_with_scale_hint"
"""Bounded operator set but not canonical as formatted (parents sit at offsets that depend on
the instance's length): a PRF with a scale hint, or padding to one length, can (Thm 4)."""
NOT_PE_SOLVABLE = "not_pe_solvable"
"""Increasing CRC under any position-only representation (an output depends on Theta(n) inputs,
or its parents are found by content): no PE can length-generalize it in principle (Thm 1);
content-based attention still may."""
PE_SOLVABILITY = (PE_SOLVABLE, PE_SOLVABLE_WITH_SCALE_HINT, NOT_PE_SOLVABLE)


@dataclass(frozen=True)
class Example:
    """One instance: prompt and target as token strings, and the scale it was drawn at.

    Attributes:
        prompt, target: token strings in the shared vocabulary (no ``=`` / EOS).
        scale: the task's own length n of this instance.
        mask: per target token, whether it is scored by the randomized-PE paper's
            per-token accuracy (e.g. tokens after a terminator are not); None = all.
        scale_hint: the n a scale-hint encoding (learned-PRF-SH) receives; Task.sample
            sets it (usually equal to ``scale``); None = use ``scale``.
    """

    prompt: tuple[str, ...]
    target: tuple[str, ...]
    scale: int
    mask: tuple[bool, ...] | None = None
    scale_hint: int | None = None

    @property
    def token_length(self) -> int:
        """Length of the whole training sequence ``prompt = target <eos>``."""
        return len(self.prompt) + len(self.target) + 2

    def token_ids(self) -> tuple[list[int], int]:
        """(ids of ``prompt = target <eos>``, index of the first target token)."""
        ids = vocab.encode((*self.prompt, "=", *self.target, vocab.EOS))
        return ids, len(self.prompt) + 1


class Task(ABC):
    """Base class of every task. Subclasses set the class attributes and implement
    ``sample`` and ``solve``.

    Class attributes:
        name: registry key.
        source: paper and section the format comes from.
        metric: the metric its paper reports: "exact_match" or "token_accuracy".
        train_scales: (1, N), default training scales (inclusive).
        test_scales: (N+1, M), default test scales (inclusive).
        min_scale: the smallest scale the task can produce.
        max_scale: the largest, or None for unbounded.
        vocabulary: every token its prompts and targets may contain (shared-vocabulary
            strings, ``=`` and EOS excluded: the harness adds those).
        pe_solvability: one of ``PE_SOLVABILITY`` (our labels, from Chen et al. §III, §V).
        pe_solvability_basis: why: what the paper states, or the derivation.
        layout: one line describing the format, for the catalogue (docs/tasks.md).
        answer_separator: the token after whose last occurrence a target's final answer
            starts (a scratchpad task's line separator); None: the whole target is the
            answer. Used by ``eval.match = "answer"``.
        coupling: which tokens of the layout share a position id (digits of equal
            significance, Cho et al. 2024), read by ``position_coupling``; None: the task
            declares none. Built with :func:`layout_coupling`.
    """

    name: ClassVar[str] = ""
    source: ClassVar[str] = ""
    metric: ClassVar[str] = "exact_match"
    train_scales: ClassVar[tuple[int, int]] = (1, 10)
    test_scales: ClassVar[tuple[int, int]] = (11, 40)
    min_scale: ClassVar[int] = 1
    max_scale: ClassVar[int | None] = None
    vocabulary: ClassVar[tuple[str, ...]] = ()
    pe_solvability: ClassVar[str] = ""
    pe_solvability_basis: ClassVar[str] = ""
    layout: ClassVar[str] = ""
    answer_separator: ClassVar[str | None] = None
    coupling: ClassVar[Coupling | None] = None

    def answer(self, target: Sequence[str]) -> tuple[str, ...]:
        """The final answer inside a target (or a decoded completion without its EOS):
        the tokens after the last ``answer_separator``, or all of them."""
        tokens = tuple(target)
        if self.answer_separator is None or self.answer_separator not in tokens:
            return tokens
        last = len(tokens) - 1 - tokens[::-1].index(self.answer_separator)
        return tokens[last + 1 :]

    def has_scale(self, n: int) -> bool:
        """Whether an instance of scale n exists (SCAN overrides: some lengths have none)."""
        return n >= self.min_scale and (self.max_scale is None or n <= self.max_scale)

    def check_scale(self, n: int) -> None:
        """Raise ValueError if this task cannot produce an instance of scale n."""
        if n < self.min_scale or (self.max_scale is not None and n > self.max_scale):
            upper = "" if self.max_scale is None else f" and <= {self.max_scale}"
            raise ValueError(f"task {self.name!r} needs scale >= {self.min_scale}{upper}, got {n}")
        if not self.has_scale(n):
            raise ValueError(f"task {self.name!r} has no instance of scale {n}")

    def sample(self, n: int, rng: random.Random) -> Example:
        """One instance of scale n drawn from rng (checks the scale first)."""
        self.check_scale(n)
        return self.instance(self.sample_prompt(n, rng), n)

    def instance(self, prompt: Sequence[str], n: int) -> Example:
        """The instance of scale n with this prompt: its solution, accuracy mask and scale hint."""
        prompt = tuple(prompt)
        target = tuple(self.solve(prompt))
        return Example(prompt, target, n, mask=self.accuracy_mask(target), scale_hint=self.scale_hint(prompt, n))

    def sample_test(self, n: int, rng: random.Random) -> Example:
        """One evaluation instance of scale n (``evaluation_set``): ``sample`` unless the
        task's paper tests on another distribution than it trains on."""
        return self.sample(n, rng)

    def output_length(self, n: int) -> int | None:
        """Target length at scale n when it is fixed (the randomized-PE protocol reads
        the input followed by this many blanks); None when it varies per instance."""
        return None

    def accuracy_mask(self, target: tuple[str, ...]) -> tuple[bool, ...] | None:
        """Which target tokens the per-token accuracy scores; None = all of them."""
        return None

    def scale_hint(self, prompt: tuple[str, ...], n: int) -> int:
        """The scale a scale-hint encoding receives for this instance (default: n)."""
        return n

    @abstractmethod
    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        """The prompt tokens of a random instance of scale n."""

    @abstractmethod
    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        """The target as a pure function of the prompt (ends with ``.`` where the format has one)."""


TASKS = Registry("task", "pezoo.tasks", base=Task)
"""Name -> Task subclass (or a function returning a Task): the built-ins, registered by
:func:`register_task`, and plugins of the ``pezoo.tasks`` entry-point group (a plugin naming
a class that is not a Task subclass does not load)."""


def layout_coupling(members: Sequence[str], *segments: CoupledSegment) -> Coupling:
    """A task's coupling over the harness's layout ``<bos> prompt = target <eos>`` (padded
    with ``<pad>``): ``members`` are numbered within their segment, each of the task's other
    tokens and ``=`` is a separator, and the layout's ``<bos>``, ``<eos>`` and ``<pad>`` stay
    outside the numbering (id 0, as the paper's). ``segments``: the specs of the segments
    from the first (the prompt's start), e.g. a chain of thought's steps of five tokens."""
    fixed = (vocab.BOS_ID, vocab.EOS_ID, vocab.PAD_ID)
    return Coupling(tuple(vocab.encode(members)), tuple(segments), fixed)


def register_task(cls: type[Task]) -> type[Task]:
    """Class decorator adding a task to the registry under ``cls.name``. A class that is not
    a Task subclass, and a name the language-modelling track has (``lm_en``), are refused."""
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise TypeError(f"@register_task decorates a subclass of harness.tasks.Task, got {cls!r}")
    if cls.name in LM_TASKS:
        raise ValueError(lm_name_clash(cls.name, f"{cls.__module__}.{cls.__qualname__}"))
    TASKS.register(cls.name, cls)
    return cls


def lm_name_clash(name: str, source: str) -> str:
    """The message for a task registered under a language-modelling task's name."""
    return (
        f"task {name!r} of {source} has the name of a language-modelling task of the harness "
        f"({', '.join(LM_TASKS)}), whose runs would train on the corpus instead: rename it"
    )


def available() -> list[str]:
    return list(TASKS)


def create(name: str, **options: object) -> Task:
    """The task registered as ``name``; ``options`` go to its constructor (strict keys)."""
    cls = TASKS[name]  # a plugin's class that leaves name unset has its entry-point key as name
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        signature = None
    valid = [] if signature is None else [p.name for p in signature.parameters.values() if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"task {name!r} has no option(s) {unknown}; valid options: {valid or 'none'}")
    try:
        made = cls(**options)
    except TypeError as exc:  # a constructor with a required argument: bench's checks say so in one line
        raise ValueError(
            f"task {name!r} cannot be made from its options {options or '(none)'}: {exc} (a task's constructor "
            "takes only keyword-only options, each with a default)"
        ) from exc
    if not isinstance(made, Task):
        raise TypeError(f"task {name!r}: its factory {cls!r} returned {type(made).__name__}, not a harness.tasks.Task")
    if made.name != name:
        raise ValueError(
            f"task {name!r}: its class sets name = {made.name!r}, which differs from the name it is registered "
            f"under; make them agree (the evaluation sets and records go by the name)"
        )
    return made
