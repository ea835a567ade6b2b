"""The task catalogue, generated from the registry: ``python -m harness.tasks.catalogue > docs/tasks.md``.

Everything per task (format, example, scales, source, metric, PE-solvability label, notes)
is read from the task classes and their module docstrings, so the page cannot drift from
the code; a test regenerates it and compares.
"""

from __future__ import annotations

import inspect
import random
import sys
from collections.abc import Iterable

from harness.tasks import vocab
from harness.tasks.base import NOT_PE_SOLVABLE, PE_SOLVABLE, PE_SOLVABLE_WITH_SCALE_HINT, TASKS, Task

FAMILIES = (  # (heading, prefix of Task.source)
    ("PRISM paper (Lee 2025), Tables 3-4", "Lee 2025"),
    ("Randomized-PE paper (Ruoss et al. 2023), Table 1: the Delétang et al. 2023 tasks", "Ruoss"),
    ("Turing Programs (Hou et al.)", "Hou"),
    ("Positional limitations (Chen, Liang & Lin)", "Chen"),
    ("SCAN (Lake & Baroni 2018)", "Lake"),
    ("Zoology (Arora et al. 2023)", "Arora"),
    ("H3 (Fu et al. 2023)", "Fu"),
    ("Flip-flop language modeling (Liu et al. 2023)", "Liu"),
)

PREAMBLE = f"""\
# Task catalogue

Generated from the task registry by `python -m harness.tasks.catalogue > docs/tasks.md`.
Do not edit by hand: `tests/harness/tasks/test_catalogue.py` regenerates it and compares.

## Conventions

- **Layout.** An instance is a prompt and a target in the shared vocabulary; the harness
  trains on `prompt = target <eos>` with the loss on the target and EOS only. `=` and EOS
  are added by the harness and never occur inside a prompt or target.
- **Scale.** Every task samples at its own notion of length n (operand digits, string
  length, SCAN action count), shown per task; `Example.token_length` records the token
  length of the whole sequence. A scale the task cannot produce (n = 0, a SCAN length
  with no command) raises `ValueError`; `Task.has_scale(n)` says which exist.
- **Determinism.** Tasks draw only from the `random.Random` they are given.
- **End marker.** Targets of the PRISM paper's tasks end with `.` (its format; the
  completion must match exactly, `.` and EOS included). The other papers' tasks have no `.`.
- **Metrics.** `exact_match`: the greedy completion equals `target <eos>` (PRISM,
  Turing Programs, positional limitations). `token_accuracy`: per-token accuracy of the
  randomized-PE paper; its tasks give `output_length(n)` (the fixed number of target
  tokens, i.e. the blanks its non-causal encoder reads after the input) and a per-target-
  token mask `Example.mask` (the tokens after a terminator are not scored).
- **Scale hint.** `Example.scale_hint` is the n an encoding with a scale hint
  (learned-PRF-SH) receives; it equals the scale except for `modular_arithmetic_simple`,
  where it is the odd token length actually sampled.
- **Position coupling.** `Task.coupling` declares which tokens share a position id (digits
  of equal significance: Cho et al. 2024), read from the token ids by the
  `position_coupling` encoding (docs/encodings/position_coupling.md). `addition`, `copy`,
  `lp_addition` and `reverse` declare one; that encoding refuses the other tasks.
- **Options.** `harness.tasks.create(name, **options)`; unknown options are errors that
  name the valid ones. `addition`, `multiplication_cot` and `addition_turing` take
  `operand_lengths`: `"longest"` (default; one operand has n digits, the other U{{1..n}},
  which one by a coin flip) or `"equal"` (both n digits: the papers' n-by-n test grids).
  `addition_turing` also takes `test_operand_lengths` (default `"equal"`, the Turing-Programs
  paper's test set) for its evaluation instances (`Task.sample_test`).

## Adding a task

Subclass `harness.tasks.Task` (set the class attributes, implement `sample_prompt` and
`solve`) and register it: in-tree with `@register_task` in a module of `harness/tasks/`
named as the task (and imported by `harness/tasks/__init__.py`), or from your own package
through the `pezoo.tasks` entry-point group (`my_task = "my_package:MyTask"`; a class that
leaves `name` unset gets the key, one whose `name` differs from it is refused). Names follow
the encodings' rules (letters, digits, `_`, `.`, `-`), may not be a language-modelling
task's (`lm_en`, `lm_code`), and an entry point must name a `Task` subclass. Its constructor
takes only keyword-only options, each with a default (`create(name, **options)`).

Before a run trains, the harness draws a few instances at the smallest and largest of its
training scales (`sample`) and of its test scales (`sample_test`) and refuses the run, in
one sentence naming the task, the call and what it returned (`harness/tasks/checks.py`),
when an instance is not an `Example`; has a token that is not a string, not in the shared
vocabulary, not in the task's declared `vocabulary`, or one of the layout's (`=`, `<eos>`,
`<pad>`, `<bos>`); has an empty target; records another scale than the one asked for; has
a target other than `solve(prompt)`, a mask not of the target's length, or a target length
other than `output_length(n)`; differs when drawn again from an equal seed; or when the
largest test scale's instances are no longer than the smallest training scale's (a
generator that ignores n). `tests/harness/tasks/test_user_tasks.py` shows each.

## Sources

Each task's `source` cites its paper by author and year, with the table or section:

- **Lee 2025**: “Position as Probability: Self-Supervised Transformers that Think Past Their
  Training for Length Extrapolation” (PRISM).
- **Ruoss et al. 2023**: “Randomized Positional Encodings Boost Length Generalization of
  Transformers”.
- **Delétang et al. 2023**: “Neural Networks and the Chomsky Hierarchy”, the source of the
  tasks Ruoss et al. reuse.
- **Hou et al.** (2024): “Universal Length Generalization with Turing Programs”.
- **Chen, Liang & Lin** (also “Chen et al.”): “On the Limitations and Capabilities of
  Position Embeddings for Length Generalization”.
- **Lake & Baroni 2018**: “Generalization without Systematicity: On the Compositional Skills
  of Sequence-to-Sequence Recurrent Networks” (SCAN).
- **Arora et al. 2023**: “Zoology: Measuring and Improving Recall in Efficient Language
  Models” (arXiv 2312.04927; multi-query associative recall, MQAR).
- **Fu et al. 2023**: “Hungry Hungry Hippos: Towards Language Modeling with State Space
  Models” (arXiv 2212.14052; associative recall, one query).
- **Liu et al. 2023**: “Exposing Attention Glitches with Flip-Flop Language Modeling”
  (arXiv 2306.00946).

## Names: which task is which paper's

Bare names are the PRISM paper's tasks. The randomized-PE paper's tasks keep their own
names except the two the PRISM paper already uses, which get the prefix `dm_`
(DeepMind's binary, per-token-scored versions): `dm_odds_first`, `dm_stack_manipulation`.
Its `reverse_string` is the binary sibling of PRISM's `reverse`. The positional-limitations
paper's variants of shared concepts get `lp_`: `lp_parity` (parity with a chain of
thought; `parity_check` is the randomized-PE one without), `lp_addition` (LSD-first, no
chain; `addition` is PRISM's chain-of-thought format). That paper's unpadded Copy is PRISM's
`copy` without the `.`, so it is not registered twice. The Turing-Program addition is
`addition_turing`. `scan` is plain SCAN; `scan_cot` is PRISM's chain-of-thought version.

## Vocabulary mapping

The randomized-PE tasks use their own small vocabularies (ids 0..k−1). An id that the
source writes as a digit becomes that digit token: bits, residues mod 5, the stack
actions 2/3/4, missing_duplicate_string's marker 2 and padding 3, the terminator 2 of the
binary arithmetic outputs and of stack_manipulation. Ids that denote an operator, bracket,
variable or equals sign become the symbol: `+ - * ( ) x`, and `≡` for solve_equation's
equals sign, so that `=` stays the prompt separator. The Turing-Program tapes use `a`..`j`
for head-marked digits 0..9, `^` for an exhausted operand and `|` between lines.
`mqar` and `associative_recall` take their keys from the 43 non-digit tokens of ids 14..57
(`:` excluded, which separates the queries) and their values from the digits; `flip_flop`
writes the paper's instructions as `w` (write), `i` (ignore) and `r` (read).

## PE-solvability labels

From the positional-limitations paper's analysis (computational-representation
complexity, CRC, and canonicity: Chen, Liang & Lin, "On the Limitations and Capabilities
of Position Embeddings for Length Generalization", §III for the definitions, §V for the
theorems; "Chen et al. §III, §V" below. The labels are our derivation from them):

- `{PE_SOLVABLE}`: bounded operator set and canonical as formatted; some plain positional
  relation function characterizes the task.
- `{PE_SOLVABLE_WITH_SCALE_HINT}`: bounded operators, but the parents of an output token
  sit at offsets that depend on the instance's length; a scale hint (or padding every
  instance to one length) makes it characterizable.
- `{NOT_PE_SOLVABLE}`: the CRC grows with n under any position-only representation (an
  output depends on Θ(n) inputs, or its parents are found by content). No PE can length-
  generalize it in principle; content-based attention still may.

"Solvable" means that a suitable relation function exists, not that a given encoding
(RoPE, ALiBi, ...) realises it. The label applies to the causal prompt-then-target layout
used here.

## Readings of ambiguous points

- Odds first (both versions): 0-based odd positions first, `x[1::2] + x[0::2]`, as the
  PRISM example and the code behind the randomized-PE numbers do (prose and docstring
  say the opposite).
- PRISM test scales are not in the paper's text; the grids here are our
  proposal (e.g. Reverse/Odds First/Stack 41..150, Addition 11..40).
- PRISM Addition: most significant digits non-zero; a final carry is only the extra top
  digit of the answer, with no extra chain step. Multiplication-CoT follows the worked
  example (the prose's notation disagrees); no product is computed.
- PRISM Stack: exact match includes the zero padding after the terminator
  (`dm_stack_manipulation` masks it instead).
- SCAN-CoT: `after` is reordered in step 2 only; step 2 lists `clause : actions` groups.
  An instance of scale n is a command drawn uniformly among those with exactly n actions.
- Turing-Program addition: digits i.i.d. (leading zeros occur and are kept in the
  result); a final carry costs one `^+^` line; `=` replaces the first `|` of the paper's
  compact form and the answer follows the last `|` with no `.`.
- Randomized-PE tasks replicate the public code, including its degenerate small scales
  (binary_addition n = 1, binary_multiplication n <= 2, missing_duplicate_string n = 1,
  solve_equation n < 3), modular_arithmetic_simple turning even n into n − 1 tokens, and
  modular_arithmetic_brackets with multiplication (as in the paper's runs).
- Positional-limitations formats are those the paper states (Select, Parity Ex. 1,
  Addition Ex. 8), unaligned; its appendix with exact formats is not available.

## Shared vocabulary

{{vocabulary}}
"""


def family_of(task: Task) -> str:
    for heading, prefix in FAMILIES:
        if task.source.startswith(prefix):
            return heading
    return "Other tasks (plugins)"


def example_scale(task: Task) -> int:
    """A small scale to show: the first one at or above min(5, largest training scale)."""
    n = max(task.train_scales[0], min(5, task.train_scales[1]))
    while not task.has_scale(n):
        n += 1
    return n


def mean_token_length(task: Task, n: int, samples: int = 20) -> float:
    rng = random.Random(f"catalogue/length/{task.name}/{n}")
    return sum(task.sample(n, rng).token_length for _ in range(samples)) / samples


def options_of(task: Task) -> str:
    params = [p for p in inspect.signature(type(task)).parameters.values() if p.kind is p.KEYWORD_ONLY]
    return ", ".join(f"`{p.name}={p.default!r}`" for p in params) or "none"


def notes_of(task: Task) -> str:
    """The task module's docstring, minus its title paragraph."""
    doc = inspect.getdoc(sys.modules[type(task).__module__]) or ""
    return doc.split("\n\n", 1)[1].strip() if "\n\n" in doc else ""


def task_section(task: Task) -> list[str]:
    n = example_scale(task)
    ex = task.sample(n, random.Random(f"catalogue/{task.name}"))
    lo, hi = task.train_scales
    test_lo, test_hi = task.test_scales
    doc = inspect.getdoc(type(task)) or ""  # never None: a task class inherits Task's docstring
    lines = [
        f"### `{task.name}`",
        "",
        f"{doc.splitlines()[0]}",
        "",
        f"- **Source:** {task.source}",
        f"- **Format:** `{task.layout}`",
        f"- **Example** (scale {n}): `{vocab.to_text([*ex.prompt, '=', *ex.target])}`",
        f"- **Scales:** train {lo}..{hi}, test {test_lo}..{test_hi}; mean token length "
        f"{mean_token_length(task, hi):.1f} at n = {hi}, {mean_token_length(task, test_hi):.1f} at n = {test_hi}",
        f"- **Metric:** `{task.metric}`",
    ]
    if task.output_length(n) is not None:
        sizes = ", ".join(f"{k} → {task.output_length(k)}" for k in (1, 2, 3, 10, 41))
        lines.append(f"- **Output length** n → `output_length(n)`: {sizes}; mask of the example: `{_mask(ex.mask)}`")
    lines += [
        f"- **PE-solvability:** `{task.pe_solvability}`: {task.pe_solvability_basis}",
        f"- **Vocabulary:** {' '.join(f'`{t}`' for t in task.vocabulary)}",
        f"- **Options:** {options_of(task)}",
    ]
    notes = notes_of(task)
    if notes:
        lines += ["", "```text", notes, "```"]
    return [*lines, ""]


def _mask(mask: tuple[bool, ...] | None) -> str:
    return "all" if mask is None else "".join("1" if m else "0" for m in mask)


def summary_table(task_list: Iterable[Task]) -> list[str]:
    lines = ["| task | source | train | test | metric | PE-solvability |", "|---|---|---|---|---|---|"]
    for t in task_list:
        (a, b), (c, d) = t.train_scales, t.test_scales
        lines.append(f"| `{t.name}` | {t.source} | {a}..{b} | {c}..{d} | {t.metric} | {t.pe_solvability} |")
    return lines


def vocabulary_table() -> str:
    cells = [f"{i}:`{t}`" for i, t in enumerate(vocab.TOKENS)]
    return " ".join(cells) + f"  ({len(vocab.TOKENS)} of {vocab.VOCAB_SIZE} ids used; new tokens are only appended)"


def render() -> str:
    """The whole docs/tasks.md page."""
    task_list = [TASKS[name]() for name in TASKS]
    by_family: dict[str, list[Task]] = {}
    for task in task_list:
        by_family.setdefault(family_of(task), []).append(task)
    order = [h for h, _ in FAMILIES if h in by_family] + [h for h in by_family if h not in dict(FAMILIES)]
    out = [PREAMBLE.replace("{vocabulary}", vocabulary_table()).rstrip(), "", "## Summary", ""]
    out += summary_table(t for h in order for t in by_family[h])
    for heading in order:
        if out[-1]:
            out.append("")
        out += [f"## {heading}", ""]
        for task in by_family[heading]:
            out += task_section(task)
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
