"""PRISM's histogram filter: one cursor's distribution over signed offsets (Lee 2025, §5.1, Alg. 1).

Axis letters: t steps (tokens), n cursors (any leading batch axes), p histogram bins.

A cursor keeps a histogram ``h`` over the 2P+1 signed offsets -P..P; bin ``k`` holds
offset ``k - P`` (the centre bin ``mid = P`` is offset 0). One step, given gate
probabilities reset r, increment a, decrement b, keep c (a + b + c = 1):

    reset branch      total·r·(c at mid, a at mid+1, b at mid-1)       re-centre, then one move
    no-reset branch   (1-r)·(c·h[k] + a·h[k-1] + b·h[k+1])              banded shift, edges clamp
    copy branch       new = p_nocopy·new + p_pos                        (optional)
    sharpen           h' ∝ (new + ε)^γ                                  computed in log space

Every operation is a slice, a pad or an elementwise product: O(P) per step and cursor,
never a dense (2P+1)² matrix. Clamping keeps mass that would leave the support in the
edge bin (Alg. 1), so before sharpening the total mass is conserved exactly.

Support and the ε floor. After t+1 steps from the one-hot centre, mass can only lie
within offsets ±(t+1). ``reachable_mask`` marks those bins; passing it to the step adds
ε (and lets mass exist) only there, so the result is *identical* for every P ≥ T: the
support can grow with the sequence (and during incremental decoding) without changing
what the model computes. Without a mask, ε is added to every bin, as Alg. 1 writes it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor

__all__ = [
    "centre_one_hot",
    "clamp_copy",
    "histogram_scan",
    "histogram_step",
    "histogram_transition",
    "mix_copy",
    "n_bins",
    "reachable_mask",
    "sharpen",
]


def n_bins(support: int) -> int:
    """Number of bins 2P+1 for support P (offsets -P..P)."""
    return 2 * support + 1


def centre_one_hot(shape: tuple[int, ...], support: int, *, device=None, dtype=torch.float32) -> Tensor:
    """The initial histogram (docs/prism.md, reading 4): all mass at offset 0. Returns (*shape, 2P+1)."""
    h = torch.zeros((*shape, n_bins(support)), device=device, dtype=dtype)
    h.narrow(-1, support, 1).fill_(1.0)  # not h[..., P] = 1.0, which makes a host tensor (a CUDA graph may refuse it)
    return h


def reachable_mask(steps: Tensor, support: int) -> Tensor:
    """Bins a histogram can occupy after processing token ``steps`` (0-based).

    Args:
        steps: integer tensor (...) of token indices t.
        support: P.

    Returns:
        bool (..., 2P+1): True where |offset| <= t + 1.
    """
    offsets = torch.arange(-support, support + 1, device=steps.device)  # (p,)
    return offsets.abs() <= (steps[..., None] + 1)


def histogram_transition(
    h: Tensor,
    p_reset: Tensor,
    p_inc: Tensor,
    p_dec: Tensor,
    p_keep: Tensor,
    p_copy: Tensor | None = None,
) -> Tensor:
    """Reset, move and copy (Alg. 1 steps 1–4), without sharpening.

    Args:
        h: (..., 2P+1) histogram (non-negative; need not sum to one).
        p_reset, p_inc, p_dec, p_keep: (...) gate probabilities, inc + dec + keep = 1.
        p_copy: (..., 2P+2) or None. Entries 0..2P are the mass copied into each bin,
            the last entry is p_no_copy; the whole vector sums to one.

    Returns:
        (..., 2P+1). Total mass equals ``h``'s (times one, with the copy branch, when
        ``h`` sums to one): nothing leaves the support.
    """
    bins = h.shape[-1]
    if bins < 3 or bins % 2 == 0:
        raise ValueError(f"a histogram needs 2P+1 >= 3 bins, got {bins}")
    mid = bins // 2
    stay = 1.0 - p_reset  # (...)
    new = h * (stay * p_keep)[..., None]  # (..., p); the moves are added into it in place
    up = h * (stay * p_inc)[..., None]  # mass leaving bin k for k+1
    down = h * (stay * p_dec)[..., None]  # mass leaving bin k for k-1
    new[..., 1:] += up[..., :-1]
    new[..., -1:] += up[..., -1:]  # clamp: the top bin keeps what would leave the support
    new[..., :-1] += down[..., 1:]
    new[..., :1] += down[..., :1]  # clamp at the bottom
    reset = h.sum(dim=-1) * p_reset  # (...) reset mass, re-centred then moved once
    new[..., mid - 1 : mid + 2] += torch.stack([reset * p_dec, reset * p_keep, reset * p_inc], dim=-1)
    return new if p_copy is None else mix_copy(new, p_copy)


def mix_copy(h: Tensor, p_copy: Tensor) -> Tensor:
    """Copy branch (§5.0.4, Alg. 1 step 4): ``p_no_copy · h + p_pos``.

    Args:
        h: (..., p) histogram after reset and move.
        p_copy: (..., p+1): copied mass per bin, then p_no_copy.
    """
    if p_copy.shape[-1] != h.shape[-1] + 1:
        raise ValueError(f"p_copy needs {h.shape[-1] + 1} entries (bins + no-copy), got {p_copy.shape[-1]}")
    return p_copy[..., -1:] * h + p_copy[..., :-1]


def clamp_copy(a_pos: Tensor, width: int) -> Tensor:
    """(..., t) copy weights of tokens j = 0.. onto offsets 1..width: (..., width), token j
    on offset j + 1, those beyond ``width`` (only under ``max_support``) summed on the top
    bin (the edge rule of Alg. 1); zero-padded when fewer than ``width`` tokens exist."""
    n = a_pos.shape[-1]
    if n <= width:
        return torch.nn.functional.pad(a_pos, (0, width - n))
    return torch.cat([a_pos[..., : width - 1], a_pos[..., width - 1 :].sum(dim=-1, keepdim=True)], dim=-1)


def sharpen(h: Tensor, gamma: Tensor | float, eps: float, mask: Tensor | None = None) -> Tensor:
    """Power sharpening ``(h + ε)^γ / Σ (h + ε)^γ`` in log space (Alg. 1 step 5).

    Args:
        h: (..., p) non-negative.
        gamma: (...) exponent, or a float for every histogram (> 1 in PRISM; 1 gives
            plain renormalisation).
        eps: floor added before the power (>= 0). At 0 the forward value is exact but an
            empty bin's log is -inf, so gradients through it are NaN: training needs ε > 0
            (``PRISM`` rejects ε = 0).
        mask: optional bool (..., p); bins outside it get exactly zero mass and no ε.

    Returns:
        (..., p), non-negative, sums to one.
    """
    if not eps >= 0.0:
        raise ValueError(f"sharpen needs eps >= 0, got {eps}")
    if not isinstance(gamma, Tensor):  # a plain float: one γ for every histogram
        gamma = torch.full((), gamma, dtype=h.dtype, device=h.device)  # filled on the device: no host copy
    logits = gamma[..., None] * torch.log(h + eps)  # (..., p)
    if mask is not None:
        logits = logits.masked_fill(~mask, -torch.inf)
    return torch.softmax(logits, dim=-1)


def histogram_step(
    h: Tensor,
    p_reset: Tensor,
    p_inc: Tensor,
    p_dec: Tensor,
    p_keep: Tensor,
    gamma: Tensor | float,
    eps: float,
    p_copy: Tensor | None = None,
    *,
    mask: Tensor | None = None,
    validate: bool = True,
) -> Tensor:
    """One PRISM histogram update (Lee 2025, Alg. 1, symmetric support).

    Args:
        h: (..., 2P+1) current histogram; bin k is offset k - P.
        p_reset: (...) reset probability (sigmoid gate).
        p_inc, p_dec, p_keep: (...) move probabilities (softmax gate, sum to one).
        gamma: (...) sharpening exponent γ_c, or a float shared by all histograms.
        eps: sharpening floor ε.
        p_copy: (..., 2P+2) copied mass per bin with p_no_copy last, or None.
        mask: optional bool (..., 2P+1) of reachable bins (``reachable_mask``); ε is
            added only there, which makes the result independent of P.
        validate: check that inc + dec + keep = 1 (a device sync per call; timing loops
            and PRISM's own scan, whose gates come from a softmax, pass False).

    Returns:
        (..., 2P+1) next histogram: non-negative, sums to one.

    Raises:
        ValueError: if inc + dec + keep differs from one anywhere (by more than 1e-3), or
            eps < 0.
    """
    moves = p_inc + p_dec + p_keep
    if validate and not torch.allclose(moves, torch.ones_like(moves), atol=1e-3, rtol=0.0):
        worst = (moves - 1.0).abs().max().item()
        raise ValueError(f"histogram_step: p_inc + p_dec + p_keep must sum to 1 (off by up to {worst:.3g})")
    return sharpen(histogram_transition(h, p_reset, p_inc, p_dec, p_keep, p_copy), gamma, eps, mask)


StepFn = Callable[..., Tensor]

unchecked_histogram_step: StepFn = functools.partial(histogram_step, validate=False)
"""``histogram_step`` without the gate check (no device sync): for scans and timing loops."""


def histogram_scan(
    h0: Tensor,
    gates: Tensor,
    gamma: Tensor,
    eps: float,
    p_copy: Tensor | None = None,
    masks: Tensor | None = None,
    *,
    step: StepFn = unchecked_histogram_step,
) -> Tensor:
    """Run ``histogram_step`` over t: the sequential hot loop of PRISM.

    Vectorised over every leading axis (batch × cursors); only t is sequential.

    Args:
        h0: (..., p) histogram before the first step.
        gates: (t, ..., 4) probabilities (reset, inc, dec, keep).
        gamma: broadcastable to (...).
        eps: ε.
        p_copy: (t, ..., p+1) or None.
        masks: (t, p) or (t, ..., p) reachable bins per step, or None.
        step: the step function (``histogram_step`` or a compiled version of it).

    Returns:
        (t, ..., p) histogram after each step.
    """
    out = []
    h = h0
    reset, inc, dec, keep = gates.unbind(dim=-1)  # (t, ...) each
    # unbind once: indexing p_copy[t] per step would make each backward step allocate and
    # fill a zero tensor of p_copy's full (t, ..., p+1) size, O(T²·P) in all
    copies = None if p_copy is None else p_copy.unbind(0)
    for t in range(gates.shape[0]):
        copy_t = None if copies is None else copies[t]
        mask_t = None if masks is None else masks[t]
        h = step(h, reset[t], inc[t], dec[t], keep[t], gamma, eps, copy_t, mask=mask_t)
        out.append(h)
    return torch.stack(out, dim=0)
