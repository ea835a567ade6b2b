"""The filter's scan over a call's new tokens as :class:`~pezoo.encodings.prism.layer.PRISMLayer`
runs it: each step's position stream kept instead of its histogram, only the bins reachable so
far (windowed), in chunks recomputed in the backward pass, and, on the default path, as the
one autograd node of ``fused_scan.py``. ``histogram.histogram_scan`` is the plain
loop these equal.

Axis letters: s steps (new tokens), b batch, n scanned cursors, k copying cursors (the first
k of n), t tokens so far, p bins (2P+1, or 2w+1 of a window), f stream width.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from pezoo.encodings.prism.chunks import run_chunked
from pezoo.encodings.prism.fused_scan import fused_windowed_scan, scan_coefficients
from pezoo.encodings.prism.histogram import clamp_copy

__all__ = ["scan_emitting"]


def scan_emitting(
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
    (token j's copied mass) then a_null (the no-copy weight) last. Token j's copied mass sits
    on the bin of offset j + 1, so the window's slice of p_pos is ``w + 1`` zeros then
    ``a_pos[:w]``, built per step in O(w) without the dense (s, b, k, 2P+2) tensor. Either is
    unbound once: indexing it per step would make every backward step allocate and fill a
    zero tensor of its full size (O(S²·P) in all).

    ``checkpoint_every`` (windowed only): run the steps in chunks of this many tokens whose
    intermediates the backward pass recomputes from each chunk's first histogram instead of
    keeping them (the fused node does so itself, the per-op path under
    ``torch.utils.checkpoint``).

    ``fused`` (default): the windowed scan with streams (``table`` given) and no dense
    ``p_copy`` runs as one autograd node with a hand-written reverse scan
    (``fused_scan.fused_windowed_scan``): the same outputs and gradients to float rounding,
    in less time and memory. ``fused=False`` keeps the per-op autograd scan (the reference
    the tests compare with); record mode (``table`` None) and the dense copy always use it.
    ``step`` must then be ``PRISMLayer._step`` or equivalent (it is not called).

    Returns:
        (last histogram (b, n, p), stacked streams (s, b, n, f|p)).
    """
    if not windowed:
        return _full_scan_emitting(hist, gates, gamma, eps, p_copy, masks, step, table)
    h, support = _start_window(hist, start)  # (b, n, 2r+1): the reachable bins, r = min(start, P)
    if fused and table is not None and p_copy is None:
        return _fused_scan_emitting(h, gates, gamma, eps, table, start, support, copy_probs, checkpoint_every)
    return _windowed_scan_emitting(
        h, gates, gamma, eps, p_copy, step, table, start, support, copy_probs, checkpoint_every
    )


def _start_window(hist: Tensor, start: int) -> tuple[Tensor, int]:
    """(the bins of ``hist`` (b, n, 2P+1) reachable after ``start`` tokens, P): a view of the
    2r+1 bins around the centre, r = min(start, P)."""
    support = hist.shape[-1] // 2
    radius = min(start, support)
    return hist[..., support - radius : support + radius + 1], support


def _full_scan_emitting(
    hist: Tensor,
    gates: Tensor,
    gamma: Tensor,
    eps: float,
    p_copy: Tensor | None,
    masks: Tensor | None,
    step: Callable[..., Tensor],
    table: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """``scan_emitting``'s full-width path: every step on all 2P+1 bins, ``masks[t]`` its ε mask."""
    reset, inc, dec, keep = gates.unbind(dim=-1)
    h = hist
    copies = None if p_copy is None else p_copy.unbind(0)  # (b, k, p+1) per step
    every = []
    for t in range(gates.shape[0]):
        copy_t = None if copies is None else copies[t]
        mask_t = None if masks is None else masks[t]
        h = step(h, reset[t], inc[t], dec[t], keep[t], gamma, eps, copy_t, mask=mask_t)
        every.append(h if table is None else h @ table)
    return h, torch.stack(every, dim=0)


def _windowed_scan_emitting(
    h: Tensor,
    gates: Tensor,
    gamma: Tensor,
    eps: float,
    p_copy: Tensor | None,
    step: Callable[..., Tensor],
    table: Tensor | None,
    start: int,
    support: int,
    copy_probs: Tensor | None,
    checkpoint_every: int,
) -> tuple[Tensor, Tensor]:
    """``scan_emitting``'s windowed path through the per-op autograd scan, from the window
    ``h`` of radius min(start, P): step t on the bins of radius min(start + t + 1, P)."""
    reset, inc, dec, keep = gates.unbind(dim=-1)
    copies = None if p_copy is None else p_copy.unbind(0)  # (b, k, p+1) per step
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
            copy_t = _window_copy(pos_null, copies, t, new_radius, support)
            h = step(h, reset[t], inc[t], dec[t], keep[t], gamma, eps, copy_t, mask=None)
            radius = new_radius
            if table is None:
                chunk.append(F.pad(h, (lo, 2 * support + 1 - hi)))
            else:
                chunk.append(h @ table[lo:hi])
        return h, torch.stack(chunk, dim=0)

    steps = gates.shape[0]
    h, out = run_chunked(run, h, steps, checkpoint_every)
    radius = min(start + steps, support)
    last = F.pad(h, (support - radius, support - radius))
    return last, out


def _window_copy(
    pos_null: tuple[tuple[Tensor, Tensor], ...] | None,
    copies: tuple[Tensor, ...] | None,
    t: int,
    radius: int,
    support: int,
) -> Tensor | None:
    """Step t's copy branch (b, k, 2w+2) on the window of ``radius`` w (offsets -w..w) and the
    no-copy weight last: from the copy attention's (a_pos, a_null) of the step, from the dense
    ``copies``, or None without a copy branch."""
    if pos_null is not None:  # token j's copy lands on offset j + 1
        pos_t, null_t = pos_null[t]
        # inside the support tokens beyond the radius carry no mass (causal): drop them;
        # at the support's edge (only under max_support) they pile on the top bin
        pos_w = pos_t[..., :radius] if radius < support else clamp_copy(pos_t, support)
        return torch.cat([F.pad(pos_w, (radius + 1, 0)), null_t], dim=-1)
    if copies is not None:
        lo, hi = support - radius, support + radius + 1  # the window's bins
        return torch.cat([copies[t][..., lo:hi], copies[t][..., -1:]], dim=-1)
    return None


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
    """``scan_emitting``'s windowed path through ``fused_windowed_scan``, which recomputes
    chunks of ``checkpoint_every`` steps in the backward itself when asked to."""
    coef = scan_coefficients(gates)  # (s, b, n, 6)
    h, streams = fused_windowed_scan(
        h, coef, gamma, table, eps, start=start, support=support, copy_probs=copy_probs,
        checkpoint_every=checkpoint_every,
    )  # fmt: skip
    radius = min(start + gates.shape[0], support)
    return F.pad(h, (support - radius, support - radius)), streams
