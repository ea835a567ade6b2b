"""select_first: output the first digit (positional-limitations paper, §VII-B / Fig. 3).

Chen, Liang & Lin, "On the Limitations and Capabilities of Position Embeddings for Length
Generalization": given ``x₁…xₙ =``, output ``x₁`` (SelectFirst), ``x_{⌊n/2⌋+1}``
(SelectMiddle) or ``xₙ`` (SelectLast). Digits i.i.d. uniform; no ``.`` (not a PRISM task).

3 1 4 1 5 = 3
"""

from __future__ import annotations

import random
from abc import abstractmethod
from typing import ClassVar

from harness.tasks.base import PE_SOLVABLE, Task, register_task
from harness.tasks.copy import DIGITS

LP = "Chen, Liang & Lin (PE limitations), §VII-B / Fig. 3"


class Select(Task):
    """Shared sampling of the Select tasks: n i.i.d. digits -> the digit at ``index(n)``."""

    metric: ClassVar[str] = "exact_match"
    train_scales: ClassVar[tuple[int, int]] = (1, 10)
    test_scales: ClassVar[tuple[int, int]] = (11, 20)
    vocabulary: ClassVar[tuple[str, ...]] = tuple(DIGITS)
    pe_solvability: ClassVar[str] = PE_SOLVABLE
    pe_solvability_basis: ClassVar[str] = (
        "Chen et al. §III, §V and their Fig. 3: bounded operators, the parent is a fixed function of i"
    )

    @abstractmethod
    def index(self, n: int) -> int:
        """0-based position of the selected digit in a string of n."""

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        return rng.choices(DIGITS, k=n)

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        return [prompt[self.index(len(prompt))]]


@register_task
class SelectFirst(Select):
    """``x₁…xₙ`` -> ``x₁``; scale n = string length."""

    name = "select_first"
    source = f"{LP}: SelectFirst"
    layout = "x₁…xₙ = x₁"

    def index(self, n: int) -> int:
        return 0
