"""KERPLE: kernelized relative positional embedding (Chi, Fan, Ramadge, Rudnicky 2022,
"KERPLE: Kernelized Relative Positional Embedding for Length Extrapolation", NeurIPS,
§4 "KERPLE", the power and logarithmic variants of the shifted kernel).

Head h of layer l adds a conditionally positive definite kernel of the distance to its
scores (after the 1/sqrt(e) scaling; the bias is not scaled):

    kerple_power:  b(i, j) = -r1 · |pos_i - pos_j|^r2          r1 > 0, 0 < r2 <= 2
    kerple_log:    b(i, j) = -r1 · log(1 + r2 · |pos_i - pos_j|)   r1, r2 > 0

Initialisation and constraints follow the paper's reference implementation (GPT-NeoX):
the parameter outside the distance term starts uniform in (0, 2) for the log variant and
(0, 1) for the power variant; the one inside starts uniform in (0, 1) (log) and (0, 2)
(power). Both are kept in range by projection: every forward first clips the parameters
into ``[eps, inf)`` (and r2 <= 2 for the power variant), eps = 0.01, so a gradient step
that leaves the range is undone before the next use, and the gradient at the boundary
still flows (projected gradient descent, as in the reference). Each layer has its own
(r1, r2) per head. Only the module's own ``nn.Parameter``s are projected in place: plain
tensors a caller swaps in (``torch.func.functional_call``) are never written to; the bias
reads their projected values with the gradient the projection gives.

The bias is a :class:`~pezoo.biases.RelativeFunctionBias`: flex adds it in its
``score_mod`` without an (i, j) tensor; eager/sdpa/xformers materialise it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from pezoo.biases import AttentionBias, RelativeFunctionBias
from pezoo.cards import LmPaperClaim, LmRowSelector, PaperCard, PaperClaim, PlotLook
from pezoo.context import AttentionContext, check_layer, check_sizes
from pezoo.interface import PositionalEncoding
from pezoo.registry import register

KERPLE_EPS = 0.01
"""Lower bound of r1 and r2 (the reference implementation's ``eps``)."""

KERPLE_MAX_POWER = 2.0
"""Upper bound of the power variant's exponent r2: |d|^r2 is conditionally positive
definite only for 0 < r2 <= 2."""


def kerple_log_bias(q_pos: Tensor, k_pos: Tensor, head: Tensor, r1: Tensor, r2: Tensor) -> Tensor:
    """``-r1[h] · log(1 + r2[h] · |q_pos - k_pos|)``, elementwise with broadcasting.

    Args:
        q_pos, k_pos: float positions, broadcastable (e.g. (b, 1, i, 1) and (b, 1, 1, j)).
        head: long head indices broadcastable with them (e.g. (1, h, 1, 1)).
        r1, r2: (h,) positive parameters.
    """
    return -r1[head] * torch.log1p(r2[head] * (q_pos - k_pos).abs())


def kerple_power_bias(q_pos: Tensor, k_pos: Tensor, head: Tensor, r1: Tensor, r2: Tensor) -> Tensor:
    """``-r1[h] · |q_pos - k_pos|^r2[h]``, elementwise with broadcasting (see :func:`kerple_log_bias`).

    ``0^r2 = 0``; PyTorch's ``pow`` gives a zero (not NaN) exponent gradient at a zero base.
    """
    return -r1[head] * (q_pos - k_pos).abs().pow(r2[head])


def _projected(x: Tensor, low: float, high: float) -> Tensor:
    """``x.clamp(low, high)`` whose gradient is the identity: the values and gradients of
    projecting x in place (:meth:`_Kerple.project`) and then using it, without writing to x."""
    return x.clamp(min=low, max=high).detach() + (x - x.detach())


class _Kerple(PositionalEncoding):
    """Shared module logic: per-layer, per-head (r1, r2), projected into range on every use.

    Args:
        n_heads: heads h.
        n_layers: layers; each has its own parameters.
    """

    _fn = staticmethod(kerple_log_bias)
    _r1_init_scale = 2.0  # r1 ~ U(0, scale)
    _r2_init_scale = 1.0
    _r2_max = float("inf")

    def __init__(self, *, n_heads: int, n_layers: int) -> None:
        super().__init__()
        check_sizes(self.name, n_heads=n_heads, n_layers=n_layers)  # True passed `>= 1` and built one head
        self.n_heads, self.n_layers = n_heads, n_layers
        self.r1 = nn.Parameter(torch.rand(n_layers, n_heads) * self._r1_init_scale)  # (l, h)
        self.r2 = nn.Parameter(torch.rand(n_layers, n_heads) * self._r2_init_scale)  # (l, h)
        self.project()

    def reset_parameters(self) -> None:
        """Re-initialise the parameters as the constructor does (deferred initialisation:
        after building on ``meta`` and ``to_empty``)."""
        with torch.no_grad():
            self.r1.uniform_(0.0, self._r1_init_scale)
            self.r2.uniform_(0.0, self._r2_init_scale)
        self.project()

    @torch.no_grad()
    def project(self) -> None:
        """Clip r1, r2 into their ranges in place (the reference's projection step).

        Writes through ``.data`` so that tensors already saved for a backward pass are
        not flagged as modified; the values only change after an optimizer step, before
        any use in the next forward.
        """
        self.r1.data.clamp_(min=KERPLE_EPS)
        self.r2.data.clamp_(min=KERPLE_EPS, max=self._r2_max)

    def bias(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> list[AttentionBias]:
        check_layer(self.name, layer, self.n_layers)
        if not (isinstance(self.r1, nn.Parameter) and isinstance(self.r2, nn.Parameter)):
            # Tensors a caller swapped in (torch.func.functional_call, torch.func transforms):
            # never written to. The projected values, with the gradient the in-place projection
            # gives (it flows at and beyond the bounds, as from the bound), without projecting.
            r1 = _projected(self.r1[layer], KERPLE_EPS, float("inf"))  # (h,)
            r2 = _projected(self.r2[layer], KERPLE_EPS, self._r2_max)  # (h,)
        else:
            self.project()
            # The clamp repeats the projection functionally: values stay in range even for a
            # state dict loaded after the last projection; clamp passes gradients at the bounds.
            r1 = self.r1[layer].clamp(min=KERPLE_EPS)  # (h,)
            r2 = self.r2[layer].clamp(min=KERPLE_EPS, max=self._r2_max)  # (h,)
        return [RelativeFunctionBias(type(self)._fn, (r1, r2), n_heads=r1.shape[0])]

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, n_layers={self.n_layers}"


LOG_CLAIM = PaperClaim(
    order=60,
    source="Chi et al. 2022, “KERPLE: Kernelized Relative Positional Embedding for Length Extrapolation”, "
    "abstract (claimed on language modelling)",
    says="KERPLE's logarithmic variant extrapolates better than the encodings it is compared with.",
    test="judged against the strongest of ALiBi, T5's bias, RoPE and sin/cos APE on the table (the best ranked "
    "that fitted): kerple_log's EM>N above it by the permutation test, p ≤ 0.05 (holds); ranked above it without "
    "the test separating them (a tie does not show better), or at or below it (does not hold).",
    rule="above_strongest",
    row="kerple_log",
    against=("alibi", "t5", "rope", "ape"),  # the encodings the paper compares with
)

LM_PAPER = "Chi et al., “KERPLE: Kernelized Relative Positional Embedding for Length Extrapolation” (NeurIPS 2022)"
"""KERPLE's paper as the language-modelling section cites it."""

LOG_LM_CLAIMS = (
    LmPaperClaim(
        order=40,
        key="kerple_flat",
        source=f"{LM_PAPER}, Table 3",
        says="KERPLE-log trained at L = 512 stays flat to 16 384 (32× L)",
        rule="reach",
        row=LmRowSelector("kerple_log"),
        multiple=32,
    ),
    LmPaperClaim(
        order=60,
        key="kerple_below_alibi_t5",
        source=f"{LM_PAPER}, Table 3",
        says="at 16 384, KERPLE-log is below ALiBi and T5's bias (T5 worse beyond 2 048; 5 seeds, paired t-test)",
        rule="below",
        row=LmRowSelector("kerple_log"),
        against=(LmRowSelector("alibi"), LmRowSelector("t5")),
        multiple=32,  # 16 384 of L = 512
    ),
)
"""KERPLE-log's language-modelling claims (the paper's Table 3: OpenWebText2, L = 512)."""

LOG_CARD = PaperCard(
    claims=(LOG_CLAIM,), lm_claims=LOG_LM_CLAIMS, look=PlotLook("#E69F00", "7 3", "square")
)  # orange, dashed


@register("kerple_log", card=LOG_CARD)
class KerpleLog(_Kerple):
    """KERPLE-log (Chi et al. 2022, §4): ``-r1 · log(1 + r2 · |pos_i - pos_j|)`` per head and layer.

    r1 starts uniform in (0, 2), r2 uniform in (0, 1); both are projected into
    ``[0.01, inf)`` on every forward.

    Args:
        n_heads: heads h.
        n_layers: layers; each has its own (r1, r2) per head.
    """

    _fn = staticmethod(kerple_log_bias)
    _r1_init_scale = 2.0
    _r2_init_scale = 1.0


POWER_LM_CLAIM = LmPaperClaim(
    order=50,
    key="kerple_power_flat",
    source=f"{LM_PAPER}, Table 3",
    says="KERPLE-power trained at L = 512 stays flat to 16 384 (32× L)",
    rule="reach",
    row=LmRowSelector("kerple_power"),
    multiple=32,
)

POWER_CARD = PaperCard(
    lm_claims=(POWER_LM_CLAIM,), look=PlotLook("#56B4E9", "7 3", "square")
)  # sky blue, dashed: its look on the published board


@register("kerple_power", card=POWER_CARD)
class KerplePower(_Kerple):
    """KERPLE-power (Chi et al. 2022, §4): ``-r1 · |pos_i - pos_j|^r2`` per head and layer.

    r1 starts uniform in (0, 1), r2 uniform in (0, 2); r1 is projected into
    ``[0.01, inf)``, r2 into ``[0.01, 2]`` on every forward.

    Args:
        n_heads: heads h.
        n_layers: layers; each has its own (r1, r2) per head.
    """

    _fn = staticmethod(kerple_power_bias)
    _r1_init_scale = 1.0
    _r2_init_scale = 2.0
    _r2_max = KERPLE_MAX_POWER
