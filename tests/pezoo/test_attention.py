"""The attention backends agree with the eager reference, with causal masks and padding."""

from __future__ import annotations

import math

import pytest
import torch

import pezoo
from pezoo.attention import dense_mask
from pezoo.backends import flex_compile, xformers_available

DIMS = pezoo.ModelDims(d_model=32, n_heads=4, n_layers=2)
# xformers runs only on CUDA; flex runs uncompiled here (its compiled kernel is tested in test_backends_flex)
BACKENDS = [b for b in sorted(pezoo.BACKENDS) if b != "eager" and (b != "xformers" or xformers_available())]


@pytest.fixture(autouse=True)
def _uncompiled_flex():
    with flex_compile(False):
        yield


ENCODINGS = pezoo.available()


def reference_attention(q, k, v, mask_bool, bias, scale):
    """Softmax attention written out with loops over heads: independent of pezoo.attend."""
    b, h, i, _ = q.shape
    out = torch.zeros(b, h, i, v.shape[-1], dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            scores = (q[bi, hi].double() @ k[bi, hi].double().T) * scale + bias[bi, hi].double()
            scores = scores.masked_fill(~mask_bool[bi], -math.inf)
            out[bi, hi] = scores.softmax(-1) @ v[bi, hi].double()
    return out


def test_eager_equals_written_out_softmax_with_causal_mask_and_padding():
    torch.manual_seed(0)
    b, h, s, e = 2, 3, 6, 4
    q, k, v = (torch.randn(b, h, s, e) for _ in range(3))
    pos = torch.arange(s)[None]
    padding = torch.ones(b, s, dtype=torch.bool)
    padding[1, :2] = False  # row 1 is left-padded by two tokens
    slopes = torch.tensor([0.5, 0.25, 0.1])
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos, key_padding_mask=padding)
    out, _ = pezoo.attend(q, k, v, ctx, [pezoo.LinearBias(slopes)], backend="eager")
    causal = torch.tril(torch.ones(s, s, dtype=torch.bool))
    mask = causal[None] & padding[:, None, :]
    dist = (torch.arange(s)[:, None] - torch.arange(s)[None, :]).abs().float()
    bias = (-slopes[:, None, None] * dist).expand(b, h, s, s)
    expected = reference_attention(q, k, v, mask, bias, 1 / math.sqrt(e))
    real_rows = mask.any(-1)  # queries at padding positions see nothing: their output is unspecified
    for bi in range(b):
        rows = real_rows[bi] & padding[bi]
        torch.testing.assert_close(out[bi][:, rows].double(), expected[bi][:, rows], atol=1e-5, rtol=1e-5)


def test_fully_masked_rows_stay_finite():
    pos = torch.arange(4)[None]
    padding = torch.tensor([[False, False, True, True]])
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos, key_padding_mask=padding)
    mask = dense_mask(ctx, [], 1, 4, 4, torch.float32, torch.device("cpu"))
    q = k = v = torch.randn(1, 1, 4, 2)
    for backend in ["eager", *BACKENDS]:
        out, _ = pezoo.attend(q, k, v, ctx, backend=backend)
        assert torch.isfinite(out).all(), backend
    assert torch.isfinite(mask[0, 0, 0]).all()


def test_window_mask_membership():
    """WindowMask(w): key j visible from query i iff 0 <= i - j < w (with the causal mask)."""
    pos = torch.arange(7)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    windows = torch.tensor([1.0, 3.0, math.inf])
    mask = dense_mask(ctx, [pezoo.WindowMask(windows)], 3, 7, 7, torch.float32, torch.device("cpu"))
    for h, w in enumerate([1, 3, None]):
        for i in range(7):
            for j in range(7):
                visible = j <= i and (w is None or i - j < w)
                assert (mask[0, h, i, j].item() == 0.0) == visible


def _hooked_attention(pe, q, k, v, ctx, backend):
    q2, k2 = pe.qk(0, q, k, ctx)
    return pezoo.attend(q2, k2, v, ctx, pe.bias(0, q2, k2, ctx), scale=1 / math.sqrt(q.shape[-1]), backend=backend,
                        transform=pe.score_transform(0, ctx), normaliser=pe.normaliser(0, ctx))[0]  # fmt: skip


CAUSAL_ONLY = ("cope", "fox", "stick_breaking")
"""Encodings defined for causal attention only (under a wrapper too: ssmax:cope): CoPE counts keys from
the key up to the query, FoX sums the forget gates between them, stick-breaking breaks the stick over
the keys before the query."""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ENCODINGS)
@pytest.mark.parametrize("causal", [True, False])
def test_backends_agree_with_eager(name, backend, causal):
    if name.rpartition(":")[2] in CAUSAL_ONLY and not causal:
        pytest.skip(f"{name} is defined for causal attention only")
    torch.manual_seed(0)
    pe = pezoo.create(name, dims=DIMS).eval()
    takes = pe.attention_backends()
    if takes is not None and backend not in (*takes, "auto"):
        pytest.skip(f"{name} runs on {', '.join(takes)} only (its refusal elsewhere: tests/pezoo/test_scores.py)")
    b, h, s, e = 2, DIMS.n_heads, 11, DIMS.head_dim
    x = torch.randn(b, s, DIMS.d_model)
    q, k, v = (torch.randn(b, h, s, e) for _ in range(3))
    pos = torch.arange(s)[None]
    padding = torch.ones(b, s, dtype=torch.bool)
    padding[0, :3] = False
    outs = {}
    for bk in ("eager", backend):
        ctx = pezoo.AttentionContext(
            q_pos=pos, k_pos=pos, causal=causal, key_padding_mask=padding, scale_hint=torch.full((b,), s)
        )
        pe.observe(0, x, ctx)
        outs[bk] = _hooked_attention(pe, q, k, v, ctx, bk)
    valid = padding[:, None, :, None].expand_as(outs["eager"])
    torch.testing.assert_close(outs[backend][valid], outs["eager"][valid], atol=2e-5, rtol=2e-5)


def test_unknown_backend_lists_valid_ones():
    pos = torch.arange(2)[None]
    q = torch.randn(1, 1, 2, 2)
    with pytest.raises(pezoo.UnknownNameError, match="sdpa"):
        pezoo.attend(q, q, q, pezoo.AttentionContext(q_pos=pos, k_pos=pos), backend="nope")


@pytest.mark.parametrize("backend", ["eager", *BACKENDS])
@pytest.mark.parametrize("odd", ["k", "v"])
def test_q_k_v_of_different_dtypes_are_a_clear_error(backend, odd):
    """q in bf16 with k and v in fp32 failed in torch's words on eager and sdpa ("expected
    scalar type BFloat16 but found Float") and ran silently on flex; under autocast they mix."""
    pos = torch.arange(5)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    q, k, v = (torch.randn(2, 4, 5, 8) for _ in range(3))
    if odd == "k":
        q = q.bfloat16()
    else:
        v = v.bfloat16()
    with pytest.raises(ValueError, match="attend wants q, k and v of one dtype; got q torch"):
        pezoo.attend(q, k, v, ctx, backend=backend)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = pezoo.attend(q, k, v.bfloat16(), ctx, backend="eager")
    assert out.shape == (2, 4, 5, 8)


@pytest.mark.parametrize("causal", [False, True])
def test_dense_mask_unmasks_exactly_the_rows_with_no_key(causal):
    """Rows whose every key is masked become all-zero (finite softmax); every other row keeps
    its -inf entries. Checked element by element against the definition, with a padding-only
    mask (b, 1, 1, j) broadcast over queries, and with Hard-ALiBi's windows on top."""
    b, h, s = 3, 4, 5
    pos = torch.arange(s)[None].expand(b, s)
    padding = torch.tensor([[True] * s, [True, True, False, False, False], [False] * s])
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos, causal=causal, key_padding_mask=padding)
    for biases in ([], pezoo.create("hard_alibi", n_heads=h).bias(0, None, None, ctx)):
        mask = dense_mask(ctx, biases, h, s, s, torch.float32, torch.device("cpu"))
        mask = mask.expand(b, h, s, s)
        allowed = padding[:, None, None, :].expand(b, h, s, s).clone()
        if causal:
            allowed &= torch.ones(s, s, dtype=torch.bool).tril()
        for bias in biases:
            allowed &= ~torch.isneginf(bias.materialize(ctx, h, torch.float32).expand(b, h, s, s))
        dead = ~allowed.any(dim=-1)  # (b, h, i)
        assert torch.equal(mask[dead], torch.zeros_like(mask[dead]))
        assert torch.equal(torch.isneginf(mask[~dead]), ~allowed[~dead])


@pytest.mark.parametrize("mode", ["mask", "causal", "plain"])
def test_scores_first_equals_torch_sdpa(mode):
    """The CPU path for queries wider than their values and keys (PRISM's extended q/k at short
    lengths) computes F.scaled_dot_product_attention's result, in float64 to rounding."""
    from pezoo.attention import _fused_sdpa

    g = torch.Generator().manual_seed(0)
    b, h, s, e, f = 2, 3, 7, 40, 8  # e > s and f < e: the scores-first branch
    q, k = (torch.randn(b, h, s, e, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(b, h, s, f, generator=g, dtype=torch.float64)
    kwargs = {"scale": 0.3}
    if mode == "mask":
        kwargs["attn_mask"] = torch.randn(b, 1, s, s, generator=g, dtype=torch.float64).masked_fill(
            torch.ones(s, s, dtype=torch.bool).triu(1), -math.inf
        )
    elif mode == "causal":
        kwargs["is_causal"] = True
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)
    torch.testing.assert_close(_fused_sdpa(q, k, v, **kwargs), want, rtol=1e-12, atol=1e-12)


def _self_attention_call(ctx: pezoo.AttentionContext, s: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    torch.manual_seed(0)
    attn = pezoo.SelfAttention(32, 4, layer=1)
    return attn(torch.randn(2, s, 32), pezoo.create("rope", dims=DIMS), ctx)


def test_self_attention_caches_keys_only_for_a_kept_state():
    """A full pass whose state is dropped (``state_kept=False``, as in training) writes no
    KV cache: a per-layer entry in ``ctx.state`` made each block's compiled graph differ by
    its layer. A kept state caches the keys, and the next call reads them."""
    pos = torch.arange(5)[None]
    dropped = pezoo.AttentionContext(q_pos=pos, k_pos=pos, state_kept=False)
    want, _ = _self_attention_call(dropped, 5)
    assert dropped.state == {}
    kept = pezoo.AttentionContext(q_pos=pos[:, :3], k_pos=pos[:, :3])
    _self_attention_call(kept, 3)
    assert set(kept.state) == {("kv", 1)}
    torch.manual_seed(0)
    attn = pezoo.SelfAttention(32, 4, layer=1)
    x = torch.randn(2, 5, 32)
    rope = pezoo.create("rope", dims=DIMS)
    state: dict = {}
    first, _ = attn(x[:, :3], rope, pezoo.AttentionContext(q_pos=pos[:, :3], k_pos=pos[:, :3], state=state))
    rest, _ = attn(x[:, 3:], rope, pezoo.AttentionContext(q_pos=pos[:, 3:], k_pos=pos, state=state))
    torch.testing.assert_close(torch.cat([first, rest], dim=1), want)


def test_self_attention_without_the_cache_its_positions_claim_is_a_clear_error():
    """k_pos holding keys before the queries with no KV cache in ``ctx.state`` (a decoding
    call handed a fresh state) names the missing cache, not a broadcast of positions."""
    pos = torch.arange(5)[None]
    with pytest.raises(ValueError, match=r"2 key\(s\) before the queries, but ctx.state has no KV cache for layer 1"):
        _self_attention_call(pezoo.AttentionContext(q_pos=pos[:, 2:], k_pos=pos), 3)


@pytest.mark.parametrize("backend", ["eager", *BACKENDS])
@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_grouped_query_attention_gives_each_query_head_its_key_value_head(backend, kv_heads):
    """k, v with g heads dividing q's h (GQA; MQA at g = 1): query head i attends with
    key/value head i // (h/g), against softmax written out here. Every backend failed in
    torch's words before (flex after a compile attempt)."""
    torch.manual_seed(0)
    b, h, s, e, f = 2, 4, 6, 8, 5
    q, k, v = torch.randn(b, h, s, e), torch.randn(b, kv_heads, s, e), torch.randn(b, kv_heads, s, f)
    pos = torch.arange(s)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    biases = pezoo.create("alibi", n_heads=h).bias(0, q, k, ctx)
    out, _ = pezoo.attend(q, k, v, ctx, biases, backend=backend)
    slopes = biases[0].slopes  # (h,)
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    for head in range(h):
        g = head // (h // kv_heads)
        scores = q[:, head] @ k[:, g].transpose(-1, -2) / math.sqrt(e)  # (b, s, s)
        scores = scores - slopes[head] * (pos[0][:, None] - pos[0][None, :]).abs()
        probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        torch.testing.assert_close(out[:, head], probs @ v[:, g], atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("k_shape", "v_shape", "message"),
    [
        ((2, 3, 6, 8), (2, 3, 6, 8), "k and v have 3 heads, which must divide q's 4"),
        ((2, 2, 6, 8), (2, 1, 6, 8), "k and v must have the same heads and keys"),
        ((2, 2, 6, 4), (2, 2, 6, 8), "q and k must share their head width"),
        ((2, 2, 6, 8), (3, 2, 6, 8), "k and v have batch 2, 3 for q's 2"),
    ],
)
def test_keys_and_values_that_do_not_fit_the_queries_are_named(k_shape, v_shape, message):
    q, pos = torch.randn(2, 4, 6, 8), torch.arange(6)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    for backend in ["eager", *BACKENDS]:
        with pytest.raises(ValueError, match=message):
            pezoo.attend(q, torch.randn(k_shape), torch.randn(v_shape), ctx, backend=backend)
