"""Randomized PE evaluated as its paper runs it (Ruoss et al. 2023 §3: "at test time [...]
we use the same procedure but for all token positions"): random sorted positions at
evaluation, planned once per example from the run's seed, the scale and the example's
index, so an evaluation is deterministic, the same after a resume and independent of
batching; the cached greedy decode reads the same positions as a full pass."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch

import harness.tasks as tasks
from harness.config import preset_config
from harness.evaluation.evaluate import (
    evaluate_length,
    example_seed,
    greedy_decode,
    planned_positions,
    sequence_length,
)
from harness.execution.run import train_and_evaluate
from harness.tasks.data import collate, evaluation_set, prompt_ids
from harness.tasks.vocab import EOS_ID
from harness.training.train import build_model

L = 64  # a small L keeps the positions of a 20-token sequence far from 0..19


def model_for(pe: str = "randomized", task: str = "copy", seed: int = 0, **options):
    cfg = preset_config("smoke", pe=pe, task=task, seed=seed)
    cfg = replace(cfg, pe_options={**cfg.pe_options, "max_length": L, **options})
    torch.manual_seed(0)
    model = build_model(cfg)
    with torch.no_grad():  # an untrained model whose predictions depend strongly on positions
        for p in model.parameters():
            if p.ndim >= 2:
                p.mul_(8.0)
    return model.eval(), cfg


def recorded_positions(model):
    """The positions every forward call embeds at (the sin/cos APE reads ``pos``)."""
    seen, embed = [], model.pe.inner.embed

    def spy(x, pos):
        seen.append(pos.clone())
        return embed(x, pos)

    model.pe.inner.embed = spy
    return seen


def test_planned_positions_are_one_seeded_sorted_draw_per_example():
    model, _ = model_for()
    examples = evaluation_set(tasks.create("copy"), 7, 5, 0)
    plan = planned_positions(model, examples, 3, "cpu", "decoder")
    length = max(sequence_length(ex) for ex in examples)
    assert length == 1 + 7 + 1 + 7 + 1 + 1  # <bos> prompt = target . <eos>
    assert plan.shape == (5, length)
    for i, row in enumerate(plan):
        # independent formula: the first S of a permutation of range(L) seeded by the example, sorted
        gen = torch.Generator().manual_seed(example_seed(3, 7, i))
        assert torch.equal(row, torch.randperm(L, generator=gen)[:length].sort().values)
    assert len({tuple(r.tolist()) for r in plan}) == 5  # each example its own draw
    assert example_seed(3, 7, 0) != example_seed(4, 7, 0) != example_seed(3, 8, 0)
    plain, _ = model_for(randomize_eval=False)
    assert planned_positions(plain, examples, 3, "cpu", "decoder") is None


def test_the_new_default_evaluates_on_random_sorted_positions():
    model, cfg = model_for()
    assert model.pe.random_at_eval and cfg.pe_options["randomize_eval"] is True
    seen = recorded_positions(model)
    examples = evaluation_set(tasks.create("copy"), 6, 4, 0)
    evaluate_length(model, examples, batch_size=4, device="cpu", seed=0)
    plan = planned_positions(model, examples, 0, "cpu", "decoder")
    assert seen and all(not torch.equal(pos[0], torch.arange(pos.shape[-1])) for pos in seen)
    for pos in seen:  # every call reads a prefix of (or a step along) the examples' plans
        assert pos.shape[0] == 4 and bool((pos[:, 1:] > pos[:, :-1]).all()) and int(pos.max()) < L
    # the teacher-forced pass reads exactly the plan's first positions
    assert torch.equal(seen[0], plan[:, : seen[0].shape[1]])

    plain, _ = model_for(randomize_eval=False)
    seen = recorded_positions(plain)
    evaluate_length(plain, examples, batch_size=4, device="cpu", seed=0)
    assert all(torch.equal(pos, torch.arange(pos.shape[-1])[None].expand_as(pos)) for pos in seen[:1])


def test_evaluation_is_deterministic_and_independent_of_batching_and_the_global_rng():
    model, _ = model_for()
    seen = recorded_positions(model)
    examples = evaluation_set(tasks.create("reverse"), 9, 12, 0)
    width = sequence_length(examples[0]) - 1  # one length: every teacher-forced batch is (b, width)

    def evaluate(batch_size: int, seed: int = 0):
        torch.manual_seed(random.randrange(10**6))  # the global RNG plays no part
        seen.clear()
        m = evaluate_length(model, examples, batch_size=batch_size, device="cpu", seed=seed)
        teacher_forced = [pos for pos in seen if pos.shape[1] == width]
        return m, torch.cat(teacher_forced)

    first, positions = evaluate(12)
    assert positions.shape == (12, width)
    again, same = evaluate(12)
    assert again == first and torch.equal(same, positions)
    batched, rebatched = evaluate(5)  # other batches: every example keeps its positions
    assert batched == first and torch.equal(rebatched, positions)
    _, other_seed = evaluate(12, seed=1)  # the run's seed does matter
    assert not torch.equal(other_seed, positions)


@pytest.mark.parametrize("pe", ["randomized", "randomized:rope", "randomized:alibi", "randomized:learned_prf"])
def test_cached_decode_equals_the_recomputing_decode_and_a_full_pass(pe):
    model, _ = model_for(pe)
    examples = evaluation_set(tasks.create("copy"), 8, 6, 0)
    plan = planned_positions(model, examples, 0, "cpu", "decoder")
    prompts = torch.tensor([prompt_ids(ex) for ex in examples])
    max_new = plan.shape[1] - prompts.shape[1]
    cached = greedy_decode(model, prompts, max_new, positions=plan)
    assert torch.equal(cached, greedy_decode(model, prompts, max_new, positions=plan, use_cache=False))
    # the full pass over prompt + decode at the same positions predicts every decoded token
    seq = torch.cat([prompts, cached], dim=1)[:, :-1]
    state = model.start_state(len(examples), seq.shape[1], positions=plan)
    with torch.no_grad():
        full = model(seq, state=state).argmax(-1)[:, prompts.shape[1] - 1 :]
    running = torch.ones(len(examples), dtype=torch.bool)
    for t in range(max_new):  # rows stop at their first EOS; compare until then
        assert torch.equal(full[running, t], cached[running, t])
        running &= cached[:, t] != EOS_ID
    # without a plan the decode draws once and both paths still agree
    torch.manual_seed(5)
    a = greedy_decode(model, prompts, max_new)
    torch.manual_seed(5)
    assert torch.equal(a, greedy_decode(model, prompts, max_new, use_cache=False))


def test_encoder_protocol_plans_positions_for_prompt_and_blanks():
    cfg = preset_config("ruoss", pe="randomized:rope", task="parity_check", seed=0)
    cfg = replace(
        cfg,
        pe_options={**cfg.pe_options, "max_length": L},
        backbone=replace(cfg.backbone, d_model=16, n_layers=1, n_heads=2),
    )
    model = build_model(cfg).eval()
    examples = evaluation_set(tasks.create("parity_check"), 7, 6, 0)
    plan = planned_positions(model, examples, 0, "cpu", "encoder")
    assert plan.shape == (6, max(len(ex.prompt) + len(ex.target) for ex in examples))
    assert sequence_length(examples[0], "encoder") == collate(examples[:1], "encoder").inputs.shape[1]
    a = evaluate_length(model, examples, batch_size=6, device="cpu", protocol="encoder")
    assert a == evaluate_length(model, examples, batch_size=4, device="cpu", protocol="encoder")


def test_an_interrupted_run_evaluates_exactly_as_an_uninterrupted_one(tmp_path):
    cfg = preset_config("smoke", pe="randomized", task="copy", seed=0, overrides={"eval": {"samples": 4}})
    device = torch.device("cpu")
    reference = train_and_evaluate(cfg, device, tmp_path / "ref.pt", checkpoint_every=5, notice=lambda m: None)

    def stop_at_12(phase, done, total, note):
        if phase == "train" and done == 12:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_and_evaluate(cfg, device, tmp_path / "ck.pt", stop_at_12, checkpoint_every=5, notice=lambda m: None)
    torch.manual_seed(1234)  # a different global RNG state after the "restart"
    resumed = train_and_evaluate(cfg, device, tmp_path / "ck.pt", checkpoint_every=5, notice=lambda m: None)
    assert resumed.status == reference.status == "finished"
    assert any("resuming from step 10" in n for n in resumed.notices)
    assert resumed.metrics == reference.metrics
