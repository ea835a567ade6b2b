"""Randomized-PE paper tasks (Delétang et al. 2023 suite): targets recomputed independently,
the source code's docstring examples (with its known traps corrected), output lengths,
masks and the degenerate small scales, as the public code of Delétang et al. 2023 defines them."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import harness.tasks as tasks

seeds = st.integers(0, 2**32 - 1)
scales = st.integers(1, 80)


def sample(name: str, n: int, seed: int) -> tuple[str, str, tuple[bool, ...]]:
    ex = tasks.create(name).sample(n, random.Random(seed))
    assert ex.mask is not None
    return "".join(ex.prompt), "".join(ex.target), ex.mask


def solve(name: str, prompt: str) -> str:
    return "".join(tasks.create(name).solve(tuple(prompt)))


# --- examples from the source's docstrings (traps fixed) and hand-worked ones ------------

EXAMPLES = [
    ("parity_check", "01101", "1"),
    ("even_pairs", "0101001", "1"),  # 2 x '10' and 3 x '01': 5 unequal pairs
    ("even_pairs", "0110", "0"),
    ("cycle_navigation", "20100", "3"),  # +1 -1 0 -1 -1 = -2 = class 3
    ("cycle_navigation", "2220", "2"),  # +1 +1 +1 -1 = 2
    ("modular_arithmetic_simple", "1+2*3", "2"),
    ("modular_arithmetic_simple", "1-1-1", "4"),
    ("modular_arithmetic_simple", "0*1+4*3-2", "0"),
    ("modular_arithmetic_brackets", "((1*2)--3)", "0"),
    ("modular_arithmetic_brackets", "(-4)", "1"),
    ("solve_equation", "(x+2)≡3", "1"),
    ("solve_equation", "(4-x)≡1", "3"),
    ("reverse_string", "011", "110"),
    ("duplicate_string", "011", "011011"),
    ("dm_odds_first", "01101", "10011"),  # s[1::2] + s[0::2]; the docstring's order is the trap
    ("dm_odds_first", "0110", "1001"),
    ("missing_duplicate_string", "01100210", "1"),
    ("missing_duplicate_string", "1011213", "0"),
    ("binary_addition", "001+01101", "0101120000"),  # 4 + 22 = 26; output n+1 = 10 tokens
    ("binary_addition", "1001+000001", "100101200000"),  # 9 + 32 = 41
    ("binary_multiplication", "001*01101", "000110120"),  # 4 * 22 = 88; output n = 9 tokens
    ("binary_multiplication", "1001*000001", "00000100120"),  # 9 * 32 = 288
    ("compute_sqrt", "100101", "110"),  # isqrt(37) = 6 (the docstring's 101 is the trap)
    ("compute_sqrt", "111", "10"),
    ("bucket_sort", "41310", "01134"),
    ("dm_stack_manipulation", "0110422", "11020000"),
    ("dm_stack_manipulation", "110222", "2000000"),
]


@pytest.mark.parametrize(("name", "prompt", "target"), EXAMPLES)
def test_examples(name, prompt, target):
    assert solve(name, prompt) == target


# --- independent targets on sampled instances --------------------------------------------


def bits_ok(s: str, n: int) -> bool:
    return len(s) == n and set(s) <= {"0", "1"}


@settings(max_examples=60, deadline=None)
@given(seed=seeds, n=scales)
def test_bit_string_tasks(seed, n):
    p, t, mask = sample("parity_check", n, seed)
    assert bits_ok(p, n) and t == str(sum(map(int, p)) % 2) and mask == (True,)
    p, t, _ = sample("even_pairs", n, seed)
    assert bits_ok(p, n) and t == str(int(p[0] != p[-1]))  # an odd number of changes iff the ends differ
    p, t, mask = sample("reverse_string", n, seed)
    assert bits_ok(p, n) and t == p[::-1] and mask == (True,) * n
    p, t, mask = sample("duplicate_string", n, seed)
    assert bits_ok(p, n) and t == p + p and mask == (True,) * (2 * n)
    p, t, _ = sample("dm_odds_first", n, seed)
    odd = [c for i, c in enumerate(p) if i % 2 == 1]
    even = [c for i, c in enumerate(p) if i % 2 == 0]
    assert bits_ok(p, n) and t == "".join(odd + even)


@settings(max_examples=60, deadline=None)
@given(seed=seeds, n=scales)
def test_cycle_navigation_and_bucket_sort(seed, n):
    p, t, _ = sample("cycle_navigation", n, seed)
    position = 0
    for move in p:
        position = (position + {"0": -1, "1": 0, "2": 1}[move]) % 5
    assert len(p) == n and t == str(position)
    p, t, _ = sample("bucket_sort", n, seed)
    counts = Counter(p)
    assert len(p) == n and set(p) <= set("01234")
    assert t == "".join(d * counts[d] for d in "01234")


@settings(max_examples=80, deadline=None)
@given(seed=seeds, n=scales)
def test_modular_arithmetic_simple(seed, n):
    p, t, _ = sample("modular_arithmetic_simple", n, seed)
    m = n if n % 2 else n - 1
    assert len(p) == m
    assert all(c in "01234" for c in p[0::2]) and all(c in "+-*" for c in p[1::2])
    assert t == str(eval(p) % 5)  # Python's precedence and unary minus are the task's
    assert tasks.create("modular_arithmetic_simple").sample(n, random.Random(seed)).scale_hint == m


@settings(max_examples=80, deadline=None)
@given(seed=seeds, n=scales)
def test_modular_arithmetic_brackets(seed, n):
    p, t, _ = sample("modular_arithmetic_brackets", n, seed)
    assert len(p) == n and set(p) <= set("01234+-*()")
    assert t == str(eval(p) % 5)


@settings(max_examples=80, deadline=None)
@given(seed=seeds, n=scales)
def test_solve_equation(seed, n):
    p, t, _ = sample("solve_equation", n, seed)
    assert len(p) == n
    if n < 3:
        assert p == "0" * n and t == "0"
        return
    lhs, rhs = p.split("≡")
    assert lhs.count("x") == 1 and "*" not in lhs and len(rhs) == 1
    solutions = [x for x in range(5) if eval(lhs.replace("x", f"({x})")) % 5 == int(rhs)]
    assert solutions == [int(t)]


@settings(max_examples=80, deadline=None)
@given(seed=seeds, n=scales)
def test_missing_duplicate_string(seed, n):
    p, t, _ = sample("missing_duplicate_string", n, seed)
    assert len(p) == n
    if n == 1:
        assert (p, t) == ("1", "1")
        return
    body = p[:-1] if n % 2 else p
    assert p.count("2") == 1 and (p[-1] == "3") == (n % 2 == 1) and "3" not in body
    fits = [b for b in "01" if body.replace("2", b)[: n // 2] == body.replace("2", b)[n // 2 :]]
    assert fits == [t]


def decode_le(bits: str) -> int:
    return int(bits[::-1], 2)


@settings(max_examples=80, deadline=None)
@given(seed=seeds, n=scales)
def test_binary_addition(seed, n):
    p, t, mask = sample("binary_addition", n, seed)
    assert len(p) == n and len(t) == n + 1
    if n <= 2:
        assert set(p) <= {"0", "1"} and decode_le(p) <= 2**n - 2
        total = decode_le(p)
    else:
        a, b = p.split("+")
        assert a and b and decode_le(a) >= 1 and decode_le(b) >= 1
        total = decode_le(a) + decode_le(b)
    width = max(total.bit_length(), 1)
    assert t[:width] == bin(total)[2:][::-1] and t[width] == "2" and set(t[width + 1 :]) <= {"0"}
    assert mask == tuple(i <= width for i in range(n + 1))


@settings(max_examples=80, deadline=None)
@given(seed=seeds, n=scales)
def test_binary_multiplication(seed, n):
    p, t, mask = sample("binary_multiplication", n, seed)
    assert len(p) == n and len(t) == n
    if n <= 2:
        assert "*" not in p and t == "0" * (n - 1) + "2" and mask == (True,) * n
        return
    a, b = p.split("*")
    product = decode_le(a) * decode_le(b)
    width = product.bit_length()
    assert t[:width] == bin(product)[2:][::-1] and t[width] == "2" and set(t[width + 1 :]) <= {"0"}
    assert mask == tuple(i <= width for i in range(n))


def test_degenerate_small_scales():
    assert {sample("binary_addition", 1, s)[:2] for s in range(20)} == {("0", "02")}
    assert {sample("missing_duplicate_string", 1, s)[:2] for s in range(5)} == {("1", "1")}
    assert {sample("binary_addition", 2, s)[0] for s in range(200)} == {"00", "10", "01"}


@settings(max_examples=80, deadline=None)
@given(seed=seeds, n=scales)
def test_compute_sqrt(seed, n):
    p, t, mask = sample("compute_sqrt", n, seed)
    x, r = int(p, 2), int(t, 2)
    assert len(p) == n and 1 <= x and len(t) == math.ceil(n / 2) and mask == (True,) * len(t)
    assert r * r <= x < (r + 1) * (r + 1)


@settings(max_examples=80, deadline=None)
@given(seed=seeds, n=scales)
def test_dm_stack_manipulation_matches_prism_without_dot(seed, n):
    p, t, mask = sample("dm_stack_manipulation", n, seed)
    prism = tasks.create("stack_manipulation").sample(n, random.Random(seed))
    assert "".join(prism.prompt) == p and "".join(prism.target) == t + "."
    assert len(t) == n + 1 and mask == tuple(i <= t.index("2") for i in range(n + 1))


def test_output_lengths():
    expected = {
        "parity_check": lambda n: 1, "even_pairs": lambda n: 1, "cycle_navigation": lambda n: 1,
        "modular_arithmetic_simple": lambda n: 1, "modular_arithmetic_brackets": lambda n: 1,
        "solve_equation": lambda n: 1, "missing_duplicate_string": lambda n: 1,
        "reverse_string": lambda n: n, "dm_odds_first": lambda n: n, "bucket_sort": lambda n: n,
        "binary_multiplication": lambda n: n, "duplicate_string": lambda n: 2 * n,
        "dm_stack_manipulation": lambda n: n + 1, "binary_addition": lambda n: n + 1,
        "compute_sqrt": lambda n: (n + 1) // 2,
    }  # fmt: skip
    for name, f in expected.items():
        task = tasks.create(name)
        for n in (1, 2, 3, 40, 41, 500):
            assert task.output_length(n) == f(n), (name, n)
