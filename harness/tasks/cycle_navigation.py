"""cycle_navigation: final position of a walk on a 5-cycle (randomized-PE paper, Table 1, regular).

Input ids 0, 1, 2 are the moves -1, 0, +1 (written as the digits of their ids); the agent
starts at 0; the target is the final position mod 5.

2 0 1 0 0 = 3      (+1 -1 0 -1 -1 = -2 ≡ 3)
"""

from __future__ import annotations

import random

from harness.tasks.base import NOT_PE_SOLVABLE, register_task
from harness.tasks.chomsky import RUOSS, ChomskyTask, digit_tokens

MOVES = digit_tokens(3)
CYCLE = 5


@register_task
class CycleNavigation(ChomskyTask):
    """n i.i.d. uniform moves tᵢ ∈ {0,1,2} -> Σ (tᵢ − 1) mod 5 (one token); scale n = moves."""

    name = "cycle_navigation"
    source = f"{RUOSS}: Cycle Navigation (R); Delétang et al. 2023"
    vocabulary = digit_tokens(CYCLE)
    pe_solvability = NOT_PE_SOLVABLE
    pe_solvability_basis = "derived, Chen et al. §III, §V: one output token of arity n, increasing CRC"
    layout = "t₁…tₙ (0=left 1=stay 2=right) = Σ(tᵢ−1) mod 5"

    def output_length(self, n: int) -> int:
        return 1

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        return rng.choices(MOVES, k=n)

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        return [str(sum(int(t) - 1 for t in prompt) % CYCLE)]
