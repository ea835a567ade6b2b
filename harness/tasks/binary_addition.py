"""binary_addition: add two little-endian binary numbers (randomized-PE paper, Table 1,
context-sensitive).

a + b with len(a) ~ U{1..n−2}, len(b) = n − 1 − len(a), a ~ U{1..2^len(a) − 1} (zero-filled
to its length, so high zeros occur), b likewise; the target is a + b little-endian without
high zeros, the terminator 2, zeros to n + 1 tokens. Per-token accuracy scores the tokens
through the terminator. As in the source code, n <= 2 has no ``+``: the prompt is one
number v ~ U{0..2ⁿ−2} on n bits and the target is v itself.

0 0 1 + 0 1 1 0 1 = 0 1 0 1 1 2 0 0 0 0      (4 + 22 = 26; the source's docstring drops a 0)
"""

from __future__ import annotations

import random

from harness.tasks.base import NOT_PE_SOLVABLE, register_task
from harness.tasks.chomsky import BITS, RUOSS, TERMINATOR, ChomskyTask, bits_le, through_terminator, value_le


def sample_operands(n: int, op: str, rng: random.Random) -> list[str]:
    """``a op b`` on n tokens (n >= 3), both operands >= 1, little-endian, zero-filled."""
    len_a = rng.randint(1, n - 2)
    len_b = n - 1 - len_a
    a, b = rng.randint(1, 2**len_a - 1), rng.randint(1, 2**len_b - 1)
    return [*bits_le(a, len_a), op, *bits_le(b, len_b)]


def operands(prompt: tuple[str, ...], op: str) -> list[int]:
    """Values of the little-endian numbers of ``prompt`` separated by ``op``."""
    values, start = [], 0
    for i, t in enumerate((*prompt, op)):
        if t == op:
            values.append(value_le(prompt[start:i]))
            start = i + 1
    return values


@register_task
class BinaryAddition(ChomskyTask):
    """``a + b`` (n tokens, little-endian) -> a + b, ``2``, zero padding (n + 1 tokens)."""

    name = "binary_addition"
    source = f"{RUOSS}: Binary Addition (CS); Delétang et al. 2023"
    vocabulary = (*BITS, "+", TERMINATOR)
    pe_solvability = NOT_PE_SOLVABLE
    pe_solvability_basis = (
        "derived, Chen et al. §III, §V: operand lengths vary inside one n, so the digit parents sit "
        "at offsets set by the position of + (content)"
    )
    layout = "a + b (LSB first) = a+b (LSB first) 2 0…0"

    def output_length(self, n: int) -> int:
        return n + 1

    def accuracy_mask(self, target: tuple[str, ...]) -> tuple[bool, ...] | None:
        return through_terminator(target)

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        if n <= 2:
            return bits_le(rng.randint(0, 2**n - 2), n)
        return sample_operands(n, "+", rng)

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        out = [*bits_le(sum(operands(prompt, "+"))), TERMINATOR]
        return out + ["0"] * (len(prompt) + 1 - len(out))
