"""PRISM: position as probability (Lee 2025), behind pezoo's one interface.

Axis letters: b batch, s new tokens of this call, t all tokens so far, d model width,
h heads, c cursors per head, n cursors of a PRISM layer (both sides, all heads),
p histogram bins (2P+1), f stream width d_pe, g GRU hidden width.

How it plugs in (Lee 2025 §5, Eq. 9; docs/prism.md):

* ``observe(layer, x, ctx)``: at each backbone layer where a PRISM layer sits, a GRU
  over the layer-normed residual stream x emits per-cursor gates, the histogram filter
  (``layer.py``, ``histogram.py``) runs over the new tokens continuing from the state kept in
  ``ctx.state``, and the resulting query/key position streams go to ``ctx.scratch``.
* ``qk(layer, q, k, ctx)``: the streams of the most recent PRISM layer at or below
  ``layer`` are scaled and concatenated onto q and k (``streams.fold_position_streams``),
  so any attention backend computes the hybrid score of Eq. 9. Keys enter the KV cache
  extended; decoding costs O(P) per token and cursor for the filter.
* ``bias(layer, q, k, ctx)``: in a full pass on CPU whose state is not kept
  (``ctx.state_kept`` False, as in training), with wide streams and a short sequence
  (:func:`scores_as_bias`), ``qk`` returns [μ q, k] instead and the position term of
  Eq. 9 comes here as a dense score (``streams.position_scores``): the same score
  without copying the C·d_pe-wide streams into q and k for every layer.
* ``embed`` is the identity: §6.2 removes the APE from the residual stream.

The support P is chosen at run time from the sequence length (the smallest power of two
>= the tokens so far, at least ``min_support``) and grows during decoding; with the
default ``eps_support="reachable"`` the result does not depend on P at all.
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any, cast

import torch
from torch import Tensor, nn

from pezoo.biases import AttentionBias, DenseBias
from pezoo.context import AttentionContext, check_layer, check_qk
from pezoo.encodings.prism.config import CopyKey, EpsSupport, PRISMConfig
from pezoo.encodings.prism.gates import HiddenRegulariser
from pezoo.encodings.prism.layer import PRISMLayer
from pezoo.encodings.prism.paper import CARD
from pezoo.encodings.prism.recording import CursorRecording
from pezoo.encodings.prism.streams import CallStreams, StreamNorm, fold_position_streams, position_scores
from pezoo.interface import PositionalEncoding
from pezoo.registry import register

__all__ = ["PRISM", "scores_as_bias"]

SCORE_MIN_D_PE = 64
"""The narrowest streams whose position term :func:`scores_as_bias` sends as a score."""


def scores_as_bias(q: Tensor, k: Tensor, streams: Tensor, ctx: AttentionContext) -> bool:
    """Whether Eq. 9's position term goes to attention as a dense (b, h, i, j) score
    rather than as C·d_pe dims widening q (b, h, i, e) and k (b, h, j, e); of ``streams``
    (..., c, f) only the cursor count c and width f are read. The two give the same
    scores (tested in float64).

    As a score, the per-cursor products ⟨g_i^{q,c}, g_j^{k,c}⟩ (b, h, c, i, j) are computed
    once per PRISM layer and weighed per backbone layer, instead of copying the streams
    into q and k and multiplying them out again in every layer that reads them. Chosen
    when all of these hold:

    * the state is dropped after the call (``ctx.state_kept`` False, nothing cached):
      a KV cache holds widened keys;
    * CPU: fused CUDA kernels take the widened q/k without an (i, j) tensor or the
      gradient of a bias;
    * the per-cursor scores are smaller than one layer's widened streams
      (i·j < (i + j)·d_pe), so long sequences keep their linear memory;
    * streams at least ``SCORE_MIN_D_PE`` = 64 wide per cursor, and C·d_pe at least 4×
      the sequence (max(i, j)): the saved copies and products grow with C·d_pe, the
      per-layer work on the (b, h, c, i, j) scores with the sequence. Measured on one
      core (docs/performance.md), every case inside the rule ran faster and every case
      outside slower: prism{paper} (C·d_pe = 904) 0.64–0.79× on the board's tasks;
      C·d_pe = 256 0.89–0.92× at 22 tokens, 1.05–1.07× at 83; the default (d_pe = 32,
      C·d_pe = 64) 1.05–1.20× on the board model, 1.26–1.55× on the ruoss model.
    """
    if ctx.state_kept or ctx.n_cached or q.device.type != "cpu":
        return False
    i, j = q.shape[-2], k.shape[-2]
    c, f = streams.shape[-2], streams.shape[-1]
    return f >= SCORE_MIN_D_PE and c * f >= 4 * max(i, j) and i * j < (i + j) * f


@register("prism", card=CARD)
class PRISM(PositionalEncoding, CursorRecording):
    """PRISM: learned relative positions as histograms over offsets (Lee 2025, §4–5, Alg. 1–4).

    Per PRISM layer and head, C query and C key cursors each keep a histogram over signed
    offsets -P..P, moved token by token by GRU gates (reset / increment / decrement /
    keep, optional copy) and power-sharpened. A cursor's position stream is its histogram
    times a sinusoid table; every attention layer from a PRISM layer up to the next uses
    the hybrid score

        μ_h ⟨q_i, k_j⟩/√e + (1 - μ_h) Σ_c |α_{h,c}| ⟨g_i^{q,c}, g_j^{k,c}⟩ / √(C·d_pe)

    computed as one dot product of extended q/k under the usual 1/√e scale (any backend),
    or, in a full CPU pass whose state is dropped, as [μ q, k] plus the position term as a
    dense score (:func:`scores_as_bias`).
    No positions are read (``uses_positions = False``); tokens are embedded without APE.

    Args: see :class:`PRISMConfig` (every field is a keyword argument).
    """

    uses_positions = False

    def __init__(
        self,
        *,
        d_model: int,
        n_heads: int,
        n_layers: int,
        layers: tuple[int, ...] = (0,),
        n_cursors: int = 2,
        d_pe: int = 32,
        gru_hidden: int = 100,
        regulariser: HiddenRegulariser = "orthogonal",
        frobenius_weight: float = 1e-3,
        gamma_init: float = 2.0,
        gamma_max: float | None = None,
        eps: float = 1e-6,
        eps_support: EpsSupport = "reachable",
        stream_norm: StreamNorm = "l2",
        copy_cursors: tuple[int, ...] = (),
        copy_every: int = 0,
        copy_key: CopyKey = "absolute",
        copy_dim: int = 16,
        copy_null_bias: float = 4.0,
        alpha_init: float = 1.0,
        mu_init: float = 0.5,
        alpha_lr: float = 0.03,
        alpha_betas: tuple[float, float] = (0.8, 0.92),
        min_support: int = 16,
        compile_scan: bool = False,
        scan_window: bool = True,
        max_support: int | None = None,
        scan_checkpoint: int | None = None,
    ) -> None:
        given = dict(locals())
        super().__init__()
        options = {f.name: given[f.name] for f in fields(PRISMConfig)}
        options["layers"], options["copy_cursors"] = tuple(layers), tuple(copy_cursors)
        options["alpha_betas"] = tuple(alpha_betas)
        self.config = cfg = PRISMConfig(**options)
        self.prism_layers = nn.ModuleDict({str(layer): PRISMLayer(cfg) for layer in cfg.layers})
        # the ModuleDict's key of each PRISM layer, looked up rather than formatted in observe:
        # dynamo cannot trace str(int), and its graph break made every hook a frame of its own,
        # compiled once per layer (a 12-layer model hit the recompile limit)
        self._layer_keys = {layer: str(layer) for layer in cfg.layers}
        # μ = σ(ν) and α per backbone layer and head (docs/prism.md, reading 14); layers below the first
        # PRISM layer have no position stream and leave theirs unused.
        self.mu_logit = nn.Parameter(torch.full((n_layers, n_heads), math.log(mu_init / (1.0 - mu_init))))
        self.alpha = nn.Parameter(torch.full((n_layers, n_heads, n_cursors), float(alpha_init)))
        self._recording = None

    def reset_parameters(self) -> None:
        """Re-initialise μ's logits and α as the constructor does (the PRISM layers have their
        own); for deferred initialisation after ``meta`` and ``to_empty``."""
        mu = self.config.mu_init
        with torch.no_grad():
            self.mu_logit.fill_(math.log(mu / (1.0 - mu)))
            self.alpha.fill_(float(self.config.alpha_init))

    # -- hooks ---------------------------------------------------------------------------
    def observe(self, layer: int, x: Tensor, ctx: AttentionContext) -> None:
        """At a PRISM layer: gates + filter over the new tokens x (b, s, d); streams to ctx.scratch."""
        check_layer(self.name, layer, self.config.n_layers)
        prism = self._prism_layer(layer)
        if prism is None:
            return
        record = self._recording is not None
        prism_layer = cast(PRISMLayer, self.prism_layers[self._layer_keys[prism]])
        state_key = self.state_key(prism)
        streams, new_state, recorded = prism_layer.streams(x, ctx.state.get(state_key), record=record)
        ctx.state[state_key] = new_state
        ctx.scratch[state_key] = streams
        if recorded is not None and self._recording is not None:
            self._recording.append({"layer": prism, **recorded})

    def _prism_layer(self, layer: int) -> int | None:
        """``layer`` if it is a PRISM layer, else None, as the config's own int.

        Compared, never used as a key: a hook PRISM's eager filter splits off the model's
        graph is compiled as a frame of its own, where a dict key (or ``str``) made of the
        traced ``layer`` pins the frame to that one value, so a model recompiled every hook
        once per layer (a 12-layer model hit dynamo's recompile limit); a comparison makes
        one graph for every layer on the same side of it.
        """
        for prism in self.config.layers:
            if layer == prism:
                return prism
        return None

    def _ctx_key(self, what: str, layer: int | None) -> tuple[str, int, int | None]:
        """This instance's ``ctx.state``/``ctx.scratch`` key for ``layer`` (:meth:`ctx_key`)."""
        return (*self.ctx_key(what), layer)

    def state_key(self, layer: int) -> tuple[str, int, int | None]:
        """The ``ctx.state`` key of PRISM layer ``layer``'s recurrent state (its filter's
        histogram, GRU state and support), for callers that inspect a decode's state."""
        return self._ctx_key("prism", layer)

    def source_layer(self, layer: int) -> int | None:
        """The PRISM layer whose streams backbone ``layer`` uses (most recent at or below), or None
        (the config's own int, compared with ``layer``: see :meth:`_prism_layer`)."""
        below = [p for p in self.config.layers if p <= layer]
        return max(below) if below else None

    def qk(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor]:
        """q, k (b, h, s, e) -> (b, h, s, e + C·d_pe) extended by the position streams."""
        check_layer(self.name, layer, self.config.n_layers)
        check_qk(self.name, q, k, ctx, q.shape[-1])  # any e: the streams are appended to it
        if q.shape[1] != self.config.n_heads:
            raise ValueError(f"{self.name} was built for n_heads={self.config.n_heads}, got q with {q.shape[1]} heads")
        source = self.source_layer(layer)
        if source is None:
            return q, k
        try:
            streams: CallStreams = ctx.scratch[self._ctx_key("prism", source)]
        except KeyError:
            raise RuntimeError(
                f"PRISM.qk(layer={layer}) needs the streams of PRISM layer {source}: call "
                f"observe({source}, x, ctx) with the same ctx first"
            ) from None
        if ctx.head_dim is None:  # attend's default scale must stay 1/sqrt(e), not of the widened dim
            ctx.head_dim = q.shape[-1]
        mu = torch.sigmoid(self.mu_logit[layer])  # (h,)
        if scores_as_bias(q, k, streams.raw, ctx):  # bias() adds the position term
            ctx.scratch[self._ctx_key("prism bias", source)] = True  # for this layer's bias(), which pops it
            return q * mu[None, :, None, None].to(q.dtype), k
        g_q, g_k = streams.normalised()
        return fold_position_streams(q, k, g_q, g_k, mu, self.alpha[layer].abs())

    def bias(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> list[AttentionBias]:
        """Eq. 9's position term as a dense score where :meth:`qk` left q/k narrow, else none."""
        check_layer(self.name, layer, self.config.n_layers)
        source = self.source_layer(layer)
        if source is None or not ctx.scratch.pop(self._ctx_key("prism bias", source), False):
            return []
        per_cursor = ctx.scratch[self._ctx_key("prism", source)].scores()  # once per PRISM layer
        mu = torch.sigmoid(self.mu_logit[layer])  # (h,)
        return [DenseBias(position_scores(per_cursor, mu, self.alpha[layer].abs(), self.config.d_pe))]

    # -- training helpers ------------------------------------------------------------------
    def optimizer_groups(self) -> list[dict[str, Any]]:
        """Optimiser groups with their own settings (§6.4): α gets AdamW(lr=alpha_lr, betas=alpha_betas).

        Parameters not listed here belong in the caller's default group.
        """
        cfg = self.config
        return [{"params": [self.alpha], "lr": cfg.alpha_lr, "betas": cfg.alpha_betas, "weight_decay": 0.0}]

    def regularisation(self) -> Tensor:
        """Loss term to add during training: the weighted Frobenius penalty on W_hh (0 unless selected)."""
        total = self.alpha.new_zeros(())
        if self.config.regulariser == "frobenius":
            for prism_layer in self.prism_layers.values():
                gates = cast(PRISMLayer, prism_layer).gates
                total = total + self.config.frobenius_weight * gates.penalty()
        return total

    def extra_repr(self) -> str:
        c = self.config
        return f"layers={c.layers}, n_cursors={c.n_cursors}, d_pe={c.d_pe}, copy={int(c.copy_mask().sum())}"
