"""KERPLE-log (Chi et al. 2022, "KERPLE: Kernelized Relative Positional Embedding for
Length Extrapolation", §4): an out-of-tree pezoo encoding, registered through the
``pezoo.encodings`` entry point (see ``pyproject.toml``), not through ``@pezoo.register``.

Head h adds a learnable logarithmic distance penalty to its scores,

    b_h(i, j) = -r1_h · log(1 + r2_h · |pos_i - pos_j|),     r1_h, r2_h > 0,

after the 1/sqrt(e) scaling. Positivity is kept by a softplus parametrisation; both
start at 1. The bias is a structured :class:`LogDistanceBias`: pezoo's backends that do
not know it (flex, xformers) fall back to its ``materialize``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from pezoo import AttentionBias, AttentionContext, PositionalEncoding

__all__ = ["KerpleLog", "LogDistanceBias", "kerple_log_bias"]

_SOFTPLUS_INV_1 = 0.5413248546129181  # softplus(x) = 1 at x = log(e - 1)


def kerple_log_bias(distance: Tensor, r1: Tensor, r2: Tensor) -> Tensor:
    """``-r1 · log(1 + r2 · |distance|)``: distance (..., i, j), r1/r2 (h,) -> (..., h, i, j)."""
    d = distance.abs().unsqueeze(-3)  # (..., 1, i, j)
    return -r1.view(-1, 1, 1) * torch.log1p(r2.view(-1, 1, 1) * d)


@dataclass(frozen=True, eq=False)
class LogDistanceBias(AttentionBias):
    """KERPLE-log's bias as a structured object: per-head r1, r2 (h,), both > 0."""

    r1: Tensor
    r2: Tensor

    def materialize(self, ctx: AttentionContext, n_heads: int, dtype: torch.dtype) -> Tensor:
        dist = ctx.q_pos.to(torch.float32)[:, :, None] - ctx.k_pos.to(torch.float32)[:, None, :]  # (b|1, i, j)
        return kerple_log_bias(dist, self.r1.float(), self.r2.float()).to(dtype)  # (b|1, h, i, j)


class KerpleLog(PositionalEncoding):
    """KERPLE-log (Chi et al. 2022): learnable logarithmic distance bias per head.

    Args:
        n_heads: heads h; one (r1, r2) pair per head, shared by all layers.
    """

    name = "kerple_log_example"  # optional: pezoo derives it from the entry-point key, and they must agree

    def __init__(self, *, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.raw_r1 = nn.Parameter(torch.full((n_heads,), _SOFTPLUS_INV_1))
        self.raw_r2 = nn.Parameter(torch.full((n_heads,), _SOFTPLUS_INV_1))

    def reset_parameters(self) -> None:
        """r1 = r2 = 1 again: deferred (meta-device) initialisation calls this after to_empty."""
        with torch.no_grad():
            self.raw_r1.fill_(_SOFTPLUS_INV_1)
            self.raw_r2.fill_(_SOFTPLUS_INV_1)

    def bias(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> list[AttentionBias]:
        softplus = nn.functional.softplus
        return [LogDistanceBias(softplus(self.raw_r1), softplus(self.raw_r2))]

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}"
