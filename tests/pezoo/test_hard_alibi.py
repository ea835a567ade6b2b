"""Hard-ALiBi (Jelassi et al. 2024; Turing Programs §2.3): windowed heads + NoPE heads."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import pezoo
from pezoo import AttentionContext, WindowMask, attend
from pezoo.attention import dense_mask
from pezoo.backends import flex_compile, xformers_plan
from pezoo.encodings.hard_alibi import default_masked_heads


@settings(max_examples=40, deadline=None)
@given(n_heads=st.integers(1, 12), data=st.data(), s=st.integers(1, 24))
def test_window_membership(n_heads, data, s):
    """Head m (1-based) <= M sees key j iff i - m < j <= i; heads past M see every j <= i."""
    n_masked = data.draw(st.integers(0, n_heads))
    pe = pezoo.create("hard_alibi", n_heads=n_heads, n_masked=n_masked)
    pos = torch.arange(s)[None]
    ctx = AttentionContext(q_pos=pos, k_pos=pos, causal=True)
    biases = pe.bias(0, torch.zeros(1, n_heads, s, 4), torch.zeros(1, n_heads, s, 4), ctx)
    allowed = torch.isfinite(dense_mask(ctx, biases, n_heads, s, s, torch.float32, torch.device("cpu")))[0]
    for h in range(n_heads):
        m = h + 1
        for i in range(s):
            for j in range(s):
                want = (i - m < j <= i) if m <= n_masked else (j <= i)
                assert bool(allowed[h, i, j]) == want, (h, i, j)


def test_window_one_head_returns_its_own_value():
    pe = pezoo.create("hard_alibi", n_heads=4, n_masked=2)
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 8)
    pos = torch.arange(7)[None]
    ctx = AttentionContext(q_pos=pos, k_pos=pos)
    out, probs = attend(q, k, v, ctx, pe.bias(0, q, k, ctx), return_probs=True)
    torch.testing.assert_close(out[:, 0], v[:, 0])  # window 1: only itself
    # window 2: softmax over {i-1, i} of the scaled scores
    s = torch.einsum("bie,bje->bij", q[:, 1], k[:, 1]) / math.sqrt(8)
    for i in range(1, 7):
        w = torch.softmax(torch.stack([s[:, i, i - 1], s[:, i, i]], -1), -1)
        torch.testing.assert_close(out[:, 1, i], w[:, :1] * v[:, 1, i - 1] + w[:, 1:] * v[:, 1, i])
    assert probs[:, 3].count_nonzero() > 0 and bool((probs[:, 3].triu(1) == 0).all())  # NoPE head: causal only


def test_default_masked_heads():
    assert default_masked_heads(8) == 6  # the paper's best M for addition
    assert default_masked_heads(16) == 6
    assert default_masked_heads(4) == 3  # keeps one global head
    assert pezoo.create("hard_alibi", n_heads=4).windows.tolist() == [1.0, 2.0, 3.0, math.inf]
    with pytest.raises(ValueError, match="n_masked"):
        pezoo.create("hard_alibi", n_heads=4, n_masked=5)


def test_no_learned_state():
    pe = pezoo.create("hard_alibi", n_heads=8)
    assert list(pe.state_dict()) == [] and not list(pe.parameters())


def test_flex_and_xformers_never_build_a_dense_mask(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a WindowMask was materialised")

    pe = pezoo.create("hard_alibi", n_heads=4)
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 20, 8), torch.randn(1, 4, 20, 8), torch.randn(1, 4, 20, 8)
    pos = torch.arange(20)[None]
    ctx = AttentionContext(q_pos=pos, k_pos=pos)
    biases = pe.bias(0, q, k, ctx)
    want, _ = attend(q, k, v, ctx, biases)
    monkeypatch.setattr(WindowMask, "materialize", refuse)
    monkeypatch.setattr(WindowMask, "allowed", refuse)
    with flex_compile(False), torch.no_grad():
        got, _ = attend(q, k, v, ctx, biases, backend="flex")
    torch.testing.assert_close(got, want)
    plan = xformers_plan(ctx, biases, n_queries=20)  # local-attention masks per window group
    assert plan is not None and sorted(w for _, w in plan) == [1.0, 2.0, 3.0, math.inf]
