"""odds_first: odd-indexed digits first, then even-indexed (PRISM paper, Table 3).

0-based odd positions first, ``x[1::2] + x[0::2]``: this is what the paper's example
shows and what the original benchmark code computes (its prose and the DeepMind
docstring say the opposite). Digits 0-9; the binary,
per-token-scored version of the randomized-PE paper is ``dm_odds_first``.

012345=135024.
"""

from __future__ import annotations

import random

from harness.tasks.base import PE_SOLVABLE_WITH_SCALE_HINT, Task, register_task
from harness.tasks.copy import DIGITS


@register_task
class OddsFirst(Task):
    """n i.i.d. uniform digits x -> x[1::2] + x[0::2] then ``.``; scale n = string length."""

    name = "odds_first"
    source = "Lee 2025 (PRISM), Table 3: Odds First"
    metric = "exact_match"
    train_scales = (1, 40)
    test_scales = (41, 150)
    vocabulary = (*DIGITS, ".")
    pe_solvability = PE_SOLVABLE_WITH_SCALE_HINT
    pe_solvability_basis = "derived, Chen et al. §III, §V: bounded operators, parents depend on n"
    layout = "x₀…xₙ₋₁ = x₁ x₃ … x₀ x₂ … ."

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        return rng.choices(DIGITS, k=n)

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        return [*prompt[1::2], *prompt[0::2], "."]
