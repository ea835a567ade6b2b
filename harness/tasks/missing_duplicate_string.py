"""missing_duplicate_string: recover the hidden symbol of a duplicated bit string
(randomized-PE paper, Table 1, context-sensitive).

w w (|w| = n // 2 bits) with one uniformly chosen position replaced by the marker 2,
then the padding symbol 3 when n is odd; the target is the hidden bit. As in the source
code, n = 1 is the constant instance 1 -> 1.

0 1 1 0 0 2 1 0 = 1
1 0 1 1 2 1 3 = 0
"""

from __future__ import annotations

import random

from harness.tasks.base import NOT_PE_SOLVABLE, register_task
from harness.tasks.chomsky import BITS, RUOSS, ChomskyTask

MISSING, PADDING = "2", "3"


@register_task
class MissingDuplicateString(ChomskyTask):
    """Duplicated bit string with one symbol masked (n tokens) -> the masked bit."""

    name = "missing_duplicate_string"
    source = f"{RUOSS}: Missing Duplicate (CS); Delétang et al. 2023"
    vocabulary = (*BITS, MISSING, PADDING)
    pe_solvability = NOT_PE_SOLVABLE
    pe_solvability_basis = "derived, Chen et al. §III, §V: the parent (the marker's twin) is located by content"
    layout = "w w with one symbol replaced by 2 (+ 3 if n odd) = the replaced bit"

    def output_length(self, n: int) -> int:
        return 1

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        if n == 1:
            return ["1"]
        word = rng.choices(BITS, k=n // 2)
        doubled = [*word, *word]
        doubled[rng.randrange(len(doubled))] = MISSING
        return doubled + [PADDING] * (n % 2)

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        if MISSING not in prompt:  # the constant n = 1 instance
            return ["1"]
        doubled = prompt[: len(prompt) - (prompt[-1] == PADDING)]
        half, idx = len(doubled) // 2, doubled.index(MISSING)
        return [doubled[idx + half if idx < half else idx - half]]
