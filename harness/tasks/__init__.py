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
Zoology (Arora et al. 2023): mqar. H3 (Fu et al. 2023): associative_recall. Flip-flop
language modelling (Liu et al. 2023): flip_flop.

One module per task (named as the task), and:

    base       the ``Task`` interface and the task registry
    vocab      the shared 64-token vocabulary every task is written in
    checks     checks of a task's instances, made once before a run trains (a user's task included)
    chomsky    the Chomsky-hierarchy tasks' shared machinery, as the randomized-PE paper uses them
    catalogue  the task catalogue, generated from the registry (docs/tasks.md)
    data       batches of task instances as tensors (imported on its own, not by this package)
    lm         (package) the language-modelling tasks lm_en and lm_code: corpora read as bytes,
               their leak-free split, training windows and scored regions (imported on its own)

    addition                     PRISM paper: LSD-first addition with a per-digit chain of thought
    copy                         PRISM paper: repeat a random digit string
    reverse                      PRISM paper: reverse a random digit string
    odds_first                   PRISM paper: odd-indexed digits first, then even-indexed
    stack_manipulation           PRISM paper: final state of a stack after pushes and pops
    scan_cot                     PRISM paper: SCAN with a two-step chain of thought
    dyn_str_cpy                  PRISM paper: copy the suffix that starts at a given digit
    multiplication_cot           PRISM paper: multiplication with a chain of thought
    even_pairs                   randomized-PE paper: parity of the number of unequal neighbours
    modular_arithmetic_simple    randomized-PE paper: d op d op ... d mod 5
    parity_check                 randomized-PE paper: parity of a bit string
    cycle_navigation             randomized-PE paper: final position of a walk on a 5-cycle
    dm_stack_manipulation        randomized-PE paper: its Stack Manipulation
    reverse_string               randomized-PE paper: reverse a bit string
    modular_arithmetic_brackets  randomized-PE paper: a bracketed expression mod 5
    solve_equation               randomized-PE paper: x in a bracketed linear equation mod 5
    duplicate_string             randomized-PE paper: write a bit string twice
    missing_duplicate_string     randomized-PE paper: the hidden symbol of a duplicated string
    dm_odds_first                randomized-PE paper: odd-indexed bits first
    binary_addition              randomized-PE paper: add two little-endian binary numbers
    binary_multiplication        randomized-PE paper: multiply two little-endian binary numbers
    compute_sqrt                 randomized-PE paper: floor square root in binary
    bucket_sort                  randomized-PE paper: sort a string over {0..4}
    addition_turing              Turing Programs: multi-digit addition as a Turing Program
    select_first                 positional limitations: output the first digit
    select_middle                positional limitations: output the middle digit
    select_last                  positional limitations: output the last digit
    lp_parity                    positional limitations: parity with a chain of thought
    lp_addition                  positional limitations: unaligned addition, no chain of thought
    scan                         SCAN: commands to action sequences, from the grammar
    mqar                         Zoology: multi-query associative recall, the values of queried keys
    associative_recall           H3: one queried key's value, read at the echoed key
    flip_flop                    flip-flop language: the bit of the last write, at the final read
"""

from harness.tasks import (  # noqa: F401  (registers the tasks)
    addition,
    addition_turing,
    associative_recall,
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
    flip_flop,
    lp_addition,
    lp_parity,
    missing_duplicate_string,
    modular_arithmetic_brackets,
    modular_arithmetic_simple,
    mqar,
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
    lm_name_clash,
    register_task,
)
from harness.tasks.lm import LM_TASKS
from pezoo import PluginClashError


def bench_tasks() -> list[str]:
    """Every task ``pezoo bench`` runs, by name: the registry's algorithmic tasks
    (:func:`available`), then the language-modelling ones (``harness.tasks.lm.LM_TASKS``).
    A plugin registered under a language-modelling task's name is a ``PluginClashError``
    (a one-line error on every command), never a run of the other task."""
    algorithmic = available()
    clash = [name for name in algorithmic if name in LM_TASKS]
    if clash:
        raise PluginClashError(lm_name_clash(clash[0], "a plugin (entry-point group 'pezoo.tasks')"))
    return [*algorithmic, *LM_TASKS]


__all__ = [
    "NOT_PE_SOLVABLE",
    "PE_SOLVABILITY",
    "PE_SOLVABLE",
    "PE_SOLVABLE_WITH_SCALE_HINT",
    "TASKS",
    "Example",
    "Task",
    "available",
    "bench_tasks",
    "create",
    "register_task",
]
