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


def test_the_other_layouts_read_the_answer_at_the_query_or_its_echo(check):
    """``at``: the prompt ends with the asked key; ``echo``: ends with ``? key``, and the
    answers are (key, value) rows; the same draws as ``after`` (one seed, one stream)."""
    after_x, after_y = check.prompts(random.Random(5), 50, 10, "after")
    at_x, at_y = check.prompts(random.Random(5), 50, 10, "at")
    echo_x, echo_y = check.prompts(random.Random(5), 50, 10, "echo")
    assert at_y.tolist() == after_y.tolist() == echo_y[:, 1].tolist()
    assert (at_x[:, -1] == after_x[:, -2]).all() and (echo_x[:, -1] == after_x[:, -2]).all()
    assert (echo_x[:, -2] == check.ASK).all() and (echo_y[:, 0] == echo_x[:, -1]).all()
    assert at_x.shape[1] == after_x.shape[1] - 1 == echo_x.shape[1] - 2


def test_an_unknown_layout_is_refused(check):
    with pytest.raises(ValueError, match="layout"):
        next(check.run(1, 1, 1, layout="before"))


def test_the_guessing_floor_is_what_guessing_among_the_prompts_values_scores(check):
    rng = random.Random(0)
    x, y = check.prompts(rng, 20000, 10)
    hits = 0
    for row, answer in zip(x.tolist(), y.tolist(), strict=True):
        body = [t for t in row if t != check.PAD][:-3]
        hits += rng.choice(body[1::2]) == answer
    assert hits / 20000 == pytest.approx(check.guess_rate(10), abs=0.015)


def test_a_short_run_trains_and_reports_every_interval(check):
    for layout in check.LAYOUTS:
        rows = list(check.run(1, 20, 10, d_model=32, heads=2, batch=16, layout=layout))
        assert [step for step, _, _ in rows] == [10, 20]
        assert all(0.0 <= accuracy <= 1.0 for _, _, accuracy in rows)
