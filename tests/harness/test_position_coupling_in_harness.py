"""The tasks declare their position coupling and the harness hands it to ``position_coupling``:
the ids the model gives a laid-out example equal the significance read off the example's
arithmetic here, decoding token by token equals the full pass, and a task that declares no
coupling is refused before anything trains."""

from __future__ import annotations

import random

import pytest
import torch

import harness.tasks as tasks
import pezoo
from harness.config import preset_config
from harness.config.pe_spec import display_name, task_options
from harness.records.provenance import resolved_pe_options
from harness.tasks.data import layout, prompt_ids
from harness.training.train import build_model, train

DECLARING = ["addition", "copy", "lp_addition", "reverse"]


def _cfg(task: str, steps: int = 3):
    return preset_config("smoke", pe="position_coupling", task=task, seed=0, overrides={"train": {"steps": steps}})


def significance_by_structure(task: str, prompt: tuple[str, ...], target: tuple[str, ...]) -> list[int | None]:
    """What the paper couples, read off each task's format (not through any coupling rule):
    per token of ``<bos> prompt = target <eos>``, the significance of the digit it belongs
    to (1 = units), 0 for a sign that opens a number, None for ``<bos>``/``<eos>``."""
    if task in ("copy", "reverse"):
        n = len(prompt)
        answer = list(range(1, n + 1)) if task == "copy" else list(range(n, 0, -1))  # y_j is x_j, or x_{n+1-j}
        eq = 0 if task == "copy" else n + 1  # "=" sits one step before the answer's first id
        return [None, *range(1, n + 1), eq, *answer, 0, None]
    plus = prompt.index("+")
    a, b = prompt[:plus], prompt[plus + 1 :]  # both least significant digit first
    operands = [*range(1, len(a) + 1), 0, *range(1, len(b) + 1)]
    if task == "lp_addition":
        return [None, *operands, 0, *range(1, len(target) + 1), None]
    arrow = target.index("→")
    chain, total = target[:arrow], target[arrow + 1 : -1]
    steps = [k for k in range(1, max(len(a), len(b)) + 1) for _ in range(5)][: len(chain)]  # a b c d , per digit k
    return [None, *operands, 0, *steps, 0, *range(1, len(total) + 1), 0, None]


@pytest.mark.parametrize("task", DECLARING)
def test_the_model_couples_digits_of_equal_significance_as_the_format_says(task):
    model = build_model(_cfg(task)).eval()
    rng = random.Random(5)
    for n in (1, 3, 7, 12):
        example = tasks.create(task).sample(n, rng)
        ids, _ = layout(example)
        pos = torch.arange(len(ids))[None]
        got = model.pe.coupled_ids(torch.tensor([ids]), pezoo.AttentionContext(q_pos=pos, k_pos=pos))[0].tolist()
        want = [0 if v is None else 1 + v for v in significance_by_structure(task, example.prompt, example.target)]
        assert got == want, (task, example)


def test_addition_gives_digit_k_of_both_operands_of_the_chain_and_of_the_sum_one_id():
    model = build_model(_cfg("addition")).eval()
    example = tasks.create("addition").instance(tuple("829+03"), 3)  # 928 + 30, least significant digit first
    ids, _ = layout(example)
    pos = torch.arange(len(ids))[None]
    got = model.pe.coupled_ids(torch.tensor([ids]), pezoo.AttentionContext(q_pos=pos, k_pos=pos))
    tokens = ["<bos>", *example.prompt, "=", *example.target, "<eos>"]
    assert " ".join(tokens) == "<bos> 8 2 9 + 0 3 = 8 0 0 8 , 2 3 0 5 , 9 0 0 9 → 8 5 9 . <eos>"
    by_token = got[0].tolist()
    # units: a₁ = 8, b₁ = 0, the chain's first step and its comma, the sum's first digit
    units = [1, 5, 8, 9, 10, 11, 12, 23]
    assert {by_token[t] for t in units} == {2} and sorted(by_token).count(2) == len(units)


@pytest.mark.parametrize("task", ["addition", "reverse"])
@pytest.mark.parametrize("training", [False, True])
def test_decoding_token_by_token_equals_the_full_pass(task, training):
    model = build_model(_cfg(task)).train(training)
    example = tasks.create(task).sample(6, random.Random(1))
    ids, _ = layout(example)
    tokens = torch.tensor([ids])
    prompt = len(prompt_ids(example))
    with torch.no_grad():
        torch.manual_seed(2)
        full = model(tokens)
        torch.manual_seed(2)
        state = model.start_state(1, len(ids))
        steps = [model(tokens[:, :prompt], state=state)]
        steps += [model(tokens[:, t : t + 1], state=state) for t in range(prompt, len(ids))]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)


def test_the_coupling_is_the_tasks_not_the_runs():
    cfg = _cfg("reverse")
    assert cfg.pe_options == {}  # the task's name is in the run; its coupling is part of the task
    assert display_name(cfg.pe, cfg.pe_options) == "position_coupling"
    declared = tasks.create("reverse").coupling
    assert declared is not None and build_model(cfg).pe.coupling == declared
    assert resolved_pe_options(cfg)["coupling"] == declared.as_option()  # the record says which
    assert task_options("rope", "odds_first") == {}


def test_a_task_that_declares_no_coupling_is_refused_before_training():
    assert [n for n in tasks.available() if tasks.create(n).coupling is not None] == DECLARING  # docs/tasks.md
    with pytest.raises(ValueError, match=r"task 'odds_first' declares none \(tasks that do: addition, copy"):
        _cfg("odds_first")


def test_it_trains_on_addition():
    cfg = _cfg("addition", steps=3)
    result = train(cfg, build_model(cfg), tasks.create(cfg.task))
    assert result.steps == 3 and torch.isfinite(torch.tensor(result.final_loss))
