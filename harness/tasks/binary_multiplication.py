"""binary_multiplication: multiply two little-endian binary numbers (randomized-PE paper,
Table 1, context-sensitive).

Operands sampled as in binary_addition with ``*``; the target is a · b little-endian
without high zeros, the terminator 2, zeros to n tokens (the product has at most n − 1
bits). Per-token accuracy scores the tokens through the terminator. As in the source code,
n <= 2 has no ``*``: the prompt is n random bits and the target the constant 0…0 2 (n tokens).

0 0 1 * 0 1 1 0 1 = 0 0 0 1 1 0 1 2 0      (4 · 22 = 88)
"""

from __future__ import annotations

import math
import random

from harness.tasks.base import NOT_PE_SOLVABLE, register_task
from harness.tasks.binary_addition import operands, sample_operands
from harness.tasks.chomsky import BITS, RUOSS, TERMINATOR, ChomskyTask, bits_le, through_terminator


@register_task
class BinaryMultiplication(ChomskyTask):
    """``a * b`` (n tokens, little-endian) -> a · b, ``2``, zero padding (n tokens)."""

    name = "binary_multiplication"
    source = f"{RUOSS}: Binary Multiplication (CS); Delétang et al. 2023"
    vocabulary = (*BITS, "*", TERMINATOR)
    pe_solvability = NOT_PE_SOLVABLE
    pe_solvability_basis = "derived, Chen et al. §III, §V (n×n multiplication, direct answer): increasing CRC"
    layout = "a * b (LSB first) = a·b (LSB first) 2 0…0"

    def output_length(self, n: int) -> int:
        return n

    def accuracy_mask(self, target: tuple[str, ...]) -> tuple[bool, ...] | None:
        return through_terminator(target)

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        if n <= 2:
            return bits_le(rng.randint(0, 2**n - 2), n)
        return sample_operands(n, "*", rng)

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        if "*" not in prompt:  # the degenerate n <= 2 instances
            return ["0"] * (len(prompt) - 1) + [TERMINATOR]
        out = [*bits_le(math.prod(operands(prompt, "*"))), TERMINATOR]
        return out + ["0"] * (len(prompt) - len(out))
