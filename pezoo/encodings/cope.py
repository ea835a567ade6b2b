"""CoPE: contextual position encoding (Golovneva, Wang, Weston, Sukhbaatar 2024,
"Contextual Position Encoding: Learning to Count What's Important", §3).

Positions are not token indices but counts of the keys a query finds relevant. For query
i and key j <= i (causal), with the attention scale s = 1/sqrt(e):

    gate       g_ij = σ(s · q_i·k_j)                       (0 for masked keys)
    position   p_ij = Σ_{t=j..i} g_it                     (a fractional count, clipped to npos_max − 1)
    embedding  e[p]  = (p − ⌊p⌋) · e[⌈p⌉] + (1 − p + ⌊p⌋) · e[⌊p⌋]   (learned e[0..npos_max−1])
    logit      a_ij  = s · q_i·k_j + q_i·e[p_ij]

The position term ``q_i·e[p]`` is computed at the integer positions first, as
``q_i·e[0..npos_max−1]`` (one matrix product), and then interpolated, as in the paper's
reference code; it is not scaled by s. The gates read the scaled logits, as in the
reference code. One table of position embeddings (e, npos_max) per layer, shared by the
heads; it starts at zero.

The bias depends on q and k, so it is a dense (b, h, i, j) :class:`~pezoo.biases.DenseBias`
built in the ``bias`` hook: no backend can lower it without materialising it (flex would
need the row's cumulative gate sum inside its ``score_mod``, a reduction over keys that a
score modification of one (query, key) pair cannot see).

Positions from ``ctx`` are never read (``uses_positions = False``), so ``randomized:cope``
does not exist: CoPE's positions are contextual.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from pezoo.biases import AttentionBias, DenseBias
from pezoo.cards import PaperCard, PlotLook
from pezoo.context import AttentionContext, check_layer, check_qk, check_sizes
from pezoo.interface import PositionalEncoding
from pezoo.registry import register


def cope_positions(gates: Tensor) -> Tensor:
    """Contextual positions ``p_ij = Σ_{t >= j} g_it`` over the key axis: (..., i, j) -> (..., i, j).

    Masked keys (after the query, padding) must have gate 0, so the sum over t >= j stops
    at the query: ``Σ_{t=j..i} g_it``.
    """
    return gates.flip(-1).cumsum(-1).flip(-1)


def cope_interpolate(position_logits: Tensor, positions: Tensor) -> Tensor:
    """Linear interpolation between integer positions: ``(p − ⌊p⌋)·z[⌈p⌉] + (1 − p + ⌊p⌋)·z[⌊p⌋]``.

    Args:
        position_logits: (..., i, P) the logit term at integer positions 0..P-1, ``q_i·e[p]``.
        positions: (..., i, j) fractional positions in [0, P-1].

    Returns:
        (..., i, j) the interpolated term.
    """
    floor = positions.floor()
    upper = position_logits.gather(-1, positions.ceil().long())
    lower = position_logits.gather(-1, floor.long())
    w = positions - floor
    return upper * w + lower * (1 - w)


def cope_bias(
    q: Tensor,
    k: Tensor,
    pos_emb: Tensor,
    *,
    scale: float,
    allowed: Tensor | None,
) -> Tensor:
    """CoPE's additive term ``q_i·e[p_ij]``: q (b, h, i, e), k (b, h, j, e), pos_emb (e, P) -> (b, h, i, j).

    Args:
        scale: the attention scale s; the gates are ``σ(s · q·k)``.
        allowed: bool, broadcastable to (b, h, i, j), True where query i may see key j
            (causal and padding), or None (all allowed).
    """
    q, k, pos_emb = q.to(torch.float32), k.to(torch.float32), pos_emb.to(torch.float32)
    gates = torch.sigmoid(torch.einsum("bhie,bhje->bhij", q, k) * scale)  # (b, h, i, j)
    if allowed is not None:
        gates = gates * allowed
    positions = cope_positions(gates).clamp(max=pos_emb.shape[-1] - 1)  # (b, h, i, j)
    position_logits = q @ pos_emb  # (b, h, i, P)
    # a nan in q or k (a diverging model) makes nan positions, which as indices were int64's
    # minimum ("index -9223372036854775808 is out of bounds"): gathered at 0, then nan again,
    # so the nan flows on as it does through every other encoding
    lost = positions.isnan()
    term = cope_interpolate(position_logits, positions.masked_fill(lost, 0.0))
    return term.masked_fill(lost, float("nan"))


CARD = PaperCard(look=PlotLook("#0072B2", "1.5 3", "triangle"))  # blue, dotted: its look on the published board


@register("cope", card=CARD)
class CoPE(PositionalEncoding):
    """Contextual position encoding (Golovneva et al. 2024, §3), causal attention only.

    Args:
        head_dim: per-head q/k width e (the width of each position embedding).
        n_layers: layers; each has its own embedding table.
        npos_max: number of learned positions P; contextual positions are clipped to P − 1.
    """

    uses_positions = False

    def __init__(self, *, head_dim: int, n_layers: int, npos_max: int = 64) -> None:
        super().__init__()
        check_sizes("cope", head_dim=head_dim, n_layers=n_layers)
        if npos_max < 2:
            raise ValueError(f"npos_max must be >= 2, got {npos_max}")
        self.head_dim, self.n_layers, self.npos_max = head_dim, n_layers, npos_max
        self.pos_emb = nn.Parameter(torch.zeros(n_layers, head_dim, npos_max))  # (l, e, P)

    def reset_parameters(self) -> None:
        """Re-initialise the parameters as the constructor does (deferred initialisation:
        after building on ``meta`` and ``to_empty``)."""
        with torch.no_grad():
            self.pos_emb.zero_()

    def bias(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> list[AttentionBias]:
        check_layer(self.name, layer, self.n_layers)
        if not ctx.causal:
            raise ValueError("cope is defined for causal attention only (its positions count keys up to the query)")
        check_qk(self.name, q, k, ctx, self.head_dim, all_keys=True)
        n_queries, n_keys = q.shape[2], k.shape[2]
        key_idx = torch.arange(n_keys, device=q.device)
        query_idx = torch.arange(n_queries, device=q.device) + (n_keys - n_queries)  # key index of each query
        allowed = (key_idx[None, :] <= query_idx[:, None])[None, None]  # (1, 1, i, j)
        if ctx.key_padding_mask is not None:
            allowed = allowed & ctx.key_padding_mask.to(q.device)[:, None, None, :]  # (b, 1, i, j)
        scale = 1.0 / math.sqrt(q.shape[-1])
        return [DenseBias(cope_bias(q, k, self.pos_emb[layer], scale=scale, allowed=allowed))]

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, n_layers={self.n_layers}, npos_max={self.npos_max}"
