"""Learning-based position embeddings, LBPE (Chen, Liang, Lin, TPAMI 2026, §VII-B),
with and without the scale hint (§VII-A).

A positional relation function (PRF) maps a (query, key) position pair to one of S
relation ids; LBPE learns it as a distribution over S slots,

    φθ(i, j) ∈ Δ^S,       LBPE(i, j) = Pᵀ φθ(i, j) ∈ R^d,      P ∈ R^{S×d} learned slots,

and adds it to the *key* input of layer l only (key-only relative PE):

    α_ij = (h_j + LBPE(i, j))ᵀ W_Kᵀ W_Q h_i  =  ⟨q_i, k_j⟩ + Σ_s φθ(i, j)_s ⟨q_i, W_K P_s⟩.

The first term is ordinary content attention; the second is this encoding's
content-dependent bias, computed as ``R[b,h,i,s] = ⟨q_i, K_s⟩`` and
``bias[b,h,i,j] = Σ_s φ[i,j,s] R[b,h,i,s]`` (O(i·j·S) per head; no (i, j, d) tensor).

Conventions and choices (the PRF network lives in the paper's online appendix, which we
do not have; see docs/encodings/learned_prf.md):
    * Slot keys. The encoding cannot see the attention's W_K, so it learns the products
      ``K_s = W_K P_s`` directly, one (S, h, e) table per layer. This has the same
      expressive power as separate P and W_K (any P with a full-rank W_K gives any K)
      but does not tie the slots' key projection to the content one.
    * Scaling. The bias is multiplied by 1/sqrt(e), like the content scores, since the
      paper's α_ij is the pre-scaling logit; it is added after the 1/sqrt(e) scaling.
    * PRF network, one per layer: raw integer features ``[i, j, i - j]`` (and the
      instance scale n with the scale hint) times ``feature_scale`` (1/16), an MLP of
      ``depth`` ReLU layers of width ``hidden`` (2 × 64), then S logits and a softmax
      (temperature ``temperature``). Raw (not length-normalised) features keep a
      piecewise-linear ReLU network meaningful past the training lengths.
    * Not relative. φθ(i, j) reads the query and key positions themselves (the paper's PRF
      is a function of the pair, §VII-B; APE's ``i·K + j`` is one), so it cannot be
      evaluated once per distance i - j and gathered like T5's bias: the network runs on
      every (i, j) pair and the bias is a dense (b, h, i, j) tensor on every backend,
      O(S²) memory by definition.
    * S = 16 without and 32 with the scale hint.
    * Scale hint: n comes from ``ctx.scale_hint``, the task's instance scale: (b,) per
      example, or (b, i) per query token when a row packs several instances (our
      packed-row reading of the scale hint of §VII-A: a pair (i, j) gets the n of query i's
      instance); (1,) or (1, i) gives every example the same. The harness passes it
      for every example. ``learned_prf_sh`` without it, or with another shape, is an error.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor, nn

from pezoo.biases import AttentionBias, DenseBias
from pezoo.cards import PaperCard, PlotLook, RunFacts
from pezoo.context import AttentionContext, check_batch, check_layer, check_number, check_sizes
from pezoo.eager import eager_under_compile
from pezoo.interface import PositionalEncoding
from pezoo.registry import register


def prf_features(q_pos: Tensor, k_pos: Tensor, scale_hint: Tensor | None = None, *, feature_scale: float) -> Tensor:
    """Pair features of the PRF network.

    Args:
        q_pos: (b|1, i) query positions.
        k_pos: (b|1, j) key positions.
        scale_hint: optional instance scale n: (b|1,) per example or (b, i) per query.
        feature_scale: multiplier applied to every feature.

    Returns:
        (b|1, i, j, 3) float32 ``[i, j, i - j]``, or (b, i, j, 4) with n appended.
    """
    qi = q_pos.to(torch.float32)[:, :, None]  # (b, i, 1)
    kj = k_pos.to(torch.float32)[:, None, :]  # (b, 1, j)
    qi, kj = torch.broadcast_tensors(qi, kj)  # (b, i, j)
    feats = [qi, kj, qi - kj]
    if scale_hint is not None:
        n = scale_hint.to(device=q_pos.device, dtype=torch.float32)
        n = n[:, :, None] if n.ndim == 2 else n.view(-1, 1, 1)  # (b, i, 1) per query, or (b, 1, 1)
        shape = torch.broadcast_shapes(feats[0].shape, n.shape)
        feats = [*(f.expand(shape) for f in feats), n.expand(shape)]
    return torch.stack(feats, dim=-1) * feature_scale  # (b, i, j, F)


def lbpe_bias(phi: Tensor, q: Tensor, slot_keys: Tensor) -> Tensor:
    """The LBPE score term ``Σ_s φ[i,j,s] ⟨q_i, K_s⟩ / sqrt(e)``.

    Args:
        phi: (b|1, i, j, S) slot distribution per pair.
        q: (b, h, i, e) queries.
        slot_keys: (S, h, e) key-projected slots ``W_K P_s`` per head.

    Returns:
        (b, h, i, j) additive bias in float32.
    """
    r = torch.einsum("bhie,she->bhis", q.to(torch.float32), slot_keys.to(torch.float32))  # (b, h, i, S)
    r = r / math.sqrt(q.shape[-1])
    if phi.shape[0] == 1:
        return torch.einsum("ijs,bhis->bhij", phi[0], r)
    return torch.einsum("bijs,bhis->bhij", phi, r)


class PRFNetwork(nn.Module):
    """φθ: pair features (..., F) -> slot distribution (..., S), a ReLU MLP and a softmax."""

    def __init__(self, n_features: int, n_slots: int, hidden: int, depth: int, temperature: float) -> None:
        super().__init__()
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        layers: list[nn.Module] = []
        width = n_features
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        layers.append(nn.Linear(width, n_slots))
        self.mlp = nn.Sequential(*layers)
        self.temperature = temperature

    def forward(self, feats: Tensor) -> Tensor:
        """Always in float32, whatever the parameters' dtype: integer positions up to
        thousands are not representable in bf16/fp16 to the unit."""
        x = feats.to(torch.float32)
        for layer in self.mlp:
            if isinstance(layer, nn.Linear):
                x = nn.functional.linear(x, layer.weight.to(torch.float32), layer.bias.to(torch.float32))
            else:
                x = layer(x)
        return (x / self.temperature).softmax(dim=-1)


PAPER = "Chen, Liang, Lin, “On the Limitations and Capabilities of Position Embeddings for Length Generalization”"


def training_departures(run: RunFacts) -> list[str]:
    """The relation function's network is pezoo's own design."""
    return [
        "the relation function's network (raw features [i, j, i − j] scaled by 1/16, a ReLU MLP of 2 × 64, a "
        "softmax over 16 or 32 slots) is pezoo's own design: the paper defines LBPE(i, j) = Pᵀφθ(i, j) (§VII-B) "
        "and leaves its network to an online appendix this project does not have"
    ]


CARD = PaperCard(
    paper=PAPER,
    training_departures=training_departures,
    look=PlotLook("#D55E00", "7 3", "square"),  # vermillion, dashed: its look on the published board
)
SCALE_HINT_CARD = PaperCard(
    paper=PAPER,
    training_departures=training_departures,
    extra_input="reads each example's instance scale n as an input (the scale hint of Chen, Liang, Lin, "
    "“On the Limitations and Capabilities of Position Embeddings for Length Generalization”, §VII-A), which the "
    "harness passes in training and evaluation; the other encodings see only the tokens and their positions",
    extra_input_badge="reads n",
    look=PlotLook("#0072B2", "7 3", "square"),  # blue, dashed: its look on the published board
)


@register("learned_prf", card=CARD)
class LearnedPRF(PositionalEncoding):
    """LBPE (Chen, Liang, Lin §VII-B): a learned PRF φθ(i, j) over S slots, added key-side.

    Args:
        d_model: model width d.
        n_heads: heads h.
        head_dim: each head's key width e (default d / h; a model may decouple the two).
        n_layers: one PRF network and one slot table per layer.
        n_slots: S, the number of relation slots.
        hidden: width of the PRF network's hidden layers.
        depth: number of hidden layers of the PRF network.
        feature_scale: multiplier on the raw integer pair features.
        temperature: softmax temperature of φθ.
        slot_std: init std of the key-projected slots (default 0.02 · sqrt(d), the size
            of ``W_K h`` for a unit-scale h and a 0.02-std W_K).
    """

    uses_scale_hint: ClassVar[bool] = False
    default_slots: ClassVar[int] = 16

    def __init__(
        self,
        *,
        d_model: int,
        n_heads: int,
        n_layers: int,
        head_dim: int | None = None,
        n_slots: int | None = None,
        hidden: int = 64,
        depth: int = 2,
        feature_scale: float = 1.0 / 16,
        temperature: float = 1.0,
        slot_std: float | None = None,
    ) -> None:
        super().__init__()
        check_sizes(self.name, d_model=d_model, n_heads=n_heads, n_layers=n_layers, hidden=hidden)
        check_number(self.name, "temperature", temperature, above=0)  # φ divides the logits by it
        check_number(self.name, "feature_scale", feature_scale)
        if slot_std is not None:
            check_number(self.name, "slot_std", slot_std, at_least=0)
        if head_dim is None:
            if d_model % n_heads:
                raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
            head_dim = d_model // n_heads
        check_sizes(self.name, head_dim=head_dim)
        self.d_model, self.n_heads, self.n_layers, self.head_dim = d_model, n_heads, n_layers, head_dim
        self.n_slots = self.default_slots if n_slots is None else n_slots
        if self.n_slots < 1:
            raise ValueError(f"n_slots must be >= 1 (the bias is a mixture over slots), got {self.n_slots}")
        self.feature_scale = feature_scale
        n_features = 4 if self.uses_scale_hint else 3
        self.prf_nets = nn.ModuleList(
            PRFNetwork(n_features, self.n_slots, hidden, depth, temperature) for _ in range(n_layers)
        )
        std = 0.02 * math.sqrt(d_model) if slot_std is None else slot_std
        self.slot_std = std
        self.slot_keys = nn.Parameter(torch.randn(n_layers, self.n_slots, n_heads, head_dim) * std)  # (l, S, h, e)

    def reset_parameters(self) -> None:
        """Re-initialise the slot keys as the constructor does (the PRF networks' layers have
        their own); for deferred initialisation after ``meta`` and ``to_empty``."""
        with torch.no_grad():
            self.slot_keys.normal_(0.0, self.slot_std)

    def prf(self, layer: int, q_pos: Tensor, k_pos: Tensor, scale_hint: Tensor | None = None) -> Tensor:
        """φθ of ``layer``: (b|1, i, j, S), non-negative and summing to 1 over S."""
        net = self.prf_nets[layer]
        if not self.uses_scale_hint:
            return net(prf_features(q_pos, k_pos, feature_scale=self.feature_scale))
        if scale_hint is None:
            raise ValueError(
                f"{self.name} needs the instance scale n of every example: pass ctx.scale_hint, a (b,) tensor "
                "(or (b, i), one per query token)"
            )
        return net(prf_features(q_pos, k_pos, scale_hint, feature_scale=self.feature_scale))

    def _scale_hint(self, ctx: AttentionContext, q: Tensor) -> Tensor | None:
        """``ctx.scale_hint`` checked against q (b, h, i, e): (b,) or (b|1, i) as given, and
        (1,) expanded to (b,), the same n for every example. Any other shape is an error: a
        (1,) hint used to give every example the bias of example 0's queries."""
        hint = ctx.scale_hint
        if hint is None:
            return None  # prf() says that the hint is missing
        b, i = q.shape[0], q.shape[2]
        if hint.ndim == 1 and hint.shape[0] in (1, b):
            return hint.expand(b)
        if hint.ndim == 2 and hint.shape[0] in (1, b) and hint.shape[1] == i:
            return hint
        if hint.ndim == 2 and hint.shape[0] in (1, b) and hint.shape[1] == 1:  # (b, 1): one n per example
            return hint[:, 0].expand(b)
        raise ValueError(
            f"{self.name}: ctx.scale_hint must have shape (b|1,) or (b|1, 1), one n per example, or (b|1, i), one "
            f"per query token; for q with b={b}, i={i}: ({b},), ({b}, 1), ({b}, {i}) or (1, {i}); got "
            f"{tuple(hint.shape)}"
        )

    def bias(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> list[AttentionBias]:
        check_layer(self.name, layer, self.n_layers)
        check_batch(f"{self.name}.bias", q, k, ctx)
        if q.shape[1] != self.n_heads:
            raise ValueError(f"{self.name} was built for n_heads={self.n_heads}, got q with {q.shape[1]} heads")
        slot_keys = self.slot_keys[layer]  # (S, h, e)
        hint = self._scale_hint(ctx, q) if self.uses_scale_hint else None
        # per example where positions or hints differ by row, or have no values to group by (meta
        # tensors, for shape inference: the grouped form reads the distinct scales)
        per_example = hint is None or hint.ndim > 1 or ctx.q_pos.shape[0] > 1 or ctx.k_pos.shape[0] > 1 or hint.is_meta
        if per_example:
            phi = self.prf(layer, ctx.q_pos, ctx.k_pos, hint)  # (b|1, i, j, S)
            return [DenseBias(lbpe_bias(phi, q, slot_keys))]
        return [DenseBias(self._bias_per_scale(layer, q, ctx, hint, slot_keys))]

    @eager_under_compile("grouping by torch.unique has data-dependent sizes: see _bias_per_scale")
    def _bias_per_scale(
        self, layer: int, q: Tensor, ctx: AttentionContext, hint: Tensor | None, slot_keys: Tensor
    ) -> Tensor:
        """Positions shared by the batch: φ evaluated once per distinct scale n, not per example
        (b, h, i, j). Runs eagerly under ``torch.compile``: ``torch.unique`` has a data-dependent
        size, and evaluating φ per example instead (traceable) made a compiled training step
        5× the eager one (φ's MLP on every example's (i, j) grid; the board's batches hold a
        few distinct n)."""
        assert hint is not None
        if hint.numel() == 0:  # no sequences: no scale to group by
            return q.new_zeros(0, q.shape[1], ctx.q_pos.shape[-1], ctx.k_pos.shape[-1])
        values, inverse = torch.unique(hint, return_inverse=True)
        pieces, order = [], []
        for u, n in enumerate(values):
            rows = (inverse == u).nonzero().squeeze(1)
            phi = self.prf(layer, ctx.q_pos, ctx.k_pos, n.view(1))  # (1, i, j, S)
            pieces.append(lbpe_bias(phi, q[rows], slot_keys))  # (b_u, h, i, j)
            order.append(rows)
        return torch.cat(pieces)[torch.cat(order).argsort()]  # back to batch order

    def extra_repr(self) -> str:
        return f"n_layers={self.n_layers}, n_heads={self.n_heads}, n_slots={self.n_slots}"


@register("learned_prf_sh", card=SCALE_HINT_CARD)
class LearnedPRFScaleHint(LearnedPRF):
    """LBPE-SH (Chen, Liang, Lin §VII-A/B): φθ(i, j, n) also reads the instance scale n.

    Same arguments as :class:`LearnedPRF` (S defaults to 32); n comes from
    ``ctx.scale_hint``.
    """

    uses_scale_hint: ClassVar[bool] = True
    default_slots: ClassVar[int] = 32
