"""Sinusoidal absolute positional encoding (Vaswani et al. 2017, §3.5).

    PE[pos, 2i]   = sin(pos / base^(2i/d))
    PE[pos, 2i+1] = cos(pos / base^(2i/d))        base = 10000

added to the token embeddings before layer 0. The table is computed from the integer
positions on demand (in fp32), so any position works without a stored maximum.
"""

from __future__ import annotations

import torch
from torch import Tensor

from pezoo.cards import PaperCard, PaperClaim, PlotLook
from pezoo.context import check_embed, check_number, check_sizes
from pezoo.interface import PositionalEncoding
from pezoo.registry import register


def sinusoid_table(pos: Tensor, dim: int, base: float = 10000.0) -> Tensor:
    """Sin/cos features of integer positions: pos (...) -> (..., dim) float32, interleaved.

    Even feature 2i is sin(pos * base^(-2i/dim)), odd feature 2i+1 the matching cos.
    ``dim`` must be even.
    """
    if dim % 2:
        raise ValueError(f"sinusoid_table needs an even dim, got {dim}")
    inv_freq = base ** (-torch.arange(0, dim, 2, device=pos.device, dtype=torch.float32) / dim)  # (dim/2,)
    angles = pos.to(torch.float32)[..., None] * inv_freq  # (..., dim/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)  # (..., dim)


CLAIM = PaperClaim(
    order=40,
    source="Hou et al., “Universal Length Generalization with Turing Programs”, related work (after Shaw "
    "et al. 2018); Ruoss et al. 2023, §1",
    says="Absolute position encodings do not generalize past the training length.",
    test="sin/cos and learned APE, where they fit the training scales, score exact match below {collapsed} "
    "beyond N on every seed.",
    rule="collapses",
    row="ape",
    against=("learned_ape",),
)
"""Absolute encodings collapse past N: tested on this row and the learned absolute one."""

CARD = PaperCard(claims=(CLAIM,), look=PlotLook("#E69F00", ""))  # orange, solid: its look on the published board


@register("ape", card=CARD)
class SinusoidalAPE(PositionalEncoding):
    """Sinusoidal absolute PE (Vaswani et al. 2017), added to token embeddings.

    Args:
        d_model: embedding width d (even).
        base: wavelength base (10000 in the paper).
        scale: multiplier on the table (1.0 in the paper).
    """

    def __init__(self, *, d_model: int, base: float = 10000.0, scale: float = 1.0) -> None:
        super().__init__()
        check_sizes("ape", d_model=d_model)
        if d_model % 2:
            raise ValueError(f"sinusoidal APE needs an even d_model, got {d_model}")
        check_number("ape", "base", base, above=1)
        check_number("ape", "scale", scale)
        self.d_model, self.base, self.scale = d_model, base, scale

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        """x (b, s, d), pos (b|1, s) -> x + scale * PE[pos]."""
        check_embed(self.name, x, pos, self.d_model)
        table = sinusoid_table(pos, self.d_model, self.base)  # (b|1, s, d)
        return x + (self.scale * table).to(x.dtype)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, base={self.base}, scale={self.scale}"
