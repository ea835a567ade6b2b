"""reverse_string: reverse a bit string (randomized-PE paper, Table 1, deterministic context-free).

0 1 1 = 1 1 0
"""

from __future__ import annotations

import random

from harness.tasks.base import PE_SOLVABLE_WITH_SCALE_HINT, register_task
from harness.tasks.chomsky import BITS, RUOSS, ChomskyTask


@register_task
class ReverseString(ChomskyTask):
    """n i.i.d. uniform bits -> the same bits reversed (n tokens, all scored).

    The binary sibling of ``reverse`` (PRISM paper: digits, ``.``-terminated, exact match).
    """

    name = "reverse_string"
    source = f"{RUOSS}: Reverse String (DCF); Delétang et al. 2023"
    vocabulary = BITS
    pe_solvability = PE_SOLVABLE_WITH_SCALE_HINT
    pe_solvability_basis = (
        "derived, Chen et al. §III, §V (as PRISM Reverse): bounded operators, parent j = 2n+2−i depends on n"
    )
    layout = "b₁…bₙ = bₙ…b₁"

    def output_length(self, n: int) -> int:
        return n

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        return rng.choices(BITS, k=n)

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        return list(reversed(prompt))
