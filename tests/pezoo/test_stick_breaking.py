"""Stick-breaking attention against the paper's product, written out per (i, j) in float64:
A_ij = σ(z_ij) ∏_{j<k<i} (1 − σ(z_ik)), the remainder ∏_{k<i} (1 − σ(z_ik)) on the query's own
value; stable at extreme scores; decoding in pieces equals the full pass; gradients equal the
formula's; every backend but eager refuses it by name."""

from __future__ import annotations

import math

import pytest
import torch

import pezoo
from pezoo.backends import flex_compile
from pezoo.encodings.stick_breaking import StickBreakingWeights, stick_breaking_weights
from pezoo.testing import KitModel

DIMS = pezoo.ModelDims(d_model=16, n_heads=2, n_layers=2)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def _reference_weights(z: torch.Tensor, remainder: str, live: list[bool] | None = None) -> torch.Tensor:
    """Tan et al. 2025, §2: the stick broken from the nearest earlier key outwards; ``live``
    marks the keys that exist (padding does not), ``z`` is (i, j) with query a at key a + j − i."""
    i, j = z.shape
    live = live or [True] * j
    out = torch.zeros(i, j, dtype=torch.float64)
    for a in range(i):
        own = a + j - i
        for key in range(own):
            if not live[key]:
                continue
            weight = _sigmoid(float(z[a, key]))
            for k in range(key + 1, own):
                if live[k]:
                    weight *= 1.0 - _sigmoid(float(z[a, k]))
            out[a, key] = weight
        if remainder == "self" and live[own]:
            rest = 1.0
            for k in range(own):
                if live[k]:
                    rest *= 1.0 - _sigmoid(float(z[a, k]))
            out[a, own] = rest
    return out


@pytest.mark.parametrize("remainder", ["self", "none"])
def test_weights_match_the_papers_product(remainder):
    torch.manual_seed(0)
    pe = pezoo.create("stick_breaking", remainder=remainder)
    q, k, v = (torch.randn(2, 3, 6, 4) * 2 for _ in range(3))
    pos = torch.arange(6)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    out, probs = pezoo.attend(q, k, v, ctx, normaliser=pe.normaliser(0, ctx), return_probs=True)
    for b in range(2):
        for h in range(3):
            z = (q[b, h] @ k[b, h].T / 2).double()  # scale 1/sqrt(4)
            want = _reference_weights(z, remainder)
            torch.testing.assert_close(probs[b, h].double(), want, atol=1e-6, rtol=1e-5)
            torch.testing.assert_close(out[b, h].double(), want @ v[b, h].double(), atol=1e-5, rtol=1e-5)
    if remainder == "self":
        torch.testing.assert_close(probs.sum(-1), torch.ones(2, 3, 6))  # every row a distribution
    else:
        assert (probs[..., 0, :] == 0).all()  # the first token has no earlier key


def test_padded_keys_are_not_on_the_stick():
    torch.manual_seed(1)
    z = torch.randn(1, 1, 5, 7) * 3
    live = [True, False, True, True, False, True, True]
    allowed = torch.tensor(live)[None, None, None, :] & (torch.arange(7)[None, :] <= torch.arange(5)[:, None] + 2)
    got = stick_breaking_weights(z, allowed)
    want = _reference_weights(z[0, 0].double(), "self", live)
    torch.testing.assert_close(got[0, 0].double(), want, atol=1e-6, rtol=1e-5)


def test_extreme_scores_stay_finite_and_exact_in_log_space():
    """Scores of ±60 over 400 keys: the products underflow in linear space, not in log space."""
    torch.manual_seed(2)
    z = (torch.randn(1, 2, 400, 400) * 60).requires_grad_()
    weights = stick_breaking_weights(z, None)
    assert torch.isfinite(weights).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(1, 2, 400), atol=1e-5, rtol=0)
    weights.square().sum().backward()
    assert torch.isfinite(z.grad).all()
    row = 399  # the last query against a float64 log-space evaluation of the same product
    zd = z.detach()[0, 0, row].double()
    log_rest = torch.nn.functional.logsigmoid(-zd)
    for key in (0, 100, 398):
        log_a = torch.nn.functional.logsigmoid(zd[key]) + log_rest[key + 1 : row].sum()
        assert weights[0, 0, row, key].item() == pytest.approx(log_a.exp().item(), rel=1e-4, abs=1e-30)


def test_decoding_in_pieces_equals_the_full_pass():
    torch.manual_seed(3)
    for backend in ("eager", "auto"):
        model = KitModel(pezoo.create("stick_breaking"), DIMS, vocab=11, backend=backend).eval()
        tokens, pos = torch.randint(11, (2, 12)), torch.arange(12)[None]
        with torch.no_grad():
            full = model(tokens, pos)
            state: dict = {}
            pieces = [model(tokens[:, a:z], pos, state=state) for a, z in ((0, 5), (5, 6), (6, 11), (11, 12))]
        torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-5)


def test_gradients_equal_the_formulas():
    torch.manual_seed(4)
    q, k, v = (torch.randn(1, 2, 5, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    pos = torch.arange(5)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    out, _ = pezoo.attend(q, k, v, ctx, normaliser=StickBreakingWeights())
    got = torch.autograd.grad(out.square().sum(), (q, k, v))
    z = q @ k.transpose(-1, -2) / 2  # the formula with autograd: products, no log space
    beta = torch.sigmoid(z)
    rows = []
    for a in range(5):
        weights = []
        for key in range(5):
            if key < a:
                weights.append(beta[..., a, key] * torch.prod(1 - beta[..., a, key + 1 : a], dim=-1))
            elif key == a:
                weights.append(torch.prod(1 - beta[..., a, :a], dim=-1))
            else:
                weights.append(torch.zeros_like(beta[..., a, 0]))
        rows.append(torch.stack(weights, -1))
    want = torch.autograd.grad((torch.stack(rows, -2) @ v).square().sum(), (q, k, v))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("backend", ["sdpa", "flex", "xformers"])
def test_backends_that_fuse_a_softmax_refuse_it_naming_eager(backend):
    model = KitModel(pezoo.create("stick_breaking"), DIMS, vocab=11, backend=backend).eval()
    with pytest.raises(ValueError, match=rf"the {backend} backend cannot express StickBreakingWeights.*'eager'"):
        with torch.no_grad(), flex_compile(False):
            model(torch.randint(11, (1, 4)), torch.arange(4)[None])
    assert pezoo.create("stick_breaking").attention_backends() == ("eager",)


def test_bad_options_and_bidirectional_attention_are_clear_errors():
    with pytest.raises(ValueError, match="remainder must be one of 'self', 'none'"):
        pezoo.create("stick_breaking", remainder="bias")
    pos = torch.arange(3)[None]
    with pytest.raises(ValueError, match="causal attention only"):
        pezoo.create("stick_breaking").normaliser(0, pezoo.AttentionContext(q_pos=pos, k_pos=pos, causal=False))
