"""modular_arithmetic_simple: evaluate d op d op … d mod 5 (randomized-PE paper, Table 1, regular).

Residues 0..4 alternate with operators + - * (multiplication binds tighter); the target
is the value mod 5. Expressions have odd length: an even n gives n − 1 tokens.

1 - 1 - 1 = 4
0 * 1 + 4 * 3 - 2 = 0
"""

from __future__ import annotations

import random

from harness.tasks.base import NOT_PE_SOLVABLE, register_task
from harness.tasks.chomsky import RUOSS, ChomskyTask, digit_tokens

MODULUS = 5
RESIDUES = digit_tokens(MODULUS)


def evaluate_mod(tokens: tuple[str, ...] | list[str], modulus: int = MODULUS) -> int:
    """Value mod ``modulus`` of an expression over digits, binary ``+ - *``, unary ``-``
    and brackets, with the usual precedence (``*`` over ``+ -``, left to right).

    Grammar: expr := term (("+"|"-") term)* ; term := unary ("*" unary)* ;
    unary := "-" unary | primary ; primary := digit | "(" expr ")".
    """
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take(expected: str | None = None) -> str:
        nonlocal pos
        tok = peek()
        if tok is None or (expected is not None and tok != expected):
            raise ValueError(f"malformed expression {''.join(tokens)!r} at token {pos}")
        pos += 1
        return tok

    def expr() -> int:
        value = term()
        while peek() in ("+", "-"):
            value = value + term() if take() == "+" else value - term()
        return value % modulus

    def term() -> int:
        value = unary()
        while peek() == "*":
            take()
            value = value * unary() % modulus
        return value

    def unary() -> int:
        if peek() == "-":
            take()
            return -unary() % modulus
        if peek() == "(":
            take()
            value = expr()
            take(")")
            return value
        tok = take()
        if not tok.isdigit():
            raise ValueError(f"malformed expression {''.join(tokens)!r} at token {pos - 1}")
        return int(tok) % modulus

    value = expr()
    if pos != len(tokens):
        raise ValueError(f"malformed expression {''.join(tokens)!r}: trailing tokens from {pos}")
    return value


@register_task
class ModularArithmeticSimple(ChomskyTask):
    """m = n (odd n) or n − 1 (even n) tokens: (m+1)/2 i.i.d. residues of {0..4} and (m−1)/2
    i.i.d. operators of {+, *, -} alternating -> the value mod 5 (one token)."""

    name = "modular_arithmetic_simple"
    source = f"{RUOSS}: Modular Arithmetic (Simple) (R); Delétang et al. 2023"
    vocabulary = (*RESIDUES, "+", "-", "*")
    pe_solvability = NOT_PE_SOLVABLE
    pe_solvability_basis = "derived, Chen et al. §III, §V: one output token of arity n, increasing CRC"
    layout = "d op d op … d (d∈0..4, op∈+-*, odd length) = value mod 5"

    def output_length(self, n: int) -> int:
        return 1

    def scale_hint(self, prompt: tuple[str, ...], n: int) -> int:
        return len(prompt)  # even n is sampled as n − 1 tokens: hint the length actually seen

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        m = n if n % 2 else n - 1
        residues = rng.choices(RESIDUES, k=m // 2 + 1)
        operators = rng.choices(("+", "*", "-"), k=m // 2)
        out = [residues[0]]
        for op, d in zip(operators, residues[1:], strict=True):
            out += [op, d]
        return out

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        return [str(evaluate_mod(prompt))]
