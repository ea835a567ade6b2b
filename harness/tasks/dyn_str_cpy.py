"""dyn_str_cpy: copy the suffix that starts at a given digit (PRISM paper, Table 3).

The prompt is a digit string s, ``,`` and a digit d that occurs exactly once in s; the
target is s from d to its end, then ``.``. Sampling (our choice; the paper gives the format only): a start t ~ U{1..n},
d ~ U{0..9} at t, the other n − 1 positions i.i.d. from the nine digits other than d.

5839472,3=39472.
"""

from __future__ import annotations

import random

from harness.tasks.base import NOT_PE_SOLVABLE, Task, register_task
from harness.tasks.copy import DIGITS


@register_task
class DynStrCpy(Task):
    """``s , d`` (|s| = n, d once in s) -> s[s.index(d):] then ``.``; scale n = |s|."""

    name = "dyn_str_cpy"
    source = "Lee 2025 (PRISM), Table 3: Dynamic String Copy"
    metric = "exact_match"
    train_scales = (1, 10)
    test_scales = (11, 150)
    vocabulary = (*DIGITS, ",", ".")
    pe_solvability = NOT_PE_SOLVABLE
    pe_solvability_basis = (
        "derived, Chen et al. §III, §V: the start index is set by content, increasing CRC position-only"
    )
    layout = "s , d = s from d on ."

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        start = rng.randint(1, n)
        d = rng.choice(DIGITS)
        others = [c for c in DIGITS if c != d]
        s = [rng.choice(others) for _ in range(n - 1)]
        s.insert(start - 1, d)
        return [*s, ",", d]

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        s, d = prompt[:-2], prompt[-1]
        return [*s[s.index(d) :], "."]
