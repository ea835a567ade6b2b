"""Length-dependent attention temperature: Scalable-Softmax (SSMax), and the fixed forms of Llama 4,
Ministral 3 and Beam, as a wrapper over any encoding (``ssmax:nope``, ``ssmax:rope``, ``ssmax:alibi``, ...).

SSMax (Nakanishi 2025, "Scalable-Softmax Is Superior for Attention", arXiv 2501.19399: its
defining equation) replaces softmax over a row of n logits z by

    z_i  ->  n^(s z_i) / sum_j n^(s z_j)  =  softmax((s log n) z)_i

with s a learned scalar per layer and head: the logits are multiplied by ``s·log n``, n the
number of keys the query sees. Under a causal mask the query at sequence index t (0-based,
counting cached tokens) sees n = t + 1 keys; without one, every key of the row; padded keys
(``ctx.key_padding_mask``) are not counted.

Llama 4 applies a fixed form on its NoPE layers ("attention temperature tuning"; transformers'
``Llama4TextAttention.forward``, whose comment cites the SSMax paper):

    q  ->  q · (1 + β · log(⌊(pos + 1) / F⌋ + 1)),   β = attn_scale = 0.1,  F = floor_scale = 8192

with pos the query's position (transformers: its cache position).

Mistral's Ministral 3 (transformers' ``Ministral3Attention``, its ``llama_4_scaling_beta``)
applies the same kind of factor on every layer of a RoPE model, without Llama 4's + 1:

    q  ->  q · (1 + β · log(⌊pos / F⌋ + 1)),   β = llama_4_scaling_beta,  F = the original context

Reflection AI's Beam (transformers' ``BeamModel``, ``compute_attention_scaling``) applies a
power of the position, unfloored, on its NoPE layers:

    q  ->  q · (1 + (pos + 1) / F)^β,   β = 0.1,  F = 2048

All are one factor per query, so they act in the ``qk`` hook as a multiplication of q
(after the wrapped encoding's own ``qk``): ``<c q, k> = c <q, k>``, the logit times c. Every
other hook is the wrapped encoding's, unchanged. Hence the one difference from scaling the
whole logit: a wrapped encoding's *bias* (ALiBi's slopes, T5's table, masks) is added
unscaled, as in Llama 4 and the SSMax paper, both of which scale the query.

Axis letters: b batch, h heads, i queries, j keys, e q/k head dim, l layers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from pezoo.cards import LmPaperClaim, LmRowSelector, PaperCard
from pezoo.context import AttentionContext, check_batch, check_layer, check_number, check_sizes
from pezoo.encodings.rope import RoPE
from pezoo.interface import PositionalEncoding, acts_through, defines_hook
from pezoo.registry import WRAPPERS, ModelDims, register
from pezoo.wrapper import Wrapper

__all__ = [
    "FIXED_FORMS",
    "FORMS",
    "SSMax",
    "SSMaxRoPE",
    "fixed_query_scale",
    "llama4_query_scale",
    "ssmax_query_scale",
    "visible_keys",
]

FIXED_FORMS = ("llama4", "ministral3", "beam")
"""The fixed factors of the query's position: Llama 4's (``⌊(pos + 1) / F⌋``), Ministral 3's
(``⌊pos / F⌋``) and Beam's (``(1 + (pos + 1) / F)^β``)."""

FORMS = ("ssmax", *FIXED_FORMS)
"""``form``: the learned SSMax factor ``s·log n``, or one of :data:`FIXED_FORMS`."""

S_INIT = 0.43
"""Default initial s: the value of the SSMax paper's Figure 1 illustration (see
docs/encodings/ssmax.md for why this default)."""

LLAMA4_ATTN_SCALE = 0.1
LLAMA4_FLOOR_SCALE = 8192
"""Llama 4's published constants (transformers' ``Llama4TextConfig``: ``attn_scale``,
``floor_scale``)."""

BEAM_ATTN_SCALE = 0.1
BEAM_FLOOR_SCALE = 2048
"""Beam's constants (β and F), written into transformers' ``compute_attention_scaling`` of its
Beam model rather than its config."""


def visible_keys(ctx: AttentionContext, n_queries: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """n, the number of keys each new query sees: (b|1, i) in ``dtype``, at least 1.

    Causal: the query at sequence index t (t = ``ctx.n_cached`` + its index in this call)
    sees keys 0..t, those of them marked real in ``ctx.key_padding_mask``; not causal: every
    real key. Counted from the mask, so a left-padded row gets the count it has alone."""
    n_keys = ctx.k_pos.shape[-1]
    device = ctx.k_pos.device
    if ctx.key_padding_mask is None:
        if ctx.causal:
            n = torch.arange(n_keys - n_queries + 1, n_keys + 1, device=device)[None]  # (1, i)
        else:
            n = torch.full((1, n_queries), n_keys, device=device)
    else:
        real = ctx.key_padding_mask.to(device=device, dtype=torch.long)  # (b, j)
        if ctx.causal:
            n = real.cumsum(-1)[:, n_keys - n_queries :]  # (b, i)
        else:
            n = real.sum(-1, keepdim=True).expand(-1, n_queries)
    return n.to(dtype).clamp(min=1.0)


def ssmax_query_scale(s: Tensor, n: Tensor) -> Tensor:
    """SSMax's factor ``s_h · log n_i``: s (h,), n (b|1, i) -> (b|1, h, i, 1) in n's dtype."""
    return (s.to(n.dtype)[None, :, None] * n.log()[:, None, :])[..., None]


def llama4_query_scale(
    pos: Tensor,
    attn_scale: float = LLAMA4_ATTN_SCALE,
    floor_scale: float = LLAMA4_FLOOR_SCALE,
    dtype: torch.dtype = torch.float32,
    offset: float = 1.0,
) -> Tensor:
    """Llama 4's factor ``1 + β · log(⌊(pos + 1) / F⌋ + 1)``: pos (b|1, i) -> (b|1, 1, i, 1) in ``dtype``;
    with ``offset=0``, Ministral 3's ``1 + β · log(⌊pos / F⌋ + 1)``.

    As transformers' ``Llama4TextAttention.forward``:
    ``torch.log1p(torch.floor((positions.float() + 1.0) / floor_scale)) * attn_scale + 1.0``, and
    ``get_llama_4_attn_scale`` of its Ministral 3 model (``1 + beta * log(1 + floor(pos / F))``)."""
    factor = torch.log1p(torch.floor((pos.to(dtype) + offset) / floor_scale)) * attn_scale + 1.0
    return factor[:, None, :, None]


def fixed_query_scale(
    form: str, pos: Tensor, attn_scale: float, floor_scale: float, dtype: torch.dtype = torch.float32
) -> Tensor:
    """The factor of a fixed ``form`` (:data:`FIXED_FORMS`, module docstring): pos (b|1, i) ->
    (b|1, 1, i, 1) in ``dtype``. Beam's ``(1 + (pos + 1) / F)^β`` is transformers'
    ``exp(β · log1p((pos + 1) / F))``."""
    if form == "beam":
        factor = torch.exp(attn_scale * torch.log1p((pos.to(dtype) + 1.0) / floor_scale))
        return factor[:, None, :, None]
    if form not in FIXED_FORMS:
        raise ValueError(f"no fixed temperature form {form!r}; the forms are {', '.join(map(repr, FIXED_FORMS))}")
    return llama4_query_scale(pos, attn_scale, floor_scale, dtype, offset=1.0 if form == "llama4" else 0.0)


class SSMax(Wrapper):
    """A length-dependent temperature over ``inner``: each query q times ``s_(l,h) · log n``
    (SSMax, Nakanishi 2025), or times Llama 4's ``1 + β log(⌊(pos+1)/F⌋ + 1)``.

    Every hook is ``inner``'s; ``qk`` then multiplies the queries (module docstring). A
    wrapped encoding's biases are not scaled.

    Args:
        inner: the wrapped encoding (any, except one that chooses its own positions:
            randomize the whole, ``randomized:ssmax:rope``, or another SSMax).
        n_heads, n_layers: the model's heads and layers: SSMax learns one s per (layer, head).
        form: ``"ssmax"`` (default: learned s, factor ``s log n``), ``"llama4"`` (no
            parameters: Llama 4's factor of the query's position), ``"ministral3"``
            (Ministral 3's, the same without Llama 4's + 1) or ``"beam"`` (Beam's power
            of the position).
        s_init: initial value of every s (``form="ssmax"``); default 0.43.
        attn_scale, floor_scale: β and F of the fixed forms (Llama 4's 0.1 and 8192).

    The first query of a causal row sees one key: its factor ``s log 1`` is 0, and its one
    key gets all the attention, as with any factor.
    """

    s: Tensor | None

    def __init__(
        self,
        inner: PositionalEncoding,
        /,
        *,
        n_heads: int,
        n_layers: int,
        form: str = "ssmax",
        s_init: float = S_INIT,
        attn_scale: float = LLAMA4_ATTN_SCALE,
        floor_scale: int = LLAMA4_FLOOR_SCALE,
    ) -> None:
        if not isinstance(inner, PositionalEncoding):
            raise TypeError(f"ssmax wraps a pezoo PositionalEncoding, got {type(inner).__name__}")
        super().__init__(inner)
        if isinstance(inner, SSMax) or acts_through(inner, "positions"):
            what = "is already ssmax" if isinstance(inner, SSMax) else "chooses its own positions"
            raise ValueError(
                f"ssmax cannot wrap {inner.name!r}: it {what}; wrap the other way round "
                f"(randomized:ssmax:<base>) or once"
            )
        check_sizes("ssmax", n_heads=n_heads, n_layers=n_layers)
        if form not in FORMS:
            raise ValueError(f"ssmax: form must be one of {', '.join(map(repr, FORMS))}; got {form!r}")
        check_number("ssmax", "s_init", s_init)
        check_number("ssmax", "attn_scale", attn_scale, at_least=0)
        check_number("ssmax", "floor_scale", floor_scale, integer=True, at_least=1)
        self.n_heads, self.n_layers, self.form = n_heads, n_layers, form
        self.s_init, self.attn_scale, self.floor_scale = float(s_init), float(attn_scale), int(floor_scale)
        if form == "ssmax":
            self.s = nn.Parameter(torch.full((n_layers, n_heads), self.s_init))  # (l, h)
        else:
            self.s = None
        self.uses_positions = inner.uses_positions if form == "ssmax" else True
        if not type(self).name:  # the wrapper form; the registered bare name keeps its own key
            self.name = f"ssmax:{inner.name}"

    @classmethod
    def accepts(cls, factory: Callable[..., Any]) -> bool:
        """Whether ``ssmax:`` wraps the encoding ``factory`` builds: any, except another SSMax
        and one that chooses its own positions (randomized PE wraps SSMax instead)."""
        if not isinstance(factory, type):
            return True  # a plugin's factory function: decided when built
        return not issubclass(factory, SSMax) and not defines_hook(factory, "positions")

    def reset_parameters(self) -> None:
        """Every s back to ``s_init`` (deferred initialisation)."""
        if self.s is not None:
            with torch.no_grad():
                self.s.fill_(self.s_init)

    def query_scale(
        self, layer: int, ctx: AttentionContext, n_queries: int, dtype: torch.dtype = torch.float32
    ) -> Tensor:
        """The factor of each new query of ``layer``: (b|1, h|1, i, 1) in ``dtype``."""
        if self.s is None:
            return fixed_query_scale(self.form, ctx.q_pos, self.attn_scale, self.floor_scale, dtype)
        check_layer(self.name, layer, self.n_layers)
        return ssmax_query_scale(self.s[layer], visible_keys(ctx, n_queries, dtype))

    # -- hooks: the inner encoding's (Wrapper), with q scaled ------------------------
    def qk(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor]:
        """The inner ``qk``, then q (b, h, i, e') times the factor of each query."""
        check_batch(f"{self.name}.qk", q, k, ctx)  # the factor counts each row's real keys
        q, k = self.inner.qk(layer, q, k, ctx)
        if self.s is not None and self.s.shape[1] != q.shape[1]:
            raise ValueError(f"{self.name} was built for n_heads={self.n_heads}, got q with {q.shape[1]} heads")
        dtype = torch.promote_types(q.dtype, torch.float32)  # fp32 for bf16/fp16, float64 for a double model
        scale = self.query_scale(layer, ctx, q.shape[2], dtype)  # (b|1, h|1, i, 1)
        return (q.to(dtype) * scale).to(q.dtype), k

    def qk_head_dims(self, head_dim: int, n_layers: int) -> list[int | None]:
        """The inner encoding's: the factor on the queries fits heads of any width."""
        return self.inner.qk_head_dims(head_dim, n_layers)

    def extra_repr(self) -> str:
        if self.s is None:
            return f"form={self.form!r}, attn_scale={self.attn_scale:g}, floor_scale={self.floor_scale}"
        return f"n_layers={self.n_layers}, n_heads={self.n_heads}, s_init={self.s_init:g}"


PAPER = "Nakanishi 2025, “Scalable-Softmax Is Superior for Attention” (arXiv 2501.19399)"


def paper_options(task: str, dims: ModelDims) -> dict[str, Any]:
    """The SSMax paper's form: s learned per layer and head (from 0.43, module docstring)."""
    return {"form": "ssmax", "s_init": S_INIT}


LM_CLAIMS = (
    LmPaperClaim(
        order=120,
        key="ssmax_below_softmax",
        source=f"{PAPER}, its experiments on context sizes beyond the training length",
        says="a model trained with SSMax keeps a lower loss than the same model with softmax at context sizes "
        "beyond the training length",
        rule="below",
        row=LmRowSelector("ssmax"),
        against=(LmRowSelector("rope"),),
    ),
)
"""The SSMax paper's language-modelling claim (its models use RoPE: bare ``ssmax``, SSMax over RoPE,
against ``rope``)."""

CARD = PaperCard(paper=PAPER, setup=paper_options, lm_claims=LM_CLAIMS)
"""Read by the bare name and by every ``ssmax:<base>``."""


@register("ssmax", card=CARD)
class SSMaxRoPE(SSMax):
    """Bare ``ssmax``: SSMax over RoPE, the SSMax paper's setting; the same as ``ssmax:rope``.

    Args:
        head_dim: per-head q/k width e (RoPE).
        n_heads, n_layers: the model's heads and layers (one s per layer and head).
        base: RoPE's frequency base.
        form, s_init, attn_scale, floor_scale: as :class:`SSMax`.
    """

    def __init__(
        self,
        *,
        head_dim: int,
        n_heads: int,
        n_layers: int,
        base: float = 10000.0,
        form: str = "ssmax",
        s_init: float = S_INIT,
        attn_scale: float = LLAMA4_ATTN_SCALE,
        floor_scale: int = LLAMA4_FLOOR_SCALE,
    ) -> None:
        inner = RoPE(head_dim=head_dim, base=base)
        super().__init__(
            inner,
            n_heads=n_heads,
            n_layers=n_layers,
            form=form,
            s_init=s_init,
            attn_scale=attn_scale,
            floor_scale=floor_scale,
        )


WRAPPERS["ssmax"] = SSMax
