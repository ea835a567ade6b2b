"""CoPE against the paper's formulas, written as loops over (i, j) with plain floats."""

from __future__ import annotations

import math

import pytest
import torch

import pezoo

DIMS = pezoo.ModelDims(d_model=32, n_heads=4, n_layers=2)


def _naive_cope(q, k, table, n_cached: int, npos_max: int, live=None):
    """q_i·e[p_ij] with g_it = σ(q_i·k_t / sqrt(e)), p_ij = min(Σ_{t=j..i} g_it, P − 1) and
    e[p] interpolated between ⌊p⌋ and ⌈p⌉ (Golovneva et al. 2024, §3). q (i, e), k (j, e),
    table (e, P). Returns {(i, j): value} for the keys query i sees."""
    n_q, e = q.shape[0], q.shape[1]
    out = {}
    for i in range(n_q):
        last = i + n_cached  # the query's own key index
        for j in range(last + 1):
            if live is not None and not live[j]:
                continue
            p = 0.0
            for t in range(j, last + 1):
                if live is None or live[t]:
                    p += 1 / (1 + math.exp(-sum(q[i, f].item() * k[t, f].item() for f in range(e)) / math.sqrt(e)))
            p = min(p, npos_max - 1)
            lo, hi = math.floor(p), math.ceil(p)
            w = p - lo
            emb = [w * table[f, hi].item() + (1 - w) * table[f, lo].item() for f in range(e)]
            out[i, j] = sum(q[i, f].item() * emb[f] for f in range(e))
    return out


@pytest.mark.parametrize("npos_max", [64, 3], ids=["unclipped", "clipped"])
def test_bias_matches_the_formula(npos_max):
    torch.manual_seed(0)
    pe = pezoo.create("cope", dims=DIMS, npos_max=npos_max)
    with torch.no_grad():
        pe.pos_emb.normal_()
    b, h, s, e = 2, 4, 7, 8
    q, k = torch.randn(b, h, s, e) * 2, torch.randn(b, h, s, e) * 2
    pos = torch.arange(s)[None]
    live = torch.ones(b, s, dtype=torch.bool)
    live[1, 2] = False  # a masked key in the middle: its gate counts for nothing
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos, key_padding_mask=live)
    (bias,) = pe.bias(1, q, k, ctx)
    dense = bias.materialize(ctx, h, torch.float32)
    assert dense.shape == (b, h, s, s)
    for bb in range(b):
        for hh in range(h):
            want = _naive_cope(q[bb, hh], k[bb, hh], pe.pos_emb[1], 0, npos_max, live[bb].tolist())
            for (i, j), value in want.items():
                assert dense[bb, hh, i, j].item() == pytest.approx(value, rel=1e-4, abs=1e-4)


def test_bias_with_cached_keys():
    torch.manual_seed(1)
    pe = pezoo.create("cope", head_dim=4, n_layers=1, npos_max=8)
    with torch.no_grad():
        pe.pos_emb.normal_()
    q, k = torch.randn(1, 1, 3, 4), torch.randn(1, 1, 9, 4)  # 3 new queries after 6 cached keys
    ctx = pezoo.AttentionContext(q_pos=torch.arange(6, 9)[None], k_pos=torch.arange(9)[None])
    (bias,) = pe.bias(0, q, k, ctx)
    dense = bias.materialize(ctx, 1, torch.float32)
    for (i, j), value in _naive_cope(q[0, 0], k[0, 0], pe.pos_emb[0], 6, 8).items():
        assert dense[0, 0, i, j].item() == pytest.approx(value, rel=1e-4, abs=1e-4)


def test_keys_and_layout_are_checked_against_the_context():
    """Only the new key of a cached step gave a (b, h, 1, 1) bias of that key alone, and a
    (b, s, h, e) layout a bias over heads instead of keys, both without an error."""
    pe = pezoo.create("cope", head_dim=8, n_layers=1)
    step = pezoo.AttentionContext(q_pos=torch.tensor([[5]]), k_pos=torch.arange(6)[None])
    q_new, k_new = torch.randn(2, 4, 1, 8), torch.randn(2, 4, 1, 8)
    with pytest.raises(ValueError, match=r"all keys, cached ones included: 6 .* got 1 keys"):
        pe.bias(0, q_new, k_new, step)
    assert pe.bias(0, q_new, torch.randn(2, 4, 6, 8), step)[0].tensor.shape == (2, 4, 1, 6)
    full = pezoo.AttentionContext(q_pos=torch.arange(6)[None], k_pos=torch.arange(6)[None])
    swapped = torch.randn(2, 6, 4, 8)
    with pytest.raises(ValueError, match=r"4 queries on axis 2 of q for 6 positions.*\(b, h, s, e\)"):
        pe.bias(0, swapped, swapped, full)
    with pytest.raises(ValueError, match="same batch and heads"):
        pe.bias(0, torch.randn(2, 4, 6, 8), torch.randn(2, 2, 6, 8), full)
    with pytest.raises(ValueError, match=r"shape \(b, h, s, e\)"):
        pe.bias(0, torch.randn(4, 6, 8), torch.randn(4, 6, 8), full)


def test_positions_count_gates_not_tokens():
    """With gates all 1 the contextual position is the token distance + 1; with gates 0 on
    the in-between keys it collapses: position is a count of what the gates select."""
    from pezoo.encodings.cope import cope_positions

    gates = torch.tensor([[1.0, 1.0, 1.0, 1.0]])
    assert cope_positions(gates).tolist() == [[4.0, 3.0, 2.0, 1.0]]
    gates = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    assert cope_positions(gates).tolist() == [[2.0, 1.0, 1.0, 1.0]]


def test_starts_at_zero_is_causal_only_and_not_randomizable():
    pe = pezoo.create("cope", dims=DIMS)
    assert pe.pos_emb.shape == (2, 8, 64) and not pe.pos_emb.any()
    assert "cope" in pezoo.available() and "randomized:cope" not in pezoo.available()
    pos = torch.arange(3)[None]
    q = torch.zeros(1, 4, 3, 8)
    with pytest.raises(ValueError, match="causal"):
        pe.bias(0, q, q, pezoo.AttentionContext(q_pos=pos, k_pos=pos, causal=False))
    with pytest.raises(ValueError, match="npos_max"):
        pezoo.create("cope", dims=DIMS, npos_max=1)


def test_gradients_reach_the_table_and_the_gates():
    torch.manual_seed(2)
    pe = pezoo.create("cope", head_dim=4, n_layers=1, npos_max=16)
    with torch.no_grad():
        pe.pos_emb.normal_()
    q, k = torch.randn(1, 1, 5, 4, requires_grad=True), torch.randn(1, 1, 5, 4, requires_grad=True)
    pos = torch.arange(5)[None]
    (bias,) = pe.bias(0, q, k, pezoo.AttentionContext(q_pos=pos, k_pos=pos))
    bias.tensor.tril().sum().backward()
    assert pe.pos_emb.grad.abs().sum() > 0 and k.grad.abs().sum() > 0  # k only through the gates


def test_a_nan_in_q_or_k_flows_on_as_nan_in_its_own_row():
    """A nan made nan positions, cast to int64's minimum as an index: a RuntimeError
    ("index -9223372036854775808 is out of bounds") where every other encoding passes it on."""
    pe = pezoo.create("cope", dims=pezoo.ModelDims(d_model=32, n_heads=4, n_layers=1)).eval()
    pos = torch.arange(6)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos, causal=True)
    for where in ("q", "k"):
        q, k = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8)
        (q if where == "q" else k)[0, 0, 3, 0] = float("nan")
        with torch.no_grad():
            (bias,) = pe.bias(0, q, k, ctx)
            dense = bias.materialize(ctx, 4, torch.float32)
        assert dense[0, 0].isnan().any() and not dense[1].isnan().any()  # the other batch row untouched
        clean = dense[0, 1:]  # the other heads of the same row, too
        assert not clean.isnan().any()
