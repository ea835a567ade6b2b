"""xPos against the paper's formula: per feature pair, RoPE's rotation times ζ_i^((n − m)/B)."""

from __future__ import annotations

import cmath
import math

import pytest
import torch

import pezoo
from pezoo.encodings.xpos import xpos_rotation, xpos_zeta


def _naive_score(q: torch.Tensor, k: torch.Tensor, n: int, m: int, base: float, scale_base: float) -> float:
    """<f_q(q, n), f_k(k, m)> = Σ_i Re[ q_i conj(k_i) ζ_i^((n−m)/B) e^(i (n−m) θ_i) ] in complex pairs
    (Sun et al. 2023, §3), ζ_i = (2i/e + 0.4)/1.4, θ_i = base^(−2i/e)."""
    e = q.shape[-1]
    total = 0.0
    for i in range(e // 2):
        zq = complex(q[2 * i].item(), q[2 * i + 1].item())
        zk = complex(k[2 * i].item(), k[2 * i + 1].item())
        zeta = (2 * i / e + 0.4) / 1.4
        theta = base ** (-2 * i / e)
        total += (zq * zk.conjugate() * zeta ** ((n - m) / scale_base) * cmath.exp(1j * (n - m) * theta)).real
    return total


def test_zeta_follows_the_paper():
    assert xpos_zeta(8).tolist() == pytest.approx([(2 * i / 8 + 0.4) / 1.4 for i in range(4)])


@pytest.mark.parametrize("scale_base", [512.0, 4.0])
def test_scores_match_the_formula(scale_base):
    torch.manual_seed(0)
    e = 8
    pe = pezoo.create("xpos", head_dim=e, scale_base=scale_base)
    pos = torch.tensor([[0, 1, 3, 7, 20, 33]])
    q, k = torch.randn(1, 2, 6, e), torch.randn(1, 2, 6, e)
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    q2, k2 = pe.qk(0, q, k, ctx)
    scores = torch.einsum("bhie,bhje->bhij", q2, k2)
    for h in range(2):
        for a, n in enumerate(pos[0].tolist()):
            for b, m in enumerate(pos[0].tolist()):
                want = _naive_score(q[0, h, a], k[0, h, b], n, m, 10000.0, scale_base)
                assert scores[0, h, a, b].item() == pytest.approx(want, rel=1e-4, abs=1e-4)


def test_query_is_scaled_up_and_key_down_relative_to_the_centre():
    e = 4
    pos = torch.tensor([[10, 11, 12, 13, 14]])
    center = torch.tensor([[12]])
    rot_q = xpos_rotation(pos, center, e, scale_base=2.0)  # (1, 1, 5, 2)
    rot_k = xpos_rotation(pos, center, e, scale_base=2.0, key=True)
    for t, n in enumerate(pos[0].tolist()):
        for i in range(e // 2):
            zeta, theta = (2 * i / e + 0.4) / 1.4, 10000 ** (-2 * i / e)
            want_q = zeta ** ((n - 12) / 2.0) * cmath.exp(1j * n * theta)
            want_k = zeta ** (-(n - 12) / 2.0) * cmath.exp(1j * n * theta)
            assert complex(rot_q[0, 0, t, i].item()) == pytest.approx(want_q, rel=1e-5)
            assert complex(rot_k[0, 0, t, i].item()) == pytest.approx(want_k, rel=1e-5)


def test_large_positions_stay_finite_thanks_to_the_centre():
    """At position 50 000 the uncentred factor ζ_0^(n/512) underflows in fp32 (e^-122);
    centred on the call, the scores are finite and carry the decay of the distance."""
    e = 8
    far = torch.arange(50_000, 50_008)[None]
    uncentred = xpos_rotation(far, torch.zeros(1, 1), e)
    assert uncentred[..., 0].abs().min() == 0  # the failure the centre avoids
    torch.manual_seed(1)
    pe = pezoo.create("xpos", head_dim=e)
    q, k = torch.randn(1, 1, 8, e), torch.randn(1, 1, 8, e)
    q2, k2 = pe.qk(0, q, k, pezoo.AttentionContext(q_pos=far, k_pos=far))
    assert torch.isfinite(q2).all() and torch.isfinite(k2).all()
    scores = torch.einsum("bhie,bhje->bhij", q2, k2)
    for a in range(8):
        for b in range(8):
            n, m = far[0, a].item(), far[0, b].item()
            # angles of positions ~5e4 carry fp32 rounding (~4e-3 rad): a looser tolerance
            assert scores[0, 0, a, b].item() == pytest.approx(
                _naive_score(q[0, 0, a], k[0, 0, b], n, m, 1e4, 512), abs=0.05
            )


def test_centre_is_fixed_by_the_first_call_and_reused():
    pe = pezoo.create("xpos", head_dim=4)
    state: dict = {}
    q = k = torch.ones(1, 1, 4, 4)
    pe.qk(0, q, k, pezoo.AttentionContext(q_pos=torch.arange(4)[None], k_pos=torch.arange(4)[None], state=state))
    assert state["xpos_center"].tolist() == [[1]]
    one = torch.ones(1, 1, 1, 4)
    pe.qk(0, one, one, pezoo.AttentionContext(q_pos=torch.tensor([[4]]), k_pos=torch.arange(5)[None], state=state))
    assert state["xpos_center"].tolist() == [[1]]


def test_reduces_to_rope_without_decay():
    """With ζ ≡ 1 (γ → ∞ makes every ζ_i → 1) xPos is RoPE."""
    torch.manual_seed(2)
    xpos, rope = pezoo.create("xpos", head_dim=8, gamma=1e9), pezoo.create("rope", head_dim=8)
    q, k = torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    pos = torch.tensor([[0, 2, 4, 9, 12]])
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    rope_ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    for got, want in zip(xpos.qk(0, q, k, ctx), rope.qk(0, q, k, rope_ctx), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_rejects_odd_head_dim_and_bad_scales():
    with pytest.raises(ValueError, match="even head_dim"):
        pezoo.create("xpos", head_dim=7)
    with pytest.raises(ValueError, match="scale_base"):
        pezoo.create("xpos", head_dim=8, scale_base=0.0)
    assert math.isfinite(pezoo.create("xpos", head_dim=8).scale_base)


def test_blockwise_mask_matches_its_definition():
    """Blockwise causal attention: positions in blocks of ``block``; a query sees the keys
    of its own block and of the block before (the causal mask is the caller's)."""
    block, n = 3, 11
    pos = torch.arange(n)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    mask = pezoo.BlockMask(block).materialize(ctx, 4, torch.float32)  # (1, 1, i, j)
    for i in range(n):
        for j in range(n):
            seen = j // block in (i // block - 1, i // block) or j // block > i // block
            assert (mask[0, 0, i, j] == 0) == seen and (mask[0, 0, i, j] == -math.inf) != seen, (i, j)
    # a query in block b sees back to the start of block b - 1: between block and 2*block - 1 keys
    causal = [sum(1 for j in range(i + 1) if mask[0, 0, i, j] == 0) for i in range(n)]
    assert causal == [1, 2, 3, 4, 5, 6, 4, 5, 6, 4, 5]


@pytest.mark.parametrize("bad", [0, -2, 2.5, True, "3"])
def test_blockwise_needs_a_whole_block(bad):
    with pytest.raises((ValueError, TypeError), match="blockwise"):
        pezoo.create("xpos", head_dim=8, blockwise=bad)
    with pytest.raises(ValueError, match="BlockMask"):
        pezoo.BlockMask(bad)


def test_blockwise_is_a_bias_only_and_changes_no_parameter():
    plain, blockwise = pezoo.create("xpos", head_dim=8), pezoo.create("xpos", head_dim=8, blockwise=4)
    pos = torch.arange(6)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    q = torch.randn(1, 2, 6, 8)
    assert plain.bias(0, q, q, ctx) == []
    [mask] = blockwise.bias(0, q, q, ctx)
    assert isinstance(mask, pezoo.BlockMask) and mask.block == 4
    assert plain.state_dict().keys() == blockwise.state_dict().keys()  # trained weights load either way


def test_blockwise_xpos_passes_the_kit():
    """Decoding in steps equals the full pass, every backend agrees, nothing leaks from the
    future, with blocks short enough that the kit's sequences cross several."""
    from pezoo.testing import check_encoding

    dims = pezoo.ModelDims(d_model=32, n_heads=4, n_layers=2)
    check_encoding(lambda: pezoo.create("xpos", dims=dims, blockwise=3), dims)


def test_blockwise_takes_numpy_integers_and_refuses_a_bidirectional_model():
    import numpy as np

    pe = pezoo.create("xpos", head_dim=8, blockwise=np.int64(4))
    pos = torch.arange(6)[None]
    q = torch.randn(1, 2, 6, 8)
    [mask] = pe.bias(0, q, q, pezoo.AttentionContext(q_pos=pos, k_pos=pos))
    assert mask.block == 4 and type(mask.block) is int
    with pytest.raises(ValueError, match="blockwise \\*causal\\* attention"):
        pe.bias(0, q, q, pezoo.AttentionContext(q_pos=pos, k_pos=pos, causal=False))
