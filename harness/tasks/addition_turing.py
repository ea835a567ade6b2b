"""addition_turing: multi-digit addition as a Turing Program (Hou et al., "Universal Length
Generalization with Turing Programs", Fig. 2, footnote 1).

The prompt is ``a+b`` (most significant digit first, digits i.i.d. so leading zeros occur).
Each scratchpad line is a full tape: both operands with the digit consumed this step shown
head-marked (a=0 … j=9) and already consumed digits removed (an exhausted operand is ``^``),
then ``(c,R)`` with c the carry out of the step and R the result so far. Steps continue
while a digit or a carry remains (a final carry costs one ``^+^`` line). Lines are
separated by ``|``; after the last one comes ``|`` and the answer R. In the paper's compact
form ``$a+b|line|…|R<EOS>``, the harness's ``=`` takes the place of the first ``|``.

4324+139=432e+13j(1,3)|43c+1d(0,63)|4d+b(0,463)|e+^(0,4463)|4463
"""

from __future__ import annotations

import random

from harness.tasks.addition import check_operand_lengths, sample_operand_lengths
from harness.tasks.base import PE_SOLVABLE_WITH_SCALE_HINT, Example, Task, register_task
from harness.tasks.copy import DIGITS

HEAD = "abcdefghij"  # head-marked digit k is HEAD[k]
EXHAUSTED, LINE = "^", "|"


def turing_addition_lines(a: str, b: str) -> list[str]:
    """The scratchpad lines of a+b (operands as MSD-first digit strings), then the answer."""
    lines, carry, result = [], 0, ""
    while a or b or carry:
        da, db = int(a[-1]) if a else 0, int(b[-1]) if b else 0
        tape_a = a[:-1] + HEAD[da] if a else EXHAUSTED
        tape_b = b[:-1] + HEAD[db] if b else EXHAUSTED
        carry, digit = divmod(da + db + carry, 10)
        result = str(digit) + result
        lines.append(f"{tape_a}+{tape_b}({carry},{result})")
        a, b = a[:-1], b[:-1]
    return [*lines, result]


@register_task
class AdditionTuring(Task):
    """``a+b`` -> the Turing-Program scratchpad lines and the sum, joined by ``|``.

    Scale n = digits of the longer operand; ``operand_lengths`` as in ``addition`` for
    training instances; ``test_operand_lengths`` for evaluation ones (default "equal",
    the paper's test setting: both operands n digits).
    """

    name = "addition_turing"
    source = "Hou et al. 2024 (Turing Programs), §3 / Fig. 2: addition Turing Program"
    metric = "exact_match"
    train_scales = (2, 50)
    test_scales = (51, 100)
    vocabulary = (*DIGITS, *HEAD, "+", "(", ")", ",", EXHAUSTED, LINE)
    pe_solvability = PE_SOLVABLE_WITH_SCALE_HINT
    pe_solvability_basis = (
        "derived, Chen et al. §III, §V: local rewrite per line (bounded operators), previous-line offset depends "
        "on both lengths and the step (scale hint of both lengths, or content matching)"
    )
    layout = "a+b = tape(c,R)|tape(c,R)|…|R   (tape: operands with the consumed digit marked a..j, ^ if empty)"
    answer_separator = LINE

    def __init__(self, *, operand_lengths: str = "longest", test_operand_lengths: str = "equal") -> None:
        self.operand_lengths = check_operand_lengths(operand_lengths)
        self.test_operand_lengths = check_operand_lengths(test_operand_lengths)

    def sample_prompt(self, n: int, rng: random.Random, lengths: str | None = None) -> list[str]:
        len_a, len_b = sample_operand_lengths(n, rng, lengths or self.operand_lengths)
        return [*rng.choices(DIGITS, k=len_a), "+", *rng.choices(DIGITS, k=len_b)]

    def sample_test(self, n: int, rng: random.Random) -> Example:
        self.check_scale(n)
        return self.instance(self.sample_prompt(n, rng, self.test_operand_lengths), n)

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        plus = prompt.index("+")
        a, b = "".join(prompt[:plus]), "".join(prompt[plus + 1 :])
        return list(LINE.join(turing_addition_lines(a, b)))
