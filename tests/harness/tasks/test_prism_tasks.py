"""PRISM paper tasks: worked examples (Table 3) and targets recomputed
by independent implementations on hypothesis-generated instances."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import harness.tasks as tasks

DIGITS = "0123456789"


def spaced(text: str) -> tuple[str, ...]:
    """'8 2 9 + 0 3' or '8349216' -> single-character tokens."""
    return tuple(text.replace(" ", ""))


def render(name: str, prompt: str) -> str:
    """Prompt text -> ``prompt=target`` text (single-character tasks)."""
    task = tasks.create(name)
    return "".join(spaced(prompt)) + "=" + "".join(task.solve(spaced(prompt)))


seeds = st.integers(0, 2**32 - 1)


# --- worked examples -------------------------------------------------------------------

PAPER_EXAMPLES = [
    ("copy", "8349216", "8349216."),
    ("reverse", "8349216", "6129438."),
    ("odds_first", "012345", "135024."),
    ("stack_manipulation", "0110422", "11020000."),
    ("stack_manipulation", "110222", "2000000."),
    ("addition", "829+03", "8008,2305,9009→859."),
    ("addition", "9571+48", "9413,5814,7008,1001→3481."),
    ("addition", "5+7", "5712→21."),
    ("dyn_str_cpy", "5839472,3", "39472."),
    ("multiplication_cot", "675x1259", "675x[1*(1+1)(2+0)(5+0)(9+0)+2*(2+1)(5+0)(9+0)+5*(5+1)(9+0)+9*(9+1)]."),
]


@pytest.mark.parametrize(("name", "prompt", "target"), PAPER_EXAMPLES)
def test_paper_examples(name, prompt, target):
    assert render(name, prompt) == f"{prompt}={target}"


# --- independent targets -----------------------------------------------------------------


def odds_then_evens(s: str) -> str:
    """1-based even positions (0-based odd) first, then the rest, each in order."""
    return "".join([c for i, c in enumerate(s, start=1) if i % 2 == 0] + [c for i, c in enumerate(s, start=1) if i % 2])


@settings(max_examples=60, deadline=None)
@given(seed=seeds, n=st.integers(1, 60))
def test_copy_reverse_odds_first(seed, n):
    for name, expected in [
        ("copy", lambda s: s),
        ("reverse", lambda s: s[::-1]),
        ("odds_first", odds_then_evens),
    ]:
        ex = tasks.create(name).sample(n, random.Random(seed))
        s = "".join(ex.prompt)
        assert len(s) == n and set(s) <= set(DIGITS)
        assert "".join(ex.target) == expected(s) + "."


def reference_addition(a: str, b: str) -> str:
    """Chain by closed form: step k sums the k-th digits; the carry out of step k is
    1 iff the k+1 lowest digits of a and b overflow; d_k is digit k of a+b."""
    x, y = int(a[::-1]), int(b[::-1])
    steps = []
    for k in range(max(len(a), len(b))):
        mod = 10 ** (k + 1)
        da = a[k] if k < len(a) else "0"
        db = b[k] if k < len(b) else "0"
        carry = int(x % mod + y % mod >= mod)
        steps.append(f"{da}{db}{carry}{(x + y) // 10**k % 10}")
    return ",".join(steps) + "→" + str(x + y)[::-1] + "."


@settings(max_examples=100, deadline=None)
@given(a=st.integers(0, 10**30), b=st.integers(0, 10**30))
def test_addition_on_generated_operands(a, b):
    prompt = str(a)[::-1] + "+" + str(b)[::-1]
    assert render("addition", prompt) == prompt + "=" + reference_addition(str(a)[::-1], str(b)[::-1])


@settings(max_examples=60, deadline=None)
@given(seed=seeds, n=st.integers(1, 40), equal=st.booleans())
def test_addition_sampler(seed, n, equal):
    task = tasks.create("addition", operand_lengths="equal" if equal else "longest")
    ex = task.sample(n, random.Random(seed))
    a, b = "".join(ex.prompt).split("+")
    assert max(len(a), len(b)) == n and min(len(a), len(b)) >= 1
    assert not equal or len(a) == len(b) == n
    for x in (a, b):  # LSD first: the last written digit is the most significant one
        assert len(x) == 1 or x[-1] != "0"
    assert "".join(ex.target) == reference_addition(a, b)


def reference_multiplication_cot(a: str, b: str) -> str:
    terms = ["".join([f"{d}*({d}+1)", *(f"({e}+0)" for e in b[i + 1 :])]) for i, d in enumerate(b)]
    return f"{a}x[{'+'.join(terms)}]."


@settings(max_examples=60, deadline=None)
@given(seed=seeds, n=st.integers(1, 20))
def test_multiplication_cot(seed, n):
    ex = tasks.create("multiplication_cot").sample(n, random.Random(seed))
    a, b = "".join(ex.prompt).split("x")
    assert max(len(a), len(b)) == n and all(len(x) == 1 or x[0] != "0" for x in (a, b))
    assert "".join(ex.target) == reference_multiplication_cot(a, b)


def test_multiplication_cot_equal_lengths():
    task = tasks.create("multiplication_cot", operand_lengths="equal")
    ex = task.sample(12, random.Random(0))
    assert ["".join(ex.prompt).split("x")[i].__len__() for i in (0, 1)] == [12, 12]


def reference_stack(program: str) -> str:
    """Split at the first action, run the actions on a list with its top at index 0."""
    k = next((i for i, t in enumerate(program) if t in "234"), len(program))
    stack = list(program[:k])[::-1]  # top first
    for action in program[k:]:
        if action == "2":
            stack = stack[1:]
        else:
            stack = [str(int(action) - 3), *stack]
    return ("".join(stack) + "2").ljust(len(program) + 1, "0")


@settings(max_examples=80, deadline=None)
@given(seed=seeds, n=st.integers(1, 60))
def test_stack_manipulation(seed, n):
    ex = tasks.create("stack_manipulation").sample(n, random.Random(seed))
    program = "".join(ex.prompt)
    assert len(program) == n
    if n == 1:
        assert program in ("0", "1")
    else:  # initial stack of >= 1 bits, then >= 1 actions
        assert program[0] in "01" and program[-1] in "234"
        k = next(i for i, t in enumerate(program) if t in "234")
        assert set(program[k:]) <= set("234")
    assert "".join(ex.target) == reference_stack(program) + "."


@settings(max_examples=80, deadline=None)
@given(seed=seeds, n=st.integers(1, 60))
def test_dyn_str_cpy(seed, n):
    ex = tasks.create("dyn_str_cpy").sample(n, random.Random(seed))
    s, d = "".join(ex.prompt).split(",")
    assert len(s) == n and len(d) == 1 and s.count(d) == 1
    assert "".join(ex.target) == s[s.find(d) :] + "."


def test_dyn_str_cpy_start_is_uniform_enough():
    """Every start position occurs (t ~ U{1..n})."""
    rng = random.Random(0)
    task = tasks.create("dyn_str_cpy")
    starts = {len(task.sample(5, rng).target) for _ in range(300)}
    assert starts == {2, 3, 4, 5, 6}  # suffix lengths 1..5, plus "."
