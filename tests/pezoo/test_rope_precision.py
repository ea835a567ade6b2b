"""RoPE keeps its angles in fp32 under bf16 autocast: positions beyond 2048 stay exact.

bf16 has an 8-bit significand, so integers above 256 are rounded (4097 becomes 4096) and
an angle ``pos * theta`` computed in bf16 is off by up to a radian and more at the
highest frequency. The reference here is the rotation written out in float64.
"""

from __future__ import annotations

import pytest
import torch

import pezoo

HEAD_DIM = 16
POSITIONS = [2049, 2051, 3001, 4097, 6143, 8191, 12289, 65537]


def rotation_float64(x: torch.Tensor, pos: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoFormer's rotation of interleaved pairs, in float64: x (b, h, s, e), pos (s,)."""
    x = x.to(torch.float64)
    e = x.shape[-1]
    out = torch.empty_like(x)
    for i in range(e // 2):
        theta = base ** (-2.0 * i / e)
        angle = pos.to(torch.float64) * theta  # (s,)
        c, s = torch.cos(angle), torch.sin(angle)
        even, odd = x[..., 2 * i], x[..., 2 * i + 1]
        out[..., 2 * i] = even * c - odd * s
        out[..., 2 * i + 1] = even * s + odd * c
    return out


def bf16_ulp(x: torch.Tensor) -> torch.Tensor:
    """Spacing of bf16 numbers at |x| (8-bit significand): 2^(floor(log2|x|) - 7)."""
    mag = x.abs().clamp_min(1e-30)
    return torch.exp2(torch.floor(torch.log2(mag)) - 7)


def allowed_error(x: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """One bf16 rounding of the output, plus an angle error of 2^-9 rad times the pair's norm.

    fp32 angles of positions up to 65537 are accurate to about 1e-3 rad (the rounding of
    ``pos * theta``); bf16 angles are off by up to a radian.
    """
    pair_norm = x.to(torch.float64).unflatten(-1, (-1, 2)).norm(dim=-1, keepdim=True).expand(*x.shape[:-1], -1, 2)
    return bf16_ulp(want) + 2.0**-9 * pair_norm.flatten(-2)


@pytest.fixture
def qk_bf16() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, len(POSITIONS), HEAD_DIM, generator=gen).to(torch.bfloat16)
    k = torch.randn(2, 3, len(POSITIONS), HEAD_DIM, generator=gen).to(torch.bfloat16)
    return q, k


def test_rope_under_bf16_autocast_matches_float64_rotation(qk_bf16):
    q, k = qk_bf16
    pos = torch.tensor(POSITIONS)
    rope = pezoo.create("rope", head_dim=HEAD_DIM)
    ctx = pezoo.AttentionContext(q_pos=pos[None], k_pos=pos[None])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        q_rot, k_rot = rope.qk(0, q, k, ctx)
    assert q_rot.dtype == torch.bfloat16 and k_rot.dtype == torch.bfloat16
    for got, x in ((q_rot, q), (k_rot, k)):
        want = rotation_float64(x, pos)
        err = (got.to(torch.float64) - want).abs()
        assert bool((err <= allowed_error(x, want)).all()), float((err / allowed_error(x, want)).max())


def test_bf16_angles_would_fail_the_same_check(qk_bf16):
    """The check above can fail: computing the angles in bf16 breaks it at these positions."""
    q, _ = qk_bf16
    pos = torch.tensor(POSITIONS)
    assert not torch.equal(pos.to(torch.bfloat16).to(torch.int64), pos)  # bf16 cannot hold them
    e = HEAD_DIM
    inv_freq = (10000.0 ** (-torch.arange(0, e, 2, dtype=torch.float32) / e)).to(torch.bfloat16)
    angle = (pos.to(torch.bfloat16)[:, None] * inv_freq).to(torch.float64)  # (s, e/2), rounded
    x = q.to(torch.float64).unflatten(-1, (-1, 2))
    c, s = torch.cos(angle), torch.sin(angle)
    naive = torch.stack([x[..., 0] * c - x[..., 1] * s, x[..., 0] * s + x[..., 1] * c], -1).flatten(-2)
    want = rotation_float64(q, pos)
    err = (naive - want).abs()
    assert float((err / allowed_error(q, want)).max()) > 10.0


def test_rope_scores_depend_only_on_offset_beyond_2048():
    """<R(m) q, R(n) k> = <R(m + c) q, R(n + c) k> for large m, n under autocast (fp32 angles)."""
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(1, 1, 1, HEAD_DIM, generator=gen)
    k = torch.randn(1, 1, 1, HEAD_DIM, generator=gen)
    rope = pezoo.create("rope", head_dim=HEAD_DIM)

    def score(m: int, n: int) -> float:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            qm, _ = rope.qk(0, q, q, pezoo.AttentionContext(q_pos=torch.tensor([[m]]), k_pos=torch.tensor([[m]])))
            kn, _ = rope.qk(0, k, k, pezoo.AttentionContext(q_pos=torch.tensor([[n]]), k_pos=torch.tensor([[n]])))
        return float((qm * kn).sum())

    base = score(5, 2)
    for shift in (4096, 8190, 30001):
        assert score(5 + shift, 2 + shift) == pytest.approx(base, abs=1e-3)
