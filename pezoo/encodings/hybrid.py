"""Hybrid layers: NoPE layers (or RoPE layers of other frequencies) with global attention
interleaved with RoPE layers with local attention, by a layer pattern (Yang et al. 2025,
"Rope to Nope and Back Again: A New Hybrid Attention Strategy", arXiv 2501.18795: RNoPE and
RNoPE-SWA; Llama 4's iRoPE; Gemma 3's local and global layers).

Layer l follows ``pattern[l % len(pattern)]``:

    R   RoPE (Su et al. 2021) on q and k, attention restricted to a local window of the last
        ``window`` positions (``local="window"``, a sliding window: Cohere's RNoPE-SWA), or to
        the query's own chunk of ``window`` positions (``local="chunk"``: Llama 4's chunked
        attention, ⌊pos_k / C⌋ = ⌊pos_q / C⌋); with ``window=None`` global (plain RNoPE).
    N   NoPE, global attention; optionally a fixed attention temperature on q, one of
        :data:`pezoo.encodings.ssmax.FIXED_FORMS` (``nope_temperature="llama4"``: Llama 4's
        q · (1 + β log(⌊(pos + 1)/F⌋ + 1)), transformers' Llama4TextAttention;
        ``"beam"``: Reflection AI's Beam, q · (1 + (pos + 1)/F)^β).
    G   RoPE with global attention and frequencies of its own (``global_base``,
        ``global_scaling``): Gemma 3's global layers (Gemma Team 2025, "Gemma 3 Technical
        Report", arXiv 2503.19786, on long context: base 10⁶ on the global layers, 10⁴ on
        the local ones, the global ones' positions interpolated by a factor 8), five local R
        layers per G layer.

``pattern="RRRN"`` is both papers' layout: Cohere's three RoPE sliding-window layers per NoPE
global layer, and Llama 4's ``no_rope_layer_interval = 4`` (transformers: layer l is NoPE
when ``(l + 1) % 4 == 0``). Llama 4's iRoPE is then
``hybrid{pattern=RRRN,local=chunk,window=8192,nope_temperature=llama4}`` (its RoPE layers'
QK-norm is the model's, not the encoding's, and is not reproduced).

The local masks are structured biases (``WindowMask`` on every head, or :class:`ChunkMask`),
so every backend lowers them; the encoding has no learned parameters.

Axis letters: b batch, h heads, i queries, j keys, e head dim.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from pezoo.biases import AttentionBias, ElementForm, ElementSite, PositionRanges, WindowMask
from pezoo.cards import LmPaperClaim, LmRowSelector, PaperCard
from pezoo.context import AttentionContext, check_batch, check_layer, check_number, check_sizes
from pezoo.encodings.rope import LAYOUTS, RoPE
from pezoo.encodings.ssmax import FIXED_FORMS, LLAMA4_ATTN_SCALE, LLAMA4_FLOOR_SCALE, fixed_query_scale
from pezoo.interface import PositionalEncoding
from pezoo.registry import ModelDims, register

__all__ = ["KINDS", "LOCALS", "ChunkMask", "Hybrid", "chunk_blocks", "layer_kinds"]

LOCALS = ("window", "chunk")
"""How an R layer's attention is local: a sliding window, or Llama 4's chunks."""

KINDS = ("R", "N", "G")
"""A layer's kind in ``pattern``: RoPE local, NoPE global, RoPE global with its own frequencies."""

TEMPERATURES = (None, *FIXED_FORMS)
"""``nope_temperature``: none, or a fixed form's (Llama 4's, Beam's, ...) on the N layers."""


def layer_kinds(pattern: str, n_layers: int) -> str:
    """The kind of each of ``n_layers`` layers, ``pattern`` repeated: ``layer_kinds("RRRN", 6) == "RRRNRR"``."""
    return (pattern * (n_layers // len(pattern) + 1))[:n_layers]


def chunk_blocks(size: Tensor, ranges: PositionRanges) -> tuple[Tensor, Tensor]:
    """A :class:`ChunkMask`'s block summary (``size``: positions per chunk, 0-d float):
    (any, all) allowed, (b, 1, qb, kb): some pair can share a chunk where the blocks' chunk
    ranges overlap; every pair does where both blocks lie in one and the same chunk."""
    size = size.to(device=ranges.q_lo.device, dtype=torch.float32)
    q_first = torch.floor(ranges.q_lo / size)[:, None, :, None]  # (b, 1, qb, 1)
    q_last = torch.floor(ranges.q_hi / size)[:, None, :, None]
    k_first = torch.floor(ranges.k_lo / size)[:, None, None, :]  # (b, 1, 1, kb)
    k_last = torch.floor(ranges.k_hi / size)[:, None, None, :]
    any_allowed = (k_last >= q_first) & (k_first <= q_last)
    all_allowed = (q_first == q_last) & (k_first == k_last) & (k_first == q_first)
    return any_allowed, all_allowed


@dataclass(frozen=True, eq=False)
class ChunkMask(AttentionBias):
    """Chunked attention, the same for every head: positions fall into chunks of ``chunk``
    (chunk ``pos // chunk``) and a query sees the keys of its own chunk only (Llama 4's
    ``attention_chunk_size``; transformers' ``chunked_overlay``). It does not mask future
    keys: the causal mask is the caller's.

    Attributes:
        chunk: positions per chunk (>= 1).
    """

    chunk: int
    reads_positions_only = True

    def __post_init__(self) -> None:
        check_number("ChunkMask", "chunk", self.chunk, integer=True, at_least=1)

    def allowed(self, ctx: AttentionContext) -> Tensor:
        """(b|1, 1, i, j) bool: True where attention is allowed."""
        q = torch.div(ctx.q_pos, self.chunk, rounding_mode="floor")[:, None, :, None]  # (b|1, 1, i, 1)
        k = torch.div(ctx.k_pos, self.chunk, rounding_mode="floor")[:, None, None, :]  # (b|1, 1, 1, j)
        return k == q

    def materialize(self, ctx: AttentionContext, n_heads: int, dtype: torch.dtype) -> Tensor:
        zero = torch.zeros((), dtype=dtype, device=ctx.q_pos.device)  # filled on the device: no host copy
        return torch.where(self.allowed(ctx), zero, torch.full((), -math.inf, dtype=dtype, device=ctx.q_pos.device))

    def element(self, site: ElementSite) -> ElementForm:
        size = torch.full((), float(self.chunk), device=site.device)  # 0-d: captured, not baked into a kernel

        def allowed(b: Tensor, h: Tensor, qi: Tensor, kj: Tensor) -> Tensor:
            return torch.floor(site.k_position(b, kj) / size) == torch.floor(site.q_position(b, qi) / size)

        return ElementForm(allowed=allowed, blocks=lambda ranges: chunk_blocks(size, ranges))


PAPER = (
    "Yang, Venkitesh, Talupuru, Lin, Cairuz, Blunsom & Locatelli 2025, “Rope to Nope and Back Again: A New "
    "Hybrid Attention Strategy” (arXiv 2501.18795)"
)


def paper_pattern(n_layers: int) -> str:
    """RNoPE-SWA's three RoPE layers per NoPE layer; a model of fewer than four layers gets its
    last layer NoPE and the others RoPE (one of each from two layers on; a one-layer model's
    one layer is the NoPE global one)."""
    return "RRRN" if n_layers >= 4 else "R" * (n_layers - 1) + "N"


def paper_options(task: str, dims: ModelDims) -> dict[str, Any]:
    """RNoPE-SWA's layout for a model of ``dims``, sliding windows. The window is a length in
    tokens, set against the training length, which no setup knows: give ``window`` with the run."""
    return {"pattern": paper_pattern(dims.n_layers), "local": "window"}


LM_CLAIMS = (
    LmPaperClaim(
        order=150,
        key="rnope_swa_below_rope",
        source=f"{PAPER}, its long-context results for RNoPE-SWA against a RoPE baseline",
        says="interleaving NoPE global layers with RoPE sliding-window layers extrapolates past the training "
        "length where full RoPE does not",
        rule="below",
        row=LmRowSelector("hybrid", has=("window",)),
        against=(LmRowSelector("rope"),),
    ),
)
"""RNoPE-SWA's claim, on a hybrid row with a window."""

CARD = PaperCard(paper=PAPER, setup=paper_options, lm_claims=LM_CLAIMS)


@register("hybrid", card=CARD)
class Hybrid(PositionalEncoding):
    """NoPE (or other-RoPE) global layers interleaved with RoPE local layers by ``pattern``
    (RNoPE-SWA, iRoPE, Gemma 3's local/global layers).

    Args:
        head_dim: per-head q/k width e (RoPE's).
        n_heads, n_layers: the model's heads and layers (the pattern is checked against them).
        pattern: one letter per layer, repeated over the layers: ``R`` RoPE (local when a
            window is given), ``N`` NoPE (global); the model's layers must hold at least one of
            each (from two layers on). Default: ``"RRRN"``, and for a model of fewer than four
            layers its last layer N and the others R (``"RN"`` for two, ``"N"`` for one).
        window: an R layer's reach in positions: the last ``window`` positions
            (``local="window"``: a key at distance d is seen when d < window) or chunks of
            ``window`` positions (``local="chunk"``). None (default): R layers attend globally.
        local: ``"window"`` (sliding, Cohere's) or ``"chunk"`` (Llama 4's).
        base, layout: RoPE's frequency base and pair layout (G layers take the layout too).
        scaling: RoPE's context-extension scaling of the R layers (``rope{scaling=...}``'s
            options: linear, NTK, YaRN, Llama 3, ...; Llama 4 Scout's checkpoints scale theirs
            by Llama 3's rule). None (default): unscaled.
        nope_temperature: None, or a fixed temperature form on q of the N layers:
            ``"llama4"`` (Llama 4's), ``"ministral3"`` or ``"beam"`` (Beam's).
        attn_scale, floor_scale: β and F of that temperature (default Llama 4's 0.1 and 8192;
            Beam's are 0.1 and 2048).
        global_base, global_scaling: the G layers' RoPE base (None: ``base``) and scaling
            (None: unscaled); only with G layers in the pattern.
        rotary_fraction, global_rotary_fraction: the fraction of each head the R layers' and
            the G layers' RoPE rotate (``rope``'s ``rotary_fraction``: its first
            ``int(e · fraction)`` features); None (default): every feature. Poolside's Laguna
            rotates half of each head on its global layers and all of it on its windowed ones.
        global_head_dim: the G layers' per-head q/k width where it is not ``head_dim`` (None,
            the default: the same): Gemma 4's global layers have heads twice as wide as its
            local ones (512 and 256), and the model hands each layer's q and k at its own width.
    """

    windows: Tensor

    def __init__(
        self,
        *,
        head_dim: int,
        n_heads: int,
        n_layers: int,
        pattern: str | None = None,
        window: int | None = None,
        local: str = "window",
        base: float = 10000.0,
        layout: str = "interleaved",
        nope_temperature: str | None = None,
        attn_scale: float = LLAMA4_ATTN_SCALE,
        floor_scale: int = LLAMA4_FLOOR_SCALE,
        scaling: Mapping[str, Any] | None = None,
        global_base: float | None = None,
        global_scaling: Mapping[str, Any] | None = None,
        rotary_fraction: float | None = None,
        global_rotary_fraction: float | None = None,
        global_head_dim: int | None = None,
    ) -> None:
        super().__init__()
        check_sizes("hybrid", head_dim=head_dim, n_heads=n_heads, n_layers=n_layers)
        if pattern is None:
            pattern = paper_pattern(n_layers)
        if not isinstance(pattern, str) or not pattern or set(pattern) - set(KINDS):
            raise ValueError(
                "hybrid: pattern is a string of R (RoPE, local), N (NoPE, global) and G (RoPE, global, its own "
                f"frequencies) layers, e.g. 'RRRN'; got {pattern!r}"
            )
        kinds = layer_kinds(pattern, n_layers)
        if n_layers > 1 and ("R" not in kinds or not {"N", "G"} & set(kinds)):
            raise ValueError(
                f"hybrid: pattern {pattern!r} over {n_layers} layers gives {kinds!r}, without "
                f"{'an R (RoPE)' if 'R' not in kinds else 'an N (NoPE) or G (global RoPE)'} layer; a hybrid needs "
                f"both (e.g. pattern={'R' * max(n_layers - 1, 1) + 'N'!r})"
            )
        global_options = (global_base, global_scaling, global_rotary_fraction, global_head_dim)
        if "G" not in kinds and global_options != (None, None, None, None):
            raise ValueError(
                f"hybrid: global_base, global_scaling, global_rotary_fraction and global_head_dim set the G layers' "
                f"RoPE, and pattern {pattern!r} over {n_layers} layers has none"
            )
        if global_head_dim is not None:
            check_sizes("hybrid", global_head_dim=global_head_dim)
        if window is not None:
            check_number("hybrid", "window", window, integer=True, at_least=1)
        if local not in LOCALS:
            raise ValueError(f"hybrid: local must be one of {', '.join(map(repr, LOCALS))}; got {local!r}")
        if layout not in LAYOUTS:
            raise ValueError(f"hybrid: layout must be one of {', '.join(map(repr, LAYOUTS))}; got {layout!r}")
        if nope_temperature not in TEMPERATURES:
            forms = ", ".join(repr(form) for form in TEMPERATURES)
            raise ValueError(f"hybrid: nope_temperature must be one of {forms}; got {nope_temperature!r}")
        check_number("hybrid", "attn_scale", attn_scale, at_least=0)
        check_number("hybrid", "floor_scale", floor_scale, integer=True, at_least=1)
        self.head_dim, self.n_heads, self.n_layers = head_dim, n_heads, n_layers
        self.pattern, self.kinds, self.window, self.local = pattern, kinds, window, local
        self.nope_temperature, self.attn_scale, self.floor_scale = nope_temperature, float(attn_scale), int(floor_scale)
        self.rope = RoPE(head_dim=head_dim, base=base, layout=layout, scaling=scaling, rotary_fraction=rotary_fraction)
        self.global_rope: RoPE | None = None
        if "G" in kinds:
            g_base = base if global_base is None else global_base
            fraction = global_rotary_fraction
            width = head_dim if global_head_dim is None else global_head_dim
            self.global_rope = RoPE(
                head_dim=width, base=g_base, layout=layout, scaling=global_scaling, rotary_fraction=fraction
            )
        self.register_buffer("windows", self._windows(), persistent=False)  # (h,), for WindowMask

    def _windows(self) -> Tensor:
        return torch.full((self.n_heads,), float(self.window if self.window is not None else math.inf))

    def reset_parameters(self) -> None:
        """Rebuild the window buffer (derived, not in the state dict)."""
        with torch.no_grad():
            self.windows.copy_(self._windows().to(self.windows.device))

    def qk_head_dims(self, head_dim: int, n_layers: int) -> list[int | None]:
        """Each layer's RoPE width: the R layers' and the G layers' (``global_head_dim``, where
        given: Gemma 4's global heads are twice as wide); any width on an N layer."""
        glob = None if self.global_rope is None else self.global_rope.head_dim
        width = {"R": self.rope.head_dim, "G": glob, "N": None}
        return [width[kind] for kind in layer_kinds(self.pattern, n_layers)]

    def is_rope(self, layer: int) -> bool:
        """Whether ``layer`` is an R (RoPE, local) layer."""
        check_layer(self.name, layer, self.n_layers)
        return self.kinds[layer] == "R"

    def qk(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor]:
        """R layers: RoPE's rotation; G layers: the global RoPE's; N layers: q and k as they are
        (q times the temperature ``nope_temperature`` names, if any)."""
        check_batch(f"{self.name}.qk", q, k, ctx)  # named as hybrid's on every layer kind
        if self.is_rope(layer):
            return self.rope.qk(layer, q, k, ctx)
        if self.kinds[layer] == "G":
            assert self.global_rope is not None  # built whenever the pattern has G layers
            return self.global_rope.qk(layer, q, k, ctx)
        if self.nope_temperature is None:
            return q, k
        dtype = torch.promote_types(q.dtype, torch.float32)
        scale = fixed_query_scale(self.nope_temperature, ctx.q_pos, self.attn_scale, self.floor_scale, dtype)
        return (q.to(dtype) * scale).to(q.dtype), k

    def bias(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> list[AttentionBias]:
        """R layers with a window: their local mask; every other layer (N, G) attends globally."""
        if not self.is_rope(layer) or self.window is None:
            return []
        if self.local == "chunk":
            return [ChunkMask(self.window)]
        return [WindowMask(self.windows)]

    def extra_repr(self) -> str:
        text = f"pattern={self.pattern!r} ({self.kinds}), window={self.window}"
        if self.window is not None and self.local != "window":
            text += f", local={self.local!r}"
        if self.nope_temperature is not None:
            text += f", nope_temperature={self.nope_temperature!r}, floor_scale={self.floor_scale}"
        return text  # the R and G layers' RoPE show as submodules (rope, global_rope)
