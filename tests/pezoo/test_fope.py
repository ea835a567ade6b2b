"""FoPE (Hua et al. 2025, "Fourier Position Embedding: Enhancing Attention's Periodic Extension
for Length Generalization"): against the Fourier series written out here, pair m turned by
cos'_m(t) = Σ_k C^cos_(k,m) cos(ω_k t), sin'_m(t) = Σ_k C^sin_(k,m) sin(ω_k t) over the kept
frequencies (period <= L), the clipped pairs not turned."""

from __future__ import annotations

import math

import pytest
import torch

import pezoo
from pezoo import AttentionContext
from pezoo.testing import KitConfig, check_incremental_decoding
from pezoo.testing.kit import KitModel, quiet_flex_warnings

DIMS = pezoo.ModelDims(d_model=64, n_heads=4, n_layers=2)  # head dim 16: 8 pairs


def kept_frequencies(e, base, length):
    """ω_i = base^(−2i/e) whose period 2π/ω_i is at most L (every one without L)."""
    omegas = [base ** (-2 * i / e) for i in range(e // 2)]
    return omegas if length is None else [w for w in omegas if 2 * math.pi / w <= length]


def reference(x, t, cos_coef, sin_coef, omegas, layout):
    """x (e,) at position t, one head's coefficients (k, k): pair m of the kept ones turned by
    its series, the others as they are."""
    e = len(x)
    out = [float(v) for v in x]
    for m in range(len(omegas)):
        c = sum(float(cos_coef[k, m]) * math.cos(w * t) for k, w in enumerate(omegas))
        s = sum(float(sin_coef[k, m]) * math.sin(w * t) for k, w in enumerate(omegas))
        i, j = (2 * m, 2 * m + 1) if layout == "interleaved" else (m, m + e // 2)
        a, b = out[i], out[j]
        out[i], out[j] = a * c - b * s, a * s + b * c
    return torch.tensor(out)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("train_length", [None, 24, 700])
def test_pairs_turn_by_their_fourier_series_and_clipped_pairs_do_not_turn(train_length, layout):
    torch.manual_seed(0)
    pe = pezoo.create("fope", dims=DIMS, train_length=train_length, sigma=0.5, layout=layout)
    omegas = kept_frequencies(16, 10000.0, train_length)
    assert pe.n_kept == len(omegas)
    q, k = torch.randn(1, 4, 4, 16), torch.randn(1, 4, 4, 16)
    pos = torch.tensor([[0, 5, 23, 1000]])
    for layer in (0, 1):
        q2, k2 = pe.qk(layer, q, k, AttentionContext(q_pos=pos, k_pos=pos))
        for h in range(4):
            coefs = (pe.cos_coef[layer, h], pe.sin_coef[layer, h])
            for t in range(4):
                want = reference(q[0, h, t], int(pos[0, t]), *coefs, omegas, layout)
                torch.testing.assert_close(q2[0, h, t], want, atol=2e-4, rtol=1e-4)
                want = reference(k[0, h, t], int(pos[0, t]), *coefs, omegas, layout)
                torch.testing.assert_close(k2[0, h, t], want, atol=2e-4, rtol=1e-4)


def test_the_papers_clipping_keeps_frequencies_that_complete_a_cycle():
    """L = 24 with e = 16: periods 2π·10000^(i/8) = 6.3, 20.0, 62.8, ...: the first two are kept."""
    pe = pezoo.create("fope", dims=DIMS, train_length=24)
    assert pe.n_kept == 2
    assert pezoo.create("fope", dims=DIMS, train_length=5).n_kept == 0  # nothing completes a cycle: NoPE


def test_without_noise_or_clipping_it_is_rope_and_with_clipping_p_rope():
    q, k = torch.randn(2, 4, 5, 16), torch.randn(2, 4, 5, 16)
    pos = torch.arange(5)[None] * 7

    def ctx():  # one per instance: a context's memo is keyed by the instance
        return AttentionContext(q_pos=pos, k_pos=pos)

    fope = pezoo.create("fope", dims=DIMS, sigma=0.0)
    for got, want in zip(fope.qk(1, q, k, ctx()), pezoo.create("rope", dims=DIMS).qk(1, q, k, ctx()), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    clipped = pezoo.create("fope", dims=DIMS, sigma=0.0, train_length=24)  # 2 of 8 pairs kept
    p_rope = pezoo.create("p_rope", dims=DIMS, p=2 / 8)
    for got, want in zip(clipped.qk(0, q, k, ctx()), p_rope.qk(0, q, k, ctx()), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_coefficients_start_at_the_identity_plus_the_official_xavier_noise():
    """eye_xavier_norm: std = σ · sqrt(2 / (k·k + h·k)) for (h, k, k) matrices, per layer."""
    torch.manual_seed(1)
    dims = pezoo.ModelDims(d_model=512, n_heads=8, n_layers=2)  # e = 64: 32 pairs, none clipped
    pe = pezoo.create("fope", dims=dims, sigma=0.3)
    noise = (pe.cos_coef - torch.eye(32)).flatten()
    want = 0.3 * math.sqrt(2 / (32 * 32 + 8 * 32))
    assert float(noise.std()) == pytest.approx(want, rel=0.05) and abs(float(noise.mean())) < want / 10
    assert not torch.equal(pe.cos_coef, pe.sin_coef) and not torch.equal(pe.cos_coef[0], pe.cos_coef[1])


def test_fixed_coefficients_are_saved_and_learnable_ones_learn_through_every_backend():
    fixed = pezoo.create("fope", dims=DIMS, train_length=100)
    assert not list(fixed.parameters()) and set(fixed.state_dict()) == {"cos_coef", "sin_coef"}
    tokens = torch.randint(16, (2, 9), generator=torch.Generator().manual_seed(2))
    grads = {}
    for backend in ("eager", "sdpa", "flex"):
        torch.manual_seed(3)
        pe = pezoo.create("fope", dims=DIMS, train_length=100, learnable=True)
        model = KitModel(pe, DIMS, vocab=16, backend=backend)
        with quiet_flex_warnings():  # flex has no backward pass on CPU: sdpa's gradient there
            model(tokens, torch.arange(9)[None]).logsumexp(-1).sum().backward()
        grads[backend] = (pe.cos_coef.grad, pe.sin_coef.grad)
    assert all(float(g.abs().sum()) > 0 for g in grads["eager"])
    for backend in ("sdpa", "flex"):
        for got, want in zip(grads[backend], grads["eager"], strict=True):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "options", [{}, {"train_length": 24}, {"train_length": 300, "learnable": True, "layout": "half"}]
)
def test_cached_decoding_equals_the_full_pass(options):
    check_incremental_decoding(lambda: pezoo.create("fope", dims=DIMS, **options), KitConfig(dims=DIMS, length=13))


def test_reset_parameters_draws_again_from_the_identity():
    pe = pezoo.create("fope", dims=DIMS, sigma=0.0)
    with torch.no_grad():
        pe.cos_coef.fill_(3.0)
    pe.reset_parameters()
    assert torch.equal(pe.cos_coef, torch.eye(8).expand(2, 4, 8, 8))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"train_length": 0}, r"train_length must be an integer >= 1"),
        ({"sigma": -0.1}, r"sigma must be a finite number >= 0"),
        ({"learnable": "yes"}, r"learnable must be true or false"),
        ({"layout": "pairs"}, r"layout must be one of 'interleaved', 'half'"),
        ({"head_dim": 15}, r"head_dim must be even"),
        ({"base": 0.5}, r"base must be a finite number > 1"),
    ],
)
def test_bad_options_are_errors_naming_them(options, message):
    with pytest.raises(ValueError, match=message):
        pezoo.create("fope", **{"head_dim": 16, "n_heads": 4, "n_layers": 2, **options})


def test_wrong_shapes_are_named():
    pe = pezoo.create("fope", dims=DIMS)
    pos = torch.arange(3)[None]
    ctx = AttentionContext(q_pos=pos, k_pos=pos)
    with pytest.raises(ValueError, match="n_layers=2"):
        pe.qk(2, torch.randn(1, 4, 3, 16), torch.randn(1, 4, 3, 16), ctx)
    with pytest.raises(ValueError, match="n_heads=4"):
        pe.qk(0, torch.randn(1, 2, 3, 16), torch.randn(1, 2, 3, 16), ctx)


def test_a_clipping_fope_builds_on_the_meta_device_and_materialises():
    """Deferred initialisation (and the harness's preflight) build on ``meta``, where a boolean
    mask cannot select the kept frequencies: they are counted instead."""
    with torch.device("meta"):
        pe = pezoo.create("fope", dims=DIMS, train_length=24)
    assert pe.n_kept == 2 and pe.omega.is_meta
    pe.to_empty(device="cpu")
    pe.reset_parameters()
    torch.testing.assert_close(pe.omega, torch.tensor(kept_frequencies(16, 10000.0, 24), dtype=torch.float32))
