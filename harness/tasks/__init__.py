"""The task suite: one module per task, each registered under its name.

PRISM paper (Lee 2025): addition, copy, reverse, odds_first, stack_manipulation, scan_cot,
dyn_str_cpy, multiplication_cot. Randomized-PE paper (Ruoss et al. 2023, tasks of
Delétang et al. 2023): even_pairs, modular_arithmetic_simple, parity_check,
cycle_navigation, dm_stack_manipulation, reverse_string, modular_arithmetic_brackets,
solve_equation, duplicate_string, missing_duplicate_string, dm_odds_first,
binary_addition, binary_multiplication, compute_sqrt, bucket_sort (``dm_`` marks the
two whose names the PRISM tasks already take). Turing Programs (Hou et al.):
addition_turing. Positional limitations (Chen, Liang & Lin): select_first,
select_middle, select_last, lp_parity, lp_addition. SCAN (Lake & Baroni 2018): scan.
"""

from harness.tasks import (  # noqa: F401  (registers the tasks)
    addition,
    addition_turing,
    binary_addition,
    binary_multiplication,
    bucket_sort,
    compute_sqrt,
    copy,
    cycle_navigation,
    dm_odds_first,
    dm_stack_manipulation,
    duplicate_string,
    dyn_str_cpy,
    even_pairs,
    lp_addition,
    lp_parity,
    missing_duplicate_string,
    modular_arithmetic_brackets,
    modular_arithmetic_simple,
    multiplication_cot,
    odds_first,
    parity_check,
    reverse,
    reverse_string,
    scan,
    scan_cot,
    select_first,
    select_last,
    select_middle,
    solve_equation,
    stack_manipulation,
)
from harness.tasks.base import (
    NOT_PE_SOLVABLE,
    PE_SOLVABILITY,
    PE_SOLVABLE,
    PE_SOLVABLE_WITH_SCALE_HINT,
    TASKS,
    Example,
    Task,
    available,
    create,
    register_task,
)

__all__ = [
    "NOT_PE_SOLVABLE",
    "PE_SOLVABILITY",
    "PE_SOLVABLE",
    "PE_SOLVABLE_WITH_SCALE_HINT",
    "TASKS",
    "Example",
    "Task",
    "available",
    "create",
    "register_task",
]
