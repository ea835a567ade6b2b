"""addition: least-significant-digit-first addition with a per-digit chain of thought
(PRISM paper, Table 3 / §3.1 / App. D).

Operands are written LSD first. The chain has one step ``a_k b_k c_k d_k`` per digit of
the longer operand (a missing digit written 0, c_k the carry out of the step, d_k the sum
digit), steps joined by ``,``; then ``→``, the sum LSD first (a final carry is only its
extra top digit, with no extra step), ``.``. Most significant digits are non-zero.

8 2 9 + 0 3 = 8 0 0 8 , 2 3 0 5 , 9 0 0 9 → 8 5 9 .
5 + 7 = 5 7 1 2 → 2 1 .

Scale n = digits of the longer operand = number of chain steps. ``operand_lengths``:
"longest" (default) draws the other operand's length from U{1..n} and which one is
longer by a coin flip, covering the paper's unequal-length examples; "equal" gives both
n digits (the n-digit + n-digit grid).
"""

from __future__ import annotations

import random

from harness.tasks.base import PE_SOLVABLE_WITH_SCALE_HINT, CoupledSegment, Task, layout_coupling, register_task
from harness.tasks.copy import DIGITS

OPERAND_LENGTHS = ("longest", "equal")


def check_operand_lengths(option: str) -> str:
    if option not in OPERAND_LENGTHS:
        raise ValueError(f"operand_lengths must be one of {OPERAND_LENGTHS}, got {option!r}")
    return option


def sample_operand_lengths(n: int, rng: random.Random, option: str) -> tuple[int, int]:
    """(len a, len b): both n ("equal"), or one n and the other U{1..n}, order random."""
    if option == "equal":
        return n, n
    other = rng.randint(1, n)
    return (n, other) if rng.randrange(2) else (other, n)


def sample_number(length: int, rng: random.Random) -> list[str]:
    """``length`` digits, most significant first, no leading zero unless length == 1."""
    first = rng.choice(DIGITS if length == 1 else DIGITS[1:])
    return [first, *rng.choices(DIGITS, k=length - 1)]


@register_task
class Addition(Task):
    """``a + b`` (LSD first) -> chain of ``a_k b_k c_k d_k`` steps, ``→``, the sum, ``.``."""

    name = "addition"
    source = "Lee 2025 (PRISM), Table 3 / App. D: Addition with chain of thought"
    metric = "exact_match"
    train_scales = (1, 10)
    test_scales = (11, 40)
    vocabulary = (*DIGITS, "+", ",", "→", ".")
    pe_solvability = PE_SOLVABLE_WITH_SCALE_HINT
    pe_solvability_basis = "derived, Chen et al. §III, §V: bounded operators, positions depend on both operand lengths"
    layout = "a (LSD first) + b (LSD first) = a₁ b₁ c₁ d₁ , … , aₙ bₙ cₙ dₙ → a+b (LSD first) ."
    # position coupling (Cho et al. 2024): digit k of a, of b, chain step k (a_k b_k c_k d_k and
    # its comma) and digit k of the sum share one id; +, =, → and . sit just below digit 1
    coupling = layout_coupling((*DIGITS, ","), CoupledSegment(), CoupledSegment(), CoupledSegment(width=5))

    def __init__(self, *, operand_lengths: str = "longest") -> None:
        self.operand_lengths = check_operand_lengths(operand_lengths)

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        len_a, len_b = sample_operand_lengths(n, rng, self.operand_lengths)
        a, b = sample_number(len_a, rng), sample_number(len_b, rng)
        return [*reversed(a), "+", *reversed(b)]

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        plus = prompt.index("+")
        a, b = prompt[:plus], prompt[plus + 1 :]  # LSD first
        steps: list[list[str]] = []
        digits: list[str] = []
        carry = 0
        for k in range(max(len(a), len(b))):
            da = int(a[k]) if k < len(a) else 0
            db = int(b[k]) if k < len(b) else 0
            carry, d = divmod(da + db + carry, 10)
            steps.append([str(da), str(db), str(carry), str(d)])
            digits.append(str(d))
        if carry:
            digits.append(str(carry))
        chain = [tok for i, step in enumerate(steps) for tok in ([","] if i else []) + step]
        return [*chain, "→", *digits, "."]
