"""compute_sqrt: floor square root in binary (randomized-PE paper, Table 1, context-sensitive).

Big-endian in and out; the root is zero-filled to ceil(n/2) bits.

1 0 0 1 0 1 = 1 1 0      (isqrt(37) = 6; the source's docstring wrongly says 101)
"""

from __future__ import annotations

import math
import random

from harness.tasks.base import NOT_PE_SOLVABLE, register_task
from harness.tasks.chomsky import BITS, RUOSS, ChomskyTask


@register_task
class ComputeSqrt(ChomskyTask):
    """x ~ U{1..2ⁿ−1} as n big-endian bits -> isqrt(x) as ceil(n/2) big-endian bits."""

    name = "compute_sqrt"
    source = f"{RUOSS}: Compute Sqrt (CS); Delétang et al. 2023"
    vocabulary = BITS
    pe_solvability = NOT_PE_SOLVABLE
    pe_solvability_basis = "derived, Chen et al. §III, §V: each root bit depends on Θ(n) input bits, increasing CRC"
    layout = "x (n bits, MSB first) = ⌊√x⌋ (⌈n/2⌉ bits, MSB first)"

    def output_length(self, n: int) -> int:
        return math.ceil(n / 2)

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        return list(f"{rng.randint(1, 2**n - 1):b}".zfill(n))

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        root = math.isqrt(int("".join(prompt), 2))
        return list(f"{root:b}".zfill(self.output_length(len(prompt))))
