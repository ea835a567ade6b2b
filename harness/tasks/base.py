"""The Task interface and the task registry.

A task generates instances of a given *scale* n (its own notion of length: digits of an
operand, string length, ...) from a seeded ``random.Random``. An instance is a prompt
and a target (completion), both token strings in the shared vocabulary; the harness
lays it out as ``prompt = target <eos>`` and puts loss only on ``target <eos>``.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from harness.tasks import vocab
from pezoo.base import Registry

TASKS = Registry("task", "pezoo.tasks")


@dataclass(frozen=True)
class Example:
    """One instance: prompt and target as token strings, and the scale it was drawn at."""

    prompt: tuple[str, ...]
    target: tuple[str, ...]
    scale: int

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
    """

    name: ClassVar[str] = ""
    source: ClassVar[str] = ""
    metric: ClassVar[str] = "exact_match"
    train_scales: ClassVar[tuple[int, int]] = (1, 10)
    test_scales: ClassVar[tuple[int, int]] = (11, 40)
    min_scale: ClassVar[int] = 1
    max_scale: ClassVar[int | None] = None

    def check_scale(self, n: int) -> None:
        """Raise ValueError if this task cannot produce an instance of scale n."""
        if n < self.min_scale or (self.max_scale is not None and n > self.max_scale):
            upper = "" if self.max_scale is None else f" and <= {self.max_scale}"
            raise ValueError(f"task {self.name!r} needs scale >= {self.min_scale}{upper}, got {n}")

    def sample(self, n: int, rng: random.Random) -> Example:
        """One instance of scale n drawn from rng (checks the scale first)."""
        self.check_scale(n)
        prompt = tuple(self.sample_prompt(n, rng))
        return Example(prompt, tuple(self.solve(prompt)), n)

    @abstractmethod
    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        """The prompt tokens of a random instance of scale n."""

    @abstractmethod
    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        """The target as a pure function of the prompt (ends with ``.`` where the format has one)."""


def register_task(cls: type[Task]) -> type[Task]:
    """Class decorator adding a task to the registry under ``cls.name``."""
    TASKS.register(cls.name, cls)
    return cls


def available() -> list[str]:
    return list(TASKS)


def create(name: str) -> Task:
    return TASKS[name]()
