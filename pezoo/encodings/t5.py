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

Lowering. The bias depends on n only, and every |n| >= 2D lies in the last bucket of its
sign, so it is a lookup table over the distances -2D..2D: ``lut[h, clamp(n, -2D, 2D) + 2D]``,
(h, 4D + 1) floats whatever the sequence length, gathered from the (B, h) table once per
forward call (so gradients reach the table through it). The bias is a
:class:`~pezoo.biases.RelativeFunctionBias` reading that table: flex looks it up in its
``score_mod`` per (query, key) without an (i, j) tensor; eager/sdpa/xformers materialise
it once per call (shared by the layers).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from pezoo.biases import AttentionBias, RelativeFunctionBias
from pezoo.cards import PaperCard, PlotLook
from pezoo.context import AttentionContext, check_number, check_sizes
from pezoo.interface import PositionalEncoding
from pezoo.registry import register


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


def t5_distance_bias(q_pos: Tensor, k_pos: Tensor, head: Tensor, lut: Tensor) -> Tensor:
    """``lut[h, clamp(q_pos - k_pos, -C, C) + C]`` with C = (lut columns - 1) / 2, elementwise.

    Args:
        q_pos, k_pos: float positions, broadcastable (e.g. (b, 1, i, 1) and (b, 1, 1, j)),
            or scalars inside a flex ``score_mod``.
        head: long head indices broadcastable with them (e.g. (1, h, 1, 1)).
        lut: (h, 2C + 1) bias per head and distance -C..C.
    """
    c = (lut.shape[-1] - 1) // 2
    idx = ((q_pos - k_pos).clamp(-c, c) + c).to(torch.int64)
    return lut[head, idx]


def t5_distance_bias_dense(q_pos: Tensor, k_pos: Tensor, lut: Tensor) -> Tensor:
    """:func:`t5_distance_bias` for all heads at once: (b|1, 1, i, 1), (b|1, 1, 1, j) -> (b|1, h, i, j)."""
    c = (lut.shape[-1] - 1) // 2
    idx = ((q_pos - k_pos).clamp(-c, c) + c).to(torch.int64)  # (b|1, 1, i, j)
    return lut.t()[idx[:, 0]].permute(0, 3, 1, 2)  # (b|1, i, j, h) -> (b|1, h, i, j)


CARD = PaperCard(look=PlotLook("#56B4E9", ""))  # sky blue, solid: its look on the published board


@register("t5", card=CARD)
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
        check_sizes("t5", n_heads=n_heads)
        per_sign = num_buckets // 2 if bidirectional else num_buckets
        if per_sign < 2 or max_distance <= per_sign // 2:
            raise ValueError(
                f"need at least 2 buckets per direction and max_distance > {per_sign // 2}; "
                f"got num_buckets={num_buckets}, max_distance={max_distance}"
            )
        self.n_heads, self.num_buckets, self.max_distance = n_heads, num_buckets, max_distance
        check_number("t5", "init_std", init_std, at_least=0)
        self.bidirectional, self.init_std = bidirectional, init_std
        self.table = nn.Parameter(torch.randn(num_buckets, n_heads) * init_std)  # (B, h)
        # Distances the lookup table covers: -C..C. Beyond C the bucket is the last of its sign
        # (the log rule is monotone and capped); checked here for this configuration.
        self.lut_radius = 2 * max_distance
        ends = self.buckets(torch.tensor([self.lut_radius, -self.lut_radius], device="cpu"))  # also under meta
        last = [per_sign - 1, 2 * per_sign - 1 if bidirectional else 0]
        if ends.tolist() != last:  # pragma: no cover - the log rule saturates well before 2D
            raise AssertionError(f"T5 buckets do not saturate at distance {self.lut_radius}: {ends.tolist()}")

    def buckets(self, relative: Tensor) -> Tensor:
        """Bucket ids of relative positions ``pos_i - pos_j`` (any shape) -> same shape, long."""
        return t5_relative_bucket(
            relative, bidirectional=self.bidirectional, num_buckets=self.num_buckets, max_distance=self.max_distance
        )

    def reset_parameters(self) -> None:
        """Re-initialise the parameters as the constructor does (deferred initialisation:
        after building on ``meta`` and ``to_empty``)."""
        with torch.no_grad():
            self.table.normal_(0.0, self.init_std)

    def distance_table(self) -> Tensor:
        """(h, 2C + 1): the bias of each head at distances -C..C, C = ``lut_radius``."""
        c = self.lut_radius
        distances = torch.arange(-c, c + 1, device=self.table.device)  # (2C + 1,)
        return self.table[self.buckets(distances)].t()  # (h, 2C + 1)

    def bias(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> list[AttentionBias]:
        key = self.ctx_key("t5-lut")
        if key not in ctx.scratch:  # same for every layer of this call
            ctx.scratch[key] = self.distance_table()
        lut = ctx.scratch[key]
        memo = self.ctx_key("t5")
        bias = RelativeFunctionBias(
            t5_distance_bias, (lut,), dense_fn=t5_distance_bias_dense, memo=memo, n_heads=lut.shape[0]
        )
        return [bias]

    def extra_repr(self) -> str:
        return (
            f"n_heads={self.n_heads}, num_buckets={self.num_buckets}, max_distance={self.max_distance}, "
            f"bidirectional={self.bidirectional}"
        )
