"""ALiBi: attention with linear biases (Press et al. 2022).

Head h adds ``-m_h * (pos_i - pos_j)`` to its scores (after the 1/sqrt(e) scaling; the
bias is *not* scaled). Slopes form a geometric sequence: for n heads, n a power of two,
``m_h = 2^(-8h/n)``, h = 1..n. For other n (paper §3, footnote), take the 2^k slopes of
the largest power of two 2^k < n, then the odd-indexed slopes of the 2^(k+1) sequence
until n slopes are there.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from pezoo.base import AttentionBias, AttentionContext, LinearBias, PositionalEncoding, register


def alibi_slopes(n_heads: int) -> list[float]:
    """The ALiBi slope of each of ``n_heads`` heads (any n >= 1)."""
    if n_heads < 1:
        raise ValueError(f"n_heads must be >= 1, got {n_heads}")

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    if math.log2(n_heads).is_integer():
        return power_of_two(n_heads)
    lower = 2 ** math.floor(math.log2(n_heads))
    return power_of_two(lower) + power_of_two(2 * lower)[0::2][: n_heads - lower]


@register("alibi")
class ALiBi(PositionalEncoding):
    """Linear distance bias per head (Press et al. 2022); no position in embeddings or q/k.

    Args:
        n_heads: number of heads; slopes from :func:`alibi_slopes`.
    """

    slopes: Tensor

    def __init__(self, *, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.register_buffer("slopes", torch.tensor(alibi_slopes(n_heads)), persistent=False)

    def reset_parameters(self) -> None:
        """Rebuild the slopes in place (a derived, non-persistent buffer: not in the state dict,
        so after ``to_empty`` of a meta-device model this is what restores them)."""
        with torch.no_grad():
            self.slopes.copy_(torch.tensor(alibi_slopes(self.n_heads), device="cpu"))

    def bias(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> list[AttentionBias]:
        return [LinearBias(self.slopes)]

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}"
