"""xPos: RoPE with an exponential decay (Sun, Dong, Patra, Ma, Huang, Benhaim, Chaudhary,
Song, Wei 2023, "A Length-Extrapolatable Transformer", ACL, §3: the relative position
embedding that maximises attention resolution).

Each pair of q/k features (2i, 2i+1) is rotated as in RoPE and, in addition, scaled:

    f_q(q, n) = q · ζ_i^( n / B) · e^(i n θ_i)
    f_k(k, m) = k · ζ_i^(-m / B) · e^(i m θ_i)
    ζ_i = (2i/e + γ) / (1 + γ),   θ_i = base^(-2i/e),   γ = 0.4,   B = ``scale_base`` = 512

so the score of query n and key m carries ζ_i^((n − m)/B): for n ≥ m each feature pair
decays exponentially with distance, faster for the high-frequency pairs (small ζ_i),
which is what stabilises RoPE's attention at long distances.

Numerics: ζ^(n/B) over- or underflows for large positions (ζ_0 ≈ 0.29: the factor passes
1e38 near n ≈ 36000 with B = 512). Only ζ^((n − m)/B) matters, so both exponents are taken
relative to a centre c — q is scaled by ζ^((n − c)/B) and k by ζ^(−(m − c)/B) — which
leaves every score unchanged. c is fixed per sequence at its first call (the midpoint of
that call's positions, per batch row) and kept in ``ctx.state``, because keys are scaled
once, before they enter the KV cache: a full pass keeps every exponent within half its
span of positions; a long incremental decode drifts away from c as it goes (see the docs
page for the limits). The scale and rotation are computed in fp32 and applied as one
complex product (under ``torch.compile`` as the same product in real arithmetic, which
inductor can generate code for), then cast back to the input dtype.

The blockwise causal attention the paper evaluates xPos with is the option ``blockwise``:
its block length (the training length, in positions), returned by ``bias`` as a
:class:`~pezoo.biases.BlockMask` (each query sees its own block and the one before it).
It changes no parameter, so it can be switched on for evaluation only.
"""

from __future__ import annotations

import torch
from torch import Tensor

from pezoo.biases import AttentionBias, BlockMask
from pezoo.cards import LmPaperClaim, LmRowSelector, PaperCard, PlotLook, RunFacts, option_departures
from pezoo.context import AttentionContext, check_number, check_qk, check_sizes
from pezoo.encodings.rope import Rotation, rotate, rotation
from pezoo.interface import PositionalEncoding
from pezoo.registry import register
from pezoo.spec import format_value


def xpos_zeta(head_dim: int, gamma: float = 0.4, device: torch.device | str | None = None) -> Tensor:
    """Per-pair decay bases ``ζ_i = (2i/e + γ) / (1 + γ)``, i = 0..e/2-1: (e/2,) float32 in (0, 1),
    made on ``device`` (a pass that made it on the host and copied it over could not be a CUDA graph)."""
    return (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim + gamma) / (1 + gamma)


def xpos_rotation(
    pos: Tensor,
    center: Tensor,
    head_dim: int,
    *,
    base: float = 10000.0,
    scale_base: float = 512.0,
    gamma: float = 0.4,
    key: bool = False,
) -> Rotation:
    """The complex factor each feature pair is multiplied by: pos (b|1, s) -> (b|1, 1, s, e/2) complex64
    (while ``torch.compile`` traces, the real pair (a cos, a sin) instead: ``rope.rotation``).

    ``ζ^(±(pos − center)/scale_base) · exp(i pos θ)``: ``+`` for queries, ``−`` for keys
    (``key=True``). ``center`` (b|1, 1) is any position shared by the queries and keys
    that meet in one score; it cancels in every score.
    """
    pos = pos.to(torch.float32)
    inv_freq = base ** (-torch.arange(0, head_dim, 2, device=pos.device, dtype=torch.float32) / head_dim)  # (e/2,)
    angles = pos[..., None] * inv_freq  # (b, s, e/2)
    exponent = (pos - center.to(torch.float32))[..., None] / scale_base  # (b, s, 1)
    if key:
        exponent = -exponent
    magnitude = xpos_zeta(head_dim, gamma, pos.device) ** exponent  # (b, s, e/2)
    return rotation(magnitude[:, None], angles[:, None])  # (b, 1, s, e/2)


PAPER = "Sun et al. 2023, “A Length-Extrapolatable Transformer”"


def departures(run: RunFacts) -> list[str]:
    """xPos's paper evaluates with blockwise causal attention: a run departs unless its
    evaluation option ``blockwise`` is set (an inference-time variant, ``xpos@{blockwise=24}``);
    one that *trained* with it set departs the other way."""
    if run.options.get("blockwise") is not None:
        return [
            "trained with blockwise attention as well; the paper trains with full causal attention and uses "
            "blockwise causal attention at evaluation only (the same where every training sequence fits in one block)"
        ]
    if run.eval_options.get("blockwise") is not None:
        return []
    return [
        "evaluated with plain causal attention, where the paper evaluates xPos with blockwise causal attention "
        "(the option blockwise: each query sees its own block of training length and the block before; "
        "docs/encodings/xpos.md)"
    ]


LM_PAPER = "Sun et al., “A Length-Extrapolatable Transformer” (ACL 2023)"
"""xPos's paper as the language-modelling section cites it."""

LM_CLAIMS = (
    LmPaperClaim(
        order=70,
        key="xpos_blockwise",
        source=f"{LM_PAPER}, Tables 2 and 5 (§3.3)",
        says="xPos extrapolates to 4× L with its blockwise causal attention",
        rule="reach",
        row=LmRowSelector("xpos", has=("blockwise",)),
        multiple=4,
    ),
    LmPaperClaim(
        order=80,
        key="xpos_plain_blowup",
        source=f"{LM_PAPER}, Table 5",
        says="without blockwise attention xPos does not extrapolate to 4× L",
        rule="blowup",
        row=LmRowSelector("xpos", options={"blockwise": None}),
        multiple=4,
    ),
)
"""xPos's language-modelling claims, with and without its blockwise causal attention."""

LM_SCALE_RATIO = (512, 1024)
"""The paper's language models: ``scale_base`` 512 at a training length of 1024."""


def lm_departures(run: RunFacts) -> list[str]:
    """A language-modelling run departs from the paper's setup unless its ``scale_base`` has
    the paper's ratio to the training length L (512 at L = 1024: L/2, 128 at L = 256)."""
    base, length = LM_SCALE_RATIO
    paper = {"scale_base": run.train_max * base / length}
    words = {
        "scale_base": lambda value, wanted: (
            f"scale_base = {value:g}, where the paper's ratio ({base} at L = {length}) gives "
            f"{wanted:g} at L = {run.train_max}"
        )
    }
    return option_departures(run, paper, XPos, words)


CARD = PaperCard(
    paper=PAPER,
    departures=departures,
    lm_claims=LM_CLAIMS,
    lm_departures=lm_departures,  # scale_base at the paper's ratio to L is the LM setup
    inference_options=("blockwise",),  # the blockwise causal attention its paper evaluates with
    variant_labels={"blockwise": lambda block: None if block is None else f"blockwise L={format_value(block)}"},
    look=PlotLook("#E69F00", "1.5 3", "triangle"),  # orange, dotted: its look on the published board
)


@register("xpos", card=CARD)
class XPos(PositionalEncoding):
    """xPos (Sun et al. 2023, §3): RoPE whose q and k are also scaled by ζ^(±pos/B).

    Args:
        head_dim: per-head q/k width e (even).
        base: RoPE frequency base (10000).
        scale_base: B, the positions one decay step spans (512 in the paper).
        gamma: γ in ``ζ_i = (2i/e + γ)/(1 + γ)`` (0.4 in the paper).
        blockwise: None (plain attention), or the block length of the blockwise causal
            attention the paper evaluates with: the training length in positions. Each
            query then sees the keys of its own block and the block before it.
    """

    def __init__(
        self,
        *,
        head_dim: int,
        base: float = 10000.0,
        scale_base: float = 512.0,
        gamma: float = 0.4,
        blockwise: int | None = None,
    ) -> None:
        super().__init__()
        check_sizes("xpos", head_dim=head_dim)
        if head_dim % 2:
            raise ValueError(f"xPos needs an even head_dim, got {head_dim}")
        check_number("xpos", "base", base, above=1)
        check_number("xpos", "scale_base", scale_base, above=0)
        check_number("xpos", "gamma", gamma, above=0)
        if blockwise is not None:
            check_number("xpos", "blockwise", blockwise, integer=True, at_least=1)
        self.head_dim, self.base, self.scale_base, self.gamma = head_dim, base, scale_base, gamma
        self.blockwise = None if blockwise is None else int(blockwise)

    def qk(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor]:
        """q, k (b, h, i, e) at positions ctx.q_pos -> rotated and scaled q, k."""
        check_qk(self.name, q, k, ctx, self.head_dim)
        if ctx.q_pos.shape[-1] == 0:  # no tokens: nothing to rotate, and no centre to fix yet
            return q, k
        key = self.ctx_key("xpos")
        if key not in ctx.scratch:  # once per call, shared by all layers
            if "xpos_center" not in ctx.state:  # the sequence's first call fixes the centre
                lo, hi = ctx.q_pos.amin(-1, keepdim=True), ctx.q_pos.amax(-1, keepdim=True)  # (b|1, 1)
                ctx.state["xpos_center"] = torch.div(lo + hi, 2, rounding_mode="floor")
            center = ctx.state["xpos_center"]
            ctx.scratch[key] = tuple(
                xpos_rotation(
                    ctx.q_pos,
                    center,
                    self.head_dim,
                    key=key,
                    base=self.base,
                    scale_base=self.scale_base,
                    gamma=self.gamma,
                )
                for key in (False, True)
            )
        rot_q, rot_k = ctx.scratch[key]
        return rotate(q, rot_q), rotate(k, rot_k)

    def bias(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> list[AttentionBias]:
        """The blockwise causal attention's mask when ``blockwise`` is set, else nothing.
        It is defined for causal attention only: a bidirectional model would let every
        query see all later blocks."""
        if self.blockwise is None:
            return []
        if not ctx.causal:
            raise ValueError(
                f"xpos blockwise={self.blockwise} is blockwise *causal* attention; this attention is not causal "
                "(an encoder), where it would let each query see every later block"
            )
        return [BlockMask(self.blockwise)]

    def extra_repr(self) -> str:
        text = f"head_dim={self.head_dim}, base={self.base}, scale_base={self.scale_base}, gamma={self.gamma}"
        return text if self.blockwise is None else f"{text}, blockwise={self.blockwise}"
