"""modular_arithmetic_brackets: evaluate a bracketed expression mod 5 (randomized-PE paper,
Table 1, deterministic context-free).

Expressions of exactly n tokens from the recursive generator of the source code:
n = 1: d, 2: -d, 3: (d), 4: (-d), n >= 5: (L op R) with len(L) ~ U{1..n−4},
len(R) = n − 3 − len(L) and op ~ U{+, -, *} (the paper's runs include ``*``).

( ( 1 * 2 ) - - 3 ) = 0
"""

from __future__ import annotations

import random

from harness.tasks.base import NOT_PE_SOLVABLE, register_task
from harness.tasks.chomsky import RUOSS, ChomskyTask
from harness.tasks.modular_arithmetic_simple import MODULUS, RESIDUES, evaluate_mod


def sample_bracket_expression(n: int, rng: random.Random, *, multiplication: bool) -> list[str]:
    """A random expression of exactly n tokens (see the module docstring)."""
    if n < 1:
        raise ValueError(f"an expression needs at least one token, got {n}")
    if n <= 4:
        d = rng.choice(RESIDUES)
        return {1: [d], 2: ["-", d], 3: ["(", d, ")"], 4: ["(", "-", d, ")"]}[n]
    left = rng.randint(1, n - 4)
    lhs = sample_bracket_expression(left, rng, multiplication=multiplication)
    rhs = sample_bracket_expression(n - 3 - left, rng, multiplication=multiplication)
    op = rng.choice(("+", "-", "*") if multiplication else ("+", "-"))
    return ["(", *lhs, op, *rhs, ")"]


@register_task
class ModularArithmeticBrackets(ChomskyTask):
    """Random bracketed expression of n tokens over {0..4, +, -, *, (, )} -> value mod 5."""

    name = "modular_arithmetic_brackets"
    source = f"{RUOSS}: Modular Arithmetic (DCF); Delétang et al. 2023"
    vocabulary = (*RESIDUES, "+", "-", "*", "(", ")")
    pe_solvability = NOT_PE_SOLVABLE
    pe_solvability_basis = "derived, Chen et al. §III, §V: parse-dependent parents and one output of arity n"
    layout = "bracketed expression over 0..4 + - * ( ) = value mod 5"

    def output_length(self, n: int) -> int:
        return 1

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        return sample_bracket_expression(n, rng, multiplication=True)

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        return [str(evaluate_mod(prompt, MODULUS))]
