"""One PRISM layer: the gates, the copy branch and the histogram filter of its 2·h·C cursors,
run over a call's new tokens from the state the previous call left (Lee 2025 §5, Alg. 1–2).

Axis letters: b batch, s new tokens of this call, t all tokens so far, d model width,
h heads, c cursors per head, n cursors of the layer (both sides, all heads), k copying
cursors, p histogram bins (2P+1), f stream width d_pe.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn
from torch.profiler import record_function

from pezoo.eager import eager_under_compile
from pezoo.encodings.ape import sinusoid_table
from pezoo.encodings.prism.config import PRISMConfig, support_for
from pezoo.encodings.prism.gates import CopyAttention, GateNet, compute_dtype
from pezoo.encodings.prism.histogram import (
    centre_one_hot,
    clamp_copy,
    histogram_scan,
    histogram_transition,
    mix_copy,
    reachable_mask,
    sharpen,
)
from pezoo.encodings.prism.scan import scan_emitting
from pezoo.encodings.prism.streams import CallStreams, offset_table

__all__ = ["PRISMLayer"]


def _inverse_softplus(y: float) -> float:
    return y + math.log(-math.expm1(-y))


_INCREMENT_ONLY = (0.0, 1.0, 0.0, 0.0)  # reset, inc, dec, keep


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

    @eager_under_compile("PRISM's filter is a sequential scan over the tokens: see PRISMLayer.streams")
    def streams(
        self, x: Tensor, state: dict[str, Any] | None, *, record: bool = False
    ) -> tuple[CallStreams, dict[str, Any], dict[str, Tensor] | None]:
        """:meth:`forward` with the streams not yet normalised (:class:`CallStreams`).

        Runs eagerly under ``torch.compile`` (``pezoo.eager.eager_under_compile``); the streams'
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
        steps = torch.arange(t0, t0 + s, device=x.device)  # absolute token index of each new token
        hist = state.get("hist")
        if hist is None:
            hist = centre_one_hot((b, self.n_scan), support, device=x.device, dtype=dtype)  # (b, n, p)
        hist = _grow(hist.to(dtype), support)

        xn = self.norm(x)
        with record_function("prism.gates"):
            gates, gru_state = self.gates(xn, state.get("gru"))  # (b, s, n, 4)
        gates = gates.transpose(0, 1)  # (s, b, n, 4)
        new_state: dict[str, Any] = {"t": t0 + s, "support": support, "gru": gru_state}
        out, table = self._scan(xn, hist, gates, steps, support, state, new_state, record)  # (s, b, n, p|f)
        out = self._in_output_order(out, steps, support, dtype, record)  # (s, b, 2hc, p|f)
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

    def _scan(
        self,
        xn: Tensor,
        hist: Tensor,
        gates: Tensor,
        steps: Tensor,
        support: int,
        state: dict[str, Any],
        new_state: dict[str, Any],
        record: bool,
    ) -> tuple[Tensor, Tensor]:
        """The filter over the new tokens of the normalised stream xn (b, s, d) from the scanned
        cursors' histograms ``hist`` (b, n, p) with the gates (s, b, n, 4), keeping the copy
        branch's and the scan's state in ``new_state``. Returns the scanned cursors' streams
        (s, b, n, f), or with ``record`` their histograms (s, b, n, p), and the offset table (p, f)."""
        cfg, t0, dtype = self.cfg, state.get("t", 0), hist.dtype
        reachable = cfg.eps_support == "reachable"
        # the windowed scan (a compiled step wants fixed shapes) needs no masks: it only holds reachable bins
        windowed = reachable and cfg.scan_window and not cfg.compile_scan and not self.learned_copy_keys
        masks = reachable_mask(steps, support) if reachable and not windowed else None  # (s, p)
        gamma = self.gamma().to(dtype)
        table = offset_table(support, cfg.d_pe, xn.device).to(dtype)  # (p, f)
        emit = (lambda hh: hh) if record else (lambda hh: hh @ table)  # (b, n, p) -> (b, n, p|f)

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
                return emit(torch.cat([query_h, key_h], dim=2)), table
            copy_probs = None
            if self.copy is not None and windowed:  # the window's copied mass comes from a_pos itself
                copy_probs = probs.permute(2, 0, 1, 3)  # (s, b, k, t+1): a_pos then a_null
            elif self.copy is not None:  # copied mass of token j lands on the fixed key's bin P + j + 1
                p_pos = F.pad(clamp_copy(a_pos, support), (support + 1, 0))  # (b, k, s, p)
                p_copy = torch.cat([p_pos, a_null], dim=-1).permute(2, 0, 1, 3)  # (s, b, k, p+1)
            new_state["hist"], out = scan_emitting(
                hist, gates, gamma, cfg.eps, p_copy, masks, step, None if record else table,
                start=t0, windowed=windowed, copy_probs=copy_probs, checkpoint_every=cfg.scan_chunk(gates.shape[0]),
            )  # fmt: skip
        return out, table

    def _in_output_order(self, out: Tensor, steps: Tensor, support: int, dtype: torch.dtype, record: bool) -> Tensor:
        """The scanned cursors' streams or histograms (s, b, n, f|p) with the increment-only key
        cursors' (one-hot at offset t+1, in ``dtype``) appended, in (side, head, cursor) order:
        (s, b, 2hc, f|p)."""
        s, b, bins = out.shape[0], out.shape[1], 2 * support + 1
        if self.n_fixed:  # increment-only key cursors: one-hot at offset t+1
            if record:
                fixed = F.one_hot((steps + support + 1).clamp(max=bins - 1), bins).to(dtype)  # (s, p)
            else:
                fixed = sinusoid_table((steps + 1).clamp(max=support), self.cfg.d_pe).to(dtype)  # (s, f)
            out = torch.cat([out, fixed[:, None, None, :].expand(s, b, self.n_fixed, -1)], dim=2)
        if not self._in_order:
            out = _permute_dim2(out, self.unpermute)  # (s, b, 2hc, p|f) in (side, head, cursor) order
        return out


def _grow(hist: Tensor, support: int) -> Tensor:
    """Zero-pad a (..., 2P'+1) histogram to (..., 2P+1), P >= P', keeping offsets aligned."""
    extra = support - hist.shape[-1] // 2
    return F.pad(hist, (extra, extra)) if extra > 0 else hist


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
