"""Context extension of a RoPE-trained model: the scaling config and the frequencies it gives.

Position interpolation (``linear``), NTK-aware (``ntk``), dynamic NTK (``dynamic``), YaRN,
YaRN's own dynamic scaling (``dynamic_yarn``), Llama 3.1 (``llama3``), LongRoPE, and p-RoPE
(``p_rope``), with the keys and meaning of transformers' ``rope_parameters`` /
``rope_scaling`` (their sources are in docs/encodings/rope.md).

Context extension changes only the frequencies and, for YaRN / LongRoPE, multiplies cos and
sin by an ``attention_scale`` a (transformers' convention): both q and k are scaled by a, so
the logits of the rotated features by a². :func:`rope_frequencies` computes both from a
``scaling`` dict, validated as a :class:`RopeScaling`. The rotation and the ``rope``
encoding that uses them are in :mod:`pezoo.encodings.rope`.

Axis letters: e head dim, r rotary dim (r <= e), f = r/2 frequencies.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, TypeVar

import torch
from torch import Tensor

__all__ = ["ROPE_INIT_FUNCTIONS", "ROPE_TYPES", "RopeScaling", "rope_frequencies", "rotary_dim_of"]

_REQUIRED: dict[str, tuple[str, ...]] = {
    "default": (),
    "linear": ("factor",),
    "ntk": ("factor",),
    "dynamic": ("factor", "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings"),
    "dynamic_yarn": ("original_max_position_embeddings",),
    "llama3": ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"),
    "longrope": ("short_factor", "long_factor", "original_max_position_embeddings"),
    "p_rope": ("p",),
}
_OPTIONAL: dict[str, tuple[str, ...]] = {
    "yarn": ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "truncate"),
    "dynamic_yarn": ("beta_fast", "beta_slow", "truncate"),
    "longrope": ("factor", "attention_factor"),
}
_COMMON = ("rope_type", "rope_theta", "partial_rotary_factor")
ROPE_TYPES = tuple(_REQUIRED)
"""``rope_type`` values :func:`rope_frequencies` knows. ``ntk``, ``dynamic_yarn`` and
``p_rope`` are pezoo's; the others are transformers' names with transformers' meaning."""

_LENGTH_DEPENDENT = ("dynamic", "dynamic_yarn", "longrope")


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
        factor: s, the context extension ratio L'/L (>= 1). ``dynamic_yarn`` takes none: its
            s is max(1, l'/L) for a sequence of l' positions.
        original_max_position_embeddings: L, the context length the model was trained on.
            ``dynamic`` and ``dynamic_yarn`` need it here (transformers reads
            ``max_position_embeddings`` from the model config instead).
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
        """Whether the frequencies depend on the sequence length (``dynamic``, ``dynamic_yarn``, ``longrope``)."""
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
            base from max(seq_len, L)), ``dynamic_yarn`` (s = max(1, seq_len/L)) and
            ``longrope`` (long factors when > L), ignored by the others. None means L.
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
        dynamic_yarn  yarn with s = max(1, seq_len / L)   (YaRN's Dynamic Scaling, Peng et al. 2023, §3.3)
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
    inv, scale = ROPE_INIT_FUNCTIONS[cfg.rope_type](cfg, base, r, seq_len, device)
    return inv.to(device=device, dtype=torch.float32), float(scale)


# --------------------------------------------------------------------------------------
# One function per rope_type, with one signature (transformers' ROPE_INIT_FUNCTIONS):
# (config, base b, rotary dim r, seq_len, device) -> (inv_freq (f,), attention_scale a).
# The float64 ones are rounded to float32 by rope_frequencies.
# --------------------------------------------------------------------------------------

Device = torch.device | str | None


def _plain_theta(base: float, r: int, device: Device) -> Tensor:
    """θ_i = b^(-2i/r), (f,) float32: exactly the frequencies RoPE always used."""
    return base ** (-torch.arange(0, r, 2, device=device, dtype=torch.float32) / r)


def _theta64(base: float, r: int) -> tuple[Tensor, Tensor]:
    """(2i/r, θ_i = b^(-2i/r)), each (f,) float64: the scaled variants start from these."""
    exponent = torch.arange(0, r, 2, dtype=torch.float64) / r  # 2i/r, (f,)
    return exponent, base**-exponent


def _default(cfg: RopeScaling, base: float, r: int, seq_len: int | None, device: Device) -> tuple[Tensor, float]:
    """θ_i (Su et al. 2021, §3.4)."""
    return _plain_theta(base, r, device), 1.0


def _p_rope(cfg: RopeScaling, base: float, r: int, seq_len: int | None, device: Device) -> tuple[Tensor, float]:
    """θ_i for the first ⌊p·r/2⌋ (highest) frequencies, 0 for the rest (Barbero et al. 2024)."""
    inv_freq = _plain_theta(base, r, device)
    kept = int(_given(cfg.p) * r // 2)  # ⌊p·r/2⌋, as Barbero et al.'s apply_p_rope
    return torch.where(torch.arange(r // 2, device=device) < kept, inv_freq, torch.zeros_like(inv_freq)), 1.0


def _linear(cfg: RopeScaling, base: float, r: int, seq_len: int | None, device: Device) -> tuple[Tensor, float]:
    """θ_i / s (Chen et al. 2023, position interpolation)."""
    return _theta64(base, r)[1] / _given(cfg.factor), 1.0


def _ntk_base(kind: str, base: float, r: int, s: float) -> float:
    """b' = b · s^(r/(r-2)) (NTK-aware; Peng et al. 2023, §3.1)."""
    if r <= 2:
        raise ValueError(f"rope scaling: {kind!r} rescales the base by s^(r/(r-2)) and needs a rotary dim > 2")
    return base * s ** (r / (r - 2))


def _ntk(cfg: RopeScaling, base: float, r: int, seq_len: int | None, device: Device) -> tuple[Tensor, float]:
    """θ_i = b'^(-2i/r) with b' = b · s^(r/(r-2))."""
    return _ntk_base("ntk", base, r, _given(cfg.factor)) ** -_theta64(base, r)[0], 1.0


def _dynamic(cfg: RopeScaling, base: float, r: int, seq_len: int | None, device: Device) -> tuple[Tensor, float]:
    """ntk with s' = s · max(seq_len, L)/L - (s - 1) (transformers' "dynamic"; Peng et al. 2023, §3.3)."""
    s, L = _given(cfg.factor), _given(cfg.original_max_position_embeddings)
    length = L if seq_len is None else max(seq_len, L)
    return _ntk_base("dynamic", base, r, s * length / L - (s - 1)) ** -_theta64(base, r)[0], 1.0


def _yarn_ramp(s: float, trained: int, base: float, r: int, cfg: RopeScaling) -> Tensor:
    """(1 - γ_i) θ_i / s + γ_i θ_i, (f,) float64: NTK-by-parts (Peng et al. 2023, §3.2)."""
    beta_fast, beta_slow = cfg.beta_fast or 32.0, cfg.beta_slow or 1.0

    def dim_with(rotations: float) -> float:  # the dim index i at which L·θ_i/(2π) = rotations
        return r * math.log(trained / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = dim_with(beta_fast), dim_with(beta_slow)
    if cfg.truncate is not False:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, r - 1)
    if low == high:
        high += 0.001  # as the YaRN reference code: avoid dividing by zero
    theta = _theta64(base, r)[1]
    ramp = ((torch.arange(r // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)  # 0: keep θ, 1: θ/s
    return theta / s * ramp + theta * (1 - ramp)


def _yarn(cfg: RopeScaling, base: float, r: int, seq_len: int | None, device: Device) -> tuple[Tensor, float]:
    """(1 - γ_i) θ_i / s + γ_i θ_i, a = 0.1 ln s + 1 (Peng et al. 2023, §3.2 and §3.4)."""
    s, trained = _given(cfg.factor), _given(cfg.original_max_position_embeddings)
    if cfg.attention_factor is not None:
        scale = cfg.attention_factor
    elif cfg.mscale is not None:
        scale = _yarn_mscale(s, cfg.mscale) / _yarn_mscale(s, _given(cfg.mscale_all_dim))
    else:
        scale = _yarn_mscale(s)
    return _yarn_ramp(s, trained, base, r, cfg), scale


def _dynamic_yarn(cfg: RopeScaling, base: float, r: int, seq_len: int | None, device: Device) -> tuple[Tensor, float]:
    """yarn with s = max(1, seq_len / L): YaRN's Dynamic Scaling (Peng et al. 2023, §3.3), as
    its reference code's dynamic YaRN embedding (plain RoPE up to L, then yarn(seq_len / L))."""
    trained = _given(cfg.original_max_position_embeddings)
    s = max(1.0, (trained if seq_len is None else seq_len) / trained)
    return _yarn_ramp(s, trained, base, r, cfg), _yarn_mscale(s)


def _llama3(cfg: RopeScaling, base: float, r: int, seq_len: int | None, device: Device) -> tuple[Tensor, float]:
    """θ_i, θ_i / s, or a blend by wavelength band (Llama 3.1)."""
    s, L = _given(cfg.factor), _given(cfg.original_max_position_embeddings)
    low_f, high_f = _given(cfg.low_freq_factor), _given(cfg.high_freq_factor)
    theta = _theta64(base, r)[1]
    wavelength = 2 * math.pi / theta
    long_edge, short_edge = L / low_f, L / high_f
    smooth = (L / wavelength - low_f) / (high_f - low_f)
    inv = torch.where(wavelength > long_edge, theta / s, theta)
    blend = (1 - smooth) * theta / s + smooth * theta
    return torch.where((wavelength >= short_edge) & (wavelength <= long_edge), blend, inv), 1.0


def _longrope(cfg: RopeScaling, base: float, r: int, seq_len: int | None, device: Device) -> tuple[Tensor, float]:
    """θ_i / λ_i, λ = short or long factors, a = sqrt(1 + ln s / ln L) (Ding et al. 2024)."""
    L, short, long = _given(cfg.original_max_position_embeddings), _given(cfg.short_factor), _given(cfg.long_factor)
    for name, values in (("short_factor", short), ("long_factor", long)):
        if len(values) != r // 2:
            raise ValueError(
                f"rope scaling: {name} has {len(values)} entries but the rotary dim {r} has {r // 2} frequencies"
            )
    factors = long if seq_len is not None and seq_len > L else short
    inv = _theta64(base, r)[1] / torch.tensor(factors, dtype=torch.float64)
    if cfg.attention_factor is not None:
        return inv, cfg.attention_factor
    s = _given(cfg.factor)  # RopeScaling requires factor when attention_factor is absent
    return inv, 1.0 if s <= 1 else math.sqrt(1 + math.log(s) / math.log(L))


ROPE_INIT_FUNCTIONS: dict[str, Callable[[RopeScaling, float, int, int | None, Device], tuple[Tensor, float]]] = {
    "default": _default,
    "linear": _linear,
    "ntk": _ntk,
    "dynamic": _dynamic,
    "yarn": _yarn,
    "dynamic_yarn": _dynamic_yarn,
    "llama3": _llama3,
    "longrope": _longrope,
    "p_rope": _p_rope,
}
"""rope_type -> the function computing its frequencies and attention scale (one per
:data:`ROPE_TYPES`, in that order)."""
