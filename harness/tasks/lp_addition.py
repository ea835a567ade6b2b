"""lp_addition: unaligned LSD-first addition without a chain of thought (positional-limitations
paper, §III Ex. 8, Fig. 2).

Chen, Liang & Lin's layout ``x₁…xₙ + y₁…yₙ = z₁…z_{n+1}``: two operands of exactly n
digits, least significant first, digits i.i.d. uniform (high zeros allowed: they are
the padding of a shorter number), and the n + 1 digit sum, least significant first and
zero-padded. This is the unaligned (scale-hint) form; no ``.``. Distinct from
``addition`` (PRISM: chain of thought) and ``addition_turing``.

7 5 + 8 6 = 5 2 1      (57 + 68 = 125)
"""

from __future__ import annotations

import random

from harness.tasks.base import PE_SOLVABLE_WITH_SCALE_HINT, Task, layout_coupling, register_task
from harness.tasks.copy import DIGITS


@register_task
class LpAddition(Task):
    """``x + y`` (n digits each, LSD first) -> x + y on n + 1 digits, LSD first."""

    name = "lp_addition"
    source = "Chen, Liang & Lin (PE limitations), §III Ex. 8 / Fig. 2: Addition"
    metric = "exact_match"
    train_scales = (1, 5)
    test_scales = (6, 20)
    vocabulary = (*DIGITS, "+")
    pe_solvability = PE_SOLVABLE_WITH_SCALE_HINT
    pe_solvability_basis = "stated by the paper (Ex. 8): non-canonical unaligned, characterized with a scale hint"
    layout = "x₁…xₙ + y₁…yₙ = z₁…zₙ₊₁ (all LSD first)"
    coupling = layout_coupling(DIGITS)  # x_k, y_k and z_k share an id (Cho et al. 2024)

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        return [*rng.choices(DIGITS, k=n), "+", *rng.choices(DIGITS, k=n)]

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        plus = prompt.index("+")
        x = int("".join(reversed(prompt[:plus])))
        y = int("".join(reversed(prompt[plus + 1 :])))
        return list(str(x + y).zfill(plus + 1)[::-1])
