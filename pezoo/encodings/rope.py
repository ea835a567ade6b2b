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

Context extension changes only the frequencies and, for YaRN / LongRoPE, multiplies cos and
sin by an ``attention_scale`` a (transformers' convention): both q and k are scaled by a, so
the logits of the rotated features by a². :func:`rope_frequencies` computes both from a
``scaling`` dict with the keys of transformers' ``rope_parameters`` / ``rope_scaling``.

Axis letters: b batch, h heads, i query positions, e head dim, r rotary dim (r <= e),
f = r/2 frequencies.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, ClassVar, TypeVar

import torch
from torch import Tensor

from pezoo.context import AttentionContext, check_number, check_qk, check_sizes
from pezoo.interface import PositionalEncoding
from pezoo.registry import register

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

# --------------------------------------------------------------------------------------
# Rotations (pure functions)
# --------------------------------------------------------------------------------------


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


def rotation(magnitude: Tensor, angles: Tensor) -> Rotation:
    """``magnitude · exp(i angles)`` (..., f) for :func:`rotate`: complex64 in eager mode, the
    real pair ``(magnitude · cos, magnitude · sin)`` while ``torch.compile`` traces.

    Eager PyTorch rotates fastest as one complex product (one kernel forward and backward,
    docs/performance.md). Inductor has no code generation for complex operators ("does not
    support code generation for complex operators"): a complex product under compile falls
    back to eager kernels around every fused region and made a compiled training step slower
    than eager. The real form is the same arithmetic (fp32, to rounding), which inductor
    fuses into the surrounding elementwise work.
    """
    if torch.compiler.is_compiling():
        return magnitude * torch.cos(angles), magnitude * torch.sin(angles)
    return torch.polar(magnitude, angles)


def rotate(x: Tensor, rot: Rotation, layout: str = "interleaved") -> Tensor:
    """Rotate x (..., e) by a :func:`rotation`: :func:`rotate_complex` for a complex tensor,
    :func:`rotate_real` for a real (a cos, a sin) pair. Features past r = 2f unchanged."""
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


# --------------------------------------------------------------------------------------
# Context extension: the scaling config and the frequencies (pure function)
# --------------------------------------------------------------------------------------

_REQUIRED: dict[str, tuple[str, ...]] = {
    "default": (),
    "linear": ("factor",),
    "ntk": ("factor",),
    "dynamic": ("factor", "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings"),
    "llama3": ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"),
    "longrope": ("short_factor", "long_factor", "original_max_position_embeddings"),
    "p_rope": ("p",),
}
_OPTIONAL: dict[str, tuple[str, ...]] = {
    "yarn": ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "truncate"),
    "longrope": ("factor", "attention_factor"),
}
_COMMON = ("rope_type", "rope_theta", "partial_rotary_factor")
ROPE_TYPES = tuple(_REQUIRED)
"""``rope_type`` values :func:`rope_frequencies` knows. ``ntk`` and ``p_rope`` are pezoo's;
the others are transformers' names with transformers' meaning."""

_LENGTH_DEPENDENT = ("dynamic", "longrope")


def _real(name: str, value: Any, *, low: float, low_ok: bool = True, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"rope scaling: {name} must be a finite number, got {value!r}")
    if value < low or (value == low and not low_ok) or (high is not None and value > high):
        bound = f"{'>=' if low_ok else '>'} {low:g}" + (f" and <= {high:g}" if high is not None else "")
        raise ValueError(f"rope scaling: {name} must be {bound}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class RopeScaling:
    """A RoPE frequency scaling, keyed as transformers' ``rope_parameters`` / ``rope_scaling``.

    Build it with :meth:`from_dict` from a JSON-able dict (a model config's ``rope_scaling``
    pastes as is, legacy ``type`` included). Unknown keys, keys the ``rope_type`` does not
    use, missing required keys and out-of-range values are errors (transformers only warns).

    Attributes:
        rope_type: one of :data:`ROPE_TYPES`.
        factor: s, the context extension ratio L'/L (>= 1).
        original_max_position_embeddings: L, the context length the model was trained on.
            ``dynamic`` needs it here (transformers reads ``max_position_embeddings`` from
            the model config instead).
        beta_fast, beta_slow: YaRN's ramp bounds in rotations over L (defaults 32 and 1).
        mscale, mscale_all_dim: DeepSeek's YaRN variant: attention scale
            ``m(s, mscale) / m(s, mscale_all_dim)``, ``m(s, c) = 0.1 c ln s + 1``; both or neither.
        attention_factor: an explicit attention scale (YaRN, LongRoPE), overriding the formula.
        truncate: YaRN: round the ramp's bounds outward to whole dims (default True).
        low_freq_factor, high_freq_factor: Llama 3.1's band edges (wavelengths L/low, L/high).
        short_factor, long_factor: LongRoPE's per-frequency divisors (f each), used when the
            planned length is <= L, respectively > L.
        p: p-RoPE's fraction of frequencies kept (the highest ones), in [0, 1].
        partial_rotary_factor: fraction of the head dim rotated (r = int(e · factor)).
        rope_theta: the base, if given; must equal the base of the encoding.
    """

    rope_type: str = "default"
    factor: float | None = None
    original_max_position_embeddings: int | None = None
    beta_fast: float | None = None
    beta_slow: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None
    truncate: bool | None = None
    low_freq_factor: float | None = None
    high_freq_factor: float | None = None
    short_factor: tuple[float, ...] | None = None
    long_factor: tuple[float, ...] | None = None
    p: float | None = None
    partial_rotary_factor: float | None = None
    rope_theta: float | None = None

    KEYS: ClassVar[tuple[str, ...]]  # every key any rope_type takes (set below)

    @classmethod
    def from_dict(cls, config: Mapping[str, Any] | RopeScaling | None) -> RopeScaling:
        """Parse a ``rope_parameters`` / ``rope_scaling`` dict (None: plain RoPE); strict."""
        if config is None:
            return cls()
        if isinstance(config, RopeScaling):
            return config
        if not isinstance(config, Mapping):
            raise TypeError(f"rope scaling must be a dict of rope_parameters, got {type(config).__name__}")
        config = dict(config)
        if "type" in config:  # transformers' legacy spelling of rope_type
            legacy = config.pop("type")
            if config.setdefault("rope_type", legacy) != legacy:
                raise ValueError(f"rope scaling: type={legacy!r} and rope_type={config['rope_type']!r} disagree")
        unknown = sorted(set(config) - set(cls.KEYS))
        if unknown:
            raise ValueError(
                f"rope scaling: unknown key(s) {', '.join(map(repr, unknown))}; valid keys: {', '.join(cls.KEYS)}"
            )
        for key in ("short_factor", "long_factor"):
            if isinstance(config.get(key), (list, tuple)):
                config[key] = tuple(config[key])
        return cls(**config)

    def __post_init__(self) -> None:
        kind = self.rope_type
        if kind not in _REQUIRED:
            close = difflib.get_close_matches(str(kind), ROPE_TYPES, n=2)
            hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise ValueError(f"unknown rope_type {kind!r}.{hint} Valid rope_types: {', '.join(ROPE_TYPES)}")
        given = {f.name for f in fields(self) if f.name != "rope_type" and getattr(self, f.name) is not None}
        takes = _REQUIRED[kind] + _OPTIONAL.get(kind, ())
        extra = sorted(given - set(takes) - set(_COMMON))
        if extra:
            uses = ", ".join([*(f"{k} (required)" for k in _REQUIRED[kind]), *_OPTIONAL.get(kind, ())]) or "no keys"
            raise ValueError(
                f"rope scaling: rope_type {kind!r} does not use {', '.join(map(repr, extra))}; it takes {uses} "
                f"(and {', '.join(_COMMON[1:])})"
            )
        missing = [k for k in _REQUIRED[kind] if k not in given]
        if missing:
            raise ValueError(f"rope scaling: rope_type {kind!r} needs {', '.join(map(repr, missing))}")
        self._check_values()

    def _check_values(self) -> None:
        if self.factor is not None:
            _real("factor", self.factor, low=1.0)
        if self.original_max_position_embeddings is not None:
            n = self.original_max_position_embeddings
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"rope scaling: original_max_position_embeddings must be an integer >= 1, got {n!r}")
        for name in ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "rope_theta"):
            if getattr(self, name) is not None:
                _real(name, getattr(self, name), low=0.0, low_ok=False)
        if (self.beta_fast or 32.0) <= (self.beta_slow or 1.0):
            raise ValueError(
                f"rope scaling: beta_fast ({self.beta_fast or 32.0:g}) must exceed "
                f"beta_slow ({self.beta_slow or 1.0:g})"
            )
        if (self.mscale is None) != (self.mscale_all_dim is None):
            raise ValueError(
                "rope scaling: mscale and mscale_all_dim go together (DeepSeek's YaRN); give both or neither"
            )
        if self.truncate is not None and not isinstance(self.truncate, bool):
            raise ValueError(f"rope scaling: truncate must be true or false, got {self.truncate!r}")
        if self.low_freq_factor is not None:
            low = _real("low_freq_factor", self.low_freq_factor, low=0.0, low_ok=False)
            high = _real("high_freq_factor", self.high_freq_factor, low=0.0, low_ok=False)
            if high <= low:
                raise ValueError(f"rope scaling: high_freq_factor ({high:g}) must exceed low_freq_factor ({low:g})")
        for name in ("short_factor", "long_factor"):
            values = getattr(self, name)
            if values is not None:
                if not isinstance(values, tuple) or not values:
                    raise ValueError(f"rope scaling: {name} must be a non-empty list of numbers, got {values!r}")
                for v in values:
                    _real(name, v, low=0.0, low_ok=False)
        if self.rope_type == "longrope" and self.factor is None and self.attention_factor is None:
            raise ValueError(
                "rope scaling: rope_type 'longrope' needs 'factor' (max_position_embeddings / "
                "original_max_position_embeddings of the model config) or 'attention_factor'"
            )
        if self.p is not None:
            _real("p", self.p, low=0.0, high=1.0)
        if self.partial_rotary_factor is not None:
            _real("partial_rotary_factor", self.partial_rotary_factor, low=0.0, low_ok=False, high=1.0)

    def to_dict(self) -> dict[str, Any]:
        """The keys that are set, JSON-able (the inverse of :meth:`from_dict`)."""
        out = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items() if v is not None}
        return {"rope_type": self.rope_type, **out}

    @property
    def depends_on_length(self) -> bool:
        """Whether the frequencies depend on the sequence length (``dynamic``, ``longrope``)."""
        return self.rope_type in _LENGTH_DEPENDENT


RopeScaling.KEYS = tuple(dict.fromkeys(["rope_type", *(f.name for f in fields(RopeScaling))]))


def rotary_dim_of(head_dim: int, partial_rotary_factor: float | None = None) -> int:
    """r = ``int(head_dim * partial_rotary_factor)`` (GPT-NeoX, transformers); must be even and >= 2."""
    r = head_dim if partial_rotary_factor is None else int(head_dim * partial_rotary_factor)
    if r < 2 or r % 2:
        what = f"head_dim={head_dim}" + (f" × {partial_rotary_factor}" if partial_rotary_factor is not None else "")
        raise ValueError(f"RoPE rotates feature pairs: the rotary dim must be even and >= 2, but {what} gives {r}")
    return r


_T = TypeVar("_T")


def _given(value: _T | None) -> _T:
    """A RopeScaling field that :class:`RopeScaling` has checked is set for the rope_type
    that reads it (narrows ``X | None`` to ``X`` for type checkers)."""
    if value is None:  # pragma: no cover - RopeScaling.__post_init__ rejects a missing required key
        raise ValueError("rope scaling: a required key is missing")
    return value


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature factor sqrt(1/t) = 0.1 · mscale · ln(s) + 1 (1 for s <= 1)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def rope_frequencies(
    head_dim: int,
    base: float = 10000.0,
    scaling: Mapping[str, Any] | RopeScaling | None = None,
    seq_len: int | None = None,
    *,
    device: torch.device | str | None = None,
) -> tuple[Tensor, float]:
    """RoPE's inverse frequencies and attention scale under a context-extension ``scaling``.

    Args:
        head_dim: e; the rotary dim is r = e, or ``int(e · partial_rotary_factor)``.
        base: b, the frequency base (``rope_theta``).
        scaling: a dict with transformers' ``rope_parameters`` keys (see :class:`RopeScaling`),
            or None for plain RoPE. Strict: unknown keys or types raise ValueError.
        seq_len: the sequence length the frequencies are for; used by ``dynamic`` (NTK
            base from max(seq_len, L)) and ``longrope`` (long factors when > L), ignored
            by the others. None means L.
        device: where the returned tensor lives.

    Returns:
        ``(inv_freq, attention_scale)``: inv_freq (r/2,) float32, the angle per position of
        each pair; attention_scale a float a that multiplies cos and sin (q and k each by a,
        the logits of the rotated features by a²), 1.0 except for ``yarn`` and ``longrope``.

    With θ_i = b^(-2i/r), s = factor, L = original_max_position_embeddings:

        default   θ_i                                      (Su et al. 2021, §3.4)
        linear    θ_i / s                                  (Chen et al. 2023, position interpolation)
        ntk       b' = b · s^(r/(r-2)), θ_i = b'^(-2i/r)   (NTK-aware; Peng et al. 2023, §3.1)
        dynamic   ntk with s' = s · max(seq_len, L)/L - (s - 1)   (transformers' "dynamic"; §3.3)
        yarn      (1 - γ_i) θ_i / s + γ_i θ_i, a = 0.1 ln s + 1   (Peng et al. 2023, §3.2 and §3.4)
        llama3    θ_i, θ_i / s, or a blend by wavelength band   (Llama 3.1)
        longrope  θ_i / λ_i, λ = short or long factors, a = sqrt(1 + ln s / ln L)   (Ding et al. 2024)
        p_rope    θ_i for the first ⌊p·r/2⌋ (highest) frequencies, 0 for the rest   (Barbero et al. 2024)

    The formulas and transformers' quirks that are reproduced (YaRN's ramp is linear in
    the dim index between rounded bounds) are in docs/encodings/rope.md.
    """
    cfg = RopeScaling.from_dict(scaling)
    if cfg.rope_theta is not None and cfg.rope_theta != base:
        raise ValueError(
            f"rope scaling: rope_theta={cfg.rope_theta:g} disagrees with base={base:g}; pass base={cfg.rope_theta:g}"
        )
    if seq_len is not None and (isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1):
        raise ValueError(f"seq_len must be a positive integer or None, got {seq_len!r}")
    r = rotary_dim_of(head_dim, cfg.partial_rotary_factor)
    f = r // 2
    kind = cfg.rope_type
    if kind in ("default", "p_rope"):  # exactly the float32 frequencies RoPE always used
        inv_freq = base ** (-torch.arange(0, r, 2, device=device, dtype=torch.float32) / r)
        if kind == "p_rope":
            kept = int(_given(cfg.p) * r // 2)  # ⌊p·r/2⌋, as Barbero et al.'s apply_p_rope
            inv_freq = torch.where(torch.arange(f, device=device) < kept, inv_freq, torch.zeros_like(inv_freq))
        return inv_freq, 1.0

    exponent = torch.arange(0, r, 2, dtype=torch.float64) / r  # 2i/r, (f,)
    theta = base**-exponent  # (f,) float64
    scale = 1.0
    s, L = cfg.factor, cfg.original_max_position_embeddings  # each required by the types that read it
    if kind == "linear":
        inv = theta / _given(s)
    elif kind in ("ntk", "dynamic"):
        if r <= 2:
            raise ValueError(f"rope scaling: {kind!r} rescales the base by s^(r/(r-2)) and needs a rotary dim > 2")
        s = _given(s)
        if kind == "dynamic":
            length = _given(L) if seq_len is None else max(seq_len, _given(L))
            s = s * length / _given(L) - (s - 1)
        inv = (base * s ** (r / (r - 2))) ** -exponent
    elif kind == "yarn":
        s, trained = _given(s), _given(L)
        if cfg.attention_factor is not None:
            scale = cfg.attention_factor
        elif cfg.mscale is not None:
            scale = _yarn_mscale(s, cfg.mscale) / _yarn_mscale(s, _given(cfg.mscale_all_dim))
        else:
            scale = _yarn_mscale(s)
        beta_fast, beta_slow = cfg.beta_fast or 32.0, cfg.beta_slow or 1.0

        def dim_with(rotations: float) -> float:  # the dim index i at which L·θ_i/(2π) = rotations
            return r * math.log(trained / (rotations * 2 * math.pi)) / (2 * math.log(base))

        low, high = dim_with(beta_fast), dim_with(beta_slow)
        if cfg.truncate is not False:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, r - 1)
        if low == high:
            high += 0.001  # as the YaRN reference code: avoid dividing by zero
        ramp = ((torch.arange(f, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)  # 0: keep θ, 1: θ/s
        inv = theta / s * ramp + theta * (1 - ramp)
    elif kind == "llama3":
        s, L = _given(s), _given(L)
        low_f, high_f = _given(cfg.low_freq_factor), _given(cfg.high_freq_factor)
        wavelength = 2 * math.pi / theta
        long_edge, short_edge = L / low_f, L / high_f
        smooth = (L / wavelength - low_f) / (high_f - low_f)
        inv = torch.where(wavelength > long_edge, theta / s, theta)
        blend = (1 - smooth) * theta / s + smooth * theta
        inv = torch.where((wavelength >= short_edge) & (wavelength <= long_edge), blend, inv)
    elif kind == "longrope":
        L, short, long = _given(L), _given(cfg.short_factor), _given(cfg.long_factor)
        for name, values in (("short_factor", short), ("long_factor", long)):
            if len(values) != f:
                raise ValueError(
                    f"rope scaling: {name} has {len(values)} entries but the rotary dim {r} has {f} frequencies"
                )
        factors = long if seq_len is not None and seq_len > L else short
        inv = theta / torch.tensor(factors, dtype=torch.float64)
        if cfg.attention_factor is not None:
            scale = cfg.attention_factor
        else:  # RopeScaling requires factor when attention_factor is absent
            s = _given(s)
            scale = 1.0 if s <= 1 else math.sqrt(1 + math.log(s) / math.log(L))
    else:  # pragma: no cover - RopeScaling rejects other types
        raise AssertionError(kind)
    return inv.to(device=device, dtype=torch.float32), float(scale)


# --------------------------------------------------------------------------------------
# The module
# --------------------------------------------------------------------------------------

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


@register("rope")
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
