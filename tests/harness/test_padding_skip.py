"""Training skips the MLPs at a batch's right padding (``Backbone.forward(keep=...)``):
the labelled tokens' logits and every gradient stay those of the full pass, for every
encoding, and a ``keep`` that would change them is refused."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

import pezoo
from harness import tasks
from harness.backbone import Backbone, BackboneConfig
from harness.config import preset_config
from harness.data import IGNORE, collate, sample_training_batch
from harness.protocols import paper_pe_options
from harness.tasks.vocab import PAD_ID
from harness.train import build_model, training_loss


def padded_batch(task: str, seed: int = 0, size: int = 6):
    """A decoder batch whose examples have different scales, so most rows end in padding."""
    rng = random.Random(seed)
    batch = collate(sample_training_batch(tasks.create(task), rng, size, 1, 6))
    assert (batch.inputs == PAD_ID).any(dim=1).sum() >= 2
    return batch


def loss_and_grads(model: Backbone, batch, keep: torch.Tensor | None, seed: int):
    """The labelled tokens' loss, their logits and every parameter's gradient, with the
    encoding's random draws (randomized PE's positions) fixed by ``seed``."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    logits = model(batch.inputs, scale_hint=batch.scales, keep=keep)
    loss = F.cross_entropy(logits.flatten(0, 1), batch.labels.flatten(), ignore_index=IGNORE)
    loss.backward()
    labelled = batch.labels != IGNORE
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), logits.detach()[labelled], grads


def assert_same_pass(model: Backbone, batch) -> None:
    keep = batch.inputs != PAD_ID
    loss, logits, grads = loss_and_grads(model, batch, None, seed=5)
    loss_kept, logits_kept, grads_kept = loss_and_grads(model, batch, keep, seed=5)
    torch.testing.assert_close(loss_kept, loss, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(logits_kept, logits, rtol=1e-10, atol=1e-10)
    assert grads_kept.keys() == grads.keys() and grads
    for name, grad in grads.items():
        torch.testing.assert_close(grads_kept[name], grad, rtol=1e-8, atol=1e-12, msg=name)


@pytest.mark.parametrize("name", pezoo.available())
def test_skipping_the_padding_changes_no_labelled_logit_or_gradient(name):
    cfg = BackboneConfig(d_model=32, n_layers=2, n_heads=4)
    torch.manual_seed(0)
    pe = pezoo.create(name, dims=pezoo.ModelDims(cfg.d_model, cfg.n_heads, cfg.n_layers))
    model = Backbone(cfg, pe).double().train()
    assert_same_pass(model, padded_batch("copy"))


@pytest.mark.parametrize("task", ["reverse", "odds_first"])
def test_prism_as_its_paper_runs_it_too(task):
    """The copy branch (reverse) and two PRISM layers (odds_first), as the board runs them."""
    cfg = preset_config("smoke", pe="prism", task=task, seed=0)
    options = paper_pe_options("prism", task, BackboneConfig(d_model=32, n_layers=4, n_heads=2))
    options.update(d_pe=8, gru_hidden=8)
    cfg = replace(cfg, backbone=replace(cfg.backbone, n_layers=4), pe_options=options)
    torch.manual_seed(0)
    model = build_model(cfg, "cpu").double().train()
    assert_same_pass(model, padded_batch(task, seed=1))


def test_training_loss_skips_the_padding():
    """The harness's training step passes ``keep``: its loss is the full pass's."""
    cfg = preset_config("smoke", pe="rope", task="copy", seed=0)
    torch.manual_seed(0)
    model = build_model(cfg, "cpu").double()
    batch = padded_batch("copy", seed=2)
    seen = []
    forward = model.forward

    def spy(*args, **kwargs):
        seen.append(kwargs.get("keep"))
        return forward(*args, **kwargs)

    model.forward = spy  # type: ignore[method-assign]
    _, task_loss = training_loss(model, batch)
    assert seen[0] is not None and torch.equal(seen[0], batch.inputs != PAD_ID)
    model.forward = forward  # type: ignore[method-assign]
    full = F.cross_entropy(model(batch.inputs).flatten(0, 1), batch.labels.flatten(), ignore_index=IGNORE)
    torch.testing.assert_close(task_loss, full, rtol=1e-10, atol=1e-12)


def small_model(causal: bool = True) -> Backbone:
    cfg = BackboneConfig(d_model=16, n_layers=1, n_heads=2, causal=causal)
    return Backbone(cfg, pezoo.create("nope", dims=pezoo.ModelDims(16, 2, 1)))


def test_a_keep_that_would_change_the_kept_tokens_is_refused():
    model = small_model()
    tokens = torch.randint(0, 64, (2, 5))
    hole = torch.tensor([[True, False, True, True, True], [True] * 5])
    with pytest.raises(ValueError, match="prefix of each row"):
        model(tokens, keep=hole)
    with pytest.raises(ValueError, match="causal"):
        small_model(causal=False)(tokens, keep=torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="decoding state"):
        model(tokens, state=model.start_state(2, 5), keep=torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool tensor shaped as tokens"):
        model(tokens, keep=torch.ones(2, 4, dtype=torch.bool))


def test_keeping_every_token_is_the_plain_pass():
    model = small_model()
    tokens = torch.randint(0, 64, (2, 5))
    torch.testing.assert_close(model(tokens, keep=torch.ones(2, 5, dtype=torch.bool)), model(tokens), rtol=0, atol=0)
