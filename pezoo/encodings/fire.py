"""FIRE: functional interpolation for relative positions (Li, You, Guruganesh, Ainslie,
Ontañón, Zaheer, Sanghai, Yang, Kumar, Bhojanapalli 2024, "Functional Interpolation for
Relative Positions Improves Long Context Transformers", ICLR, §3).

Head h of layer l adds a learned function of the relative position to its scores (after
the 1/sqrt(e) scaling; the bias is not scaled), in the paper's final form

    b(i, j) = f_θ( ψ(i − j) / ψ(max(L, i)) ),     ψ(x) = log(c·x + 1),     i ≥ j,

built up in §3 in three steps: a learned function f_θ of the relative position (the
functional encoding); dividing by the query position i so every input lies in [0, 1]
whatever the length (progressive interpolation); the log transform ψ, which spreads
out nearby positions (amplifying the differences among local positions); and the
threshold L, below which the normaliser stops shrinking (thresholding for short
sequences). f_θ is an MLP 1 → 32 → h with a ReLU, its output one bias per head.

Parameterisation and initialisation follow the paper's reference code: c starts at 0.1
and is used as |c·x|; the threshold is L = |m · L0| with L0 = 512 fixed and a learned
multiplier m starting at 1; the normaliser gets + 1e-6; the MLP has PyTorch's default
``nn.Linear`` initialisation. Each layer has its own c, m and MLP (``share_layers=True``
gives the paper's layer-shared variant, one set for all layers).

Positions are those of ``ctx`` (sampled ones under ``randomized:fire``): i is the query's
position, not its index. The bias is a :class:`~pezoo.biases.RelativeFunctionBias`: flex
evaluates the MLP inside its ``score_mod``, hidden unit by hidden unit, without an (i, j)
tensor; eager/sdpa materialise it with one matrix product.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor, nn

from pezoo.biases import AttentionBias, RelativeFunctionBias
from pezoo.cards import LmPaperClaim, LmRowSelector, PaperCard, PaperClaim, PlotLook
from pezoo.context import AttentionContext, check_layer, check_number
from pezoo.interface import PositionalEncoding
from pezoo.registry import register

FIRE_EPS = 1e-6
"""Added to the normaliser ψ(max(L, i)) (the reference code's ``eps``)."""


def fire_normalized_distance(q_pos: Tensor, k_pos: Tensor, c: Tensor, threshold: Tensor) -> Tensor:
    """``ψ(i − j) / (ψ(max(L, i)) + eps)`` with ``ψ(x) = log(|c·x| + 1)``, elementwise.

    Args:
        q_pos, k_pos: float positions i and j, broadcastable.
        c: () the log transform's scale.
        threshold: () L, the smallest normaliser position.

    Returns:
        the interpolated distance, in [0, 1) for 0 <= j <= i.
    """
    distance = torch.log1p((c * (q_pos - k_pos)).abs())
    normaliser = torch.log1p((c * torch.maximum(q_pos, threshold)).abs()) + FIRE_EPS
    return distance / normaliser


def fire_bias(
    q_pos: Tensor,
    k_pos: Tensor,
    head: Tensor,
    c: Tensor,
    threshold: Tensor,
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
) -> Tensor:
    """FIRE's bias for head ``head``, elementwise (the form flex's ``score_mod`` runs).

    The MLP ``f(x) = W2 · relu(w1 · x + b1) + b2`` is summed hidden unit by hidden unit,
    so every op is elementwise on the broadcast inputs.

    Args:
        q_pos, k_pos: float positions, broadcastable.
        head: long head indices, broadcastable with them.
        c, threshold: () see :func:`fire_normalized_distance`.
        w1, b1: (u,) first layer (input width 1).
        w2: (h, u) and b2: (h,) second layer.
    """
    x = fire_normalized_distance(q_pos, k_pos, c, threshold)
    out = b2[head]
    for unit in range(w1.shape[0]):
        # w2[:, unit][head], not w2[head, unit]: flex's score_mod in torch 2.6-2.8 cannot index a
        # captured tensor by a tensor and an int at once (dynamo: a data-dependent operator)
        out = out + torch.relu(x * w1[unit] + b1[unit]) * w2[:, unit][head]
    return out


def fire_bias_dense(
    q_pos: Tensor, k_pos: Tensor, c: Tensor, threshold: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor
) -> Tensor:
    """:func:`fire_bias` for every head at once: q_pos (b|1, 1, i, 1), k_pos (b|1, 1, 1, j) -> (b|1, h, i, j)."""
    x = fire_normalized_distance(q_pos, k_pos, c, threshold)[:, 0]  # (b, i, j)
    hidden = torch.relu(x[..., None] * w1 + b1)  # (b, i, j, u)
    return (hidden @ w2.T + b2).permute(0, 3, 1, 2)  # (b, h, i, j)


CLAIM = PaperClaim(
    order=50,
    source="Li et al. 2024, “Functional Interpolation for Relative Positions Improves Long Context "
    "Transformers”, abstract (claimed on language modelling and long-text benchmarks)",
    says="FIRE generalizes to longer contexts better than the relative encodings it is compared with.",
    test="judged against the strongest of T5's bias, ALiBi, KERPLE (log), RoPE and NoPE on the table (the best "
    "ranked that fitted): fire's EM>N above it by the permutation test, p ≤ 0.05 (holds); ranked above it without "
    "the test separating them (a tie does not show better), or at or below it (does not hold).",
    rule="above_strongest",
    row="fire",
    against=("t5", "alibi", "kerple_log", "rope", "nope"),  # the encodings the paper compares with
)

LM_PAPER = "Li et al., “Functional Interpolation for Relative Positions Improves Long Context Transformers” (ICLR 2024)"
"""FIRE's paper as the language-modelling section cites it."""

LM_CLAIM = LmPaperClaim(
    order=110,
    key="fire_below_others",
    source=f"{LM_PAPER}, §4.1 (Fig. 1)",
    says="FIRE's long-context perplexity is below the other relative encodings'",
    rule="below",
    row=LmRowSelector("fire"),
    against=(LmRowSelector("alibi"), LmRowSelector("kerple_log"), LmRowSelector("t5"), LmRowSelector("rope")),
    multiple=4,  # the paper tests to 8 192 of L = 2 048
)

CARD = PaperCard(
    claims=(CLAIM,), lm_claims=(LM_CLAIM,), look=PlotLook("#000000", "7 3", "square")
)  # black, dashed: its published look


@register("fire", card=CARD)
class FIRE(PositionalEncoding):
    """FIRE (Li et al. 2024, §3): an MLP of the log-transformed, progressively
    interpolated relative position, one output per head.

    Args:
        n_heads: heads h (the MLP's output width).
        n_layers: layers; each has its own c, threshold and MLP unless ``share_layers``.
        mlp_width: hidden width of the MLP (32 in the paper).
        init_c: initial c of ψ(x) = log(|c·x| + 1) (0.1 in the paper).
        init_threshold: L0; the threshold L = |m · L0| with the learned m starting at 1
            (512 in the paper).
        share_layers: one FIRE module for all layers (the paper's layer-shared variant).
    """

    def __init__(
        self,
        *,
        n_heads: int,
        n_layers: int,
        mlp_width: int = 32,
        init_c: float = 0.1,
        init_threshold: float = 512.0,
        share_layers: bool = False,
    ) -> None:
        super().__init__()
        if n_heads < 1 or n_layers < 1 or mlp_width < 1:
            raise ValueError(f"n_heads, n_layers and mlp_width must be >= 1, got {n_heads}, {n_layers}, {mlp_width}")
        check_number("fire", "init_c", init_c)
        check_number("fire", "init_threshold", init_threshold, above=0)
        self.n_heads, self.n_layers, self.mlp_width = n_heads, n_layers, mlp_width
        self.init_c, self.init_threshold, self.share_layers = init_c, init_threshold, share_layers
        n_sets = 1 if share_layers else n_layers
        self.mlp = nn.ModuleList(
            nn.Sequential(nn.Linear(1, mlp_width), nn.ReLU(), nn.Linear(mlp_width, n_heads)) for _ in range(n_sets)
        )
        self.c = nn.Parameter(torch.full((n_sets,), float(init_c)))  # (sets,)
        self.threshold_multiplier = nn.Parameter(torch.ones(n_sets))  # (sets,)

    def reset_parameters(self) -> None:
        """Re-initialise c and the threshold multiplier as the constructor does (the MLPs'
        layers have their own); for deferred initialisation after ``meta`` and ``to_empty``."""
        with torch.no_grad():
            self.c.fill_(float(self.init_c))
            self.threshold_multiplier.fill_(1.0)

    def bias(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> list[AttentionBias]:
        check_layer(self.name, layer, self.n_layers)
        s = 0 if self.share_layers else layer
        mlp = cast(nn.Sequential, self.mlp[s])
        first, second = cast(nn.Linear, mlp[0]), cast(nn.Linear, mlp[2])
        threshold = (self.threshold_multiplier[s] * self.init_threshold).abs()  # ()
        params = tuple(
            p.to(torch.float32)  # fp32 math under a half-precision model
            for p in (
                self.c[s],
                threshold,
                first.weight[:, 0],  # (u,)
                first.bias,  # (u,)
                second.weight,  # (h, u)
                second.bias,  # (h,)
            )
        )
        return [RelativeFunctionBias(fire_bias, params, dense_fn=fire_bias_dense, n_heads=second.weight.shape[0])]

    def extra_repr(self) -> str:
        return (
            f"n_heads={self.n_heads}, n_layers={self.n_layers}, mlp_width={self.mlp_width}, "
            f"init_c={self.init_c}, init_threshold={self.init_threshold}, share_layers={self.share_layers}"
        )
