"""Learned PRF / LBPE (Chen, Liang, Lin §VII-B) and its scale-hint variant (§VII-A)."""

from __future__ import annotations

import math
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import pezoo
from pezoo import AttentionContext


def _mlp_by_hand(pe, layer: int, feats: torch.Tensor) -> torch.Tensor:
    """φ from the network's weights, written out: ReLU layers, then softmax over slots."""
    linears = [m for m in pe.prf_nets[layer].modules() if isinstance(m, torch.nn.Linear)]
    x = feats
    for lin in linears[:-1]:
        x = torch.clamp(x @ lin.weight.T + lin.bias, min=0)
    logits = x @ linears[-1].weight.T + linears[-1].bias
    return torch.exp(logits - logits.logsumexp(-1, keepdim=True))


@settings(max_examples=25, deadline=None)
@given(
    q_pos=st.lists(st.integers(0, 3000), min_size=1, max_size=6, unique=True),
    k_pos=st.lists(st.integers(0, 3000), min_size=1, max_size=6, unique=True),
    n=st.integers(1, 500),
)
def test_prf_is_a_distribution_over_slots(q_pos, k_pos, n):
    torch.manual_seed(0)
    for name, slots, hint in (("learned_prf", 16, None), ("learned_prf_sh", 32, torch.tensor([n]))):
        pe = pezoo.create(name, d_model=16, n_heads=2, n_layers=2)
        qp, kp = torch.tensor([sorted(q_pos)]), torch.tensor([sorted(k_pos)])
        phi = pe.prf(1, qp, kp, hint)
        assert phi.shape == (1, len(q_pos), len(k_pos), slots)
        assert bool((phi >= 0).all())
        torch.testing.assert_close(phi.sum(-1), torch.ones(phi.shape[:-1]))
        # the network on raw features [i, j, i - j (, n)] / 16
        i, j = qp[0, :, None].double().expand(-1, len(k_pos)), kp[0, None, :].double().expand(len(q_pos), -1)
        feats = [i, j, i - j] + ([torch.full_like(i, n)] if hint is not None else [])
        want = _mlp_by_hand(pe, 1, (torch.stack(feats, -1) / 16).float())
        torch.testing.assert_close(phi[0], want, atol=1e-5, rtol=1e-4)


def test_bias_is_the_key_side_lbpe_term_of_the_paper():
    """(h_j + Pᵀφ(i,j))ᵀ W_Kᵀ W_Q h_i, per head, equals ⟨q_i, k_j⟩ + bias after scaling."""
    torch.manual_seed(0)
    d, h, s, slots = 8, 2, 5, 6
    e = d // h
    pe = pezoo.create("learned_prf", d_model=d, n_heads=h, n_layers=1, n_slots=slots)
    w_q, w_k = torch.randn(d, d), torch.randn(d, d)
    p = torch.randn(slots, d)
    with torch.no_grad():
        pe.slot_keys[0] = (p @ w_k.T).view(slots, h, e)  # K_s = W_K P_s, split into heads
    hidden = torch.randn(1, s, d)
    q = (hidden @ w_q.T).view(1, s, h, e).transpose(1, 2)  # (b, h, i, e)
    k = (hidden @ w_k.T).view(1, s, h, e).transpose(1, 2)
    pos = torch.arange(s)[None] * 3 + 1
    ctx = AttentionContext(q_pos=pos, k_pos=pos)
    (bias,) = pe.bias(0, q, k, ctx)
    got = torch.einsum("bhie,bhje->bhij", q, k) / math.sqrt(e) + bias.materialize(ctx, h, torch.float32)
    phi = pe.prf(0, pos, pos).detach()[0]  # (i, j, S)
    want = torch.empty(1, h, s, s)
    for i in range(s):
        for j in range(s):
            lbpe = p.T @ phi[i, j]  # (d,) convex combination of slots
            key = w_k @ (hidden[0, j] + lbpe)  # key input h_j + LBPE(i, j)
            query = w_q @ hidden[0, i]
            for head in range(h):
                sl = slice(head * e, (head + 1) * e)
                want[0, head, i, j] = query[sl] @ key[sl] / math.sqrt(e)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_scale_hint_per_example_equals_one_example_at_a_time():
    torch.manual_seed(1)
    pe = pezoo.create("learned_prf_sh", d_model=16, n_heads=4, n_layers=1)
    q, k = torch.randn(5, 4, 6, 4), torch.randn(5, 4, 6, 4)
    pos = torch.arange(6)[None]
    hints = torch.tensor([3, 7, 3, 12, 7])
    (batched,) = pe.bias(0, q, k, AttentionContext(q_pos=pos, k_pos=pos, scale_hint=hints))
    for b in range(5):
        ctx = AttentionContext(q_pos=pos, k_pos=pos, scale_hint=hints[b : b + 1])
        (one,) = pe.bias(0, q[b : b + 1], k[b : b + 1], ctx)
        torch.testing.assert_close(batched.tensor[b : b + 1], one.tensor)
    assert not torch.allclose(batched.tensor[0], batched.tensor[1])  # n changes φ(i, j, n)


def test_scale_hint_per_query_token_gives_each_query_row_its_own_n():
    """A packed row holds several instances: (b, i) hints give row i of the bias the
    bias computed with query i's n alone (and one n per row equals the (b,) form)."""
    torch.manual_seed(2)
    pe = pezoo.create("learned_prf_sh", d_model=16, n_heads=4, n_layers=1)
    q, k = torch.randn(2, 4, 6, 4), torch.randn(2, 4, 6, 4)
    pos = torch.arange(6)[None]
    hints = torch.tensor([[3, 3, 3, 9, 9, 9], [5, 5, 2, 2, 2, 2]])
    (mixed,) = pe.bias(0, q, k, AttentionContext(q_pos=pos, k_pos=pos, scale_hint=hints))
    for b in range(2):
        for i in range(6):
            ctx = AttentionContext(q_pos=pos, k_pos=pos, scale_hint=hints[b, i].view(1))
            (alone,) = pe.bias(0, q[b : b + 1], k[b : b + 1], ctx)
            torch.testing.assert_close(mixed.tensor[b, :, i], alone.tensor[0, :, i])
    flat = torch.tensor([4, 11])
    (per_row,) = pe.bias(0, q, k, AttentionContext(q_pos=pos, k_pos=pos, scale_hint=flat))
    (per_token,) = pe.bias(0, q, k, AttentionContext(q_pos=pos, k_pos=pos, scale_hint=flat[:, None].expand(2, 6)))
    torch.testing.assert_close(per_row.tensor, per_token.tensor)


@pytest.mark.parametrize("name", ["learned_prf_sh", "randomized:learned_prf_sh"])
def test_one_scale_hint_shared_by_the_batch_gives_every_example_its_own_bias(name):
    """A (1,) hint used to build the bias from example 0's queries alone, (1, h, i, j),
    which then broadcast onto the other examples."""
    torch.manual_seed(3)
    pe = pezoo.create(name, d_model=16, n_heads=4, n_layers=1)
    q, k = torch.randn(3, 4, 6, 4), torch.randn(3, 4, 6, 4)
    pos = torch.arange(6)[None]
    (shared,) = pe.bias(0, q, k, AttentionContext(q_pos=pos, k_pos=pos, scale_hint=torch.tensor([5])))
    assert shared.tensor.shape == (3, 4, 6, 6)
    for b in range(3):
        ctx = AttentionContext(q_pos=pos, k_pos=pos, scale_hint=torch.tensor([5]))
        (alone,) = pe.bias(0, q[b : b + 1], k[b : b + 1], ctx)
        torch.testing.assert_close(shared.tensor[b : b + 1], alone.tensor)


@pytest.mark.parametrize("shape", [(3,), (2, 5), (3, 1), (3, 6)])
def test_a_scale_hint_of_another_shape_is_an_error(shape):
    pe = pezoo.create("learned_prf_sh", d_model=16, n_heads=4, n_layers=1)
    q = torch.randn(2, 4, 6, 4)
    pos = torch.arange(6)[None]
    ctx = AttentionContext(q_pos=pos, k_pos=pos, scale_hint=torch.full(shape, 5))
    with pytest.raises(ValueError, match=re.escape(f"(2,), (2, 1), (2, 6) or (1, 6); got {shape}")):
        pe.bias(0, q, q, ctx)


def test_a_column_of_scale_hints_is_one_per_example():
    """(b, 1), a column of per-example n, broadcast over the queries before 568e751; it is
    the (b,) form, not an error."""
    torch.manual_seed(4)
    pe = pezoo.create("learned_prf_sh", d_model=16, n_heads=4, n_layers=1)
    q, k = torch.randn(2, 4, 6, 4), torch.randn(2, 4, 6, 4)
    pos = torch.arange(6)[None]
    hints = torch.tensor([4, 9])
    (flat,) = pe.bias(0, q, k, AttentionContext(q_pos=pos, k_pos=pos, scale_hint=hints))
    (column,) = pe.bias(0, q, k, AttentionContext(q_pos=pos, k_pos=pos, scale_hint=hints[:, None]))
    torch.testing.assert_close(column.tensor, flat.tensor, rtol=0, atol=0)


def test_scale_hint_is_required():
    pe = pezoo.create("learned_prf_sh", d_model=8, n_heads=2, n_layers=1)
    pos = torch.arange(3)[None]
    with pytest.raises(ValueError, match="scale_hint"):
        pe.bias(0, torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4), AttentionContext(q_pos=pos, k_pos=pos))


def test_options_and_gradients():
    pe = pezoo.create("learned_prf", dims=pezoo.ModelDims(16, 2, 3), n_slots=5, hidden=7, depth=3)
    assert pe.slot_keys.shape == (3, 5, 2, 8)
    assert len(pe.prf_nets) == 3
    assert sum(isinstance(m, torch.nn.Linear) for m in pe.prf_nets[0].modules()) == 4
    assert pezoo.create("learned_prf_sh", dims=pezoo.ModelDims(16, 2, 3)).n_slots == 32
    pos = torch.arange(4)[None]
    (bias,) = pe.bias(2, torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8), AttentionContext(q_pos=pos, k_pos=pos))
    bias.tensor.pow(2).sum().backward()
    assert pe.slot_keys.grad[2].abs().sum() > 0 and pe.slot_keys.grad[:2].abs().sum() == 0
    assert all(p.grad is not None for p in pe.prf_nets[2].parameters())


def test_half_precision_keeps_positions_exact():
    pe = pezoo.create("learned_prf", d_model=8, n_heads=2, n_layers=1)
    q_pos, k_pos = torch.tensor([[2000]]), torch.tensor([[1999, 2000]])
    full = pe.prf(0, q_pos, k_pos)
    pe.to(torch.bfloat16)
    half = pe.prf(0, q_pos, k_pos)
    assert half.dtype == torch.float32  # bf16 cannot tell 1999 from 2000
    torch.testing.assert_close(half, full, atol=0.02, rtol=0.05)
