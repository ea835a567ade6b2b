"""even_pairs: parity of the number of unequal neighbours (randomized-PE paper, Table 1, regular).

0 1 0 1 0 0 1 = 1      (5 unequal neighbour pairs: odd)
"""

from __future__ import annotations

import itertools
import random

from harness.tasks.base import PE_SOLVABLE, register_task
from harness.tasks.chomsky import BITS, RUOSS, ChomskyTask


@register_task
class EvenPairs(ChomskyTask):
    """n i.i.d. uniform bits -> #{i : bᵢ != bᵢ₊₁} mod 2 (one token); scale n = string length.

    The count is odd exactly when the first and last bits differ, so the target is
    ``b₁ xor bₙ`` (1 for "odd", as in the source code; its class name says "even").
    """

    name = "even_pairs"
    source = f"{RUOSS}: Even Pairs (R); Delétang et al. 2023"
    vocabulary = BITS
    pe_solvability = PE_SOLVABLE
    pe_solvability_basis = (
        "derived, Chen et al. §III, §V: target = b₁ xor bₙ, parents at absolute position 1 and at offset 1 "
        "from the query, both fixed functions of i"
    )
    layout = "b₁…bₙ = #{i: bᵢ≠bᵢ₊₁} mod 2"

    def output_length(self, n: int) -> int:
        return 1

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        return rng.choices(BITS, k=n)

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        changes = sum(a != b for a, b in itertools.pairwise(prompt))
        return [str(changes % 2)]
