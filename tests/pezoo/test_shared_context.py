"""Two instances of an encoding in one model share one ``AttentionContext`` per forward
call (docs/use-in-your-model.md): each must read its own memo and state, never the
other's. Reference: each instance alone with a fresh context."""

from __future__ import annotations

import torch
from torch import Tensor

import pezoo
from pezoo.context import AttentionContext


def _ctx(length: int = 8) -> AttentionContext:
    pos = torch.arange(length)[None]
    return AttentionContext(q_pos=pos, k_pos=pos)


def _qk(length: int = 8, e: int = 16) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(1, 2, length, e, generator=g), torch.randn(1, 2, length, e, generator=g)


def _second_of_two(first: pezoo.PositionalEncoding, second: pezoo.PositionalEncoding) -> tuple[Tensor, Tensor]:
    """second's q/k after first used the same context, and second's alone."""
    q, k = _qk()
    shared = _ctx()
    first.qk(0, q, k, shared)
    together = second.qk(1, q, k, shared)
    alone = second.qk(1, q, k, _ctx())
    return torch.cat(together), torch.cat(alone)


def test_rope_with_two_bases_in_one_model():
    """Local layers with base 1e4 and global ones with 1e6 (Gemma-3's layout)."""
    together, alone = _second_of_two(pezoo.RoPE(head_dim=16, base=1e4), pezoo.RoPE(head_dim=16, base=1e6))
    assert torch.equal(together, alone)


def test_partial_rope_beside_full_rope():
    together, alone = _second_of_two(pezoo.RoPE(head_dim=16), pezoo.RoPE(head_dim=16, rotary_dim=8))
    assert torch.equal(together, alone)


def test_xpos_with_two_scale_bases():
    first = pezoo.create("xpos", head_dim=16, scale_base=512.0)
    together, alone = _second_of_two(first, pezoo.create("xpos", head_dim=16, scale_base=64.0))
    assert torch.equal(together, alone)


def test_two_t5_tables_each_get_their_own_bias_and_gradient():
    t1, t2 = pezoo.create("t5", n_heads=2), pezoo.create("t5", n_heads=2)
    with torch.no_grad():
        t2.table.add_(1.0)  # the two tables differ
    q, k = _qk()
    shared = _ctx()
    b1 = t1.bias(0, q, k, shared)[0].materialize(shared, 2, torch.float32)
    b2 = t2.bias(1, q, k, shared)[0].materialize(shared, 2, torch.float32)
    alone = _ctx()
    assert torch.equal(b2, t2.bias(1, q, k, alone)[0].materialize(alone, 2, torch.float32))
    assert not torch.equal(b1, b2)
    (b1.sum() + b2.sum()).backward()
    assert t1.table.grad is not None and t2.table.grad is not None  # both tables train


def test_two_abacus_encoders_keep_their_own_state():
    """Abacus keeps the digit run and offset of the sequence in ctx.state across calls."""
    a, b = pezoo.create("abacus", d_model=4).eval(), pezoo.create("abacus", d_model=4).eval()
    tokens = torch.tensor([[3, 4, 5, 1, 6, 7]])
    digits = torch.tensor(a.digit_ids)
    tokens = digits[tokens % len(digits)]
    x = torch.zeros(1, 3, 4)
    shared, alone = _ctx(6), _ctx(6)
    for part in (tokens[:, :3], tokens[:, 3:]):  # two decoding calls
        a.embed_tokens(x, part, shared)
        together = b.embed_tokens(x, part, shared)
        by_itself = b.embed_tokens(x, part, alone)
        assert torch.equal(together, by_itself)


def test_two_prism_encoders_keep_their_own_streams():
    dims = pezoo.ModelDims(d_model=16, n_heads=2, n_layers=1)
    torch.manual_seed(0)
    first, second = pezoo.create("prism", dims=dims), pezoo.create("prism", dims=dims)
    x = torch.randn(1, 8, 16)
    q, k = _qk(8, 8)
    shared = _ctx()
    first.observe(0, x, shared)
    second.observe(0, x * 2, shared)
    together = torch.cat(first.qk(0, q, k, shared))
    alone_ctx = _ctx()
    first.observe(0, x, alone_ctx)
    assert torch.equal(together, torch.cat(first.qk(0, q, k, alone_ctx)))
