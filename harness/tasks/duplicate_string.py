"""duplicate_string: write a bit string twice (randomized-PE paper, Table 1, context-sensitive).

0 1 1 = 0 1 1 0 1 1
"""

from __future__ import annotations

import random

from harness.tasks.base import PE_SOLVABLE_WITH_SCALE_HINT, register_task
from harness.tasks.chomsky import BITS, RUOSS, ChomskyTask


@register_task
class DuplicateString(ChomskyTask):
    """n i.i.d. uniform bits s -> s s (2n tokens, all scored); scale n = string length."""

    name = "duplicate_string"
    source = f"{RUOSS}: Duplicate String (CS); Delétang et al. 2023"
    vocabulary = BITS
    pe_solvability = PE_SOLVABLE_WITH_SCALE_HINT
    pe_solvability_basis = "derived, Chen et al. §III, §V (as Copy): bounded operators, parent at offset n (or 2n)"
    layout = "b₁…bₙ = b₁…bₙ b₁…bₙ"

    def output_length(self, n: int) -> int:
        return 2 * n

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        return rng.choices(BITS, k=n)

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        return [*prompt, *prompt]
