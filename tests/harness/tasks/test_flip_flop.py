"""flip_flop (Liu et al.'s flip-flop language), against a reference written here: a one-bit
register run over the instructions, which also checks every read in the prompt."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import harness.tasks as tasks
from harness.tasks import vocab

seeds = st.integers(0, 2**32 - 1)


def run_register(prompt: tuple[str, ...]) -> str:
    """The register's bit at the final read; asserts the string is a flip-flop string
    (starts with a write, pairs of instruction and bit, every earlier read returns the register)."""
    assert prompt[0] == "w" and prompt[-1] == "r" and len(prompt) % 2 == 1
    register = None
    for op, bit in zip(prompt[0:-1:2], prompt[1::2], strict=True):
        assert op in ("w", "i", "r") and bit in ("0", "1")
        if op == "w":
            register = bit
        elif op == "r":
            assert bit == register, "a read returns the last written bit"
    assert register is not None
    return register


@pytest.mark.parametrize(
    ("prompt", "target"),
    [
        ("w1i0r1w0i1r", "0"),  # the module docstring's example
        ("w1r", "1"),
        ("w0i1i1i1r", "0"),  # ignores do not write
        ("w0r0w1r1r", "1"),
    ],
)
def test_examples(prompt, target):
    assert tasks.create("flip_flop").solve(tuple(prompt)) == [target]


@settings(max_examples=100, deadline=None)
@given(seed=seeds, n=st.integers(1, 60), p_ignore=st.sampled_from([0.8, 0.98, 0.1, 0.0, 1.0]))
def test_against_the_reference(seed, n, p_ignore):
    ex = tasks.create("flip_flop", p_ignore=p_ignore).sample(n, random.Random(seed))
    assert list(ex.target) == [run_register(ex.prompt)]
    if p_ignore == 1.0:  # nothing but ignores between the first write and the final read
        assert set(ex.prompt[2:-1:2]) <= {"i"}


@pytest.mark.parametrize("n", [1, 2, 10, 11, 40, 255])
def test_lengths_scale_with_the_pairs(n):
    """n instruction-bit pairs, then the final read (no bit): prompt 2n + 1 tokens, target
    1, 2n + 4 with '=' and EOS (n = 255: the paper's 512-token strings)."""
    rng = random.Random(n)
    for _ in range(5):
        ex = tasks.create("flip_flop").sample(n, rng)
        assert (len(ex.prompt), len(ex.target), ex.token_length, ex.scale) == (2 * n + 1, 1, 2 * n + 4, n)
        assert ex.prompt.count("r") + ex.prompt.count("w") + ex.prompt.count("i") == n + 1


def test_the_shortest_instance_is_a_write_then_a_read():
    task = tasks.create("flip_flop")
    assert task.has_scale(1) and not task.has_scale(0)
    rng = random.Random(0)
    assert {"".join(task.sample(1, rng).prompt) for _ in range(50)} == {"w0r", "w1r"}


def test_a_seed_fixes_the_instance():
    """The same seed draws the same instance (pinned, so a change to the draws is seen)."""
    draws = [tasks.create("flip_flop").sample(8, random.Random(2024)) for _ in range(2)]
    assert draws[0] == draws[1]
    assert vocab.to_text([*draws[0].prompt, "=", *draws[0].target]) == "w0i1i1i1i0i1i1i0r=0"


@pytest.mark.parametrize("p_ignore", [0.8, 0.98, 0.1])
def test_instruction_frequencies_are_the_papers(p_ignore):
    """Between the first write and the final read, p(i) = p_ignore and p(w) = p(r) =
    (1 − p_ignore)/2 (FFL(0.8) the default; the paper's sparse 0.98 and dense 0.1)."""
    rng, task = random.Random(0), tasks.create("flip_flop", p_ignore=p_ignore)
    ops: Counter[str] = Counter()
    for _ in range(400):
        ops.update(task.sample(40, rng).prompt[2:-1:2])
    total = sum(ops.values())  # 400 x 39 = 15 600 draws: a standard error under 0.004
    for op, p in (("i", p_ignore), ("w", (1 - p_ignore) / 2), ("r", (1 - p_ignore) / 2)):
        assert abs(ops[op] / total - p) < 0.02, (op, ops[op] / total, p)
    assert tasks.create("flip_flop").p_ignore == 0.8


def test_write_and_ignore_bits_are_uniform():
    rng, task = random.Random(1), tasks.create("flip_flop", p_ignore=0.5)
    bits: Counter[tuple[str, str]] = Counter()
    for _ in range(400):
        p = task.sample(30, rng).prompt
        bits.update(zip(p[0:-1:2], p[1::2], strict=True))
    for op in ("w", "i"):
        share = bits[(op, "1")] / (bits[(op, "0")] + bits[(op, "1")])
        assert abs(share - 0.5) < 0.03, (op, share)


@pytest.mark.parametrize("p_ignore", [-0.1, 1.5])
def test_p_ignore_must_be_a_probability(p_ignore):
    with pytest.raises(ValueError, match="p_ignore"):
        tasks.create("flip_flop", p_ignore=p_ignore)
