"""FIRE against the paper's formula, evaluated per (i, j, h) with plain floats."""

from __future__ import annotations

import math

import pytest
import torch

import pezoo
from pezoo.backends import flex_compile
from pezoo.encodings.fire import fire_bias
from pezoo.testing import KitModel

DIMS = pezoo.ModelDims(d_model=32, n_heads=4, n_layers=2)


def _naive_fire(pe, layer: int, h: int, pi: int, pj: int) -> float:
    """b(i, j) = f(ψ(i − j) / ψ(max(L, i))), ψ(x) = log(|c x| + 1), f an MLP 1 -> u -> heads
    (Li et al. 2024, §3), with the reference code's L = |m · L0| and + 1e-6 on the normaliser."""
    s = 0 if pe.share_layers else layer
    c = pe.c[s].item()
    threshold = abs(pe.threshold_multiplier[s].item() * pe.init_threshold)
    x = math.log(abs(c * (pi - pj)) + 1) / (math.log(abs(c * max(threshold, pi)) + 1) + 1e-6)
    first, second = pe.mlp[s][0], pe.mlp[s][2]
    out = second.bias[h].item()
    for u in range(first.weight.shape[0]):
        hidden = max(0.0, first.weight[u, 0].item() * x + first.bias[u].item())
        out += second.weight[h, u].item() * hidden
    return out


@pytest.mark.parametrize("threshold", [512.0, 3.0], ids=["paper-L", "small-L"])
def test_bias_matches_the_formula(threshold):
    torch.manual_seed(0)
    pe = pezoo.create("fire", dims=DIMS, init_threshold=threshold)
    with torch.no_grad():  # move c and the multiplier off their initial values
        pe.c.copy_(torch.tensor([0.3, -0.7]))
        pe.threshold_multiplier.copy_(torch.tensor([1.5, -0.5]))
    pos = torch.tensor([[0, 1, 2, 5, 17, 900]])
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    for layer in range(DIMS.n_layers):
        (bias,) = pe.bias(layer, torch.zeros(1, 4, 6, 8), torch.zeros(1, 4, 6, 8), ctx)
        dense = bias.materialize(ctx, 4, torch.float32)
        head = torch.arange(4).view(1, -1, 1, 1)
        q, k = pos.float()[:, None, :, None], pos.float()[:, None, None, :]
        elementwise = fire_bias(q, k, head, *bias.params)  # the form flex runs
        assert dense.shape == (1, 4, 6, 6)
        torch.testing.assert_close(elementwise, dense, atol=1e-5, rtol=1e-5)
        for h in range(4):
            for i, pi in enumerate(pos[0].tolist()):
                for j, pj in enumerate(pos[0].tolist()[: i + 1]):
                    want = _naive_fire(pe, layer, h, pi, pj)
                    assert dense[0, h, i, j].item() == pytest.approx(want, rel=1e-4, abs=1e-5)


def test_progressive_interpolation_past_the_threshold():
    """Beyond L the input of f depends on (i - j) / i through ψ only: the farthest key of
    every query gets f(≈1), whatever the length."""
    pe = pezoo.create("fire", n_heads=2, n_layers=1, init_threshold=8.0)
    ends = []
    for n in (20, 200, 2000):
        pos = torch.tensor([[0, n]])
        ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
        (bias,) = pe.bias(0, torch.zeros(1, 2, 2, 4), torch.zeros(1, 2, 2, 4), ctx)
        ends.append(bias.materialize(ctx, 2, torch.float32)[0, :, 1, 0])
    torch.testing.assert_close(ends[1], ends[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ends[2], ends[0], atol=1e-4, rtol=1e-4)


def test_paper_initialisation_and_layer_sharing():
    pe = pezoo.create("fire", dims=DIMS)
    assert pe.c.tolist() == pytest.approx([0.1, 0.1]) and pe.threshold_multiplier.tolist() == [1.0, 1.0]
    assert pe.mlp[0][0].weight.shape == (32, 1) and pe.mlp[0][2].weight.shape == (4, 32)
    assert len(pe.mlp) == DIMS.n_layers
    shared = pezoo.create("fire", dims=DIMS, share_layers=True)
    assert len(shared.mlp) == 1
    n_own = sum(p.numel() for p in shared.parameters())
    assert n_own == (32 + 32) + (4 * 32 + 4) + 2
    assert sum(p.numel() for p in pe.parameters()) == DIMS.n_layers * n_own
    with pytest.raises(ValueError, match="init_threshold"):
        pezoo.create("fire", dims=DIMS, init_threshold=0.0)


def test_flex_runs_the_mlp_in_score_mod_and_matches_eager(monkeypatch):
    torch.manual_seed(0)
    model = KitModel(pezoo.create("fire", dims=DIMS, init_threshold=6.0), DIMS, vocab=16).eval()
    tokens = torch.randint(16, (2, 30))
    pos = torch.tensor([[2, 3, 5, 8, *range(10, 36)]])
    materialised = []
    original = pezoo.RelativeFunctionBias.materialize
    monkeypatch.setattr(
        pezoo.RelativeFunctionBias, "materialize", lambda self, *a: materialised.append(1) or original(self, *a)
    )
    with torch.no_grad():
        want = model(tokens, pos)
        model.set_backend("flex")
        with flex_compile(False):
            got = model(tokens, pos)
    assert len(materialised) == DIMS.n_layers  # eager only
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


@pytest.mark.slow
def test_compiled_flex_matches_eager():
    """One compile on CPU: the MLP's hidden units unrolled inside the fused kernel (4 of them
    here: the same code path as the default 32 at half the compile time)."""
    torch.manual_seed(1)
    pe = pezoo.create("fire", n_heads=4, n_layers=1, init_threshold=50.0, mlp_width=4)
    q, k, v = (torch.randn(2, 4, 160, 8) for _ in range(3))
    pos = torch.arange(160)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    with torch.no_grad():
        biases = pe.bias(0, q, k, ctx)
        want, _ = pezoo.attend(q, k, v, ctx, biases)
        with flex_compile(True):
            got, _ = pezoo.attend(q, k, v, ctx, biases, backend="flex")
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
