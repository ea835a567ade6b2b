"""Rotary position embedding (Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary
Position Embedding", §3.4), its two feature layouts, partial rotary, and the context-extension
methods applied to a RoPE-trained model (position interpolation, NTK-aware, dynamic NTK,
YaRN, Llama 3.1, LongRoPE) plus p-RoPE.

Feature pair i of every head's q and k is rotated by the angle ``pos * theta_i``,
``theta_i = base^(-2i/r)`` for ``i < r/2``, r the rotary dim (``r = e`` by default); the
score <R(m) q, R(n) k> then depends only on m - n. Which two features form pair i is the
*layout*:

    interleaved   (2i, 2i+1)      RoFormer, GPT-J, Mesh-TensorFlow          (pezoo's default)
    half          (i, i + r/2)    "rotate half": GPT-NeoX, HF Llama and most HF checkpoints

The features past r (partial rotary, GPT-NeoX's ``rotary_pct``) pass through unchanged.
Angles and the rotation are computed in fp32 whatever the input dtype (positions > 2048 stay
exact under bf16), and the result is cast back.

Context extension changes only the frequencies (and, for YaRN / LongRoPE, scales cos and
sin): :mod:`pezoo.encodings.rope_scaling` computes them; its names are importable from here.

Axis letters: b batch, h heads, i query positions, e head dim, r rotary dim (r <= e),
f = r/2 frequencies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from pezoo.cards import LmPaperClaim, LmRowSelector, PaperCard, PlotLook
from pezoo.context import AttentionContext, check_number, check_qk, check_sizes
from pezoo.encodings.rope_scaling import ROPE_TYPES, RopeScaling, rope_frequencies, rotary_dim_of
from pezoo.interface import PositionalEncoding
from pezoo.registry import register
from pezoo.spec import format_value

__all__ = [
    "LAYOUTS",
    "ROPE_TYPES",
    "RoPE",
    "RopeScaling",
    "apply_rotary",
    "rope_angles",
    "rope_frequencies",
    "rotary_dim_of",
    "rotate",
    "rotate_complex",
    "rotate_pairs",
    "rotate_pairs_complex",
    "rotate_real",
    "rotation",
]

LAYOUTS = ("interleaved", "half")
"""Which features form a rotated pair: (2i, 2i+1), or (i, i + r/2) ("rotate half")."""


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"unknown RoPE layout {layout!r}; valid layouts: {', '.join(LAYOUTS)}")


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, layout: str = "interleaved") -> Tensor:
    """Rotate the first r features of x by the angles whose cos/sin are given.

    Args:
        x: (..., e) features, e.g. q or k (b, h, i, e).
        cos, sin: (..., f) broadcastable against x's leading dims, f = r/2 <= e/2 angles
            (times an attention scale, if any: they need not satisfy cos² + sin² = 1).
        layout: ``"interleaved"`` rotates pairs (2i, 2i+1), ``"half"`` pairs (i, i + f).

    Returns:
        (..., e) in x's dtype: ``[a cos - b sin, a sin + b cos]`` for each pair (a, b) of
        ``x[..., :r]`` (computed in fp32), then ``x[..., r:]`` unchanged.
    """
    _check_layout(layout)
    f = cos.shape[-1]
    r, e = 2 * f, x.shape[-1]
    if r > e:
        raise ValueError(f"{f} angles rotate {r} features but x has only {e}")
    xr = x[..., :r].to(torch.float32)
    cos, sin = cos.to(torch.float32), sin.to(torch.float32)
    if layout == "interleaved":
        pairs = xr.unflatten(-1, (f, 2))  # (..., f, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        out = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    else:
        a, b = xr[..., :f], xr[..., f:]
        out = torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    out = out.to(x.dtype)
    return out if r == e else torch.cat([out, x[..., r:]], dim=-1)


def rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate interleaved feature pairs of x (b, h, s, e) by angles given as cos/sin (.., e/2)."""
    return apply_rotary(x, cos, sin, "interleaved")


def rotate_pairs_complex(x: Tensor, rotation: Tensor) -> Tensor:
    """:func:`rotate_pairs` as one complex product: pairs of x (b, h, s, e) as complex numbers
    ``x_2i + i x_2i+1`` times ``rotation`` = ``exp(i angle)`` (.., e/2) complex64, in fp32.

    Same result as :func:`rotate_pairs` up to fp32 rounding; one kernel forward and one
    backward instead of eight elementwise ops each (RoPE cost 1.2× NoPE's training step
    at the ruoss size with the real form; docs/performance.md).
    """
    pairs = torch.view_as_complex(x.to(torch.float32).unflatten(-1, (-1, 2)).contiguous())  # (b, h, s, e/2)
    return torch.view_as_real(pairs * rotation).flatten(-2).to(x.dtype)


def rotate_complex(x: Tensor, rotation: Tensor, layout: str = "interleaved") -> Tensor:
    """:func:`apply_rotary` with the angles given as one complex tensor.

    Args:
        x: (..., e) features.
        rotation: (..., f) complex64, ``a · exp(i angle)`` (a the attention scale, 1 for
            plain RoPE), f = r/2 <= e/2.
        layout: ``"interleaved"`` or ``"half"``.

    Returns:
        (..., e) in x's dtype; features past r unchanged. Equal to :func:`apply_rotary` with
        ``cos = rotation.real``, ``sin = rotation.imag`` up to fp32 rounding.
    """
    _check_layout(layout)
    f = rotation.shape[-1]
    r, e = 2 * f, x.shape[-1]
    if r > e:
        raise ValueError(f"{f} angles rotate {r} features but x has only {e}")
    xr = x[..., :r]
    if layout == "interleaved":
        out = rotate_pairs_complex(xr, rotation)
    else:  # pair (i, i + f) as the complex number x_i + i x_(i+f); one copy in, one out
        # (1.7x faster than torch.complex + cat on CPU, forward + backward)
        z = torch.view_as_complex(xr.to(torch.float32).unflatten(-1, (2, f)).transpose(-1, -2).contiguous())
        out = torch.view_as_real(z * rotation).transpose(-1, -2).flatten(-2).to(x.dtype)  # (..., r)
    return out if r == e else torch.cat([out, x[..., r:]], dim=-1)


Rotation = Tensor | tuple[Tensor, Tensor]
"""Angles ready to rotate with: ``a·exp(i angle)`` as one complex64 tensor (eager), or the real
pair ``(a cos, a sin)`` (under ``torch.compile``), see :func:`rotation`."""


@torch.library.custom_op(
    "pezoo::rotation_table", mutates_args=(), schema="(Tensor magnitude, Tensor angles) -> (Tensor, Tensor)"
)
def _rotation_table(magnitude: Tensor, angles: Tensor) -> tuple[Tensor, Tensor]:
    """``(magnitude · cos angles, magnitude · sin angles)``, opaque to inductor (see :func:`rotation`)."""
    return magnitude * torch.cos(angles), magnitude * torch.sin(angles)


@_rotation_table.register_fake
def _(magnitude: Tensor, angles: Tensor) -> tuple[Tensor, Tensor]:
    shape = torch.broadcast_shapes(magnitude.shape, angles.shape)
    return angles.new_empty(shape), angles.new_empty(shape)


def rotation(magnitude: Tensor, angles: Tensor) -> Rotation:
    """``magnitude · exp(i angles)`` (..., f) for :func:`rotate`: complex64 in eager mode, the
    real pair ``(magnitude · cos, magnitude · sin)`` while ``torch.compile`` traces.

    Eager PyTorch rotates fastest as one complex product (one kernel forward and backward,
    docs/performance.md). Inductor has no code generation for complex operators ("does not
    support code generation for complex operators"): a complex product under compile falls
    back to eager kernels around every fused region and made a compiled training step slower
    than eager. The real form is the same arithmetic (fp32, to rounding), which inductor
    fuses into the surrounding elementwise work.

    Under compile the pair is one opaque operator (``pezoo::rotation_table``), so that the
    table of (..., f) values is computed once per call: as plain elementwise ops inductor
    inlined it into every kernel that reads it, recomputing cos, sin (and xPos's ``ζ^x``) for
    each of the b·h·s·e features of q and k, forward and backward, in every layer. The
    angles carry no gradient (positions).
    """
    if torch.compiler.is_compiling():
        return _rotation_table(magnitude, angles)
    return torch.polar(magnitude, angles)


def rotate(x: Tensor, rot: Rotation, layout: str = "interleaved") -> Tensor:
    """Rotate x (..., e) by a :func:`rotation`: :func:`rotate_complex` for a complex tensor,
    :func:`rotate_real` for a real (a cos, a sin) pair. Features past r = 2f unchanged.
    An empty x is returned as it is (the complex view of a 0-token half layout raised)."""
    if x.numel() == 0:
        return x
    if isinstance(rot, tuple):
        return rotate_real(x, rot[0], rot[1], layout)
    return rotate_complex(x, rot, layout)


def rotate_real(x: Tensor, cos: Tensor, sin: Tensor, layout: str = "interleaved") -> Tensor:
    """:func:`apply_rotary` written for a compiler: ``x·cos' + swap(x)·sin'`` over whole
    feature vectors, cos' and sin' (..., r) each angle's value on both features of its pair.

    ``swap`` maps each pair (a, b) to (-b, a): for the interleaved layout a product with a
    fixed (r, r) matrix of 0 and ±1 (exact: one nonzero term per output), so that every
    elementwise pass reads and writes contiguous features. Inductor vectorises that;
    the strided (2i, 2i+1) reads of :func:`apply_rotary` made its fused kernels scalar and
    a compiled RoPE training step slower than eager. Same values as :func:`apply_rotary`
    to rounding (fp32).
    """
    _check_layout(layout)
    f = cos.shape[-1]
    r, e = 2 * f, x.shape[-1]
    if r > e:
        raise ValueError(f"{f} angles rotate {r} features but x has only {e}")
    xr = x[..., :r].to(torch.float32)  # (..., r)
    cos, sin = cos.to(torch.float32), sin.to(torch.float32)
    if layout == "interleaved":
        swap = torch.zeros(r, r, device=x.device, dtype=torch.float32)  # (r, r): column 2i = -e_(2i+1), 2i+1 = e_2i
        idx = torch.arange(0, r, 2, device=x.device)
        swap[idx + 1, idx] = -1.0
        swap[idx, idx + 1] = 1.0
        swapped = xr @ swap  # (..., r): (-b, a) per pair
        cos2, sin2 = cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)  # (..., r)
    else:
        swapped = torch.cat([-xr[..., f:], xr[..., :f]], dim=-1)
        cos2, sin2 = torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)
    out = (xr * cos2 + swapped * sin2).to(x.dtype)
    return out if r == e else torch.cat([out, x[..., r:]], dim=-1)


def rope_angles(pos: Tensor, head_dim: int, base: float = 10000.0) -> Tensor:
    """Rotation angles: pos (b|1, s) -> (b|1, 1, s, e/2) float32, ``pos * base^(-2i/e)``."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, device=pos.device, dtype=torch.float32) / head_dim)
    return (pos.to(torch.float32)[..., None] * inv_freq)[:, None]  # (b, 1, s, e/2)


_SEQ_LEN_KEY = ("rope", "seq_len")


def _planned_length(ctx: AttentionContext) -> int:
    """The sequence length a length-dependent scaling is chosen for, fixed per sequence batch.

    ``max(position) + 1`` over the positions the caller planned for the whole sequence batch
    (``ctx.state["positions"]``, (b|1, planned), when the caller keeps it there, as the
    harness's ``Backbone.start_state`` does), else over the keys of the first call. Kept in
    ``ctx.state`` so every later call of an incremental decode uses the same frequencies as
    the keys already in the cache.
    """
    if _SEQ_LEN_KEY not in ctx.state:
        planned = ctx.state.get("positions")
        source = planned if isinstance(planned, Tensor) else ctx.k_pos
        ctx.state[_SEQ_LEN_KEY] = int(source.max()) + 1
    return ctx.state[_SEQ_LEN_KEY]


PI_PAPER = "Chen et al., “Extending Context Window of Large Language Models via Positional Interpolation” (2023)"
YARN_PAPER = "Peng et al., “YaRN: Efficient Context Window Extension of Large Language Models” (ICLR 2024)"

LM_CLAIMS = (
    LmPaperClaim(
        order=90,
        key="pi_finetuned",
        source=f"{PI_PAPER}, §3 (Table 1)",
        says="position interpolation with a short fine-tune keeps perplexity at the extended window (4× L here)",
        rule="reach",
        row=LmRowSelector("rope", variant={"scaling": {"rope_type": "linear"}}, finetuned=True),
        multiple=4,
    ),
    LmPaperClaim(
        order=95,
        key="yarn_finetuned",
        source=f"{YARN_PAPER}, §4 (long-sequence language modelling)",
        says="YaRN with a short fine-tune keeps perplexity at the extended window (4× L here)",
        rule="reach",
        row=LmRowSelector("rope", variant={"scaling": {"rope_type": "yarn"}}, finetuned=True),
        multiple=4,
    ),
    LmPaperClaim(
        order=100,
        key="yarn_dynamic_zero_shot",
        source=f"{YARN_PAPER}, §3.3 and App. B.3",
        says="YaRN's dynamic scaling (s = max(1, l′/L) at each length l′), without any fine-tuning, stops "
        "RoPE's blow-up past L: more than 2× L",
        rule="reach",
        row=LmRowSelector("rope", variant={"scaling": {"rope_type": "dynamic_yarn"}}),
        multiple=2,
    ),
)
"""The language-modelling claims of the context-extension papers whose scalings RoPE's
``scaling`` option implements (position interpolation, YaRN fine-tuned, YaRN's dynamic
scaling: ``dynamic_yarn``, s = max(1, l′/L), not transformers' ``dynamic`` NTK, whose
s · l′/L − (s − 1) with s = 16 is 17 at 2 L; that row is on the board under its own name,
judged by no claim)."""


def scaling_label(value: Any) -> str | None:
    """A ``scaling`` variant's short label: ``{rope_type}×{factor}`` then its other keys
    (``original_max_position_embeddings`` as ``L``), e.g. ``yarn×4 L=10``; None for a
    value without a ``rope_type``."""
    if not isinstance(value, Mapping) or "rope_type" not in value:
        return None
    rest = dict(value)
    text = str(rest.pop("rope_type"))
    if "factor" in rest:
        text += f"×{format_value(rest.pop('factor')).removesuffix('.0')}"
    for k, v in sorted(rest.items()):
        short = "L" if k == "original_max_position_embeddings" else k
        text += f" {short}={format_value(v)}"
    return text


CARD = PaperCard(
    inference_options=("scaling",),
    variant_labels={"scaling": scaling_label},
    lm_claims=LM_CLAIMS,  # context extension of a RoPE-trained model (rope_frequencies)
    look=PlotLook("#0072B2", ""),
)  # blue, solid: its look on the published board


@register("rope", card=CARD)
class RoPE(PositionalEncoding):
    """Rotary position embedding (Su et al. 2021, §3.4) applied to q and k of every layer.

    Args:
        head_dim: per-head q/k width e.
        base: frequency base b (10000 in the paper).
        layout: ``"interleaved"`` (pairs (2i, 2i+1): RoFormer, GPT-J; the default) or
            ``"half"`` (pairs (i, i + r/2): GPT-NeoX, HF Llama). Weights trained with one
            layout do not work with the other.
        rotary_dim: rotate only the first r features (even, 2..e); the rest pass through.
        rotary_fraction: the same as a fraction of e: r = int(e · rotary_fraction)
            (GPT-NeoX's ``rotary_pct``). At most one of the two; default r = e.
        scaling: a context-extension or p-RoPE config, a JSON-able dict with transformers'
            ``rope_parameters`` keys (``{"rope_type": "yarn", "factor": 4,
            "original_max_position_embeddings": 64}``, ``{"rope_type": "p_rope", "p": 0.75}``;
            see :func:`rope_frequencies`). Its ``partial_rotary_factor``, if any, sets r like
            ``rotary_fraction`` and must agree with it. Frequencies of ``dynamic`` and
            ``longrope`` are chosen once per sequence batch from its planned length
            (``ctx.state["positions"]`` if the caller keeps it there, else the first call's
            keys), so an incremental decode equals the full pass over the planned length.

    The attention scale a of ``yarn`` / ``longrope`` multiplies cos and sin as in
    transformers, i.e. the rotated features of q and k each by a: their logits by a².
    """

    def __init__(
        self,
        *,
        head_dim: int,
        base: float = 10000.0,
        layout: str = "interleaved",
        rotary_dim: int | None = None,
        rotary_fraction: float | None = None,
        scaling: Mapping[str, Any] | RopeScaling | None = None,
    ) -> None:
        super().__init__()
        check_sizes("rope", head_dim=head_dim)
        _check_layout(layout)
        check_number("rope", "base", base, above=1)  # theta_i = base^(-2i/r) must fall with i
        cfg = RopeScaling.from_dict(scaling)
        if rotary_dim is not None and rotary_fraction is not None:
            raise ValueError("give rotary_dim or rotary_fraction, not both")
        if rotary_fraction is not None:
            if isinstance(rotary_fraction, bool) or not 0 < rotary_fraction <= 1:
                raise ValueError(f"rotary_fraction must be in (0, 1], got {rotary_fraction!r}")
            rotary_dim = rotary_dim_of(head_dim, rotary_fraction)
        if cfg.partial_rotary_factor is not None:
            from_scaling = rotary_dim_of(head_dim, cfg.partial_rotary_factor)
            if rotary_dim is not None and rotary_dim != from_scaling:
                raise ValueError(
                    f"scaling's partial_rotary_factor={cfg.partial_rotary_factor} rotates {from_scaling} of "
                    f"{head_dim} features but rotary_dim/rotary_fraction asks for {rotary_dim}; give one of them"
                )
            rotary_dim = from_scaling
        if rotary_dim is None:
            if head_dim % 2:
                raise ValueError(f"RoPE needs an even head_dim, got {head_dim} (or rotate an even rotary_dim of it)")
            rotary_dim = head_dim
        if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, int) or not 2 <= rotary_dim <= head_dim:
            raise ValueError(f"rotary_dim must be an integer in 2..head_dim={head_dim}, got {rotary_dim!r}")
        if rotary_dim % 2:
            raise ValueError(f"rotary_dim must be even (it rotates feature pairs), got {rotary_dim}")
        self.head_dim, self.base, self.layout, self.rotary_dim = head_dim, base, layout, rotary_dim
        self.scaling = cfg
        self._freq_scaling = replace(cfg, partial_rotary_factor=None)  # r is passed as the head dim
        rope_frequencies(rotary_dim, base, self._freq_scaling)  # bad values fail here, not mid-run

    def frequencies(self, seq_len: int | None = None, device: torch.device | str | None = None) -> tuple[Tensor, float]:
        """``(inv_freq (r/2,) float32, attention_scale)`` of this encoding, see :func:`rope_frequencies`."""
        return rope_frequencies(self.rotary_dim, self.base, self._freq_scaling, seq_len, device=device)

    def qk(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor]:
        """q, k (b, h, i, e) at positions ctx.q_pos -> rotated q, k."""
        check_qk(self.name, q, k, ctx, self.head_dim)
        if q.numel() == 0:  # no tokens or no rows: nothing to rotate, no length to plan (dynamic scaling)
            return q, k
        key = self.ctx_key("rope")
        if key not in ctx.scratch:  # once per call, shared by all layers
            seq_len = _planned_length(ctx) if self.scaling.depends_on_length else None
            inv_freq, scale = self.frequencies(seq_len, ctx.q_pos.device)  # (f,) fp32
            angles = (ctx.q_pos.to(torch.float32)[..., None] * inv_freq)[:, None]  # (b|1, 1, i, f)
            magnitude = torch.ones_like(angles) if scale == 1.0 else torch.full_like(angles, scale)
            ctx.scratch[key] = rotation(magnitude, angles)  # a · exp(i angle): complex64, or (a cos, a sin) compiled
        rot = ctx.scratch[key]
        return rotate(q, rot, self.layout), rotate(k, rot, self.layout)

    def extra_repr(self) -> str:
        text = f"head_dim={self.head_dim}, base={self.base}"
        if self.layout != "interleaved":
            text += f", layout={self.layout!r}"
        if self.rotary_dim != self.head_dim:
            text += f", rotary_dim={self.rotary_dim}"
        if self.scaling != RopeScaling():
            text += f", scaling={self.scaling.to_dict()}"
        return text
