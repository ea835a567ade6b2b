"""SSMax (Nakanishi 2025, "Scalable-Softmax Is Superior for Attention") and Llama 4's attention
temperature, as the ``ssmax:`` wrapper: against the papers' formulas written out here."""

from __future__ import annotations

import math

import pytest
import torch

import pezoo
from pezoo import AttentionContext
from pezoo.encodings.ssmax import (
    BEAM_ATTN_SCALE,
    BEAM_FLOOR_SCALE,
    SSMax,
    fixed_query_scale,
    llama4_query_scale,
    visible_keys,
)
from pezoo.setups import paper_options
from pezoo.testing import KitConfig, check_incremental_decoding
from pezoo.testing.kit import KitModel, quiet_flex_warnings

DIMS = pezoo.ModelDims(d_model=32, n_heads=4, n_layers=2)


def reference_ssmax_attention(q, k, v, s, *, causal=True, bias=None, real=None):
    """softmax((s_h log n_i) · <q_i, k_j>/sqrt(e) + bias_ij) v, element by element: n_i the keys
    query i sees (j <= i when causal; real keys only). q, k, v (h, s, e) one row; s (h,)."""
    h, n, e = q.shape
    real = [True] * n if real is None else real
    out = torch.zeros(h, n, v.shape[-1], dtype=torch.float64)
    for head in range(h):
        for i in range(n):
            keys = [j for j in range(n) if (j <= i or not causal) and real[j]]
            count = max(len(keys), 1)
            logits = []
            for j in keys:
                z = float(q[head, i] @ k[head, j]) / math.sqrt(e)
                logits.append(float(s[head]) * math.log(count) * z + (0.0 if bias is None else bias(head, i, j)))
            top = max(logits)
            weights = [math.exp(x - top) for x in logits]
            total = sum(weights)
            for w, j in zip(weights, keys, strict=True):
                out[head, i] += w / total * v[head, j].double()
    return out


def run(pe, q, k, v, ctx, layer=0):
    q2, k2 = pe.qk(layer, q, k, ctx)
    out, _ = pezoo.attend(q2, k2, v, ctx, pe.bias(layer, q2, k2, ctx), scale=1 / math.sqrt(q.shape[-1]))
    return out


@pytest.mark.parametrize("causal", [True, False])
def test_ssmax_over_nope_is_the_papers_softmax_of_s_log_n_times_the_logits(causal):
    torch.manual_seed(0)
    pe = pezoo.create("ssmax:nope", dims=DIMS)
    with torch.no_grad():
        pe.s.copy_(torch.tensor([[0.43, 0.9, -0.3, 1.7], [0.1, 0.2, 0.3, 0.4]]))
    q, k, v = (torch.randn(1, 4, 7, 8) for _ in range(3))
    pos = torch.arange(7)[None]
    ctx = AttentionContext(q_pos=pos, k_pos=pos, causal=causal)
    for layer in (0, 1):
        want = reference_ssmax_attention(q[0], k[0], v[0], pe.s[layer].detach(), causal=causal)
        torch.testing.assert_close(run(pe, q, k, v, ctx, layer)[0].double(), want, atol=1e-5, rtol=1e-5)


def test_a_wrapped_bias_is_added_unscaled():
    """ALiBi's bias is not multiplied by s log n (the temperature acts on q, as Llama 4 and the paper do)."""
    torch.manual_seed(1)
    pe = pezoo.create("ssmax:alibi", dims=DIMS, s_init=0.8)
    q, k, v = (torch.randn(1, 4, 6, 8) for _ in range(3))
    pos = torch.arange(6)[None]
    ctx = AttentionContext(q_pos=pos, k_pos=pos)
    slopes = pezoo.encodings.alibi_slopes(4)
    want = reference_ssmax_attention(q[0], k[0], v[0], pe.s[0].detach(), bias=lambda h, i, j: -slopes[h] * (i - j))
    torch.testing.assert_close(run(pe, q, k, v, ctx)[0].double(), want, atol=1e-5, rtol=1e-5)


def test_n_counts_the_real_keys_a_query_sees():
    pos = torch.arange(6)[None]
    mask = torch.tensor([[False, False, True, True, True, True], [True] * 6])  # row 0 left-padded by 2
    causal = AttentionContext(q_pos=pos, k_pos=pos, key_padding_mask=mask)
    assert visible_keys(causal, 6).tolist() == [[1, 1, 1, 2, 3, 4], [1, 2, 3, 4, 5, 6]]  # at least 1
    full = AttentionContext(q_pos=pos, k_pos=pos, key_padding_mask=mask, causal=False)
    assert visible_keys(full, 6).tolist() == [[4] * 6, [6] * 6]
    decoding = AttentionContext(q_pos=pos[:, 4:], k_pos=pos)  # two new queries after four cached keys
    assert visible_keys(decoding, 2).tolist() == [[5, 6]]


def test_a_left_padded_row_attends_as_it_does_alone():
    torch.manual_seed(2)
    pe = pezoo.create("ssmax:rope", dims=DIMS, s_init=1.3)
    q, k, v = (torch.randn(1, 4, 5, 8) for _ in range(3))
    alone = run(pe, q, k, v, AttentionContext(q_pos=torch.arange(5)[None], k_pos=torch.arange(5)[None]))
    pad = torch.zeros(1, 4, 2, 8)
    qp, kp, vp = (torch.cat([pad, t], dim=2) for t in (q, k, v))
    pos = torch.tensor([[0, 0, 0, 1, 2, 3, 4]])  # padding gets position 0 (pezoo.hf's plan)
    mask = torch.tensor([[False, False] + [True] * 5])
    padded = run(pe, qp, kp, vp, AttentionContext(q_pos=pos, k_pos=pos, key_padding_mask=mask))
    torch.testing.assert_close(padded[:, :, 2:], alone, atol=1e-5, rtol=1e-5)


def test_llama4_factor_is_transformers_formula():
    """transformers' Llama4TextAttention: log1p(floor((pos + 1) / 8192)) * 0.1 + 1, written out."""
    positions = [0, 1, 8190, 8191, 16383, 20000, 100_000, 1_000_000]
    got = llama4_query_scale(torch.tensor([positions])).flatten().tolist()
    want = [1 + 0.1 * math.log(math.floor((p + 1) / 8192) + 1) for p in positions]
    assert got == pytest.approx(want, rel=1e-6)
    assert got[:3] == [1.0, 1.0, 1.0] and got[3] > 1.0  # the first step is at position 8191


def test_llama4_form_scales_q_by_its_factor_and_has_no_parameters():
    pe = pezoo.create("ssmax:nope", dims=DIMS, form="llama4", floor_scale=4)
    assert not list(pe.parameters())
    q, k = torch.randn(2, 4, 3, 8), torch.randn(2, 4, 3, 8)
    pos = torch.tensor([[3, 9, 40]])
    q2, k2 = pe.qk(1, q, k, AttentionContext(q_pos=pos, k_pos=pos))
    factor = torch.tensor([1 + 0.1 * math.log(math.floor((p + 1) / 4) + 1) for p in (3, 9, 40)])
    torch.testing.assert_close(q2, q * factor[None, None, :, None])
    assert torch.equal(k2, k)


def test_ministral3_form_is_its_formula_without_llama4s_one():
    """transformers' Ministral 3 (get_llama_4_attn_scale): 1 + β log(1 + floor(pos / F)), written
    out; it steps one position before Llama 4's."""
    pe = pezoo.create("ssmax:rope", dims=DIMS, form="ministral3", attn_scale=0.5, floor_scale=4)
    assert not list(pe.parameters())
    q, k = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8)
    pos = torch.tensor([[2, 3, 4, 9, 40]])
    ctx = AttentionContext(q_pos=pos, k_pos=pos)
    q2, k2 = pe.qk(0, q, k, ctx)
    rotated_q, rotated_k = pe.inner.qk(0, q, k, ctx)
    factor = torch.tensor([1 + 0.5 * math.log(1 + math.floor(p / 4)) for p in (2, 3, 4, 9, 40)])
    torch.testing.assert_close(q2, rotated_q * factor[None, None, :, None])
    assert torch.equal(k2, rotated_k)
    llama4 = pezoo.create("ssmax:rope", dims=DIMS, form="llama4", attn_scale=0.5, floor_scale=4)
    assert llama4.qk(0, q, k, ctx)[0][:, :, 1].ne(q2[:, :, 1]).any()  # position 3: Llama 4 has stepped


def test_beam_form_is_a_power_of_the_position():
    """transformers' Beam (compute_attention_scaling): exp(β log1p((pos + 1) / F)), i.e.
    (1 + (pos + 1)/F)^β, written out; not floored, so it grows from position 0 (Beam's
    own constants 0.1 and 2048 at 2047: 2^0.1)."""
    pe = pezoo.create("ssmax:nope", dims=DIMS, form="beam", attn_scale=0.5, floor_scale=4)
    assert not list(pe.parameters())
    q, k = torch.randn(2, 4, 4, 8), torch.randn(2, 4, 4, 8)
    pos = torch.tensor([[0, 1, 9, 40]])
    q2, k2 = pe.qk(0, q, k, AttentionContext(q_pos=pos, k_pos=pos))
    factor = torch.tensor([(1 + (p + 1) / 4) ** 0.5 for p in (0, 1, 9, 40)])
    torch.testing.assert_close(q2, q * factor[None, None, :, None])
    assert torch.equal(k2, k)
    own = fixed_query_scale("beam", torch.tensor([[2047]]), BEAM_ATTN_SCALE, BEAM_FLOOR_SCALE)
    assert own.item() == pytest.approx(2**0.1, rel=1e-6)
    with pytest.raises(ValueError, match="no fixed temperature form 'ssmax'"):
        fixed_query_scale("ssmax", pos, 0.1, 4)


def test_s_is_per_layer_and_head_and_learns_through_every_backend():
    """(flex has no backward pass on CPU: there its gradient is sdpa's, with a warning; a GPU runs flex's own.)"""
    torch.manual_seed(3)
    tokens = torch.randint(16, (2, 9))
    grads = {}
    for backend in ("eager", "sdpa", "flex"):
        torch.manual_seed(4)  # the same model each time
        model = KitModel(pezoo.create("ssmax:rope", dims=DIMS), DIMS, vocab=16, backend=backend)
        with quiet_flex_warnings():
            model(tokens, torch.arange(9)[None]).logsumexp(-1).sum().backward()
        grads[backend] = model.pe.s.grad
    assert grads["eager"].shape == (2, 4) and bool((grads["eager"] != 0).all())
    for backend in ("sdpa", "flex"):
        torch.testing.assert_close(grads[backend], grads["eager"], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", ["ssmax:rope", "ssmax:alibi", "ssmax:ape"])
@pytest.mark.parametrize("form", ["ssmax", "llama4", "beam"])
def test_cached_decoding_equals_the_full_pass(name, form):
    options = {} if form == "ssmax" else {"floor_scale": 3}
    check_incremental_decoding(
        lambda: pezoo.create(name, dims=DIMS, form=form, **options), KitConfig(dims=DIMS, length=14)
    )


def test_randomized_wraps_ssmax_and_ssmax_refuses_what_it_cannot_wrap():
    pe = pezoo.create("randomized:ssmax:rope", dims=DIMS, max_length=64)
    assert isinstance(pe.inner, SSMax) and pe.name == "randomized:ssmax:rope"
    with pytest.raises(ValueError, match=r"chooses its own positions.*randomized:ssmax"):
        pezoo.create("ssmax:randomized:rope", dims=DIMS)
    with pytest.raises(ValueError, match="already ssmax"):
        SSMax(pezoo.create("ssmax:nope", dims=DIMS), n_heads=4, n_layers=2)
    assert "ssmax:nope" in pezoo.available() and "ssmax:randomized" not in pezoo.available()
    assert pezoo.is_known("ssmax:abacus+fire") and "ssmax:ssmax" not in pezoo.available()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"form": "softmax"}, r"form must be one of 'ssmax', 'llama4'"),
        ({"s_init": float("nan")}, r"s_init must be a finite number"),
        ({"floor_scale": 0}, r"floor_scale must be an integer >= 1"),
        ({"attn_scale": -1.0}, r"attn_scale must be a finite number >= 0"),
        ({"n_heads": 0}, r"n_heads must be an integer >= 1"),
    ],
)
def test_bad_options_are_errors_naming_them(options, message):
    with pytest.raises(ValueError, match=message):
        pezoo.create("ssmax:nope", **{"n_heads": 4, "n_layers": 2, **options})


def test_wrong_layer_or_head_count_is_named():
    pe = pezoo.create("ssmax:nope", dims=DIMS)
    pos = torch.arange(3)[None]
    ctx = AttentionContext(q_pos=pos, k_pos=pos)
    with pytest.raises(ValueError, match="n_layers=2"):
        pe.qk(2, torch.randn(1, 4, 3, 8), torch.randn(1, 4, 3, 8), ctx)
    with pytest.raises(ValueError, match="n_heads=4"):
        pe.qk(0, torch.randn(1, 3, 3, 8), torch.randn(1, 3, 3, 8), ctx)


def test_bare_ssmax_is_ssmax_over_rope_with_the_same_options():
    torch.manual_seed(0)
    a = pezoo.create("ssmax", dims=DIMS)
    b = pezoo.create("ssmax:rope", dims=DIMS)
    q, k = torch.randn(1, 4, 5, 8), torch.randn(1, 4, 5, 8)
    pos = torch.arange(5)[None]
    ctx = AttentionContext(q_pos=pos, k_pos=pos)
    for x, y in zip(a.qk(1, q, k, ctx), b.qk(1, q, k, AttentionContext(q_pos=pos, k_pos=pos)), strict=True):
        torch.testing.assert_close(x, y)
    assert pezoo.card_of("ssmax:alibi") is pezoo.card_of("ssmax")
    assert paper_options("ssmax:rope", "copy", DIMS) == {"form": "ssmax", "s_init": 0.43}
