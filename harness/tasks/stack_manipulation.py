"""stack_manipulation: final state of a stack after pushes and pops (PRISM paper, Table 3).

The PRISM paper uses DeepMind's format (Delétang et al. 2023) with a ``.`` end marker and
exact match, padding included. Input: the initial stack bottom->top as bits, then actions
2 = POP, 3 = PUSH 0, 4 = PUSH 1 (POP on an empty stack does nothing). Target: the final
stack top->bottom, the terminator 2, zeros up to n+1 tokens, ``.``.

0 1 1 0 4 2 2 = 1 1 0 2 0 0 0 0 .
1 1 0 2 2 2 = 2 0 0 0 0 0 0 .
"""

from __future__ import annotations

import random

from harness.tasks.base import NOT_PE_SOLVABLE, Task, register_task
from harness.tasks.chomsky import BITS, TERMINATOR

POP, PUSH0, PUSH1 = "2", "3", "4"
ACTIONS = (POP, PUSH0, PUSH1)
STACK_SOLVABILITY_BASIS = (
    "derived, Chen et al. §III, §V: each output depends on content-matched pushes and pops, increasing CRC"
)


def sample_stack_program(n: int, rng: random.Random) -> list[str]:
    """k ~ U{1..n−1} initial bits then n−k actions ~ U{2,3,4}; n = 1: a single bit."""
    if n == 1:
        return [rng.choice(BITS)]
    k = rng.randint(1, n - 1)
    return [*rng.choices(BITS, k=k), *rng.choices(ACTIONS, k=n - k)]


def final_stack(program: tuple[str, ...]) -> list[str]:
    """Final stack top->bottom, terminator, zero-padded to len(program)+1 tokens.

    The initial bits are pushes too (they precede every action), so one rule runs all.
    """
    stack: list[str] = []
    for t in program:
        if t == POP:
            if stack:
                stack.pop()
        else:
            stack.append({PUSH0: "0", PUSH1: "1"}.get(t, t))
    out = [*reversed(stack), TERMINATOR]
    return out + ["0"] * (len(program) + 1 - len(out))


@register_task
class StackManipulation(Task):
    """Stack program of n tokens -> final stack, ``2``, zero padding to n+1 tokens, ``.``.

    The Delétang/Ruoss version (no ``.``, per-token accuracy masked after the terminator)
    is ``dm_stack_manipulation``.
    """

    name = "stack_manipulation"
    source = "Lee 2025 (PRISM), Table 3: Stack Manipulation"
    metric = "exact_match"
    train_scales = (1, 40)
    test_scales = (41, 150)
    vocabulary = ("0", "1", "2", "3", "4", ".")
    pe_solvability = NOT_PE_SOLVABLE
    pe_solvability_basis = STACK_SOLVABILITY_BASIS
    layout = "initial bits (bottom→top) then actions 2=POP 3=PUSH0 4=PUSH1 = stack top→bottom 2 0…0 ."

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        return sample_stack_program(n, rng)

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        return [*final_stack(prompt), "."]
