"""select_middle: output the middle digit x_{⌊n/2⌋+1} (positional-limitations paper, §VII-B / Fig. 3).

3 1 4 1 5 = 4
"""

from __future__ import annotations

from harness.tasks.base import register_task
from harness.tasks.select_first import LP, Select


@register_task
class SelectMiddle(Select):
    """``x₁…xₙ`` -> ``x_{⌊n/2⌋+1}`` (1-based); scale n = string length."""

    name = "select_middle"
    source = f"{LP}: SelectMiddle"
    layout = "x₁…xₙ = x_{⌊n/2⌋+1}"

    def index(self, n: int) -> int:
        return n // 2
