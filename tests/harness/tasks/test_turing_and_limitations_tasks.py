"""Turing-Programs addition (Hou et al., Fig. 2, footnote 1) and the positional-limitations
paper's Select / Parity-CoT / Addition tasks (Chen, Liang & Lin, §VI-VII experiments)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import harness.tasks as tasks

seeds = st.integers(0, 2**32 - 1)


def render(name: str, prompt: str) -> str:
    return prompt + "=" + "".join(tasks.create(name).solve(tuple(prompt)))


@pytest.mark.parametrize(
    ("prompt", "target"),
    [  # Hou et al. Fig. 2; the first is the paper's own string, "$"/"|" -> our prompt "="
        ("4324+139", "432e+13j(1,3)|43c+1d(0,63)|4d+b(0,463)|e+^(0,4463)|4463"),
        ("987+45", "98h+4f(1,2)|9i+e(1,32)|j+^(1,032)|^+^(0,1032)|1032"),
        ("45+987", "4f+98h(1,2)|e+9i(1,32)|^+j(1,032)|^+^(0,1032)|1032"),
    ],
)
def test_turing_addition_examples(prompt, target):
    assert render("addition_turing", prompt) == f"{prompt}={target}"


def reference_turing_lines(a: str, b: str) -> list[str]:
    """Line k (k = 1..) by index arithmetic: the k-th digit from the right is marked and
    the digits right of it are gone; the result holds the low k digits of a + b."""
    total, width = int(a) + int(b), max(len(a), len(b))
    steps = width + (len(str(total)) > width)

    def tape(x: str, k: int) -> str:
        return x[: len(x) - k] + "abcdefghij"[int(x[len(x) - k])] if k <= len(x) else "^"

    lines = []
    for k in range(1, steps + 1):
        carry = int(int(a[-k:] if k <= len(a) else a) + int(b[-k:] if k <= len(b) else b) >= 10**k)
        lines.append(f"{tape(a, k)}+{tape(b, k)}({carry},{str(total % 10**k).zfill(k)})")
    return [*lines, str(total).zfill(width)]


@settings(max_examples=80, deadline=None)
@given(seed=seeds, n=st.integers(1, 60), equal=st.booleans())
def test_turing_addition(seed, n, equal):
    task = tasks.create("addition_turing", operand_lengths="equal" if equal else "longest")
    ex = task.sample(n, random.Random(seed))
    a, b = "".join(ex.prompt).split("+")
    assert max(len(a), len(b)) == n and (not equal or len(a) == len(b))
    assert "".join(ex.target) == "|".join(reference_turing_lines(a, b))


@pytest.mark.parametrize(
    ("name", "prompt", "target"),
    [
        ("select_first", "31415", "3"),
        ("select_middle", "31415", "4"),
        ("select_last", "31415", "5"),
        ("select_middle", "3141", "4"),  # x_{floor(4/2)+1} = x_3
        ("lp_parity", "1011", "1101"),
        ("lp_addition", "75+86", "521"),  # 57 + 68 = 125, LSD first
        ("lp_addition", "1+9", "01"),
    ],
)
def test_limitations_examples(name, prompt, target):
    assert render(name, prompt) == f"{prompt}={target}"


@settings(max_examples=60, deadline=None)
@given(seed=seeds, n=st.integers(1, 30))
def test_limitations_tasks(seed, n):
    s = "".join(tasks.create("select_first").sample(n, random.Random(seed)).prompt)
    assert len(s) == n
    for name, expected in [("select_first", s[0]), ("select_middle", s[(n + 2) // 2 - 1]), ("select_last", s[-1])]:
        assert "".join(tasks.create(name).solve(tuple(s))) == expected
    ex = tasks.create("lp_parity").sample(n, random.Random(seed))
    x = "".join(ex.prompt)
    assert len(x) == n and "".join(ex.target) == "".join(str(x[: k + 1].count("1") % 2) for k in range(n))
    ex = tasks.create("lp_addition").sample(n, random.Random(seed))
    left, right = "".join(ex.prompt).split("+")
    assert len(left) == len(right) == n
    total = int(left[::-1]) + int(right[::-1])
    assert "".join(ex.target) == f"{total:0{n + 1}d}"[::-1]
