"""bucket_sort: sort a string over {0..4} (randomized-PE paper, Table 1, context-sensitive).

4 1 3 1 0 = 0 1 1 3 4
"""

from __future__ import annotations

import random

from harness.tasks.base import NOT_PE_SOLVABLE, register_task
from harness.tasks.chomsky import RUOSS, ChomskyTask, digit_tokens

SYMBOLS = digit_tokens(5)


@register_task
class BucketSort(ChomskyTask):
    """n i.i.d. uniform symbols of {0..4} -> the same symbols sorted (n tokens, all scored)."""

    name = "bucket_sort"
    source = f"{RUOSS}: Bucket Sort (CS); Delétang et al. 2023"
    vocabulary = SYMBOLS
    pe_solvability = NOT_PE_SOLVABLE
    pe_solvability_basis = (
        "derived, Chen et al. §III, §V: the k-th output depends on the symbol counts of the whole input (arity n)"
    )
    layout = "s₁…sₙ (sᵢ∈0..4) = sorted(s)"

    def output_length(self, n: int) -> int:
        return n

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        return rng.choices(SYMBOLS, k=n)

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        return sorted(prompt)
