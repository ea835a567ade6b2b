"""ALiBi: attention with linear biases (Press et al. 2022).

Head h adds ``-m_h * (pos_i - pos_j)`` to its scores (after the 1/sqrt(e) scaling; the
bias is *not* scaled). Slopes form a geometric sequence: for n heads, n a power of two,
``m_h = 2^(-8h/n)``, h = 1..n. For other n (paper §3, footnote), take the 2^k slopes of
the largest power of two 2^k < n, then the odd-indexed slopes of the 2^(k+1) sequence
until n slopes are there.

ALiBi on a subset of heads (x-transformers' ``alibi_num_heads``): with ``n_biased=k`` the
first k heads get the slopes of a k-head model, ``m_h = alibi_slopes(k)[h]``, and the other
h - k heads get slope 0, plain (NoPE) causal heads with global reach.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from pezoo.biases import AttentionBias, LinearBias
from pezoo.cards import LmPaperClaim, LmRowSelector, PaperCard, PlotLook
from pezoo.context import AttentionContext, check_number
from pezoo.interface import PositionalEncoding
from pezoo.registry import register


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


def alibi_subset_slopes(n_heads: int, n_biased: int) -> list[float]:
    """Slopes of ``n_heads`` heads of which the first ``n_biased`` are ALiBi heads (the slopes
    of an ``n_biased``-head model) and the rest plain heads (slope 0)."""
    if not 0 <= n_biased <= n_heads:
        raise ValueError(f"n_biased must be in [0, n_heads={n_heads}], got {n_biased}")
    return (alibi_slopes(n_biased) if n_biased else []) + [0.0] * (n_heads - n_biased)


LM_PAPER = (
    "Press, Smith & Lewis, “Train Short, Test Long: Attention with Linear Biases Enables Input Length "
    "Extrapolation” (ICLR 2022)"
)
"""ALiBi's paper as the language-modelling section cites it."""

LM_CLAIMS = (
    LmPaperClaim(
        order=10,
        key="alibi_flat",
        source=f"{LM_PAPER}, App. Table 2",
        says="ALiBi trained at L = 512 keeps its perplexity flat to 15 512 tokens (19.73 at 512, 18.31 at 15 512): "
        "~30× L",
        rule="reach",
        row=LmRowSelector("alibi"),
        multiple=30,
    ),
    LmPaperClaim(
        order=20,
        key="ape_blowup",
        source=f"{LM_PAPER}, App. Table 2",
        says="sinusoidal APE blows up just past L (20.05 at 512, 43.5 at 1012)",
        rule="blowup",
        row=LmRowSelector("ape"),
        multiple=2,
    ),
    LmPaperClaim(
        order=30,
        key="alibi_below_rope_t5",
        source=f"{LM_PAPER}, App. Table 2",
        says="at long lengths ALiBi is below rotary (79.3 at 15 512) and T5's bias (43.1 at 8 512)",
        rule="below",
        row=LmRowSelector("alibi"),
        against=(LmRowSelector("rope"), LmRowSelector("t5")),
        multiple=30,  # 15 512 of L = 512 (rotary); T5's 8 512 is ~17×
    ),
)
"""The language-modelling claims of ALiBi's paper (its App. Table 2: WikiText-103, L = 512)."""

CARD = PaperCard(lm_claims=LM_CLAIMS, look=PlotLook("#D55E00", ""))  # vermillion, solid: its published look


@register("alibi", card=CARD)
class ALiBi(PositionalEncoding):
    """Linear distance bias per head (Press et al. 2022); no position in embeddings or q/k.

    Args:
        n_heads: number of heads; slopes from :func:`alibi_slopes`.
        n_biased: how many heads carry a linear bias (the first ones, with the slopes of an
            ``n_biased``-head model); the others are plain heads. Default: all ``n_heads``.
    """

    slopes: Tensor

    def __init__(self, *, n_heads: int, n_biased: int | None = None) -> None:
        super().__init__()
        check_number("alibi", "n_heads", n_heads, integer=True, at_least=1)
        if n_biased is not None:
            check_number("alibi", "n_biased", n_biased, integer=True, at_least=0)
            if n_biased > n_heads:
                raise ValueError(f"alibi: n_biased must be at most n_heads={n_heads}, got {n_biased}")
        self.n_heads = n_heads
        self.n_biased = n_heads if n_biased is None else int(n_biased)
        self.register_buffer("slopes", torch.tensor(self._slopes()), persistent=False)

    def _slopes(self) -> list[float]:
        return alibi_subset_slopes(self.n_heads, self.n_biased)

    def reset_parameters(self) -> None:
        """Rebuild the slopes in place (a derived, non-persistent buffer: not in the state dict,
        so after ``to_empty`` of a meta-device model this is what restores them)."""
        with torch.no_grad():
            self.slopes.copy_(torch.tensor(self._slopes(), device="cpu"))

    def bias(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> list[AttentionBias]:
        return [LinearBias(self.slopes)]

    def extra_repr(self) -> str:
        if self.n_biased == self.n_heads:
            return f"n_heads={self.n_heads}"
        biased = f"ALiBi heads 0..{self.n_biased - 1}, the rest plain" if self.n_biased else "every head plain"
        return f"n_heads={self.n_heads}, n_biased={self.n_biased} ({biased})"
