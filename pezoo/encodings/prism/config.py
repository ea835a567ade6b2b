"""PRISM's options: :class:`PRISMConfig` (every option, validated), the paper's sizes, and
the support P a sequence gets (:func:`support_for`).

Axis letters: h heads, c cursors per head.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from pezoo.context import check_sizes
from pezoo.encodings.prism.gates import HiddenRegulariser
from pezoo.encodings.prism.streams import StreamNorm

__all__ = [
    "PAPER_OPTIONS",
    "SCAN_CHECKPOINT_ABOVE",
    "SCAN_CHECKPOINT_CHUNK",
    "CopyKey",
    "EpsSupport",
    "PRISMConfig",
    "support_for",
]

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
            this many tokens (inside the fused scan's node; ``torch.utils.checkpoint`` on
            the per-op and Triton paths): only each chunk's starting
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
        # each float finite too: inf passed the bounds and trained to NaN (gamma_init, eps, alpha_*)
        need(1.0 < self.gamma_init < math.inf, f"gamma_init must be a finite number > 1, got {self.gamma_init}")
        need(
            self.gamma_max is None or 1.0 < self.gamma_max < math.inf,
            f"gamma_max must be a finite number > 1 (None: no cap), got {self.gamma_max}",
        )
        need(0.0 < self.mu_init < 1.0, f"mu_init must be in (0, 1), got {self.mu_init}")
        need(
            0.0 <= self.frobenius_weight < math.inf,
            f"frobenius_weight must be a finite number >= 0, got {self.frobenius_weight}",
        )
        need(math.isfinite(self.copy_null_bias), f"copy_null_bias must be a finite number, got {self.copy_null_bias}")
        need(math.isfinite(self.alpha_init), f"alpha_init must be a finite number, got {self.alpha_init}")
        need(0.0 < self.alpha_lr < math.inf, f"alpha_lr must be a finite number > 0, got {self.alpha_lr}")
        need(
            len(self.alpha_betas) == 2 and all(0.0 <= b < 1.0 for b in self.alpha_betas),
            f"alpha_betas must be two numbers in [0, 1) (AdamW's betas), got {self.alpha_betas}",
        )
        need(
            0.0 < self.eps < math.inf,
            f"eps must be > 0 and finite, got {self.eps} (the sharpening takes log(h + eps); at eps=0 an empty "
            "bin's log is -inf and every gate gradient NaN)",
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
