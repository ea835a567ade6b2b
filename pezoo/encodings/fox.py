"""FoX: forgetting attention (Lin, Nikishin, He, Courville 2025, "Forgetting Transformer:
Softmax Attention with a Forget Gate", ICLR; arXiv 2503.02130, §3 "Forgetting Attention").

Axis letters: b batch, s new tokens, i queries, j keys, d model width, h heads, l layers.

Each head h of layer l has a scalar forget gate per token, read from the layer's input,

    f_t = σ(w_h · x_t + b_h),

and attention adds to score (i, j) the log of the gates between the key and the query,

    D_ij = Σ_{l=j+1}^{i} log f_l = c_i − c_j,      c_t = Σ_{l≤t} log f_l,

    O = softmax(Q Kᵀ / √e + D) V,

with no other position information (FoX drops RoPE). The paper computes ``c`` once and adds
``c_i − c_j`` inside its FlashAttention kernel, never building D (its hardware-aware
implementation, §3); here the bias is a :class:`~pezoo.biases.DifferenceBias` of ``c``, which
flex adds in its ``score_mod`` the same way and eager/sdpa/xformers materialise.

The gate reads the residual stream through the ``observe`` hook, which sees it *before* the
layer's pre-attention norm, where the paper's gate reads the normed input. So the gate reads
``LayerNorm(x)`` without affine weights: a LayerNorm's gain and shift fold into ``w_h`` and
``b_h`` (``w·(γ⊙x̂ + β) + b = (w⊙γ)·x̂ + (w·β + b)``), so this is the paper's gate behind a
LayerNorm up to how it is parameterised. The gate is computed in float32, as the reference
code computes ``logsigmoid`` of the gate logits. Initialisation follows the reference code:
``w_h`` normal with std 0.02, ``b_h`` zero (every gate starts at 1/2).

Incremental decoding: ``observe`` extends ``c`` by the new tokens' log gates from the last
one kept in ``ctx.state`` (per layer, ``c`` of every key so far: the bias needs ``c_j`` of
cached keys as a KV cache needs their keys), so a token-by-token decode adds exactly the
bias of one full pass. Only the "full" data-dependent gate of FoX (LLaMA) is built; the Pro
block's output gate, output norm, QK-norm and key/value shift are not position encodings and
are left to the model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pezoo.biases import AttentionBias, DifferenceBias
from pezoo.cards import LmPaperClaim, LmRowSelector, PaperCard
from pezoo.context import AttentionContext, check_embed, check_layer, check_sizes
from pezoo.interface import PositionalEncoding
from pezoo.registry import register

GATE_INIT_STD = 0.02
"""Standard deviation of the gate weights at initialisation (the reference code's ``initializer_range``)."""

PAPER = "Lin, Nikishin, He & Courville, “Forgetting Transformer: Softmax Attention with a Forget Gate” (ICLR 2025)"


def fox_log_gates(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """``log σ(w_h · LayerNorm(x_t) + b_h)`` per head, in float32 (or float64 for a float64 x).

    Args:
        x: (b, s, d) the residual stream entering the layer.
        weight: (h, d) and bias: (h,) the layer's gate.

    Returns:
        (b, h, s) log forget gates, each <= 0.
    """
    dtype = torch.promote_types(x.dtype, torch.float32)
    normed = F.layer_norm(x.to(dtype), (x.shape[-1],))  # (b, s, d), no affine weights
    logits = F.linear(normed, weight.to(dtype), bias.to(dtype))  # (b, s, h)
    return F.logsigmoid(logits).transpose(1, 2)  # (b, h, s)


CARD = PaperCard(
    paper=PAPER,
    lm_claims=(
        LmPaperClaim(
            order=120,
            key="fox_below_transformer",
            source=f"{PAPER}, abstract and §4 (LongCrawl64, trained at L = 16 384, evaluated to 65 536)",
            says="FoX's loss is below the Transformer's (RoPE) within the training context and beyond it "
            "(length extrapolation), without any position embedding",
            rule="below",
            row=LmRowSelector("fox"),
            against=(LmRowSelector("rope"),),
            multiple=4,  # the paper's longest evaluation, 65 536 = 4 × L
        ),
    ),
)
"""FoX's paper tests it on language modelling only (its Transformer baseline is Llama with
RoPE): an LM claim, and none on the algorithmic board, which the paper does not run."""


@register("fox", card=CARD)
class FoX(PositionalEncoding):
    """Forgetting attention (Lin et al. 2025): a data-dependent forget gate per head and layer,
    its cumulative log added to the scores as ``c_i − c_j``; no other position encoding.

    Args:
        d_model: the residual width d the gates read.
        n_heads: heads h (one gate each).
        n_layers: layers; each has its own gates.
    """

    uses_positions = False  # positions come from the gates, never from ctx

    def __init__(self, *, d_model: int, n_heads: int, n_layers: int) -> None:
        super().__init__()
        check_sizes("fox", d_model=d_model, n_heads=n_heads, n_layers=n_layers)
        self.d_model, self.n_heads, self.n_layers = d_model, n_heads, n_layers
        self.gate_weight = nn.Parameter(torch.empty(n_layers, n_heads, d_model))  # (l, h, d)
        self.gate_bias = nn.Parameter(torch.empty(n_layers, n_heads))  # (l, h)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The reference code's initialisation: weights normal (std 0.02), biases zero."""
        with torch.no_grad():
            self.gate_weight.normal_(0.0, GATE_INIT_STD)
            self.gate_bias.zero_()

    def observe(self, layer: int, x: Tensor, ctx: AttentionContext) -> None:
        """Extend ``c`` of ``layer`` by the new tokens' log gates (kept in ``ctx.state``)."""
        check_layer(self.name, layer, self.n_layers)
        check_embed(self.name, x, ctx.q_pos, self.d_model, what="ctx.q_pos")
        log_f = fox_log_gates(x, self.gate_weight[layer], self.gate_bias[layer])  # (b, h, s)
        kept: dict[int, Tensor] = ctx.state.setdefault(self.ctx_key("fox"), {})
        before = kept.get(layer)  # (b, h, j - s): c of the cached keys
        # c of the last cached key; none before the first token (a first call may bring none)
        start = before[..., -1:] if before is not None and before.shape[-1] > 0 else log_f.new_zeros(())
        c = start + log_f.cumsum(dim=-1)  # (b, h, s)
        kept[layer] = c if before is None else torch.cat([before, c], dim=-1)  # (b, h, j)

    def bias(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> list[AttentionBias]:
        check_layer(self.name, layer, self.n_layers)
        if not ctx.causal:
            raise ValueError(
                "fox forgets the keys before each query (D_ij sums the gates from j to i): it is defined for "
                "causal attention only (ctx.causal=False)"
            )
        c = ctx.state.get(self.ctx_key("fox"), {}).get(layer)
        n_keys, n_queries = ctx.k_pos.shape[-1], ctx.q_pos.shape[-1]
        if c is None or c.shape[-1] != n_keys:
            have = "none" if c is None else f"{c.shape[-1]} keys"
            raise ValueError(
                f"fox's bias reads the forget gates its observe hook computed for layer {layer} in this call "
                f"(one per key, {n_keys} here; have {have}): call pe.observe(layer, x, ctx) on the layer's input "
                "before its attention"
            )
        if c.shape[1] != q.shape[1]:
            raise ValueError(f"fox was built for n_heads={self.n_heads}, got q with {q.shape[1]} heads")
        return [DifferenceBias(c[..., n_keys - n_queries :], c)]  # c_i − c_j: (b, h, i), (b, h, j)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, n_layers={self.n_layers}"
