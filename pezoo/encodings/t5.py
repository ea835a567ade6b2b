"""T5 relative position bias (Raffel et al. 2020, "Exploring the Limits of Transfer
Learning with a Unified Text-to-Text Transformer", §2.1).

Each head adds a learned scalar that depends only on the bucket of the relative position
n = pos_i - pos_j (query minus key):

    causal (unidirectional):  n ← max(n, 0), all B buckets for n >= 0
    bidirectional:            B/2 buckets per sign, keys after the query offset by B/2
    exact buckets:            n < B'/2 gets bucket n                      (B' = buckets per sign)
    log buckets:              B'/2 + ⌊ log(n / (B'/2)) / log(D / (B'/2)) · B'/2 ⌋, capped at B' - 1

with D = ``max_distance``: every distance >= D shares the last bucket, which is what makes
the bias defined at any length. One (B, h) table, shared by all layers as in T5.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from pezoo.base import AttentionBias, AttentionContext, DenseBias, PositionalEncoding, register


def t5_relative_bucket(relative: Tensor, *, bidirectional: bool, num_buckets: int, max_distance: int) -> Tensor:
    """Bucket ids of relative positions ``pos_i - pos_j`` (any shape) -> same shape, long."""
    relative = relative.to(torch.int64)
    offset = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        offset = (relative < 0).to(torch.int64) * num_buckets  # keys after the query
        n = relative.abs()
    else:
        n = relative.clamp(min=0)
    max_exact = num_buckets // 2
    scaled = torch.log(n.clamp(min=1).to(torch.float32) / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (scaled * (num_buckets - max_exact)).to(torch.int64)
    large = large.clamp(max=num_buckets - 1)
    return offset + torch.where(n < max_exact, n, large)


@register("t5")
class T5Bias(PositionalEncoding):
    """T5 bucketed relative position bias (Raffel et al. 2020): a learned scalar per (bucket, head).

    Args:
        n_heads: heads h.
        num_buckets: B (32 in T5).
        max_distance: D; distances >= D share the last bucket (128 in T5).
        bidirectional: split buckets by the sign of pos_i - pos_j (encoders); decoders use False.
        init_std: std of the normal initialisation of the table.
    """

    def __init__(
        self,
        *,
        n_heads: int,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = False,
        init_std: float = 0.02,
    ) -> None:
        super().__init__()
        per_sign = num_buckets // 2 if bidirectional else num_buckets
        if per_sign < 2 or max_distance <= per_sign // 2:
            raise ValueError(
                f"need at least 2 buckets per direction and max_distance > {per_sign // 2}; "
                f"got num_buckets={num_buckets}, max_distance={max_distance}"
            )
        self.n_heads, self.num_buckets, self.max_distance = n_heads, num_buckets, max_distance
        self.bidirectional = bidirectional
        self.table = nn.Parameter(torch.randn(num_buckets, n_heads) * init_std)  # (B, h)

    def bias(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> list[AttentionBias]:
        if "t5" not in ctx.scratch:  # same for every layer of this call
            rel = ctx.q_pos[:, :, None] - ctx.k_pos[:, None, :]  # (b|1, i, j)
            buckets = t5_relative_bucket(
                rel, bidirectional=self.bidirectional, num_buckets=self.num_buckets, max_distance=self.max_distance
            )
            ctx.scratch["t5"] = self.table[buckets].permute(0, 3, 1, 2)  # (b|1, h, i, j)
        return [DenseBias(ctx.scratch["t5"])]

    def extra_repr(self) -> str:
        return (
            f"n_heads={self.n_heads}, num_buckets={self.num_buckets}, max_distance={self.max_distance}, "
            f"bidirectional={self.bidirectional}"
        )
