"""copy: repeat a random digit string (PRISM paper, Table 3 / §6.0.1).

8349216=8349216.
"""

from __future__ import annotations

import random

from harness.tasks.base import Task, register_task

DIGITS = "0123456789"


@register_task
class Copy(Task):
    """Copy a string of n i.i.d. uniform digits; scale n = string length."""

    name = "copy"
    source = "Lee 2025 (PRISM), Table 3: Copy"
    metric = "exact_match"
    train_scales = (1, 10)
    test_scales = (11, 40)

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        return rng.choices(DIGITS, k=n)

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        return [*prompt, "."]
