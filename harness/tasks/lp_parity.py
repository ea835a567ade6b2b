"""lp_parity: parity with a chain of thought (positional-limitations paper, §III Ex. 1, Fig. 5).

Chen, Liang & Lin write parity as the running XOR: y₁ = x₁, y_k = x_k ⊕ y_{k−1}, so the
last output is the parity and each step has arity 2. Bits i.i.d. uniform; no ``.``.
Distinct from ``parity_check`` (randomized-PE paper: one output token, no chain).

1 0 1 1 = 1 1 0 1
"""

from __future__ import annotations

import itertools
import operator
import random

from harness.tasks.base import PE_SOLVABLE_WITH_SCALE_HINT, Task, register_task

BITS = ("0", "1")


@register_task
class LpParity(Task):
    """``x₁…xₙ`` -> prefix parities ``y₁…yₙ``; scale n = string length."""

    name = "lp_parity"
    source = "Chen, Liang & Lin (PE limitations), §III Ex. 1 / Fig. 5: Parity with CoT"
    metric = "exact_match"
    train_scales = (1, 5)
    test_scales = (6, 10)
    vocabulary = BITS
    pe_solvability = PE_SOLVABLE_WITH_SCALE_HINT
    pe_solvability_basis = (
        "derived, Chen et al. §III, §V (parity with CoT): arity 2, but the parent x_k sits at offset n"
    )
    layout = "x₁…xₙ = y₁…yₙ, y_k = x_k xor y_{k−1}"

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        return rng.choices(BITS, k=n)

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        return [str(y) for y in itertools.accumulate((int(x) for x in prompt), operator.xor)]
