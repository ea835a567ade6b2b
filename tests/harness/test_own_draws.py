"""Every encoding's training draws come from the run's own generator, never from torch's
global RNG: runs trained side by side in one process (harness.sweeps.executors.grouped)
share that one global RNG, so a draw from it would make a run's record depend on its group.
Registry-wide, so a new encoding that draws (randomized positions, Abacus's and position
coupling's offsets) is held to it."""

from __future__ import annotations

import random

import pytest
import torch

import pezoo
from harness import tasks
from harness.config import preset_config
from harness.tasks.data import collate, sample_training_batch
from harness.training.loss import training_loss
from harness.training.train import build_model


@pytest.mark.parametrize("name", pezoo.available())
def test_training_draws_leave_the_global_rng_alone(name):
    try:
        cfg = preset_config("smoke", pe=name, task="addition", seed=0)
        model = build_model(cfg)
    except (ValueError, TypeError, SystemExit) as exc:  # an encoding the task cannot take
        pytest.skip(f"{name} on addition: {exc}")
    task = tasks.create("addition")
    batch = collate(sample_training_batch(task, random.Random(0), 8, 1, 5), cfg.protocol)
    model.train()
    own = torch.Generator().manual_seed(1)
    before, own_before = torch.get_rng_state(), own.get_state()
    with model.pe.drawing_from(own):
        loss, _ = training_loss(model, batch, draws=own)
        loss.backward()
    assert torch.equal(torch.get_rng_state(), before), f"{name} drew from torch's global RNG while training"
    if torch.equal(own.get_state(), own_before):
        return  # an encoding that draws nothing
    # what it drew, it drew from its run's generator: the same generator state gives the same loss
    again = torch.Generator().manual_seed(1)
    with model.pe.drawing_from(again):
        repeat, _ = training_loss(model, batch, draws=again)
    assert torch.equal(repeat, loss)


@pytest.mark.parametrize("name", [*pezoo.available(), "abacus+fire", "randomized:rope+abacus"])
def test_a_pass_handed_its_planned_draws_is_the_pass_that_draws_them(name):
    """``pe.plan_draws`` draws, outside a pass, what the pass would draw (a CUDA graph takes
    them as inputs: it cannot redo a host draw): a pass handed them gives the logits of the
    pass that draws for itself from the same state, draws nothing more, and leaves the stream
    where that pass leaves it. Registry-wide, so an encoding that draws in its pass without
    planning it fails here (its graphed steps would replay one frozen draw); combinations too,
    whose parts' draws are gathered (two drawing encodings in one model)."""
    try:
        cfg = preset_config("smoke", pe=name, task="addition", seed=0)
        model = build_model(cfg)
    except (ValueError, TypeError, SystemExit) as exc:  # an encoding the task cannot take
        pytest.skip(f"{name} on addition: {exc}")
    task = tasks.create("addition")
    batch = collate(sample_training_batch(task, random.Random(0), 4, 1, 5), cfg.protocol)
    b, s = batch.inputs.shape
    model.train()
    with torch.no_grad():
        drawing = torch.Generator().manual_seed(5)
        with model.pe.drawing_from(drawing):
            positions = model.pe.positions(b, s)
            itself = model(batch.inputs, scale_hint=batch.scales, positions=positions)
        planning = torch.Generator().manual_seed(5)
        with model.pe.drawing_from(planning):
            positions = model.pe.positions(b, s)
            draws = model.pe.plan_draws()
            planned_state = planning.get_state()
            handed = model(batch.inputs, scale_hint=batch.scales, positions=positions, draws=draws)
    assert torch.equal(planning.get_state(), planned_state), f"{name} drew in a pass handed its draws"
    assert torch.equal(planning.get_state(), drawing.get_state())
    torch.testing.assert_close(handed, itself, rtol=0, atol=0)
    assert model.eval().pe.plan_draws() == {}  # evaluation draws no offset
