"""Stick-breaking attention (Tan, Yang, Courville, Panda, Shen 2025, "Scaling Stick-Breaking
Attention: An Efficient Implementation and In-depth Study", ICLR; arXiv 2410.17980, §2 (the
stick-breaking process and its attention weights) and §3 (the numerically stable, log-space
form)).

Axis letters: b batch, h heads, i queries, j and k keys.

No softmax and no position encoding: each query breaks a stick, walking back from the
nearest earlier key. Key j takes the fraction ``β_ij = σ(z_ij)`` of what the nearer keys
left, so

    A_ij = β_ij ∏_{j<k<i} (1 − β_ik),        j < i,

recency comes from the order of the breaks, not from positions. Computed in log space, as
the paper does for stability,

    log A_ij = log σ(z_ij) + Σ_{j<k<i} log σ(−z_ik),

the sum an exclusive suffix sum over the row (accumulated from the nearest key outwards),
everything in float32. ``z`` is the attention score ``scale · q·k`` (plus any bias).

The weights of a row sum to ``1 − ∏_{k<i}(1 − β_ik)``; the rest of the stick is the
*remainder*. The paper's output sums over earlier tokens only (``remainder="none"``); the
reference kernel's tests add the remainder times the query's own value (``o + rem·v_i``),
which makes every row a distribution and gives the first token an output at all
(``remainder="self"``, the default). The remainder is computed as the product itself,
``exp(Σ_k log σ(−z_ik))``, not as ``1 − Σ A``.

This is a normaliser (:class:`pezoo.scores.Normaliser`): only the ``eager`` backend, which
builds the (b, h, i, j) scores, can run it; sdpa, flex and xformers fuse a softmax they
cannot replace, and refuse it with an error naming eager (``auto`` picks eager). Each row
depends on its own scores only, so cached decoding equals the full pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from pezoo.cards import LmPaperClaim, LmRowSelector, PaperCard
from pezoo.context import AttentionContext
from pezoo.interface import PositionalEncoding
from pezoo.registry import register
from pezoo.scores import Normaliser

REMAINDERS = ("self", "none")
"""Where the rest of the stick goes: to the query's own value, or nowhere (module docstring)."""


def stick_breaking_weights(scores: Tensor, allowed: Tensor | None, *, remainder: str = "self") -> Tensor:
    """Stick-breaking attention weights from scores, each query over its earlier allowed keys.

    Args:
        scores: (b, h, i, j) finite scores; keys in sequence order, query a being key ``a + j - i``.
        allowed: (b|1, h|1, i, j) bool, where a query may see a key (causal mask, padding), or
            None (every key; the earlier ones are then those before the query's own).
        remainder: ``"self"``: the rest of the stick on the query's own key (where it is
            allowed); ``"none"``: left out.

    Returns:
        (b, h, i, j) weights in the dtype of ``scores``, zero where not allowed.
    """
    if remainder not in REMAINDERS:
        raise ValueError(f"remainder must be one of {', '.join(map(repr, REMAINDERS))}; got {remainder!r}")
    i, j = scores.shape[-2:]
    z = scores.to(torch.promote_types(scores.dtype, torch.float32))  # (b, h, i, j)
    query = torch.arange(i, device=z.device)[:, None] + (j - i)  # (i, 1): each query's own key
    key = torch.arange(j, device=z.device)[None, :]  # (1, j)
    earlier = key < query  # (i, j)
    if allowed is not None:
        earlier = earlier & allowed  # (b|1, h|1, i, j)
    log_rest = torch.where(earlier, F.logsigmoid(-z), 0.0)  # log(1 − β), 0 off the stick
    beyond = log_rest.flip(-1).cumsum(-1).flip(-1) - log_rest  # Σ_{k > j} log(1 − β_k): nearer keys first
    log_a = torch.where(earlier, F.logsigmoid(z) + beyond, -math.inf)  # (b, h, i, j)
    weights = log_a.exp()
    if remainder == "self":
        own = key == query  # (i, j)
        if allowed is not None:
            own = own & allowed
        left = log_rest.sum(-1, keepdim=True).exp()  # (b, h, i, 1): ∏ (1 − β_k) over the stick
        weights = weights + torch.where(own, left, 0.0)
    return weights.to(scores.dtype)


@dataclass(frozen=True, eq=False)
class StickBreakingWeights(Normaliser):
    """The stick-breaking normaliser (:func:`stick_breaking_weights`); eager only."""

    remainder: str = "self"
    backends: ClassVar[tuple[str, ...]] = ("eager",)

    def __call__(self, scores: Tensor, allowed: Tensor | None) -> Tensor:
        return stick_breaking_weights(scores, allowed, remainder=self.remainder)


PAPER = (
    "Tan, Yang, Courville, Panda & Shen, “Scaling Stick-Breaking Attention: An Efficient Implementation and "
    "In-depth Study” (ICLR 2025)"
)

CARD = PaperCard(
    paper=PAPER,
    lm_claims=(
        LmPaperClaim(
            order=130,
            key="stick_breaking_8x",
            source=f"{PAPER}, abstract (a model trained with a 2^11 context performs well at 2^14)",
            says="stick-breaking attention trained at L = 2048 keeps its perplexity to 16 384 tokens (8× L), "
            "without position embeddings",
            rule="reach",
            row=LmRowSelector("stick_breaking"),
            multiple=8,
        ),
    ),
)
"""Stick-breaking's paper states its length generalisation on language modelling: an LM claim;
none on the algorithmic board."""


@register("stick_breaking", card=CARD)
class StickBreaking(PositionalEncoding):
    """Stick-breaking attention (Tan et al. 2025): softmax replaced by ``A_ij = β_ij ∏_{j<k<i}(1 − β_ik)``,
    ``β = σ(score)``, in log space; no position encoding. Causal attention only; eager backend only.

    Args:
        remainder: ``"self"`` (default): the rest of the stick goes to the query's own value, as
            the reference kernel's tests do; ``"none"``: the paper's sum over earlier tokens only.
    """

    uses_positions = False  # order comes from the breaks, never from ctx positions

    def __init__(self, *, remainder: str = "self") -> None:
        super().__init__()
        if remainder not in REMAINDERS:
            raise ValueError(
                f"stick_breaking: remainder must be one of {', '.join(map(repr, REMAINDERS))}; got {remainder!r}"
            )
        self.remainder = remainder

    def normaliser(self, layer: int, ctx: AttentionContext) -> Normaliser:
        if not ctx.causal:
            raise ValueError(
                "stick-breaking attention breaks the stick over the keys before each query: it is defined for "
                "causal attention only (ctx.causal=False)"
            )
        return StickBreakingWeights(self.remainder)

    def attention_backends(self) -> tuple[str, ...]:
        return StickBreakingWeights.backends

    def extra_repr(self) -> str:
        return f"remainder={self.remainder!r}"
