"""PRISM: position as probability (Lee 2025), behind pezoo's one interface.

Axis letters: b batch, s new tokens of this call, t all tokens so far, d model width,
h heads, c cursors per head, n cursors of a PRISM layer (both sides, all heads),
p histogram bins (2P+1), f stream width d_pe, g GRU hidden width.

How it plugs in (Lee 2025 §5, Eq. 9; docs/prism.md):

* ``observe(layer, x, ctx)``: at each backbone layer where a PRISM layer sits, a GRU
  over the layer-normed residual stream x emits per-cursor gates, the histogram filter
  (``histogram.py``) runs over the new tokens continuing from the state kept in
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any, Literal, cast

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from einops import rearrange
from torch import Tensor, nn
from torch.profiler import record_function

from pezoo.biases import AttentionBias, DenseBias
from pezoo.context import AttentionContext, check_layer, check_qk, check_sizes
from pezoo.encodings.ape import sinusoid_table
from pezoo.encodings.prism.fused_scan import fused_windowed_scan, scan_coefficients
from pezoo.encodings.prism.gates import CopyAttention, GateNet, HiddenRegulariser, compute_dtype
from pezoo.encodings.prism.histogram import (
    centre_one_hot,
    histogram_scan,
    histogram_transition,
    mix_copy,
    reachable_mask,
    sharpen,
)
from pezoo.encodings.prism.streams import (
    StreamNorm,
    cursor_scores,
    fold_position_streams,
    normalise_streams,
    offset_table,
    position_scores,
    stack_factors,
)
from pezoo.interface import PositionalEncoding
from pezoo.registry import register

__all__ = ["PAPER_OPTIONS", "PRISM", "CallStreams", "PRISMConfig", "PRISMLayer", "scores_as_bias", "support_for"]

EpsSupport = Literal["reachable", "full"]
CopyKey = Literal["absolute", "learned"]

PAPER_OPTIONS: dict[str, Any] = {"n_cursors": 4, "d_pe": 340, "gru_hidden": 100, "alpha_lr": 0.03}
"""§6.2 sizes (4 cursor pairs per head, 340-wide streams, GRU 100): ``create("prism", **PAPER_OPTIONS)``."""


SCAN_CHECKPOINT_ABOVE = 256
"""Default PRISM recomputes its scan in chunks once a training call scans more tokens than this.
Measured (forward + backward, quick dims d 128 x 3 layers x 4 heads, batch 1, CPU allocator
peak / CPU time): S = 256: 26.6 MiB plain vs 14.6 checkpointed, +15 % time; 512: 76 vs 28 MiB,
+19 %; 1024: 248 vs 57 MiB; 2048: 878 vs 115 MiB (plain grows 3.5x per doubling, checkpointed
2.0x). The board's sequences (at most ~200 tokens) stay below, unchanged. docs/prism.md."""

SCAN_CHECKPOINT_CHUNK = 128
"""The automatic checkpoint's chunk (tokens): each keeps one O(P) starting histogram."""


@dataclass(frozen=True)
class PRISMConfig:
    """Every option of :class:`PRISM` (validated; unknown keys are rejected by ``create``).

    Attributes:
        d_model, n_heads, n_layers: backbone shape (from ``ModelDims``).
        layers: 0-based backbone layers a PRISM layer sits before (paper "before layer 1"
            = 0; odds_first / stack: ``(0, 3)``).
        n_cursors: C, query (and key) cursors per head.
        d_pe: stream width per cursor (even).
        gru_hidden: GRU width.
        regulariser: W_hh treatment, ``"orthogonal" | "frobenius" | "none"`` (§6.3).
        frobenius_weight: weight of ‖W_hh‖_F² in :meth:`PRISM.regularisation`.
        gamma_init: initial sharpening exponent (γ = 1 + softplus(ρ)).
        gamma_max: optional cap on γ (clamped), or None.
        eps: sharpening floor ε (> 0: the sharpening takes log(h + ε)).
        eps_support: ``"reachable"`` (ε only on bins the cursor can occupy; P-invariant)
            or ``"full"`` (ε on every bin, Alg. 1 literally).
        stream_norm: Alg. 3 variant, ``"l2"`` (per token) or ``"constant"``.
        copy_cursors: per-head query-cursor indices with a copy branch (default here: ``(0,)``).
        copy_every: also give a copy branch to every k-th query cursor counted over
            (head, cursor) (§6.0.1's "one of every five"); 0 = off.
        copy_key: ``"absolute"``: the key cursor paired with a copying query is fixed to
            increment-only (its histogram is the one-hot at offset t+1); ``"learned"``.
        copy_dim: width of the copy attention's queries/keys.
        copy_null_bias: initial bias of the copy branch's null (no-copy) logit.
        alpha_init: initial α per layer, head and cursor (used as |α|).
        mu_init: initial μ per layer and head (content weight, μ = σ(ν)).
        alpha_lr, alpha_betas: AdamW settings of α's parameter group (§6.4).
        min_support: smallest support P.
        compile_scan: run the scan step through ``torch.compile``.
        scan_window: with ``eps_support="reachable"``, scan only the bins reachable so
            far (±min(t+1, P)) instead of all 2P+1: the same result, about a third of
            the work (off: the plain full-width scan, kept as the reference).
        max_support: a fixed window: cap the support P at this many offsets each side.
            None (default): P grows with the sequence and nothing is ever clamped.
            With a cap, a cursor (or a copied key position) further than P from its
            start stays in the edge bin, which is Alg. 1's own clamping rule at the
            support's edge (the increment-only key cursor of token t then sits at offset
            min(t + 1, P)); outputs equal the default's while the sequence has at most
            P - 1 tokens, and memory and time of the scan grow linearly in the sequence
            length at a fixed P instead of quadratically. A modelling choice, not a
            paper setting.
        scan_checkpoint: recompute the windowed scan in the backward pass in chunks of
            this many tokens (``torch.utils.checkpoint``): only each chunk's starting
            histogram and its streams are kept, not every step's intermediates. The same
            outputs and gradients (to float rounding), about one more forward scan of time;
            0 = off. None (default): automatic, chunks of :data:`SCAN_CHECKPOINT_CHUNK`
            tokens when a training call scans more than :data:`SCAN_CHECKPOINT_ABOVE`
            tokens, off below (so memory grows linearly, not quadratically, with long
            sequences, while short ones, the board's, run exactly as without it).
    """

    d_model: int
    n_heads: int
    n_layers: int
    layers: tuple[int, ...] = (0,)
    n_cursors: int = 2
    d_pe: int = 32
    gru_hidden: int = 100
    regulariser: HiddenRegulariser = "orthogonal"
    frobenius_weight: float = 1e-3
    gamma_init: float = 2.0
    gamma_max: float | None = None
    eps: float = 1e-6
    eps_support: EpsSupport = "reachable"
    stream_norm: StreamNorm = "l2"
    copy_cursors: tuple[int, ...] = ()
    copy_every: int = 0
    copy_key: CopyKey = "absolute"
    copy_dim: int = 16
    copy_null_bias: float = 4.0
    alpha_init: float = 1.0
    mu_init: float = 0.5
    alpha_lr: float = 0.03
    alpha_betas: tuple[float, float] = (0.8, 0.92)
    min_support: int = 16
    compile_scan: bool = False
    scan_window: bool = True
    max_support: int | None = None
    scan_checkpoint: int | None = None

    def __post_init__(self) -> None:
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise ValueError(f"PRISM: {msg}")

        check_sizes("prism", d_model=self.d_model, n_heads=self.n_heads, n_layers=self.n_layers)
        need(self.d_pe > 0 and self.d_pe % 2 == 0, f"d_pe must be a positive even number, got {self.d_pe}")
        need(self.n_cursors >= 1, f"n_cursors must be >= 1, got {self.n_cursors}")
        need(len(self.layers) >= 1, "layers must name at least one backbone layer")
        need(all(0 <= x < self.n_layers for x in self.layers), f"layers {self.layers} outside 0..{self.n_layers - 1}")
        need(len(set(self.layers)) == len(self.layers), f"layers {self.layers} repeat a layer")
        need(all(0 <= c < self.n_cursors for c in self.copy_cursors), f"copy_cursors {self.copy_cursors} not < C")
        need(self.copy_every >= 0, f"copy_every must be >= 0, got {self.copy_every}")
        need(self.gamma_init > 1.0, f"gamma_init must be > 1, got {self.gamma_init}")
        need(self.gamma_max is None or self.gamma_max > 1.0, f"gamma_max must be > 1, got {self.gamma_max}")
        need(0.0 < self.mu_init < 1.0, f"mu_init must be in (0, 1), got {self.mu_init}")
        need(
            self.eps > 0.0,
            f"eps must be > 0, got {self.eps} (the sharpening takes log(h + eps); at eps=0 an empty bin's log is "
            "-inf and every gate gradient NaN)",
        )
        need(self.min_support >= 1, f"min_support must be >= 1, got {self.min_support}")
        need(self.max_support is None or self.max_support >= 1, f"max_support must be >= 1, got {self.max_support}")
        need(
            self.scan_checkpoint is None or self.scan_checkpoint >= 0,
            f"scan_checkpoint must be >= 0 (None: automatic), got {self.scan_checkpoint}",
        )
        for name, value, valid in (
            ("regulariser", self.regulariser, ("orthogonal", "frobenius", "none")),
            ("eps_support", self.eps_support, ("reachable", "full")),
            ("stream_norm", self.stream_norm, ("l2", "constant")),
            ("copy_key", self.copy_key, ("absolute", "learned")),
        ):
            need(value in valid, f"{name} must be one of {valid}, got {value!r}")

    def scan_chunk(self, tokens: int) -> int:
        """The chunk of the checkpointed scan for a call over ``tokens`` new tokens (0: none)."""
        if self.scan_checkpoint is not None:
            return self.scan_checkpoint
        return SCAN_CHECKPOINT_CHUNK if tokens > SCAN_CHECKPOINT_ABOVE else 0

    def copy_mask(self) -> Tensor:
        """(h, c) bool: which query cursors have a copy branch."""
        # on the CPU also under torch.device("meta"): nonzero() below needs the values
        mask = torch.zeros(self.n_heads, self.n_cursors, dtype=torch.bool, device="cpu")
        mask[:, list(self.copy_cursors)] = True
        if self.copy_every:
            mask.view(-1)[:: self.copy_every] = True
        return mask


def support_for(length: int, min_support: int, max_support: int | None = None) -> int:
    """Support P for a sequence of ``length`` tokens: the smallest power of two >= length
    (>= min_support), capped at ``max_support`` when one is given."""
    support = max(min_support, 1 << max(length - 1, 0).bit_length())
    return support if max_support is None else min(support, max_support)


def _inverse_softplus(y: float) -> float:
    return y + math.log(-math.expm1(-y))


_INCREMENT_ONLY = (0.0, 1.0, 0.0, 0.0)  # reset, inc, dec, keep


class CallStreams:
    """One PRISM layer's position streams for one call, before Alg. 3's normalisation.

    ``raw`` is (s, b, 2h, c, f) in the scan's layout (side, head, cursor on one axis).
    Each reader takes the form it needs, computed once and shared by every backbone layer
    that reads this PRISM layer: :meth:`normalised` the streams for the q/k fold,
    :meth:`scores` the per-cursor products of the normalised streams for the score path.
    """

    def __init__(self, raw: Tensor, mode: StreamNorm) -> None:
        self.raw, self.mode = raw, mode
        self._normalised: tuple[Tensor, Tensor] | None = None
        self._scores: Tensor | None = None

    def normalised(self) -> tuple[Tensor, Tensor]:
        """g_q, g_k: (b, h, s, c, f) normalised query / key streams (views of one tensor)."""
        if self._normalised is None:
            # normalise in the scan's contiguous layout (the (c, f) stack of a token and head is
            # one row there), then lay the streams out once as the q/k fold reads them: on permuted
            # views every elementwise op and its backward ran strided (a third of prism{paper}'s step)
            streams = normalise_streams(self.raw, self.mode)
            g_q, g_k = rearrange(streams, "s b (two h) c f -> two b h s c f", two=2).unbind(0)  # views
            self._normalised = g_q, g_k
        return self._normalised

    def scores(self) -> Tensor:
        """(b, h, c, i, j): ⟨g_i^{q,c}, g_j^{k,c}⟩ of the normalised streams, the normalisation
        applied to the products rather than to the streams (``streams.cursor_scores``)."""
        if self._scores is None:
            e_q, e_k = rearrange(self.raw, "s b (two h) c f -> two b h s c f", two=2).unbind(0)
            n_q, n_k = rearrange(stack_factors(self.raw, self.mode), "s b (two h) -> two b h s", two=2).unbind(0)
            self._scores = cursor_scores(e_q, e_k, n_q, n_k)
        return self._scores


class PRISMLayer(nn.Module):
    """One PRISM layer: gates, copy branch and histogram filter for 2·h·C cursors.

    Cursors are scanned in the order [copying query cursors | other query cursors |
    learned key cursors]; key cursors fixed to increment-only (``copy_key="absolute"``)
    are not scanned: their histogram is the one-hot at offset t+1 and their stream the
    sinusoid of t+1. ``unpermute`` maps back to the (side, head, cursor) layout.

    Args:
        cfg: the encoding's configuration.
    """

    unpermute: Tensor
    copy_keys_in_scan: Tensor

    def __init__(self, cfg: PRISMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h, c = cfg.n_heads, cfg.n_cursors
        hc = h * c
        copy_flat = cfg.copy_mask().view(-1).nonzero().view(-1).tolist()  # query cursor ids with copy
        self.n_copy = len(copy_flat)
        self.learned_copy_keys = self.n_copy > 0 and cfg.copy_key == "learned"
        fixed = [hc + i for i in copy_flat] if self.n_copy and cfg.copy_key == "absolute" else []
        other_q = [i for i in range(hc) if i not in copy_flat]
        keys = [hc + i for i in range(hc) if hc + i not in fixed]
        order = copy_flat + other_q + keys + fixed
        self.n_scan, self.n_query, self.n_fixed = len(order) - len(fixed), hc, len(fixed)
        # positions, within the scanned key cursors, of the keys paired with copying queries
        paired = [keys.index(hc + i) for i in copy_flat] if self.learned_copy_keys else []
        self._order, self._paired = order, paired
        self._in_order = order == sorted(order)  # no copy branch: the scan order is the output order
        self.register_buffer("unpermute", torch.tensor(order).argsort(), persistent=False)
        self.register_buffer("copy_keys_in_scan", torch.tensor(paired, dtype=torch.long), persistent=False)

        self.norm = nn.LayerNorm(cfg.d_model)
        self.gates = GateNet(cfg.d_model, self.n_scan, hidden=cfg.gru_hidden, regulariser=cfg.regulariser)
        self.gamma_raw = nn.Parameter(torch.full((self.n_scan,), _inverse_softplus(cfg.gamma_init - 1.0)))
        self.copy = (
            CopyAttention(cfg.d_model, self.n_copy, dim=cfg.copy_dim, null_bias=cfg.copy_null_bias)
            if self.n_copy
            else None
        )
        self._compiled: Any = None

    def reset_parameters(self) -> None:
        """Rebuild the cursor-order buffers in place and re-initialise γ (the submodules have
        their own ``reset_parameters``). The buffers are derived and non-persistent: not in
        the state dict, so after ``to_empty`` of a meta-device model this restores them."""
        with torch.no_grad():
            self.unpermute.copy_(torch.tensor(self._order, device="cpu").argsort())
            self.copy_keys_in_scan.copy_(torch.tensor(self._paired, dtype=torch.long, device="cpu"))
            self.gamma_raw.fill_(_inverse_softplus(self.cfg.gamma_init - 1.0))

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_compiled"] = None  # a compiled step does not pickle; rebuilt on first use
        return state

    def gamma(self) -> Tensor:
        """(n_scan,) sharpening exponents γ = 1 + softplus(ρ) (> 1), capped at gamma_max if set."""
        g = 1.0 + F.softplus(self.gamma_raw)
        return g if self.cfg.gamma_max is None else g.clamp(max=self.cfg.gamma_max)

    # -- the scan ----------------------------------------------------------------------
    def _step(
        self,
        h: Tensor,
        p_reset: Tensor,
        p_inc: Tensor,
        p_dec: Tensor,
        p_keep: Tensor,
        gamma: Tensor,
        eps: float,
        p_copy: Tensor | None,
        *,
        mask: Tensor | None = None,
    ) -> Tensor:
        """``histogram_step`` on (b, n, p) whose copy branch, p_copy (b, k, p+1), applies to
        the first k cursors only (the copying query cursors come first in scan order)."""
        new = histogram_transition(h, p_reset, p_inc, p_dec, p_keep)  # (b, n, p)
        if p_copy is not None:
            k = p_copy.shape[-2]
            new = torch.cat([mix_copy(new[..., :k, :], p_copy), new[..., k:, :]], dim=-2)
        return sharpen(new, gamma, eps, mask)

    def _step_fn(self) -> Callable[..., Tensor]:
        if not self.cfg.compile_scan:
            return self._step
        if self._compiled is None:
            self._compiled = torch.compile(self._step, dynamic=True)
        return self._compiled

    def forward(
        self, x: Tensor, state: dict[str, Any] | None, *, record: bool = False
    ) -> tuple[Tensor, Tensor, dict[str, Any], dict[str, Tensor] | None]:
        """Run the filter over the new tokens x (b, s, d), continuing from ``state``.

        Returns:
            g_q, g_k: (b, h, s, c, f) normalised query / key streams;
            the new state (to keep for the next call);
            with ``record``: histograms (b, 2, h, c, s, p) and gates (b, 2, h, c, s, 4).
        """
        streams, new_state, recorded = self.streams(x, state, record=record)
        g_q, g_k = streams.normalised()
        return g_q, g_k, new_state, recorded

    @torch.compiler.disable(reason="PRISM's filter is a sequential scan over the tokens: see PRISMLayer.streams")
    def streams(
        self, x: Tensor, state: dict[str, Any] | None, *, record: bool = False
    ) -> tuple[CallStreams, dict[str, Any], dict[str, Tensor] | None]:
        """:meth:`forward` with the streams not yet normalised (:class:`CallStreams`).

        Runs eagerly under ``torch.compile`` (``torch.compiler.disable``); the streams'
        normalisation and the q/k fold that read its result compile as usual. Traced, this
        method specialised the graph on the sequence length: the support P is a power of
        two computed from it in Python (``int.bit_length``), the window of each step of
        the scan has its own width (``min(t + 1, P)``), and the scan's loop over the
        tokens unrolled into the graph, so every new length recompiled (until dynamo's
        ``recompile_limit``) and each compilation grew with the length. Eagerly it is one
        graph break (the GRU is one already: dynamo does not trace ``nn.GRU``) and the
        fused scan's hand-written backward (``fused_scan.py``).
        """
        cfg, state = self.cfg, state or {}
        b, s, _ = x.shape
        own = self.norm.weight.dtype
        if x.dtype != own and not torch.is_autocast_enabled(x.device.type):
            # a bf16 residual stream into an fp32 PRISM without autocast: nn.GRU takes no mixed
            # dtypes, so the gates read the stream in the module's dtype (as autocast would)
            x = x.to(own)
        dtype = compute_dtype(x.dtype)  # histograms and streams: fp32 under fp16 / bf16, fp64 under fp64
        t0 = state.get("t", 0)
        support = max(state.get("support", 0), support_for(t0 + s, cfg.min_support, cfg.max_support))
        bins = 2 * support + 1
        steps = torch.arange(t0, t0 + s, device=x.device)  # absolute token index of each new token
        hist = state.get("hist")
        if hist is None:
            hist = centre_one_hot((b, self.n_scan), support, device=x.device, dtype=dtype)  # (b, n, p)
        hist = _grow(hist.to(dtype), support)

        xn = self.norm(x)
        with record_function("prism.gates"):
            gates, gru_state = self.gates(xn, state.get("gru"))  # (b, s, n, 4)
        gates = gates.transpose(0, 1)  # (s, b, n, 4)
        reachable = cfg.eps_support == "reachable"
        # the windowed scan (a compiled step wants fixed shapes) needs no masks: it only holds reachable bins
        windowed = reachable and cfg.scan_window and not cfg.compile_scan and not self.learned_copy_keys
        masks = reachable_mask(steps, support) if reachable and not windowed else None  # (s, p)
        gamma = self.gamma().to(dtype)
        table = offset_table(support, cfg.d_pe, x.device).to(dtype)  # (p, f)
        emit = (lambda hh: hh) if record else (lambda hh: hh @ table)  # (b, n, p) -> (b, n, p|f)

        new_state: dict[str, Any] = {"t": t0 + s, "support": support, "gru": gru_state}
        p_copy = None
        nq = self.n_query
        if self.copy is not None:
            probs, copy_keys = self.copy(xn, state.get("copy_keys"))  # (b, k, s, t+1)
            new_state["copy_keys"] = copy_keys
            a_pos, a_null = probs[..., :-1], probs[..., -1:]  # (b, k, s, t), (b, k, s, 1)

        step = self._step_fn()
        with record_function("prism.scan"):
            if self.learned_copy_keys:  # keys first: the copy branch mixes in their histograms
                key_h = histogram_scan(hist[:, nq:], gates[:, :, nq:], gamma[nq:], cfg.eps, None, masks, step=step)
                paired = key_h[:, :, self.copy_keys_in_scan].permute(1, 2, 0, 3)  # (b, k, s, p)
                if "copy_hist" in state:
                    paired = torch.cat([_grow(state["copy_hist"], support), paired], dim=2)  # (b, k, t, p)
                new_state["copy_hist"] = paired
                p_copy = torch.cat([a_pos @ paired, a_null], dim=-1).permute(2, 0, 1, 3)  # (s, b, k, p+1)
                query_h = histogram_scan(hist[:, :nq], gates[:, :, :nq], gamma[:nq], cfg.eps, p_copy, masks, step=step)
                new_state["hist"] = torch.cat([query_h[-1], key_h[-1]], dim=1)
                out = emit(torch.cat([query_h, key_h], dim=2))
            else:
                copy_probs = None
                if self.copy is not None and windowed:  # the window's copied mass comes from a_pos itself
                    copy_probs = probs.permute(2, 0, 1, 3)  # (s, b, k, t+1): a_pos then a_null
                elif self.copy is not None:  # copied mass of token j lands on the fixed key's bin P + j + 1
                    p_pos = F.pad(_clamp_copy(a_pos, support), (support + 1, 0))  # (b, k, s, p)
                    p_copy = torch.cat([p_pos, a_null], dim=-1).permute(2, 0, 1, 3)  # (s, b, k, p+1)
                new_state["hist"], out = _scan_emitting(
                    hist, gates, gamma, cfg.eps, p_copy, masks, step, None if record else table,
                    start=t0, windowed=windowed, copy_probs=copy_probs, checkpoint_every=cfg.scan_chunk(s),
                )  # fmt: skip

        if self.n_fixed:  # increment-only key cursors: one-hot at offset t+1
            if record:
                fixed = F.one_hot((steps + support + 1).clamp(max=bins - 1), bins).to(dtype)  # (s, p)
            else:
                fixed = sinusoid_table((steps + 1).clamp(max=support), cfg.d_pe).to(dtype)  # (s, f)
            out = torch.cat([out, fixed[:, None, None, :].expand(s, b, self.n_fixed, -1)], dim=2)
        if not self._in_order:
            out = _permute_dim2(out, self.unpermute)  # (s, b, 2hc, p|f) in (side, head, cursor) order

        recorded = None
        if record:
            full_gates = torch.cat([gates, gates.new_tensor(_INCREMENT_ONLY).expand(s, b, self.n_fixed, 4)], dim=2)[
                :, :, self.unpermute
            ]
            split = "s b (two h c) z -> b two h c s z"
            recorded = {
                "hist": rearrange(out, split, two=2, h=cfg.n_heads),
                "gates": rearrange(full_gates, split, two=2, h=cfg.n_heads),
            }
            out = out @ table
        raw = out.unflatten(2, (2 * cfg.n_heads, cfg.n_cursors))  # (s, b, 2h, c, p|f)
        for dim in (2, 3, 4):  # the model's sizes, not the data's: torch.compile(dynamic=True) must
            torch._dynamo.mark_static(raw, dim)  # not unify 2h with a sequence just as long (a recompile)
        return CallStreams(raw, cfg.stream_norm), new_state, recorded


def _scan_emitting(
    hist: Tensor,
    gates: Tensor,
    gamma: Tensor,
    eps: float,
    p_copy: Tensor | None,
    masks: Tensor | None,
    step: Callable[..., Tensor],
    table: Tensor | None,
    *,
    start: int = 0,
    windowed: bool = False,
    copy_probs: Tensor | None = None,
    checkpoint_every: int = 0,
    fused: bool = True,
) -> tuple[Tensor, Tensor]:
    """``histogram_scan`` that keeps only each step's stream ``h @ table`` (the (b, n, f)
    streams instead of (b, n, p) histograms when P is large; ``table`` None keeps the
    histograms) and returns the last histogram too.

    ``windowed`` (only valid under ``eps_support="reachable"``; ``masks`` is then unused): step t
    (absolute token index ``start + t``) works on the 2w+1 bins with w = min(t + 1, P)
    around the centre instead of all 2P+1. Every other bin is exactly zero there (mass
    moves one bin per token and the mask gives it no ε), the window's edge bins enter the
    step as zero padding so the support clamp is a no-op inside it, and the mask is all
    true on it; so the result is the same as the full scan's while the work per step is
    O(min(t, P)) instead of O(P), about a third of it over a sequence whose support P is
    the next power of two above its length.

    The copy branch comes either dense, ``p_copy`` (s, b, k, p+1), or, windowed with
    increment-only key cursors, as the copy attention's ``copy_probs`` (s, b, k, t+1): a_pos
    (token j's copied mass) then a_null (the no-copy weight) last. Token j's copied mass
    sits on the bin of offset j + 1, so the window's slice of p_pos
    is ``w + 1`` zeros then ``a_pos[:w]``, built per step in O(w) without the dense
    (s, b, k, 2P+2) tensor. Either is unbound once: indexing it per step would make every
    backward step allocate and fill a zero tensor of its full size (O(S²·P) in all).

    ``checkpoint_every`` (windowed only): run the steps in chunks of this many tokens under
    ``torch.utils.checkpoint``, so the backward pass recomputes each chunk from its first
    histogram instead of keeping every step's intermediates.

    ``fused`` (default): the windowed scan with streams (``table`` given) and no dense
    ``p_copy`` runs as one autograd node with a hand-written reverse scan
    (``fused_scan.fused_windowed_scan``): the same outputs and gradients to float rounding,
    in less time and memory. ``fused=False`` keeps the per-op autograd scan (the reference
    the tests compare with); record mode (``table`` None) and the dense copy always use it.
    ``step`` must then be ``PRISMLayer._step`` or equivalent (it is not called).

    Returns:
        (last histogram (b, n, p), stacked streams (s, b, n, f|p)).
    """
    reset, inc, dec, keep = gates.unbind(dim=-1)
    h = hist
    support = hist.shape[-1] // 2
    copies = None if p_copy is None else p_copy.unbind(0)  # (b, k, p+1) per step
    if not windowed:
        every = []
        for t in range(gates.shape[0]):
            copy_t = None if copies is None else copies[t]
            mask_t = None if masks is None else masks[t]
            h = step(h, reset[t], inc[t], dec[t], keep[t], gamma, eps, copy_t, mask=mask_t)
            every.append(h if table is None else h @ table)
        return h, torch.stack(every, dim=0)
    radius = min(start, support)
    h = hist[..., support - radius : support + radius + 1]  # (b, n, 2r+1): the reachable bins
    if fused and table is not None and p_copy is None:
        return _fused_scan_emitting(h, gates, gamma, eps, table, start, support, copy_probs, checkpoint_every)
    pos_null = (
        None
        if copy_probs is None
        else tuple(zip(copy_probs[..., :-1].unbind(0), copy_probs[..., -1:].unbind(0), strict=True))
    )

    def run(h: Tensor, first: int, stop: int) -> tuple[Tensor, Tensor]:
        """Steps first..stop-1 from h (the window of radius min(start + first, P)): (h, streams)."""
        radius, chunk = min(start + first, support), []
        for t in range(first, stop):
            new_radius = min(start + t + 1, support)
            grow = new_radius - radius
            if grow:
                h = F.pad(h, (grow, grow))
            lo, hi = support - new_radius, support + new_radius + 1
            if pos_null is not None:  # bins lo..hi-1 are offsets -w..w; token j's copy lands on offset j + 1
                pos_t, null_t = pos_null[t]
                # inside the support tokens beyond the radius carry no mass (causal): drop them;
                # at the support's edge (only under max_support) they pile on the top bin
                pos_w = pos_t[..., :new_radius] if new_radius < support else _clamp_copy(pos_t, support)
                copy_t = torch.cat([F.pad(pos_w, (new_radius + 1, 0)), null_t], dim=-1)
            elif copies is not None:
                copy_t = torch.cat([copies[t][..., lo:hi], copies[t][..., -1:]], dim=-1)
            else:
                copy_t = None
            h = step(h, reset[t], inc[t], dec[t], keep[t], gamma, eps, copy_t, mask=None)
            radius = new_radius
            if table is None:
                chunk.append(F.pad(h, (lo, 2 * support + 1 - hi)))
            else:
                chunk.append(h @ table[lo:hi])
        return h, torch.stack(chunk, dim=0)

    steps = gates.shape[0]
    h, out = _run_chunked(run, h, steps, checkpoint_every)
    radius = min(start + steps, support)
    last = F.pad(h, (support - radius, support - radius))
    return last, out


def _run_chunked(
    run: Callable[[Tensor, int, int], tuple[Tensor, Tensor]], h: Tensor, steps: int, checkpoint_every: int
) -> tuple[Tensor, Tensor]:
    """``run(h, 0, steps)`` -> (last window, streams), or, when ``checkpoint_every`` asks for it
    and a backward pass will follow, chunk by chunk under ``torch.utils.checkpoint``: each
    chunk keeps its first histogram and its streams and recomputes the rest in backward."""
    if not (checkpoint_every and torch.is_grad_enabled() and steps > checkpoint_every):
        return run(h, 0, steps)
    out = []
    for first in range(0, steps, checkpoint_every):
        stop = min(first + checkpoint_every, steps)
        h, streams = torch.utils.checkpoint.checkpoint(run, h, first, stop, use_reentrant=False)
        out.append(streams)
    return h, torch.cat(out, dim=0)


def _fused_scan_emitting(
    h: Tensor,
    gates: Tensor,
    gamma: Tensor,
    eps: float,
    table: Tensor,
    start: int,
    support: int,
    copy_probs: Tensor | None,
    checkpoint_every: int,
) -> tuple[Tensor, Tensor]:
    """``_scan_emitting``'s windowed path through ``fused_windowed_scan``, chunked under
    ``torch.utils.checkpoint`` when ``checkpoint_every`` asks for it."""
    coef = scan_coefficients(gates)  # (s, b, n, 6)
    steps = gates.shape[0]

    def run(h: Tensor, first: int, stop: int) -> tuple[Tensor, Tensor]:
        probs = None if copy_probs is None else copy_probs[first:stop]
        return fused_windowed_scan(
            h, coef[first:stop], gamma, table, eps, start=start + first, support=support, copy_probs=probs
        )

    h, streams = _run_chunked(run, h, steps, checkpoint_every)
    radius = min(start + steps, support)
    return F.pad(h, (support - radius, support - radius)), streams


class _PermuteDim2(torch.autograd.Function):
    """``x.index_select(2, order)`` for a permutation ``order``, whose backward is the gather by
    the inverse permutation: advanced indexing's backward fills a zero tensor of x's size and
    scatters into it (with prism{paper}'s wide streams, 8 % of a training step)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, order: Tensor) -> Tensor:
        ctx.save_for_backward(order)
        return x.index_select(2, order)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        (order,) = ctx.saved_tensors
        return grad.index_select(2, order.argsort()), None


def _permute_dim2(x: Tensor, order: Tensor) -> Tensor:
    """``x[:, :, order]`` for a permutation ``order`` of axis 2 (see :class:`_PermuteDim2`)."""
    return _PermuteDim2.apply(x, order) if torch.is_grad_enabled() and x.requires_grad else x.index_select(2, order)


def _clamp_copy(a_pos: Tensor, width: int) -> Tensor:
    """(..., t) copy weights of tokens j = 0.. onto offsets 1..width: (..., width), token j
    on offset j + 1, those beyond ``width`` (only under ``max_support``) summed on the top
    bin (the edge rule of Alg. 1); zero-padded when fewer than ``width`` tokens exist."""
    n = a_pos.shape[-1]
    if n <= width:
        return F.pad(a_pos, (0, width - n))
    return torch.cat([a_pos[..., : width - 1], a_pos[..., width - 1 :].sum(dim=-1, keepdim=True)], dim=-1)


def _grow(hist: Tensor, support: int) -> Tensor:
    """Zero-pad a (..., 2P'+1) histogram to (..., 2P+1), P >= P', keeping offsets aligned."""
    extra = support - hist.shape[-1] // 2
    return F.pad(hist, (extra, extra)) if extra > 0 else hist


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


@register("prism")
class PRISM(PositionalEncoding):
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
        # μ = σ(ν) and α per backbone layer and head (docs/prism.md, reading 14); layers below the first
        # PRISM layer have no position stream and leave theirs unused.
        self.mu_logit = nn.Parameter(torch.full((n_layers, n_heads), math.log(mu_init / (1.0 - mu_init))))
        self.alpha = nn.Parameter(torch.full((n_layers, n_heads, n_cursors), float(alpha_init)))
        self._recording: list[dict[str, Any]] | None = None

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
        key = str(layer)
        if key not in self.prism_layers:
            return
        record = self._recording is not None
        prism_layer = cast(PRISMLayer, self.prism_layers[key])
        state_key = self.state_key(layer)
        streams, new_state, recorded = prism_layer.streams(x, ctx.state.get(state_key), record=record)
        ctx.state[state_key] = new_state
        ctx.scratch[state_key] = streams
        if recorded is not None and self._recording is not None:
            self._recording.append({"layer": layer, **recorded})

    def _ctx_key(self, what: str, layer: int | None) -> tuple[str, int, int | None]:
        """This instance's ``ctx.state``/``ctx.scratch`` key for ``layer`` (:meth:`ctx_key`)."""
        return (*self.ctx_key(what), layer)

    def state_key(self, layer: int) -> tuple[str, int, int | None]:
        """The ``ctx.state`` key of PRISM layer ``layer``'s recurrent state (its filter's
        histogram, GRU state and support), for callers that inspect a decode's state."""
        return self._ctx_key("prism", layer)

    def source_layer(self, layer: int) -> int | None:
        """The PRISM layer whose streams backbone ``layer`` uses (most recent at or below), or None."""
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
            ctx.scratch[self._ctx_key("prism bias", layer)] = True
            return q * mu[None, :, None, None].to(q.dtype), k
        g_q, g_k = streams.normalised()
        return fold_position_streams(q, k, g_q, g_k, mu, self.alpha[layer].abs())

    def bias(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> list[AttentionBias]:
        """Eq. 9's position term as a dense score where :meth:`qk` left q/k narrow, else none."""
        check_layer(self.name, layer, self.config.n_layers)
        if not ctx.scratch.pop(self._ctx_key("prism bias", layer), False):
            return []
        per_cursor = ctx.scratch[self._ctx_key("prism", self.source_layer(layer))].scores()  # once per PRISM layer
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

    @contextmanager
    def recording(self) -> Iterator[list[dict[str, Any]]]:
        """Record histograms and gates of every PRISM layer during the forward calls inside.

        Yields a list that receives one dict per (call, PRISM layer):
        ``{"layer", "hist": (b, 2, h, c, s, p), "gates": (b, 2, h, c, s, 4)}`` with side 0 =
        query cursors, 1 = key cursors, and gates ordered reset, inc, dec, keep.
        """
        self._recording = []
        try:
            yield self._recording
        finally:
            self._recording = None

    def extra_repr(self) -> str:
        c = self.config
        return f"layers={c.layers}, n_cursors={c.n_cursors}, d_pe={c.d_pe}, copy={int(c.copy_mask().sum())}"
