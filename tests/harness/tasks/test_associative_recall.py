"""associative_recall (H3's associative recall, one query, the key echoed before its value),
against a reference written here: the pairs scanned one at a time for the queried key."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import harness.tasks as tasks
from harness.tasks import vocab

seeds = st.integers(0, 2**32 - 1)

# The key alphabet written out independently of the task modules (mqar's, which this task
# shares): ids 14..57 of the vocabulary but ':', which separates the query.
KEY_ALPHABET = {
    *"+-*x,→()[]_",
    "walk", "look", "run", "jump", "turn", "left", "right", "opposite", "around", "twice", "thrice", "and",
    "after", "I_WALK", "I_LOOK", "I_RUN", "I_JUMP", "I_TURN_LEFT", "I_TURN_RIGHT",
    *"abcdefghij", "^", "|", "≡",
}  # fmt: skip


def reference_target(prompt: tuple[str, ...]) -> list[str]:
    """The key after ':' (the prompt's last token), then the token after the one pair whose
    key it is."""
    assert prompt[-2] == ":" and len(prompt) % 2 == 0
    query = prompt[-1]
    found = [prompt[k + 1] for k in range(0, len(prompt) - 2, 2) if prompt[k] == query]
    assert len(found) == 1, f"query {query!r} is bound {len(found)} times"
    return [query, found[0]]


@pytest.mark.parametrize(
    ("prompt", "target"),
    [
        ("walk 3 ( 7 f 3 : (", "( 7"),  # the module docstring's example
        ("a 1 b 2 : b", "b 2"),
        ("≡ 0 : ≡", "≡ 0"),
    ],
)
def test_examples(prompt, target):
    assert tasks.create("associative_recall").solve(tuple(prompt.split())) == target.split()


@settings(max_examples=100, deadline=None)
@given(seed=seeds, n=st.integers(1, 43))
def test_against_the_reference(seed, n):
    ex = tasks.create("associative_recall").sample(n, random.Random(seed))
    keys, values = ex.prompt[0 : 2 * n : 2], ex.prompt[1 : 2 * n : 2]
    assert len(set(keys)) == n and set(keys) <= KEY_ALPHABET, "n distinct keys"
    assert set(values) <= set("0123456789")
    assert ex.prompt[-1] in keys, "the query is one of the keys"
    assert list(ex.target) == reference_target(ex.prompt)


@pytest.mark.parametrize("n", [1, 2, 10, 11, 40, 43])
def test_lengths_scale_with_the_pairs(n):
    """Prompt 2n + 2 tokens (pairs, ':', the query), target 2: 2n + 6 with '=' and EOS."""
    rng = random.Random(n)
    for _ in range(5):
        ex = tasks.create("associative_recall").sample(n, rng)
        assert (len(ex.prompt), len(ex.target), ex.token_length, ex.scale) == (2 * n + 2, 2, 2 * n + 6, n)


def test_scales_past_the_key_alphabet_are_errors():
    task = tasks.create("associative_recall")
    assert task.has_scale(43) and not task.has_scale(44)
    with pytest.raises(ValueError, match="associative_recall"):
        task.sample(44, random.Random(0))
    assert task.test_scales[1] <= 43


def test_a_seed_fixes_the_instance():
    """The same seed draws the same instance (pinned, so a change to the draws is seen)."""
    first, second = (tasks.create("associative_recall").sample(4, random.Random(2024)) for _ in range(2))
    assert first == second
    assert vocab.to_text([*first.prompt, "=", *first.target]) == "a 2 walk 7 h 7 around 7 : walk = walk 7"


def test_the_queried_key_is_uniform_among_the_pairs():
    """Each pair is the queried one about 1/n of the time, and every key and digit is drawn."""
    rng, task, n = random.Random(0), tasks.create("associative_recall"), 5
    where, keys, values = Counter(), Counter(), Counter()
    for _ in range(2000):
        p = task.sample(n, rng).prompt
        where[p[0 : 2 * n : 2].index(p[-1])] += 1
        keys.update(p[0 : 2 * n : 2])
        values.update(p[1 : 2 * n : 2])
    assert set(where) == set(range(n)) and all(300 <= c <= 500 for c in where.values())  # 2000 / 5 = 400
    assert set(keys) == KEY_ALPHABET and set(values) == set("0123456789")
