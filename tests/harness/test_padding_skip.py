"""Training skips a batch's right padding: the MLPs skip it (``Backbone.forward(keep=...)``)
and the rows run in groups of similar length, each cut to its longest row
(``harness.training.loss._task_loss``). The labelled tokens' logits, the loss and every gradient
stay those of one padded pass, for every encoding, and a ``keep`` or ``positions`` that
would change them is refused."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

import pezoo
from harness import tasks
from harness.config import preset_config
from harness.config.protocols import paper_pe_options
from harness.tasks.data import IGNORE, collate, sample_training_batch
from harness.tasks.vocab import PAD_ID
from harness.training.backbone import Backbone, BackboneConfig
from harness.training.graphs import one_pass_loss
from harness.training.loss import LENGTH_GROUPS, _task_loss, training_loss
from harness.training.train import build_model


def padded_batch(task: str, seed: int = 0, size: int = 8):
    """A decoder batch whose examples have different scales, so most rows end in padding."""
    rng = random.Random(seed)
    batch = collate(sample_training_batch(tasks.create(task), rng, size, 1, 6))
    assert (batch.inputs == PAD_ID).any(dim=1).sum() >= 2
    return batch


def paper_prism(task: str) -> Backbone:
    """A small float64 model with PRISM's paper setup for ``task`` (copy branch, layers),
    its streams narrowed so the test stays fast."""
    cfg = preset_config("smoke", pe="prism", task=task, seed=0)
    options = paper_pe_options("prism", task, BackboneConfig(d_model=32, n_layers=4, n_heads=2))
    options.update(d_pe=8, gru_hidden=8)
    cfg = replace(cfg, backbone=replace(cfg.backbone, n_layers=4), pe_options=options)
    torch.manual_seed(0)
    return build_model(cfg, "cpu").double().train()


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
    assert_same_pass(paper_prism(task), padded_batch(task, seed=1))


def full_pass_loss(model: Backbone, batch) -> torch.Tensor:
    """One padded pass, on positions planned for the rows' lengths as training plans them
    (randomized PE: a draw of its own length for each row)."""
    lengths = (batch.inputs != PAD_ID).sum(dim=1)
    positions = model.pe.padded_positions(lengths, batch.inputs.shape[1])
    logits = model(batch.inputs, scale_hint=batch.scales, positions=positions)
    return F.cross_entropy(logits.flatten(0, 1), batch.labels.flatten(), ignore_index=IGNORE)


FLOAT32_INSIDE = ("cope", "fire", "learned_prf")
"""Encodings that compute their bias in float32 whatever the model's dtype: a group's
narrower tensors round differently there (relative 1e-7 to 1e-4 of a gradient)."""

ROTATED_IN_FLOAT32 = (
    "ssmax",
    "ssmax:rope",
    "ssmax:xpos",
    "ssmax:p_rope",
    "ssmax:fope",
    "ssmax:hybrid",
    "randomized:ssmax",
)
"""A learned parameter (SSMax's s) multiplying logits of q and k rotated in float32 whatever
the model's dtype (RoPE, xPos, p-RoPE, FoPE, a hybrid's RoPE layers): its gradient sums the rotations' float32
rounding, which a group's narrower tensors round differently (relative 1e-8 to 1e-7)."""


def assert_same_loss(model: Backbone, batch, rel: float = 1e-8) -> None:
    """The grouped loss and its gradients equal one padded pass's, the encoding's random
    draws (randomized PE's positions, planned once for the batch; Abacus's offset, one per
    batch either way) fixed by the seed. Each gradient is compared relative to its largest entry, floored at 1e-6 of
    the largest gradient of all (a parameter whose true gradient is 0, such as a bias
    that shifts a whole row of logits, has only rounding noise)."""
    results = []
    for loss_of in (full_pass_loss, _task_loss, one_pass_loss):  # the last: what a GPU runs
        model.zero_grad(set_to_none=True)
        torch.manual_seed(7)
        loss = loss_of(model, batch)
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (want, want_grads), *others = results
    for got, got_grads in others:
        torch.testing.assert_close(got, want, rtol=max(rel, 1e-10), atol=0)
        assert got_grads.keys() == want_grads.keys() and want_grads
        floor = 1e-6 * max(float(g.abs().max()) for g in want_grads.values())
        for name, grad in want_grads.items():
            error = float((got_grads[name] - grad).abs().max()) / max(float(grad.abs().max()), floor)
            assert error < rel, f"{name}: relative error {error:.2e}"


@pytest.mark.parametrize("name", pezoo.available())
def test_groups_of_similar_length_give_the_padded_pass_loss_and_gradients(name):
    cfg = BackboneConfig(d_model=32, n_layers=2, n_heads=4)
    torch.manual_seed(0)
    pe = pezoo.create(name, dims=pezoo.ModelDims(cfg.d_model, cfg.n_heads, cfg.n_layers))
    rel = 1e-3 if any(inside in name for inside in FLOAT32_INSIDE) else 1e-6 if name in ROTATED_IN_FLOAT32 else 1e-8
    assert_same_loss(Backbone(cfg, pe).double().train(), padded_batch("copy", seed=3), rel)


@pytest.mark.parametrize("task", ["reverse", "odds_first", "addition"])
def test_groups_with_prism_as_its_paper_runs_it(task):
    assert_same_loss(paper_prism(task), padded_batch(task, seed=4))


def spy_on_forward(model: Backbone) -> list[dict]:
    calls: list[dict] = []
    forward = model.forward

    def spy(tokens, **kwargs):
        calls.append({"shape": tuple(tokens.shape), **kwargs})
        return forward(tokens, **kwargs)

    model.forward = spy  # type: ignore[method-assign]
    return calls


def test_training_runs_groups_of_rows_sorted_by_length_with_the_padding_kept_out():
    cfg = preset_config("smoke", pe="rope", task="copy", seed=0)
    torch.manual_seed(0)
    model = build_model(cfg, "cpu").double()
    batch = padded_batch("copy", seed=2)
    want = full_pass_loss(model, batch)
    calls = spy_on_forward(model)
    _, task_loss = training_loss(model, batch)
    torch.testing.assert_close(task_loss, want, rtol=1e-10, atol=1e-12)
    assert len(calls) == LENGTH_GROUPS
    assert sum(c["shape"][0] for c in calls) == batch.inputs.shape[0]
    widths = [c["shape"][1] for c in calls]
    lengths = sorted((batch.inputs != PAD_ID).sum(dim=1).tolist())
    assert widths == sorted(widths) and widths[-1] == batch.inputs.shape[1] and widths[0] < widths[-1]
    assert widths[0] == max(lengths[: calls[0]["shape"][0]])  # each group cut to its own longest row
    for call in calls:
        assert call["keep"].shape == call["shape"] and call["positions"].shape[-1] >= call["shape"][1]


def test_training_draws_each_rows_random_positions_for_its_own_length():
    """Randomized PE as the board trains it: each group's rows see the positions the
    encoding plans for the batch's row lengths (``padded_positions``: one draw per length,
    so a short row's are spread over [0, L), not the first n of the widest row's)."""
    cfg = preset_config("smoke", pe="randomized", task="copy", seed=0)
    assert cfg.pe_options["draw"] == "per_length"
    model = build_model(cfg, "cpu").train()
    batch = padded_batch("copy", seed=2)
    lengths = (batch.inputs != PAD_ID).sum(dim=1)
    torch.manual_seed(11)
    planned = model.pe.padded_positions(lengths, batch.inputs.shape[1])
    assert planned.shape[0] == len(lengths) and len(set(lengths.tolist())) > 1
    calls = spy_on_forward(model)
    torch.manual_seed(11)
    _task_loss(model, batch)
    groups = torch.argsort(lengths, stable=True).chunk(LENGTH_GROUPS)
    assert len(calls) == len(groups)
    for rows, call in zip(groups, calls, strict=True):
        width = call["shape"][1]
        assert torch.equal(call["positions"], planned[rows, :width])
        for row, n in zip(rows.tolist(), lengths[rows].tolist(), strict=True):
            shorter = lengths < n
            if bool(shorter.any()):  # a longer row's draw is not a shorter row's extended
                other = int(torch.nonzero(shorter)[0])
                assert not torch.equal(planned[row, : int(lengths[other])], planned[other, : int(lengths[other])])


def test_a_batch_without_padding_is_one_pass():
    cfg = preset_config("smoke", pe="nope", task="copy", seed=0)
    model = build_model(cfg, "cpu")
    batch = collate([tasks.create("copy").sample(4, random.Random(i)) for i in range(4)])  # one scale: no padding
    calls = spy_on_forward(model)
    training_loss(model, batch)
    assert len(calls) == 1 and calls[0]["shape"] == tuple(batch.inputs.shape)


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


def test_positions_that_do_not_fit_the_pass_are_refused():
    model = small_model()
    tokens = torch.randint(0, 64, (2, 5))
    for bad in (torch.arange(4)[None], torch.arange(5).expand(3, 5), torch.arange(5)):
        with pytest.raises(ValueError, match="positions must be planned"):
            model(tokens, positions=bad)
    with pytest.raises(ValueError, match="decoding state holds its own"):
        model(tokens, state=model.start_state(2, 5), positions=torch.arange(5)[None])
    longer = torch.arange(9)[None]  # planned for more tokens: the pass reads the first 5
    torch.testing.assert_close(model(tokens, positions=longer), model(tokens), rtol=0, atol=0)


def test_keeping_every_token_is_the_plain_pass():
    model = small_model()
    tokens = torch.randint(0, 64, (2, 5))
    torch.testing.assert_close(model(tokens, keep=torch.ones(2, 5, dtype=torch.bool)), model(tokens), rtol=0, atol=0)
