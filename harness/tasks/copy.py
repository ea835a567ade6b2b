"""copy: repeat a random digit string (PRISM paper, Table 3 / §6.0.1).

This is also the positional-limitations paper's Copy (``x₁…xₙ = x₁…xₙ``, unpadded, its
Ex. 7) up to the ``.`` end marker, so that paper's variant is not registered separately.

8349216=8349216.
"""

from __future__ import annotations

import random

from harness.tasks.base import PE_SOLVABLE_WITH_SCALE_HINT, Task, layout_coupling, register_task

DIGITS = "0123456789"


@register_task
class Copy(Task):
    """Copy a string of n i.i.d. uniform digits; scale n = string length."""

    name = "copy"
    source = "Lee 2025 (PRISM), Table 3: Copy"
    metric = "exact_match"
    train_scales = (1, 10)
    test_scales = (11, 150)
    vocabulary = (*DIGITS, ".")
    pe_solvability = PE_SOLVABLE_WITH_SCALE_HINT
    pe_solvability_basis = "stated by the positional-limitations paper (Ex. 7): unpadded copy is non-canonical"
    layout = "x₁…xₙ = x₁…xₙ ."
    coupling = layout_coupling(DIGITS)  # x_k of the prompt and of the copy share an id (Cho et al. 2024)

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        return rng.choices(DIGITS, k=n)

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        return [*prompt, "."]
