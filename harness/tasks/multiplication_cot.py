"""multiplication_cot: the PRISM paper's multiplication chain of thought (Table 3 / App. D).

For a x b the target restates ``a x [`` and then, for each digit b_i of b (most
significant first), the term ``b_i*(b_i+1)`` followed by ``(b_j+0)`` for every later
digit b_j of b; terms joined by ``+``; then ``] .``. No product is computed: the task is a
structured copy (the worked example of Table 3; the prose's notation disagrees). Operands
are written most significant digit first, without leading zeros.

675x1259=675x[1*(1+1)(2+0)(5+0)(9+0)+2*(2+1)(5+0)(9+0)+5*(5+1)(9+0)+9*(9+1)].

Scale n = digits of the longer operand (``operand_lengths`` as in ``addition``; "equal"
gives the paper's n×n test grid).
"""

from __future__ import annotations

import random

from harness.tasks.addition import check_operand_lengths, sample_number, sample_operand_lengths
from harness.tasks.base import PE_SOLVABLE_WITH_SCALE_HINT, Task, register_task
from harness.tasks.copy import DIGITS


@register_task
class MultiplicationCot(Task):
    """``a x b`` -> ``a x [`` one term per digit of b, joined by ``+`` ``] .``"""

    name = "multiplication_cot"
    source = "Lee 2025 (PRISM), Table 3 / App. D: Multiplication with chain of thought"
    metric = "exact_match"
    train_scales = (1, 9)
    test_scales = (10, 20)
    vocabulary = (*DIGITS, "x", "[", "]", "*", "(", ")", "+", ".")
    pe_solvability = PE_SOLVABLE_WITH_SCALE_HINT
    pe_solvability_basis = (
        "derived, Chen et al. §III, §V: a structured copy with bounded operators, positions depend on both lengths"
    )
    layout = "a x b = a x [ b₁*(b₁+1)(b₂+0)…(bₘ+0) + b₂*(b₂+1)(b₃+0)… + … + bₘ*(bₘ+1) ] ."

    def __init__(self, *, operand_lengths: str = "longest") -> None:
        self.operand_lengths = check_operand_lengths(operand_lengths)

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        len_a, len_b = sample_operand_lengths(n, rng, self.operand_lengths)
        return [*sample_number(len_a, rng), "x", *sample_number(len_b, rng)]

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        times = prompt.index("x")
        b = prompt[times + 1 :]
        terms = []
        for i, d in enumerate(b):
            term = [d, "*", "(", d, "+", "1", ")"]
            for later in b[i + 1 :]:
                term += ["(", later, "+", "0", ")"]
            terms.append(term)
        joined = [tok for i, term in enumerate(terms) for tok in (["+"] if i else []) + term]
        return [*prompt[: times + 1], "[", *joined, "]", "."]
