"""benchmarks/recall_check.py: its prompts answer what they ask, its guessing floor is what
guessing scores, and a short run trains (docs/protocol-study.md, "mqar")."""

from __future__ import annotations

import random

import pytest
from benchmark_scripts import load


@pytest.fixture(scope="module")
def check():
    return load("recall_check")


def test_each_answer_is_the_value_bound_to_the_asked_key(check):
    x, y = check.prompts(random.Random(3), 200, 10)
    for row, answer in zip(x.tolist(), y.tolist(), strict=True):
        body = [t for t in row if t != check.PAD]
        assert body[-3] == check.COLON and body[-1] == check.ASK
        pairs, asked = body[:-3], body[-2]
        keys, values = pairs[0::2], pairs[1::2]
        assert len(set(keys)) == len(keys) and asked in keys
        assert answer == values[keys.index(asked)]


def test_the_guessing_floor_is_what_guessing_among_the_prompts_values_scores(check):
    rng = random.Random(0)
    x, y = check.prompts(rng, 20000, 10)
    hits = 0
    for row, answer in zip(x.tolist(), y.tolist(), strict=True):
        body = [t for t in row if t != check.PAD][:-3]
        hits += rng.choice(body[1::2]) == answer
    assert hits / 20000 == pytest.approx(check.guess_rate(10), abs=0.015)


def test_a_short_run_trains_and_reports_every_interval(check):
    rows = list(check.run(1, 20, 10, d_model=32, heads=2, batch=16))
    assert [step for step, _, _ in rows] == [10, 20]
    assert all(0.0 <= accuracy <= 1.0 for _, _, accuracy in rows)
