"""parity_check: parity of a bit string (randomized-PE paper, Table 1, regular).

0 1 1 0 1 = 1
"""

from __future__ import annotations

import random

from harness.tasks.base import NOT_PE_SOLVABLE, register_task
from harness.tasks.chomsky import BITS, RUOSS, ChomskyTask


@register_task
class ParityCheck(ChomskyTask):
    """n i.i.d. uniform bits -> their sum mod 2 (one token); scale n = string length."""

    name = "parity_check"
    source = f"{RUOSS}: Parity Check (R); Delétang et al. 2023"
    vocabulary = BITS
    pe_solvability = NOT_PE_SOLVABLE
    pe_solvability_basis = (
        "derived, Chen et al. §III, §V (parity with no CoT): one output token of arity n, increasing CRC"
    )
    layout = "b₁…bₙ = (Σ bᵢ) mod 2"

    def output_length(self, n: int) -> int:
        return 1

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        return rng.choices(BITS, k=n)

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        return [str(prompt.count("1") % 2)]
