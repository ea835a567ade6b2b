"""An encoding's ``regularisation()`` is part of the training loss (PRISM's Frobenius
penalty on the GRU's W_hh, Lee 2025 §6.3: weight 1e-3 in the paper)."""

from __future__ import annotations

import random

import torch

import harness.tasks as tasks
from harness.config import preset_config
from harness.tasks.data import collate, sample_training_batch
from harness.training.loss import training_loss
from harness.training.train import build_model, train

WEIGHT = 0.05


def prism(regulariser: str, weight: float = WEIGHT, steps: int = 1):
    spec = f"prism{{regulariser={regulariser},frobenius_weight={weight}}}"
    cfg = preset_config("smoke", pe=spec, task="copy", seed=0, overrides={"train": {"steps": steps, "warmup": 1}})
    return cfg, build_model(cfg)


def w_hh(model) -> torch.Tensor:
    return model.pe.prism_layers["0"].gates.gru.weight_hh_l0


def test_the_frobenius_penalty_adds_exactly_its_gradient_to_w_hh():
    batch = collate(sample_training_batch(tasks.create("copy"), random.Random(0), 8, 1, 5))
    grads, losses = {}, {}
    for regulariser in ("none", "frobenius"):
        _, model = prism(regulariser)
        torch.manual_seed(1)  # the same initialisation is not enough: also the same forward pass
        total, task_loss = training_loss(model, batch)
        total.backward()
        grads[regulariser], losses[regulariser] = w_hh(model).grad.clone(), (total.item(), task_loss.item())
    w = w_hh(model).detach()
    assert torch.equal(w, w_hh(prism("none")[1]).detach())  # both models start from the same W_hh
    # d/dW (weight * ||W||_F^2) = 2 * weight * W
    torch.testing.assert_close(grads["frobenius"] - grads["none"], 2 * WEIGHT * w, rtol=1e-4, atol=1e-7)
    assert losses["none"][0] == losses["none"][1]
    assert losses["frobenius"][1] == losses["none"][1]  # the task's loss is the same...
    penalty = WEIGHT * float(w.double().pow(2).sum())
    assert abs(losses["frobenius"][0] - losses["frobenius"][1] - penalty) < 1e-5 * penalty  # ...plus the penalty


def test_training_minimises_the_penalty_and_reports_the_tasks_loss():
    updated = {}
    for regulariser, weight in (("none", WEIGHT), ("frobenius", WEIGHT), ("frobenius", 0.0)):
        cfg, model = prism(regulariser, weight, steps=2)
        result = train(cfg, model, tasks.create("copy"))
        updated[regulariser, weight] = (w_hh(model).detach().clone(), result.final_loss)
    none, zero, penalised = updated["none", WEIGHT], updated["frobenius", 0.0], updated["frobenius", WEIGHT]
    assert torch.equal(zero[0], none[0]) and zero[1] == none[1]  # a zero weight changes nothing
    assert not torch.equal(penalised[0], none[0])  # the penalty moved W_hh
    assert penalised[0].pow(2).sum() < none[0].pow(2).sum()  # ...towards a smaller norm
