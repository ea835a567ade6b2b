"""dm_odds_first: odd-indexed bits first (randomized-PE paper, Table 1, context-sensitive).

The binary sibling of ``odds_first`` (PRISM paper: digits, ``.``-terminated, exact match).
Order as in the code that produced the paper's numbers: 0-based odd positions first,
``s[1::2] + s[0::2]`` (its docstring says the opposite).

0 1 1 0 1 = 1 0 0 1 1
"""

from __future__ import annotations

import random

from harness.tasks.base import PE_SOLVABLE_WITH_SCALE_HINT, register_task
from harness.tasks.chomsky import BITS, RUOSS, ChomskyTask


@register_task
class DmOddsFirst(ChomskyTask):
    """n i.i.d. uniform bits s -> s[1::2] + s[0::2] (n tokens, all scored)."""

    name = "dm_odds_first"
    source = f"{RUOSS}: Odds First (CS); Delétang et al. 2023"
    vocabulary = BITS
    pe_solvability = PE_SOLVABLE_WITH_SCALE_HINT
    pe_solvability_basis = "derived, Chen et al. §III, §V (as PRISM Odds First): bounded operators, parents depend on n"
    layout = "b₀…bₙ₋₁ = b₁ b₃ b₅ … b₀ b₂ b₄ … (0-based)"

    def output_length(self, n: int) -> int:
        return n

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        return rng.choices(BITS, k=n)

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        return [*prompt[1::2], *prompt[0::2]]
