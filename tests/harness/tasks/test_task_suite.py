"""Properties every registered task must have (parametrised over the registry)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import harness.tasks as tasks
from harness.tasks import vocab
from harness.tasks.base import PE_SOLVABILITY, Example
from pezoo.base import UnknownNameError

ALL = tasks.available()
TASK_DIR = Path(tasks.__file__).parent

# Every task the issues ask for (PRISM, randomized-PE, Turing Programs, positional limitations;
# issue 64's retrieval tasks).
REQUIRED = {
    "addition", "copy", "reverse", "odds_first", "stack_manipulation", "scan_cot", "dyn_str_cpy",
    "multiplication_cot",
    "even_pairs", "modular_arithmetic_simple", "parity_check", "cycle_navigation", "dm_stack_manipulation",
    "reverse_string", "modular_arithmetic_brackets", "solve_equation", "duplicate_string",
    "missing_duplicate_string", "dm_odds_first", "binary_addition", "binary_multiplication", "compute_sqrt",
    "bucket_sort",
    "addition_turing", "select_first", "select_middle", "select_last",
    "mqar", "flip_flop", "associative_recall",
}  # fmt: skip

RUOSS_TASKS = {
    "even_pairs", "modular_arithmetic_simple", "parity_check", "cycle_navigation", "dm_stack_manipulation",
    "reverse_string", "modular_arithmetic_brackets", "solve_equation", "duplicate_string",
    "missing_duplicate_string", "dm_odds_first", "binary_addition", "binary_multiplication", "compute_sqrt",
    "bucket_sort",
}  # fmt: skip


def some_scale(task: tasks.Task, rng: random.Random) -> int:
    """A scale the task can produce, from its training and test ranges (test capped for speed)."""
    lo, hi = task.train_scales[0], min(task.test_scales[1], task.test_scales[0] + 20)
    return rng.choice([n for n in range(lo, hi + 1) if task.has_scale(n)])


def test_every_required_task_is_registered():
    assert REQUIRED <= set(ALL)
    assert len(RUOSS_TASKS) == 15


@pytest.mark.parametrize("name", ALL)
def test_declarations(name):
    task = tasks.create(name)
    assert task.name == name
    assert (TASK_DIR / f"{name}.py").exists(), "one task per file, named after its registry key"
    assert task.source and task.layout and task.pe_solvability_basis
    assert task.metric in ("exact_match", "token_accuracy")
    assert task.pe_solvability in PE_SOLVABILITY
    (a, b), (c, d) = task.train_scales, task.test_scales
    assert task.min_scale <= a <= b < c <= d
    assert set(task.vocabulary) <= set(vocab.TOKENS)
    assert not {vocab.PAD, vocab.EOS, "=", "<bos>"} & set(task.vocabulary), "the harness's layout tokens"


def test_randomized_pe_protocol_defaults():
    for name in RUOSS_TASKS:
        task = tasks.create(name)
        assert (task.train_scales, task.test_scales, task.metric) == ((1, 40), (41, 500), "token_accuracy")


@pytest.mark.parametrize("name", ALL)
def test_sample_is_consistent(name):
    """Target = solve(prompt), tokens within the declared vocabulary, ids round-trip, mask fits."""
    task = tasks.create(name)
    rng = random.Random(f"consistency/{name}")
    for _ in range(20):
        n = some_scale(task, rng)
        ex = task.sample(n, rng)
        assert ex.scale == n and ex.scale_hint is not None
        assert list(ex.target) == task.solve(ex.prompt)
        assert set(ex.prompt) | set(ex.target) <= set(task.vocabulary)
        ids, start = ex.token_ids()
        assert vocab.decode(ids) == [*ex.prompt, "=", *ex.target, vocab.EOS]
        assert ids[start - 1] == vocab.SEP_ID and len(ids) == ex.token_length
        assert "=" not in ex.prompt  # the separator is unambiguous
        if ex.mask is not None:
            assert len(ex.mask) == len(ex.target) and ex.mask[0]
        out_len = task.output_length(n)
        if name in RUOSS_TASKS:
            assert out_len == len(ex.target) and ex.mask is not None
        else:
            assert out_len is None


@pytest.mark.parametrize("name", ALL)
def test_text_round_trip(name):
    task = tasks.create(name)
    ex = task.sample(task.train_scales[1], random.Random(0))
    text = vocab.to_text([*ex.prompt, "=", *ex.target])
    tokens = list(text) if all(len(t) == 1 for t in (*ex.prompt, *ex.target)) else text.split(" ")
    assert tokens == [*ex.prompt, "=", *ex.target]


@pytest.mark.parametrize("name", ALL)
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_determinism(name, seed):
    task = tasks.create(name)
    n = some_scale(task, random.Random(seed))
    draw = [task.sample(n, random.Random(seed)) for _ in range(2)]
    assert draw[0] == draw[1]


@pytest.mark.parametrize("name", ALL)
def test_different_seeds_differ(name):
    task = tasks.create(name)
    n = task.test_scales[0]
    batches = [[task.sample(n, rng) for _ in range(8)] for rng in (random.Random(1), random.Random(2))]
    assert batches[0] != batches[1]


@pytest.mark.parametrize("name", ALL)
def test_sampling_uses_only_the_given_rng(name):
    """Reseeding the global ``random`` module changes nothing."""
    task = tasks.create(name)
    n = task.train_scales[1]
    random.seed(1)
    a = task.sample(n, random.Random(7))
    random.seed(2)
    b = task.sample(n, random.Random(7))
    assert a == b


@pytest.mark.parametrize("name", ALL)
def test_impossible_scales_are_errors(name):
    task = tasks.create(name)
    for n in (0, -1):
        assert not task.has_scale(n)
        with pytest.raises(ValueError, match=name):
            task.sample(n, random.Random(0))


@pytest.mark.parametrize("name", ALL)
def test_smoke_largest_test_scale(name):
    task = tasks.create(name)
    n = task.test_scales[1]
    ex = task.sample(n, random.Random(0))
    assert isinstance(ex, Example) and ex.scale == n
    assert len(vocab.encode((*ex.prompt, *ex.target))) == ex.token_length - 2


def test_unknown_task_lists_the_valid_ones():
    with pytest.raises(UnknownNameError, match="odds_first"):
        tasks.create("odd_first")


def test_unknown_option_names_the_valid_ones():
    with pytest.raises(ValueError, match="operand_lengths"):
        tasks.create("addition", operand_length="equal")
    with pytest.raises(ValueError, match="none"):
        tasks.create("copy", anything=1)
    with pytest.raises(ValueError, match="longest"):
        tasks.create("addition", operand_lengths="shortest")


def test_example_defaults_keep_the_old_constructor():
    ex = Example(("1", "2"), ("2", "1", "."), 2)
    assert ex.mask is None and ex.scale_hint is None and ex.token_length == 7


def test_vocabulary_is_append_only():
    """Ids of the tokens the first tasks were trained with never move."""
    head = ("<pad>", "<eos>", "=", ".", *"0123456789", "+", "-", "*", "x", ",", "→", "(", ")", "[", "]", ":", "_")
    assert vocab.TOKENS[: len(head)] == head
    assert vocab.TOKENS[45:58] == (*"abcdefghij", "^", "|", "≡") and len(vocab.TOKENS) <= vocab.VOCAB_SIZE
    assert vocab.TOKENS[58:61] == ("<bos>", "w", "r")
