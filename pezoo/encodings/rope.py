"""Rotary position embedding (Su et al. 2021, RoFormer §3.4).

Each pair of q/k features (2i, 2i+1) is rotated by the angle ``pos * theta_i`` with
``theta_i = base^(-2i/e)``; in complex form ``(x_2i + i x_2i+1) * exp(i pos theta_i)``.
The score <R(m) q, R(n) k> then depends only on m - n. Angles and the rotation are
computed in fp32 whatever the input dtype (positions > 2048 stay exact under bf16), and
the result is cast back.
"""

from __future__ import annotations

import torch
from torch import Tensor

from pezoo.base import AttentionContext, PositionalEncoding, register


def rope_angles(pos: Tensor, head_dim: int, base: float = 10000.0) -> Tensor:
    """Rotation angles: pos (b|1, s) -> (b|1, 1, s, e/2) float32, ``pos * base^(-2i/e)``."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, device=pos.device, dtype=torch.float32) / head_dim)
    return (pos.to(torch.float32)[..., None] * inv_freq)[:, None]  # (b, 1, s, e/2)


def rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate interleaved feature pairs of x (b, h, s, e) by angles given as cos/sin (.., e/2)."""
    xf = x.to(torch.float32).unflatten(-1, (-1, 2))  # (b, h, s, e/2, 2)
    even, odd = xf[..., 0], xf[..., 1]
    out = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return out.flatten(-2).to(x.dtype)


def rotate_pairs_complex(x: Tensor, rotation: Tensor) -> Tensor:
    """:func:`rotate_pairs` as one complex product: pairs of x (b, h, s, e) as complex numbers
    ``x_2i + i x_2i+1`` times ``rotation`` = ``exp(i angle)`` (.., e/2) complex64, in fp32.

    Same result as :func:`rotate_pairs` up to fp32 rounding; one kernel forward and one
    backward instead of eight elementwise ops each (RoPE cost 1.2× NoPE's training step
    at the ruoss size with the real form; docs/performance.md).
    """
    pairs = torch.view_as_complex(x.to(torch.float32).unflatten(-1, (-1, 2)).contiguous())  # (b, h, s, e/2)
    return torch.view_as_real(pairs * rotation).flatten(-2).to(x.dtype)


@register("rope")
class RoPE(PositionalEncoding):
    """Rotary position embedding (Su et al. 2021) applied to q and k of every layer.

    Args:
        head_dim: per-head q/k width e (even).
        base: frequency base (10000 in the paper).
    """

    def __init__(self, *, head_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"RoPE needs an even head_dim, got {head_dim}")
        self.head_dim, self.base = head_dim, base

    def qk(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor]:
        """q, k (b, h, i, e) at positions ctx.q_pos -> rotated q, k."""
        if "rope" not in ctx.scratch:  # once per call, shared by all layers
            angles = rope_angles(ctx.q_pos, self.head_dim, self.base)  # (b|1, 1, i, e/2) fp32
            ctx.scratch["rope"] = torch.polar(torch.ones_like(angles), angles)  # exp(i angle), complex64
        rotation = ctx.scratch["rope"]
        return rotate_pairs_complex(q, rotation), rotate_pairs_complex(k, rotation)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}"
