"""scan_cot: SCAN with the PRISM paper's two-step chain of thought (Table 3 / App. D).

Step 1 rewrites the command with every repetition expanded into ``+``-joined copies of
its clause, conjunction kept in place; ``→``; step 2 lists, in execution order (``after``
reorders here only), every clause as ``clause : actions``; then ``.``.

jump after walk left twice = jump after walk left + walk left → walk left : I_TURN_LEFT I_WALK
    walk left : I_TURN_LEFT I_WALK jump : I_JUMP .
"""

from __future__ import annotations

from harness.tasks.base import register_task
from harness.tasks.scan import (
    ACTIONS,
    COMMAND_WORDS,
    ScanBase,
    clause_actions,
    execution_clauses,
    phrase_clauses,
    split_command,
)


def expanded_phrase(phrase: tuple[str, ...]) -> list[str]:
    """Step 1 for one phrase S: its clauses joined by ``+``."""
    return [w for i, c in enumerate(phrase_clauses(phrase)) for w in (["+"] if i else []) + list(c)]


@register_task
class ScanCot(ScanBase):
    """A SCAN command -> step 1 ``→`` step 2 ``.`` (SCAN length split by action count)."""

    name = "scan_cot"
    source = "Lee 2025 (PRISM), Table 3 / App. D: SCAN with chain of thought (length split)"
    metric = "exact_match"
    vocabulary = (*COMMAND_WORDS, *ACTIONS, "+", "→", ":", ".")
    layout = "command = command with repetitions as + → clause : actions … ."

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        first, conj, second = split_command(prompt)
        step1 = expanded_phrase(first) + ([conj, *expanded_phrase(second)] if conj else [])
        step2 = [w for c in execution_clauses(prompt) for w in [*c, ":", *clause_actions(c)]]
        return [*step1, "→", *step2, "."]
