"""PoPE, polar coordinate position embeddings (Gopalakrishnan, Csordás, Schmidhuber & Mozer
2025, "Decoupling the 'What' and 'Where' With Polar Coordinate Positional Embeddings",
arXiv 2509.10534).

RoPE rotates pairs of q/k features, so a feature pair's own angle (its content) and the
position's angle add up: the *what* and the *where* are entangled. PoPE makes every one of
the e features a complex number whose magnitude is the content and whose phase is the
position alone:

    q̃_c = μ_q,c · exp(i · pos_q · θ_c),          μ = softplus(q)      (non-negative magnitude)
    k̃_c = μ_k,c · exp(i · (pos_k · θ_c + δ_c)),  δ_c ∈ [−2π, 0]        (a learned phase on keys)
    score = Re Σ_c q̃_c · conj(k̃_c) = Σ_c μ_q,c μ_k,c cos((pos_q − pos_k) θ_c − δ_c)

with one frequency per feature, ``θ_c = base^(−c/e)`` for c = 0..e−1 (RoPE has one per
*pair*, e/2). The real form of that score is one dot product of widened vectors,

    q' = [μ_q cos φ_q ; μ_q sin φ_q],  k' = [μ_k cos φ_k ; μ_k sin φ_k]    (b, h, i, 2e)

(``cos a cos b + sin a sin b = cos(a − b)``), so PoPE runs in the ``qk`` hook and inside any
attention kernel; the values keep their width e. The score scale stays the model's 1/√e
(``ctx.head_dim``), as x-transformers keeps its ``dim_head ** -0.5``.

δ is one learned phase per (layer, head, feature), kept in [−2π, 0] by a clamp in the
forward pass (as x-transformers' ``PolarEmbedding``: ``learned_bias.clamp(-2π, 0)``), zero at
initialisation by default or uniform in [−2π, 0].

Axis letters: b batch, h heads, i positions, e head dim (features, and frequencies), l layers.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pezoo.cards import LmPaperClaim, LmRowSelector, PaperCard
from pezoo.context import AttentionContext, check_layer, check_number, check_qk, check_sizes
from pezoo.interface import PositionalEncoding
from pezoo.registry import ModelDims, register

__all__ = ["DELTA_INITS", "PoPE", "pope_frequencies", "pope_widen"]

DELTA_INITS = ("zero", "uniform")
"""How δ starts: 0 (x-transformers' default), or uniform in [−2π, 0] (its ``bias_uniform_init``)."""

TWO_PI = 2 * math.pi


def pope_frequencies(head_dim: int, base: float = 10000.0, *, dtype: torch.dtype = torch.float32) -> Tensor:
    """θ_c = base^(−c/e) for c = 0..e−1: one frequency per feature, (e,)."""
    return base ** (-torch.arange(head_dim, dtype=torch.float64) / head_dim).to(dtype)


def pope_widen(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """``[μ cos φ ; μ sin φ]`` with μ = softplus(x): x (..., e), cos/sin (..., e) broadcastable
    -> (..., 2e) in cos's dtype."""
    mu = F.softplus(x.to(cos.dtype))  # (..., e) >= 0
    return torch.cat([mu * cos, mu * sin], dim=-1)


PAPER = (
    "Gopalakrishnan, Csordás, Schmidhuber & Mozer 2025, “Decoupling the ‘What’ and ‘Where’ With Polar "
    "Coordinate Positional Embeddings” (arXiv 2509.10534)"
)


def paper_options(task: str, dims: ModelDims) -> dict[str, Any]:
    """PoPE as x-transformers runs it by default: δ from 0, base 10000."""
    return {"delta_init": "zero", "base": 10000.0}


LM_CLAIMS = (
    LmPaperClaim(
        order=130,
        key="pope_below_rope",
        source=f"{PAPER}, its zero-shot length-extrapolation experiments",
        says="PoPE extrapolates zero-shot past the training length where RoPE's loss degrades",
        rule="below",
        row=LmRowSelector("pope"),
        against=(LmRowSelector("rope"),),
    ),
)
"""The PoPE paper's language-modelling claim: below RoPE past L, without fine-tuning."""

CARD = PaperCard(paper=PAPER, setup=paper_options, lm_claims=LM_CLAIMS)


@register("pope", card=CARD)
class PoPE(PositionalEncoding):
    """PoPE (Gopalakrishnan et al. 2025): q, k -> ``[μ cos φ ; μ sin φ]``, μ = softplus, φ the
    position's phase per feature (keys: plus a learned δ ∈ [−2π, 0]); q/k widen from e to 2e.

    Args:
        head_dim: per-head q/k width e (e features, e frequencies).
        n_heads, n_layers: the model's heads and layers (δ is per layer, head and feature).
        base: frequency base b, θ_c = b^(−c/e).
        delta_init: ``"zero"`` (default) or ``"uniform"`` in [−2π, 0].

    Computed in float32 (float64 for a double model) and cast back to q's dtype. Sets
    ``ctx.head_dim`` to e when unset, so :func:`pezoo.attend`'s default scale stays 1/√e.
    """

    inv_freq: Tensor
    delta: nn.Parameter

    def __init__(
        self, *, head_dim: int, n_heads: int, n_layers: int, base: float = 10000.0, delta_init: str = "zero"
    ) -> None:
        super().__init__()
        check_sizes("pope", head_dim=head_dim, n_heads=n_heads, n_layers=n_layers)
        check_number("pope", "base", base, above=1)
        if delta_init not in DELTA_INITS:
            raise ValueError(f"pope: delta_init must be one of {', '.join(map(repr, DELTA_INITS))}; got {delta_init!r}")
        self.head_dim, self.n_heads, self.n_layers = head_dim, n_heads, n_layers
        self.base, self.delta_init = float(base), delta_init
        self.delta = nn.Parameter(torch.zeros(n_layers, n_heads, head_dim))  # (l, h, e), clamped where read
        self.register_buffer("inv_freq", pope_frequencies(head_dim, self.base), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """δ back to its initial values, and the frequency table rebuilt (deferred initialisation)."""
        with torch.no_grad():
            self.inv_freq.copy_(pope_frequencies(self.head_dim, self.base).to(self.inv_freq.device))
            if self.delta_init == "zero":
                self.delta.zero_()
            else:
                self.delta.uniform_(-TWO_PI, 0.0)

    def key_phase(self, layer: int) -> Tensor:
        """δ of ``layer``, clamped to [−2π, 0]: (h, e)."""
        check_layer(self.name, layer, self.n_layers)
        return self.delta[layer].clamp(-TWO_PI, 0.0)

    def qk(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor]:
        """q, k (b, h, i, e) at positions ctx.q_pos -> (b, h, i, 2e) each."""
        check_qk(self.name, q, k, ctx, self.head_dim)
        if q.shape[1] != self.n_heads:
            raise ValueError(f"pope was built for n_heads={self.n_heads}, got q/k with {q.shape[1]} heads")
        if ctx.head_dim is None:
            ctx.head_dim = self.head_dim  # attend's default scale: the model's 1/sqrt(e), not 1/sqrt(2e)
        dtype = torch.promote_types(q.dtype, torch.float32)
        key = (*self.ctx_key("pope"), dtype)
        if key not in ctx.scratch:  # once per call, shared by all layers
            angles = ctx.q_pos.to(dtype)[:, None, :, None] * self.inv_freq.to(dtype)  # (b|1, 1, i, e)
            ctx.scratch[key] = (angles.cos(), angles.sin())
        cos, sin = ctx.scratch[key]
        delta = self.key_phase(layer).to(dtype)[None, :, None, :]  # (1, h, 1, e)
        cos_d, sin_d = delta.cos(), delta.sin()
        k_cos, k_sin = cos * cos_d - sin * sin_d, sin * cos_d + cos * sin_d  # cos, sin of φ + δ: (b|1, h, i, e)
        return pope_widen(q, cos, sin).to(q.dtype), pope_widen(k, k_cos, k_sin).to(k.dtype)

    def extra_repr(self) -> str:
        text = f"head_dim={self.head_dim}, n_heads={self.n_heads}, n_layers={self.n_layers}, base={self.base:g}"
        return text if self.delta_init == "zero" else f"{text}, delta_init={self.delta_init!r}"
