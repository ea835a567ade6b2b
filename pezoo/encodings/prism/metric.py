"""The learned distance PRISM's cursors define, and the similarity its streams induce
(Lee 2025, §4.1, §5.0.2 Eq. 6, §5.2 Eq. 7). Analysis tools: not used in training.

Axis letters: p histogram bins (offset = bin - P), r displacements (2p - 1 of them).

* A cursor driven by deterministic gates (0/1) keeps a one-hot histogram; its mode
  ``ẑ_t`` is the cursor coordinate and ``d(t, t') = |ẑ_t' - ẑ_t|`` the learned distance.
* With stochastic gates, the signed displacement between two time points is the
  cross-correlation of their histograms (Eq. 6, which treats the two marginals as
  independent): ``Pr(D_{k→ℓ} = d) = Σ_i h_k[i] h_ℓ[i + d]``.
* The similarity of two cursors is the inner product of their position streams
  ``e = Σ_k h[k] f(k - P)``; for one-hot histograms ``⟨f(z), f(z')⟩ = Σ_m cos(ω_m (z - z'))``.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["displacement_pmf", "expected_abs_displacement", "mode_offsets", "stream_similarity"]


def mode_offsets(h: Tensor) -> Tensor:
    """The most likely offset of each histogram: (..., p) -> (...) long, in -P..P."""
    return h.argmax(dim=-1) - h.shape[-1] // 2


def displacement_pmf(h_from: Tensor, h_to: Tensor) -> Tensor:
    """Eq. 6: pmf of the displacement D = Z_to - Z_from for independent Z_from ~ h_from, Z_to ~ h_to.

    Args:
        h_from, h_to: (..., p) histograms over the same bins.

    Returns:
        (..., 2p - 1); entry r holds Pr(D = r - (p - 1)).
    """
    p = h_from.shape[-1]
    joint = h_from[..., :, None] * h_to[..., None, :]  # (..., i, j): Z_from = i, Z_to = j
    idx = torch.arange(p, device=h_from.device)
    shift = (idx[None, :] - idx[:, None] + p - 1).flatten()  # (i j) -> r = j - i + p - 1
    out = torch.zeros((*joint.shape[:-2], 2 * p - 1), dtype=joint.dtype, device=joint.device)
    return out.index_add_(-1, shift, joint.flatten(-2))


def expected_abs_displacement(h_a: Tensor, h_b: Tensor) -> Tensor:
    """E|Z_b - Z_a| for independent Z_a ~ h_a, Z_b ~ h_b: (..., p) x2 -> (...)."""
    p = h_a.shape[-1]
    idx = torch.arange(p, device=h_a.device, dtype=h_a.dtype)
    dist = (idx[:, None] - idx[None, :]).abs()  # (i, j)
    return torch.einsum("...i,ij,...j->...", h_a, dist, h_b)


def stream_similarity(h_a: Tensor, h_b: Tensor, table: Tensor) -> Tensor:
    """⟨e_a, e_b⟩ of the position streams of two histograms under a (p, d_pe) sinusoid table."""
    return ((h_a @ table) * (h_b @ table)).sum(dim=-1)
