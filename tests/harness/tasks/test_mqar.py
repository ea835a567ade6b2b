"""mqar (Zoology's multi-query associative recall), against a reference written here: each
answer found by scanning the key-value pairs for its query, one pair at a time."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import harness.tasks as tasks
from harness.tasks import vocab

seeds = st.integers(0, 2**32 - 1)

# The key alphabet written out independently of the task module: ids 14..57 of the
# vocabulary are the symbols, SCAN words, Turing-Program letters and ^ | ≡; ":" separates.
KEY_ALPHABET = {
    *"+-*x,→()[]_",
    "walk", "look", "run", "jump", "turn", "left", "right", "opposite", "around", "twice", "thrice", "and",
    "after", "I_WALK", "I_LOOK", "I_RUN", "I_JUMP", "I_TURN_LEFT", "I_TURN_RIGHT",
    *"abcdefghij", "^", "|", "≡",
}  # fmt: skip


def reference_answers(prompt: tuple[str, ...]) -> list[str]:
    """For each query after ':', the token after the pair whose key it is (the first
    ':' ends the pairs: no key or value is ':')."""
    n = prompt.index(":") // 2
    answers = []
    for query in prompt[2 * n + 1 :]:
        found = [prompt[2 * k + 1] for k in range(n) if prompt[2 * k] == query]
        assert len(found) == 1, f"query {query!r} is bound {len(found)} times"
        answers.append(found[0])
    return answers


@pytest.mark.parametrize(
    ("prompt", "target"),
    [
        ("a 1 b 2 : b a", "2 1"),
        ("walk 3 ( 7 f 3 : f walk (", "3 3 7"),  # the module docstring's example
        ("≡ 0 : ≡", "0"),
    ],
)
def test_examples(prompt, target):
    assert tasks.create("mqar").solve(tuple(prompt.split())) == target.split()


@settings(max_examples=100, deadline=None)
@given(seed=seeds, n=st.integers(1, 43))
def test_against_the_reference(seed, n):
    ex = tasks.create("mqar").sample(n, random.Random(seed))
    pairs, queries = ex.prompt[: 2 * n], ex.prompt[2 * n + 1 :]
    keys, values = pairs[0::2], pairs[1::2]
    assert ex.prompt[2 * n] == ":"
    assert len(set(keys)) == n and set(keys) <= KEY_ALPHABET, "n distinct keys"
    assert set(values) <= set("0123456789")
    assert sorted(queries) == sorted(keys), "every key queried exactly once"
    assert list(ex.target) == reference_answers(ex.prompt)


@pytest.mark.parametrize("n", [1, 2, 10, 11, 40, 43])
def test_lengths_scale_with_the_pairs(n):
    """Prompt 3n + 1 tokens (pairs, ':', queries), target n: 4n + 3 with '=' and EOS."""
    rng = random.Random(n)
    for _ in range(5):
        ex = tasks.create("mqar").sample(n, rng)
        assert (len(ex.prompt), len(ex.target), ex.token_length, ex.scale) == (3 * n + 1, n, 4 * n + 3, n)


def test_scales_past_the_key_alphabet_are_errors():
    task = tasks.create("mqar")
    assert task.has_scale(43) and not task.has_scale(44) and len(KEY_ALPHABET) == 43
    with pytest.raises(ValueError, match="mqar"):
        task.sample(44, random.Random(0))
    assert task.test_scales[1] <= 43


def test_a_seed_fixes_the_instance():
    """The same seed draws the same instance (pinned, so a change to the draws is seen:
    a run's training data and evaluation sets are a function of its seed)."""
    first, second = (tasks.create("mqar").sample(4, random.Random(2024)) for _ in range(2))
    assert first == second
    assert vocab.to_text([*first.prompt, "=", *first.target]) == "a 2 walk 7 h 7 around 7 : walk h around a = 7 7 7 2"


def test_keys_values_and_query_order_are_spread():
    """Every key of the alphabet is drawn, every digit is a value, and the first query is
    any of the keys (uniform order: the first key first about 1/n of the time)."""
    rng, task, n = random.Random(0), tasks.create("mqar"), 5
    keys, values, first_is_first = Counter(), Counter(), 0
    for _ in range(2000):
        p = task.sample(n, rng).prompt
        keys.update(p[0 : 2 * n : 2])
        values.update(p[1 : 2 * n : 2])
        first_is_first += p[2 * n + 1] == p[0]
    assert set(keys) == KEY_ALPHABET and set(values) == set("0123456789")
    assert 300 <= first_is_first <= 500  # 2000 / 5 = 400
