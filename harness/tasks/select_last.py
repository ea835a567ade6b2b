"""select_last: output the last digit (positional-limitations paper, §VII-B / Fig. 3).

3 1 4 1 5 = 5
"""

from __future__ import annotations

from harness.tasks.base import register_task
from harness.tasks.select_first import LP, Select


@register_task
class SelectLast(Select):
    """``x₁…xₙ`` -> ``xₙ``; scale n = string length."""

    name = "select_last"
    source = f"{LP}: SelectLast"
    layout = "x₁…xₙ = xₙ"

    def index(self, n: int) -> int:
        return n - 1
