"""dm_stack_manipulation: the randomized-PE paper's Stack Manipulation (Table 1, DCF).

Same instances as ``stack_manipulation`` (PRISM paper) without the ``.``; scored by
per-token accuracy on the tokens up to and including the terminator 2.

0 1 1 0 4 2 2 = 1 1 0 2 0 0 0 0      (mask: first 4 tokens)
"""

from __future__ import annotations

import random

from harness.tasks.base import NOT_PE_SOLVABLE, register_task
from harness.tasks.chomsky import RUOSS, ChomskyTask, through_terminator
from harness.tasks.stack_manipulation import STACK_SOLVABILITY_BASIS, final_stack, sample_stack_program


@register_task
class DmStackManipulation(ChomskyTask):
    """Stack program of n tokens -> final stack top->bottom, ``2``, zeros to n+1 tokens."""

    name = "dm_stack_manipulation"
    source = f"{RUOSS}: Stack Manipulation (DCF); Delétang et al. 2023"
    vocabulary = ("0", "1", "2", "3", "4")
    pe_solvability = NOT_PE_SOLVABLE
    pe_solvability_basis = STACK_SOLVABILITY_BASIS
    layout = "initial bits (bottom→top) then actions 2=POP 3=PUSH0 4=PUSH1 = stack top→bottom 2 0…0"

    def output_length(self, n: int) -> int:
        return n + 1

    def accuracy_mask(self, target: tuple[str, ...]) -> tuple[bool, ...] | None:
        return through_terminator(target)

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        return sample_stack_program(n, rng)

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        return final_stack(prompt)
