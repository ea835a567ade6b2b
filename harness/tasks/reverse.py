"""reverse: reverse a random digit string (PRISM paper, Table 3 / §6.0.1).

8349216=6129438.
"""

from __future__ import annotations

import random

from harness.tasks.base import PE_SOLVABLE_WITH_SCALE_HINT, CoupledSegment, Task, layout_coupling, register_task
from harness.tasks.copy import DIGITS


@register_task
class Reverse(Task):
    """Reverse a string of n i.i.d. uniform digits; scale n = string length.

    The binary, per-token-scored sibling is ``reverse_string`` (randomized-PE paper).
    """

    name = "reverse"
    source = "Lee 2025 (PRISM), Table 3: Reverse"
    metric = "exact_match"
    train_scales = (1, 40)
    test_scales = (41, 150)
    vocabulary = (*DIGITS, ".")
    pe_solvability = PE_SOLVABLE_WITH_SCALE_HINT
    pe_solvability_basis = "derived, Chen et al. §III, §V: bounded operators, parent j = 2n+2−i depends on n"
    layout = "x₁…xₙ = xₙ…x₁ ."
    # position coupling (Cho et al. 2024): the answer's j-th digit shares x_{n+1-j}'s id
    coupling = layout_coupling(DIGITS, CoupledSegment(), CoupledSegment(down_from=0))

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        return rng.choices(DIGITS, k=n)

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        return [*reversed(prompt), "."]
