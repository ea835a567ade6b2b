"""solve_equation: find x in a bracketed linear equation mod 5 (randomized-PE paper, Table 1,
deterministic context-free).

An expression of n − 2 tokens from the modular_arithmetic_brackets generator without
``*`` (so x has one solution), one of its digits replaced by ``x``, then ``≡`` and the
expression's value mod 5. The target is the replaced digit. As in the source code, n < 3
gives a prompt of n zeros and the target 0.

( x + 2 ) ≡ 3 = 1
"""

from __future__ import annotations

import random

from harness.tasks.base import NOT_PE_SOLVABLE, register_task
from harness.tasks.chomsky import RUOSS, ChomskyTask
from harness.tasks.modular_arithmetic_brackets import sample_bracket_expression
from harness.tasks.modular_arithmetic_simple import MODULUS, RESIDUES, evaluate_mod

EQUALS = "≡"


@register_task
class SolveEquation(ChomskyTask):
    """Equation of n tokens ``expr(x) ≡ v`` -> the x in {0..4} that solves it."""

    name = "solve_equation"
    source = f"{RUOSS}: Solve Equation (DCF); Delétang et al. 2023"
    vocabulary = (*RESIDUES, "+", "-", "(", ")", "x", EQUALS)
    pe_solvability = NOT_PE_SOLVABLE
    pe_solvability_basis = "derived, Chen et al. §III, §V: parse-dependent parents and one output of arity n"
    layout = "bracketed expression over 0..4 + - ( ) with one x ≡ v = x (n < 3: zeros = 0)"

    def output_length(self, n: int) -> int:
        return 1

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        if n < 3:
            return ["0"] * n
        expression = sample_bracket_expression(n - 2, rng, multiplication=False)
        value = evaluate_mod(expression)
        # a uniform position, moved right (cyclically) to the next digit, as the source does
        idx = rng.randrange(len(expression))
        while not expression[idx].isdigit():
            idx = (idx + 1) % len(expression)
        expression[idx] = "x"
        return [*expression, EQUALS, str(value)]

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        if EQUALS not in prompt:  # the degenerate n < 3 instances
            return ["0"]
        expression, value = prompt[: prompt.index(EQUALS)], int(prompt[-1])
        # expr(x) = c + s·x with s = ±1 (no multiplication), so x = s·(v − c) mod 5
        c = evaluate_mod(tuple("0" if t == "x" else t for t in expression))
        s = (evaluate_mod(tuple("1" if t == "x" else t for t in expression)) - c) % MODULUS
        return [str(s * (value - c) % MODULUS)]
