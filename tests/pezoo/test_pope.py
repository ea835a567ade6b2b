"""PoPE (Gopalakrishnan et al. 2025, "Decoupling the 'What' and 'Where' With Polar Coordinate
Positional Embeddings"): the widened q/k against the paper's complex-valued score written out
here, Re Σ_c q̃_c conj(k̃_c) with q̃_c = softplus(q_c) e^{i m θ_c}, k̃_c = softplus(k_c) e^{i (n θ_c + δ_c)}."""

from __future__ import annotations

import cmath
import math

import pytest
import torch

import pezoo
from pezoo import AttentionContext
from pezoo.testing import KitConfig, check_incremental_decoding
from pezoo.testing.kit import KitModel, quiet_flex_warnings

DIMS = pezoo.ModelDims(d_model=32, n_heads=4, n_layers=2)


def softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def reference_score(q, k, m, n, delta, base=10000.0):
    """Re Σ_c q̃_c · conj(k̃_c) for one head: q, k (e,) at positions m, n; δ (e,) already in [−2π, 0]."""
    e = len(q)
    total = 0j
    for c in range(e):
        theta = base ** (-c / e)
        q_tilde = softplus(float(q[c])) * cmath.exp(1j * m * theta)
        k_tilde = softplus(float(k[c])) * cmath.exp(1j * (n * theta + float(delta[c])))
        total += q_tilde * k_tilde.conjugate()
    return total.real


def test_widened_dot_product_is_the_complex_polar_score():
    torch.manual_seed(0)
    pe = pezoo.create("pope", dims=DIMS)
    with torch.no_grad():
        pe.delta.uniform_(-2 * math.pi, 0.0)
    q, k = torch.randn(1, 4, 6, 8), torch.randn(1, 4, 6, 8)
    pos = torch.tensor([[0, 3, 4, 11, 200, 4099]])
    ctx = AttentionContext(q_pos=pos, k_pos=pos)
    for layer in (0, 1):
        q2, k2 = pe.qk(layer, q, k, ctx)
        assert q2.shape == k2.shape == (1, 4, 6, 16)
        scores = (q2 @ k2.transpose(-1, -2))[0]  # (h, i, j)
        for h in range(4):
            for i in range(6):
                for j in range(6):
                    want = reference_score(
                        q[0, h, i], k[0, h, j], int(pos[0, i]), int(pos[0, j]), pe.delta[layer, h].detach()
                    )
                    assert float(scores[h, i, j]) == pytest.approx(want, rel=1e-4, abs=1e-4)


def test_phase_is_clamped_to_minus_two_pi_and_zero():
    torch.manual_seed(1)
    pe = pezoo.create("pope", dims=DIMS)
    with torch.no_grad():
        pe.delta[0].fill_(1.5)  # above 0: read as 0
        pe.delta[1].fill_(-9.0)  # below -2π: read as -2π
    q, k = torch.randn(1, 4, 3, 8), torch.randn(1, 4, 3, 8)
    pos = torch.tensor([[0, 5, 9]])
    ctx = AttentionContext(q_pos=pos, k_pos=pos)
    for layer, used in ((0, 0.0), (1, -2 * math.pi)):
        q2, k2 = pe.qk(layer, q, k, ctx)
        got = float((q2 @ k2.transpose(-1, -2))[0, 2, 1, 0])
        assert got == pytest.approx(reference_score(q[0, 2, 1], k[0, 2, 0], 5, 0, [used] * 8), rel=1e-4, abs=1e-5)
    assert bool((pe.key_phase(0) == 0).all()) and bool((pe.key_phase(1) == -2 * math.pi).all())


def test_scores_depend_on_relative_positions_only():
    torch.manual_seed(2)
    pe = pezoo.create("pope", dims=DIMS, delta_init="uniform")
    q, k = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8)
    pos = torch.arange(5)[None]
    scores = []
    for shift in (0, 37):
        ctx = AttentionContext(q_pos=pos + shift, k_pos=pos + shift)
        q2, k2 = pe.qk(1, q, k, ctx)
        scores.append(q2 @ k2.transpose(-1, -2))
    torch.testing.assert_close(scores[0], scores[1], atol=1e-4, rtol=1e-4)


def test_magnitudes_are_non_negative_so_content_never_flips_the_phase():
    """The 'what' is μ = softplus(x) >= 0: a feature's angle is the position's alone (the point of PoPE)."""
    pe = pezoo.create("pope", dims=DIMS)
    q = -torch.rand(1, 4, 1, 8) * 5  # all negative
    pos = torch.tensor([[7]])
    q2, _ = pe.qk(0, q, q, AttentionContext(q_pos=pos, k_pos=pos))
    mu = torch.nn.functional.softplus(q)
    theta = torch.tensor([10000.0 ** (-c / 8) for c in range(8)])
    torch.testing.assert_close(q2[..., :8], mu * torch.cos(7 * theta), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(q2[..., 8:], mu * torch.sin(7 * theta), atol=1e-6, rtol=1e-5)


def test_attention_scale_stays_the_models_head_dim():
    pe = pezoo.create("pope", dims=DIMS)
    pos = torch.arange(4)[None]
    ctx = AttentionContext(q_pos=pos, k_pos=pos)
    q, k, v = torch.randn(1, 4, 4, 8), torch.randn(1, 4, 4, 8), torch.randn(1, 4, 4, 8)
    q2, k2 = pe.qk(0, q, k, ctx)
    assert ctx.head_dim == 8
    out, _ = pezoo.attend(q2, k2, v, ctx)  # default scale: 1/sqrt(8), not 1/sqrt(16)
    want, _ = pezoo.attend(q2, k2, v, ctx, scale=1 / math.sqrt(8))
    torch.testing.assert_close(out, want)
    assert out.shape == (1, 4, 4, 8)  # values keep their width


@pytest.mark.parametrize("name", ["pope", "randomized:pope", "ssmax:pope"])
def test_cached_decoding_equals_the_full_pass(name):
    check_incremental_decoding(lambda: pezoo.create(name, dims=DIMS, max_length=128) if "rand" in name
                               else pezoo.create(name, dims=DIMS), KitConfig(dims=DIMS, length=15))  # fmt: skip


def test_delta_learns_through_every_backend():
    """(flex has no backward pass on CPU: there its gradient is sdpa's; a GPU runs flex's own.)"""
    tokens = torch.randint(16, (2, 9), generator=torch.Generator().manual_seed(3))
    grads = {}
    for backend in ("eager", "sdpa", "flex"):
        torch.manual_seed(4)
        model = KitModel(pezoo.create("pope", dims=DIMS, delta_init="uniform"), DIMS, vocab=16, backend=backend)
        with quiet_flex_warnings():
            model(tokens, torch.arange(9)[None]).logsumexp(-1).sum().backward()
        grads[backend] = model.pe.delta.grad
    assert grads["eager"].shape == (2, 4, 8) and float(grads["eager"].abs().sum()) > 0
    for backend in ("sdpa", "flex"):
        torch.testing.assert_close(grads[backend], grads["eager"], atol=1e-5, rtol=1e-4)


def test_uniform_init_lies_in_range_and_reset_restores_it():
    torch.manual_seed(5)
    pe = pezoo.create("pope", dims=DIMS, delta_init="uniform")
    assert float(pe.delta.min()) >= -2 * math.pi and float(pe.delta.max()) <= 0
    assert pe.state_dict().keys() == {"delta"}  # the frequency table is derived, not saved
    zero = pezoo.create("pope", dims=DIMS)
    with torch.no_grad():
        zero.delta.fill_(-1.0)
    zero.reset_parameters()
    assert bool((zero.delta == 0).all())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"delta_init": "random"}, r"delta_init must be one of 'zero', 'uniform'"),
        ({"base": 1.0}, r"base must be a finite number > 1"),
        ({"head_dim": 0}, r"head_dim must be an integer >= 1"),
    ],
)
def test_bad_options_are_errors_naming_them(options, message):
    with pytest.raises(ValueError, match=message):
        pezoo.create("pope", **{"head_dim": 8, "n_heads": 4, "n_layers": 2, **options})


def test_wrong_shapes_are_named():
    pe = pezoo.create("pope", dims=DIMS)
    pos = torch.arange(3)[None]
    ctx = AttentionContext(q_pos=pos, k_pos=pos)
    with pytest.raises(ValueError, match="n_layers=2"):
        pe.qk(2, torch.randn(1, 4, 3, 8), torch.randn(1, 4, 3, 8), ctx)
    with pytest.raises(ValueError, match="n_heads=4"):
        pe.qk(0, torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8), ctx)
    with pytest.raises(ValueError, match="head_dim=8"):
        pe.qk(0, torch.randn(1, 4, 3, 6), torch.randn(1, 4, 3, 6), ctx)
