"""Deferred initialisation for training from scratch (FSDP-style): build on ``meta``,
``to_empty``, then ``reset_parameters()`` on every module, with no checkpoint to load.
Every parameter and buffer must then hold a real initial value, drawn as the constructor
draws it, not the uninitialised memory ``to_empty`` leaves (filled with NaN here so that
anything left behind shows)."""

from __future__ import annotations

import pytest
import torch

import pezoo
from pezoo.testing import KitModel

DIMS = pezoo.ModelDims(d_model=32, n_heads=4, n_layers=2)
NAMES = [n for n in pezoo.available() if not n.startswith("randomized:")] + ["abacus+fire"]
GARBAGE = -12345


def _deferred(name: str) -> pezoo.PositionalEncoding:
    with torch.device("meta"):
        pe = pezoo.create(name, dims=DIMS)
    pe.to_empty(device="cpu")
    with torch.no_grad():
        for t in [*pe.parameters(), *pe.buffers()]:
            t.fill_(float("nan") if t.is_floating_point() else GARBAGE)
    for module in pe.modules():
        if callable(getattr(module, "reset_parameters", None)):
            module.reset_parameters()
    return pe


@pytest.mark.parametrize("name", NAMES)
def test_reset_parameters_initialises_everything(name):
    pe = _deferred(name)
    torch.manual_seed(0)
    fresh = pezoo.create(name, dims=DIMS)
    fresh_tensors = {**dict(fresh.named_parameters()), **dict(fresh.named_buffers())}
    for n, t in [*pe.named_parameters(), *pe.named_buffers()]:
        if t.is_floating_point():
            assert not t.isnan().any(), f"{name}: {n} left uninitialised"
        else:
            assert not (t == GARBAGE).any(), f"{name}: {n} left uninitialised"
            assert torch.equal(t, fresh_tensors[n]), f"{name}: derived buffer {n} differs from a fresh build"
    # constant initial values come back exactly
    for n, t in pe.named_parameters():
        want = fresh_tensors[n]
        if want.numel() > 1 and bool((want == want.flatten()[0]).all()):
            assert torch.equal(t, want), f"{name}: {n} is not re-initialised to its constant {want.flatten()[0]}"


def test_prism_keeps_its_own_init_under_deferred_initialisation():
    """PRISM's gate head starts at std 1/hidden with zero bias (near the uniform prior) and its
    GRU's W_hh is orthogonal; nn.Linear's and nn.GRU's own resets would undo both."""
    pe = _deferred("prism")
    for layer in pe.prism_layers.values():
        gates = layer.gates
        w = gates.gru.weight_hh_l0  # (3g, g), orthonormal columns
        torch.testing.assert_close(w.T @ w, torch.eye(w.shape[1]), atol=1e-5, rtol=0)
        assert torch.equal(gates.head.bias, torch.zeros_like(gates.head.bias))
        std = gates.head.weight.std().item()
        assert 0.7 / gates.gru.hidden_size < std < 1.3 / gates.gru.hidden_size, std


@pytest.mark.parametrize("name", ["prism", "t5", "learned_prf", "kerple_log", "fire", "cope", "learned_ape"])
def test_a_deferred_encoding_computes_finite_outputs(name):
    pe = _deferred(name).eval()
    torch.manual_seed(0)
    model = KitModel(pe, DIMS, vocab=8)
    tokens = torch.randint(8, (2, 6))
    with torch.no_grad():
        out = model(tokens, pe.positions(2, 6))
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", [*pezoo.available(), "abacus+fire"])
def test_a_model_on_meta_runs_forward_and_backward_for_shapes(name):
    """Shape inference: a whole model built on ``meta`` runs a pass and its backward, with the
    shapes of a real one. A value-reading check skips meta positions (learned_ape's range
    check called ``.item()``), learned_prf_sh's grouping by distinct scale (``torch.unique``:
    no meta kernel) takes its per-example form, and PRISM's scan turns autocast off only on a
    device that has it (``torch.autocast("meta")`` raised "unsupported scalarType")."""
    torch.manual_seed(0)
    with torch.device("meta"):
        pe = pezoo.create(name, dims=DIMS)
        model = KitModel(pe, DIMS, vocab=8)
        tokens = torch.zeros(2, 6, dtype=torch.long)
        out = model(tokens, pe.positions(2, 6, tokens.device), scale_hint=torch.full((2,), 6.0))
        out.square().mean().backward()
    assert out.shape == (2, 6, 8) and out.is_meta
    assert all(p.grad is None or p.grad.is_meta for p in model.parameters())
