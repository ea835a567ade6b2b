"""DAPE: data-adaptive positional encoding (Zheng, Gao, Shi, Huang, Li, Xiong, Ren, Ng, Jiang,
Li, Li 2024, "DAPE: Data-Adaptive Positional Encoding for Length Extrapolation", NeurIPS;
arXiv 2405.14722), as a wrapper over an additive position bias (``dape:alibi``,
``dape:kerple_log``, ``dape:fire``, ...; bare ``dape`` is ``dape:kerple_log``).

Axis letters: b batch, h heads, i queries, j keys, w the MLP's hidden width, l layers.

An additive relative PE gives the logits ``A = S + B`` (the paper's §3.1, eq. 1: S the scaled
query-key scores, B the bias). DAPE makes the bias depend on the data: a small MLP ``f``
reads, at each (i, j) pair, every head's score and bias and returns one correction per head
(§3.2, multi-head DAPE),

    A_DAPE = S + B + f(S, B),      f([S; B]_{ij}) = W2 · LeakyReLU(W1 · [S_ij ; B_ij] + b1) + b2,

``[S; B]_ij`` the 2h values of pair (i, j) (all heads' scores, then all heads' biases),
``f: R^{2h} -> R^h`` with hidden width ``D_DAPE = 32``, one MLP per layer, PyTorch's default
``nn.Linear`` initialisation and LeakyReLU's default slope (the reference code, which adds B
back to the logits as here: the paper's §3.2 writes the logits as ``S + f(S, B)``, a form f can
take by absorbing B). The mask is applied after f, and f reads one pair at a time, so no
future score reaches a past one; masked pairs enter f with bias 0 and are discarded.

This is a score transform (:class:`pezoo.scores.ScoreTransform`): only ``eager`` builds the
(b, h, i, j) scores f reads; sdpa, flex and xformers refuse it by name, ``auto`` picks eager.
The wrapped bias is the base encoding's, unchanged: DAPE wraps the encodings that act
through ``bias`` alone (NoPE's B = 0 included), the additive PEs of its §3.1. DAPE V2 (arXiv
2410.04798) replaces the per-pair MLP by convolutions over neighbouring pairs: not built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pezoo.cards import LmPaperClaim, LmRowSelector, PaperCard
from pezoo.context import AttentionContext, check_layer, check_sizes
from pezoo.encodings.kerple import KerpleLog
from pezoo.interface import PositionalEncoding, acts_through, defines_hook
from pezoo.registry import WRAPPERS, ModelDims, register
from pezoo.scores import ScoreTransform
from pezoo.wrapper import Wrapper

__all__ = ["DAPE", "DapeKerple", "DapeTransform", "dape_scores"]

MLP_WIDTH = 32
"""D_DAPE, the MLP's hidden width (the paper's and its reference code's default)."""

NOT_BIAS_HOOKS = ("positions", "padded_positions", "embed", "embed_tokens", "observe", "qk", "score_transform",
                  "normaliser")  # fmt: skip
"""Hooks an encoding DAPE wraps leaves alone: it acts through ``bias`` only (an additive PE)."""


def dape_scores(scores: Tensor, bias: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> Tensor:
    """``S + B + f(S, B)`` at every pair, heads last.

    Args:
        scores: (b, i, j, h) the scaled query-key scores S.
        bias: (b|1, i, j, h|1) the summed biases B (0 where masked).
        w1: (w, 2h), b1: (w,), w2: (h, w), b2: (h,): the layer's MLP.

    Returns:
        (b, i, j, h) in the dtype of ``scores``.
    """
    bias = bias.expand_as(scores)  # (b, i, j, h)
    x = torch.cat([scores, bias], dim=-1).to(w1.dtype)  # (b, i, j, 2h): all scores, then all biases
    correction = F.linear(F.leaky_relu(F.linear(x, w1, b1)), w2, b2)  # (b, i, j, h)
    return scores + bias + correction.to(scores.dtype)


@dataclass(frozen=True, eq=False)
class DapeTransform(ScoreTransform):
    """DAPE's score transform for one layer (:func:`dape_scores`); eager only."""

    w1: Tensor
    b1: Tensor
    w2: Tensor
    b2: Tensor
    backends: ClassVar[tuple[str, ...]] = ("eager",)

    def __call__(self, scores: Tensor, bias: Tensor) -> Tensor:
        if scores.shape[-1] != self.w2.shape[0]:
            raise ValueError(f"DAPE's MLP was built for {self.w2.shape[0]} heads, got scores of {scores.shape[-1]}")
        return dape_scores(scores, bias, self.w1, self.b1, self.w2, self.b2)


class DAPE(Wrapper):
    """DAPE (Zheng et al. 2024) over ``inner``'s additive bias: ``S + B + MLP([S; B])`` per pair.

    Every hook is ``inner``'s (:class:`pezoo.wrapper.Wrapper`); ``score_transform`` adds the
    layer's MLP.

    Args:
        inner: the wrapped encoding; one that acts through ``bias`` alone (NoPE, ALiBi,
            KERPLE, FIRE, T5, ...): :meth:`accepts`.
        n_heads, n_layers: the model's heads and layers (one MLP per layer, 2h -> w -> h).
        mlp_width: the MLP's hidden width D_DAPE (32, the paper's).
    """

    def __init__(self, inner: PositionalEncoding, /, *, n_heads: int, n_layers: int, mlp_width: int = MLP_WIDTH):
        if not isinstance(inner, PositionalEncoding):
            raise TypeError(f"dape wraps a pezoo PositionalEncoding, got {type(inner).__name__}")
        super().__init__(inner)
        used = [hook for hook in NOT_BIAS_HOOKS if acts_through(inner, hook)]  # what the built one does
        if used:
            raise ValueError(
                f"dape cannot wrap {inner.name!r}: DAPE learns a correction of an additive position bias (its §3.1), "
                f"and {inner.name!r} also acts through {', '.join(used)}; wrap an encoding that acts through bias "
                "alone (nope, alibi, kerple_log, kerple_power, fire, t5, ...)"
            )
        check_sizes("dape", n_heads=n_heads, n_layers=n_layers, mlp_width=mlp_width)
        self.n_heads, self.n_layers, self.mlp_width = n_heads, n_layers, mlp_width
        self.mlp = nn.ModuleList(
            nn.Sequential(nn.Linear(2 * n_heads, mlp_width), nn.LeakyReLU(), nn.Linear(mlp_width, n_heads))
            for _ in range(n_layers)
        )
        if not type(self).name:  # the wrapper form; the registered bare name keeps its own key
            self.name = f"dape:{inner.name}"

    @classmethod
    def accepts(cls, factory: Callable[..., Any]) -> bool:
        """Whether ``dape:`` wraps the encoding ``factory`` builds: one acting through ``bias``
        alone (an additive PE, NoPE included), never another DAPE."""
        if not isinstance(factory, type):
            return True  # a plugin's factory function: decided when built
        return not any(defines_hook(factory, hook) for hook in NOT_BIAS_HOOKS)

    def score_transform(self, layer: int, ctx: AttentionContext) -> ScoreTransform:
        check_layer(self.name, layer, self.n_layers)
        mlp = cast(nn.Sequential, self.mlp[layer])
        first, second = cast(nn.Linear, mlp[0]), cast(nn.Linear, mlp[2])
        return DapeTransform(first.weight, first.bias, second.weight, second.bias)

    def attention_backends(self) -> tuple[str, ...]:
        inner = self.inner.attention_backends()
        return tuple(b for b in DapeTransform.backends if inner is None or b in inner)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, n_layers={self.n_layers}, mlp_width={self.mlp_width}"


PAPER = (
    "Zheng, Gao, Shi, Huang, Li, Xiong, Ren, Ng, Jiang, Li & Li, “DAPE: Data-Adaptive Positional Encoding for "
    "Length Extrapolation” (NeurIPS 2024)"
)


def paper_options(task: str, dims: ModelDims) -> dict[str, Any]:
    """The paper's D_DAPE = 32 hidden units (§3.2; its reference code's ``mlp_width``)."""
    return {"mlp_width": MLP_WIDTH}


CARD = PaperCard(
    paper=PAPER,
    setup=paper_options,
    # the bare name is DAPE over KERPLE-log, whose bias the class passes on (pezoo.wrapper), so the
    # hooks its class defines (score_transform) would file it with stick-breaking: it is an additive PE
    family="bias",
    lm_claims=(
        LmPaperClaim(
            order=140,
            key="dape_below_static",
            source=f"{PAPER}, abstract and §4 (Arxiv and Books3, trained at 128, evaluated to 8192)",
            says="a model trained at length 128 with DAPE has a lower perplexity at 8192 than with the static "
            "position encodings it is compared with",
            rule="below",
            row=LmRowSelector("dape"),
            against=(
                LmRowSelector("kerple_log"),
                LmRowSelector("alibi"),
                LmRowSelector("fire"),
                LmRowSelector("t5"),
                LmRowSelector("rope"),
            ),
            multiple=64,  # 8192 = 64 × the training length 128
        ),
    ),
)
"""Read by the bare name and by every ``dape:<base>``. The paper also evaluates on the
Chomsky-hierarchy tasks (its Appendix D: trained to length 40, tested to 500); no claim on the
algorithmic board is taken from it here (docs/encodings/dape.md)."""


@register("dape", card=CARD)
class DapeKerple(DAPE):
    """Bare ``dape``: DAPE over KERPLE-log (the paper's DAPE-Kerple); the same as ``dape:kerple_log``.

    Args:
        n_heads, n_layers: the model's heads and layers (KERPLE's parameters and DAPE's MLPs per layer).
        mlp_width: the MLP's hidden width D_DAPE (32).
    """

    def __init__(self, *, n_heads: int, n_layers: int, mlp_width: int = MLP_WIDTH) -> None:
        super().__init__(KerpleLog(n_heads=n_heads, n_layers=n_layers), n_heads=n_heads, n_layers=n_layers,
                         mlp_width=mlp_width)  # fmt: skip


WRAPPERS["dape"] = DAPE
