"""FoPE, Fourier position embedding (Hua et al. 2025, "Fourier Position Embedding: Enhancing
Attention's Periodic Extension for Length Generalization", ICML 2025, arXiv 2412.17739).

RoPE's pair i turns at one frequency ω_i = base^(−2i/e). FoPE changes two things:

1. **Clip the floor frequencies.** A frequency whose period exceeds the training length L
   (ω_i < 2π/L) never completes a cycle in training; it is set to zero: pair i is not rotated
   (cos 1, sin 0), a position-free feature pair, like p-RoPE's dropped pairs.
2. **A Fourier series per pair.** Every kept pair m turns by a sum over the kept frequencies,
   its own dominant, the others weak:

       cos'_m(t) = Σ_k C^cos_(k,m) cos(ω_k t),    sin'_m(t) = Σ_k C^sin_(k,m) sin(ω_k t)
       (a, b) <- (a cos'_m − b sin'_m,  a sin'_m + b cos'_m)

   C = I + N, N normal with std ``sigma · sqrt(2 / (K·K + h·K))`` (K kept frequencies, h
   heads): the official code's ``eye_xavier_norm`` initialisation (``xavier_normal_`` with
   gain σ on the (h, K, K) matrices, plus the identity), separate matrices for cos and sin,
   per head and per layer (a FourierEmbedding per block), fixed by default (its
   ``fourier_learnable = False``), ``learnable=True`` to train them.

With ``sigma = 0`` and no ``train_length`` this is RoPE, bit for bit up to rounding. Keys and
queries are rotated alike, so with σ > 0 the score is no longer a function of t_q − t_k alone:
that is FoPE's point (the paper models the "spectrum damage" of linear layers as such
leakage, and trains with it).

Departures from the official code (docs/encodings/fope.md): a kept pair's series runs over
every kept frequency (the code keeps min(K, e/4) output pairs, marked TODO in it), and a
clipped pair is unrotated (cos 1, sin 0; the code pads both cos and sin with 1, a fixed 45°
turn that doubles that pair's logit).

Axis letters: b batch, h heads, i positions, e head dim, f = e/2 pairs, k kept frequencies, l layers.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from pezoo.cards import LmPaperClaim, LmRowSelector, PaperCard
from pezoo.context import AttentionContext, check_layer, check_number, check_qk, check_sizes
from pezoo.encodings.rope import LAYOUTS, apply_rotary
from pezoo.interface import PositionalEncoding
from pezoo.registry import ModelDims, register

__all__ = ["FoPE", "fope_frequencies", "fope_tables"]


def fope_frequencies(head_dim: int, base: float = 10000.0, train_length: int | None = None) -> Tensor:
    """The kept frequencies: ω_i = base^(−2i/e) with 2π/ω_i <= L (all without ``train_length``),
    highest first: (k,) float64, k <= e/2."""
    omega = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (f,)
    if train_length is None:
        return omega
    # counted in Python, not by a boolean mask: the encoding must build on the meta device too
    kept = sum(1 for i in range(head_dim // 2) if 2 * math.pi / base ** (-2 * i / head_dim) <= train_length)
    return omega[:kept]


def fope_tables(pos: Tensor, omega: Tensor, cos_coef: Tensor, sin_coef: Tensor, n_pairs: int) -> tuple[Tensor, Tensor]:
    """FoPE's cos'/sin' per head: pos (b|1, i), omega (k,), coefficients (h, k, k) ->
    (b|1, h, i, f) each in omega's dtype, pairs past the k kept ones cos 1, sin 0."""
    angles = pos.to(omega.dtype)[:, None, :, None] * omega  # (b|1, 1, i, k)
    cos = torch.einsum("bxik,hkm->bhim", angles.cos(), cos_coef.to(omega.dtype))  # (b|1, h, i, k)
    sin = torch.einsum("bxik,hkm->bhim", angles.sin(), sin_coef.to(omega.dtype))
    pad = n_pairs - omega.shape[0]
    if pad:
        cos = torch.nn.functional.pad(cos, (0, pad), value=1.0)  # unrotated pairs: cos 1, sin 0
        sin = torch.nn.functional.pad(sin, (0, pad), value=0.0)
    return cos, sin


PAPER = (
    "Hua et al. 2025, “Fourier Position Embedding: Enhancing Attention's Periodic Extension for Length "
    "Generalization” (ICML 2025, arXiv 2412.17739)"
)

SIGMA_PAPER = 0.3
"""σ of the official release's smallest models (60M: ``fourier_init_norm_gain: 0.3``; 0.4 at 180M,
0.6 at 1.2B): pezoo's models are smaller still."""


def paper_options(task: str, dims: ModelDims) -> dict[str, Any]:
    """The official configs' FoPE at its smallest scale: σ = 0.3, fixed coefficients. The
    clipping length is the run's training length in tokens, which no setup knows: give
    ``train_length`` with the run (``fope{train_length=...}``)."""
    return {"sigma": SIGMA_PAPER, "learnable": False}


LM_CLAIMS = (
    LmPaperClaim(
        order=140,
        key="fope_below_rope",
        source=f"{PAPER}, Figure 1 (1.2B models trained at 512 tokens: C4 perplexity and passkey past 512)",
        says="FoPE keeps its perplexity more stable than RoPE past the training length",
        rule="below",
        row=LmRowSelector("fope", has=("train_length",)),
        against=(LmRowSelector("rope"),),
    ),
)
"""FoPE's language-modelling claim, on a row that clips (``train_length`` set), as the paper's."""

CARD = PaperCard(paper=PAPER, setup=paper_options, lm_claims=LM_CLAIMS)


@register("fope", card=CARD)
class FoPE(PositionalEncoding):
    """FoPE (Hua et al. 2025): RoPE with its floor frequencies clipped to 0 and each kept pair
    turned by a Fourier series over the kept frequencies (module docstring).

    Args:
        head_dim: per-head q/k width e (even).
        n_heads, n_layers: the model's heads and layers (coefficients per layer and head).
        base: frequency base (10000).
        train_length: L, the training length in tokens: frequencies with period > L are
            clipped to 0. None (default): none clipped (the Fourier series alone).
        sigma: σ, the gain of the coefficients' noise (0.3; 0: every pair its own frequency).
        learnable: train the coefficients (default False: fixed random, saved with the model).
        layout: which features form a pair, ``"interleaved"`` or ``"half"`` (the official
            code's rotate-half), as :class:`pezoo.RoPE`.
    """

    omega: Tensor
    cos_coef: Tensor
    sin_coef: Tensor

    def __init__(
        self,
        *,
        head_dim: int,
        n_heads: int,
        n_layers: int,
        base: float = 10000.0,
        train_length: int | None = None,
        sigma: float = SIGMA_PAPER,
        learnable: bool = False,
        layout: str = "interleaved",
    ) -> None:
        super().__init__()
        check_sizes("fope", head_dim=head_dim, n_heads=n_heads, n_layers=n_layers)
        if head_dim % 2:
            raise ValueError(f"fope: head_dim must be even (it turns feature pairs), got {head_dim}")
        check_number("fope", "base", base, above=1)
        if train_length is not None:
            check_number("fope", "train_length", train_length, integer=True, at_least=1)
        check_number("fope", "sigma", sigma, at_least=0)
        if not isinstance(learnable, bool):
            raise ValueError(f"fope: learnable must be true or false, got {learnable!r}")
        if layout not in LAYOUTS:
            raise ValueError(f"fope: layout must be one of {', '.join(map(repr, LAYOUTS))}; got {layout!r}")
        self.head_dim, self.n_heads, self.n_layers = head_dim, n_heads, n_layers
        self.base, self.train_length, self.sigma = float(base), train_length, float(sigma)
        self.learnable, self.layout = learnable, layout
        omega = fope_frequencies(head_dim, self.base, train_length)
        self.register_buffer("omega", omega.to(torch.float32), persistent=False)  # (k,)
        k = omega.shape[0]
        shape = (n_layers, n_heads, k, k)
        if learnable:
            self.cos_coef = nn.Parameter(torch.empty(shape))
            self.sin_coef = nn.Parameter(torch.empty(shape))
        else:
            self.register_buffer("cos_coef", torch.empty(shape))  # persistent: a random draw, part of the model
            self.register_buffer("sin_coef", torch.empty(shape))
        self.reset_parameters()

    @property
    def n_kept(self) -> int:
        """k, the frequencies kept (not clipped)."""
        return int(self.omega.shape[0])

    def reset_parameters(self) -> None:
        """Draw the coefficients again (identity plus σ-scaled noise) and rebuild ω."""
        with torch.no_grad():
            self.omega.copy_(fope_frequencies(self.head_dim, self.base, self.train_length).to(self.omega.device))
            k, h = self.n_kept, self.n_heads
            std = self.sigma * math.sqrt(2.0 / (k * k + h * k)) if k else 0.0  # xavier_normal_ on (h, k, k), gain σ
            eye = torch.eye(k, device=self.cos_coef.device)
            for coef in (self.cos_coef, self.sin_coef):
                if std > 0:
                    coef.normal_(0.0, std)
                else:
                    coef.zero_()
                coef.add_(eye)

    def tables(self, layer: int, pos: Tensor, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
        """cos'/sin' of ``layer`` at positions ``pos`` (b|1, i): (b|1, h, i, e/2) each."""
        check_layer(self.name, layer, self.n_layers)
        return fope_tables(pos, self.omega.to(dtype), self.cos_coef[layer], self.sin_coef[layer], self.head_dim // 2)

    def qk(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor]:
        """q, k (b, h, i, e) at positions ctx.q_pos -> turned q, k (b, h, i, e)."""
        check_qk(self.name, q, k, ctx, self.head_dim)
        if q.shape[1] != self.n_heads:
            raise ValueError(f"fope was built for n_heads={self.n_heads}, got q/k with {q.shape[1]} heads")
        cos, sin = self.tables(layer, ctx.q_pos)  # (b|1, h, i, e/2): each layer its own coefficients
        return apply_rotary(q, cos, sin, self.layout), apply_rotary(k, cos, sin, self.layout)

    def extra_repr(self) -> str:
        text = f"head_dim={self.head_dim}, n_heads={self.n_heads}, n_layers={self.n_layers}, base={self.base:g}"
        text += f", train_length={self.train_length}, kept={self.n_kept} of {self.head_dim // 2}, sigma={self.sigma:g}"
        if self.learnable:
            text += ", learnable"
        return text if self.layout == "interleaved" else f"{text}, layout={self.layout!r}"
