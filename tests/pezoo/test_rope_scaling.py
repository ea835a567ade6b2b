"""RoPE context extension and p-RoPE: ``rope_frequencies`` against formulas written out here
per frequency from the papers, the papers' own statements as properties, the module (attention
scale, dynamic NTK under incremental decoding, the kit), strict config parsing, and — when the
``transformers`` package is installed (the ``compat`` extra) — its ``ROPE_INIT_FUNCTIONS``.

Notation: θ_i = b^(-2i/r) for i < r/2 (r the rotary dim), s the factor, L the original
context length, r_i = L θ_i / (2π) the rotations of pair i over L (YaRN's r(d)).
"""

from __future__ import annotations

import json
import math

import pytest
import torch

import pezoo
from pezoo.encodings.rope_scaling import ROPE_TYPES, RopeScaling, rope_frequencies, rotary_dim_of
from pezoo.testing import KitModel, check_encoding

BASE = 10000.0


def theta(r: int, base: float = BASE) -> list[float]:
    return [base ** (-2.0 * i / r) for i in range(r // 2)]


def yarn_mscale(s: float, m: float = 1.0) -> float:
    return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0


def naive_frequencies(r: int, base: float, cfg: dict, seq_len: int | None = None) -> tuple[list[float], float]:
    """Per-frequency formulas in float64 (docs/encodings/rope.md has the sources)."""
    kind = cfg.get("rope_type", "default")
    th = theta(r, base)
    s, L = cfg.get("factor"), cfg.get("original_max_position_embeddings")
    if kind == "default":
        return th, 1.0
    if kind == "linear":  # Chen et al. 2023: position m -> m / s, i.e. θ_i -> θ_i / s
        return [t / s for t in th], 1.0
    if kind in ("ntk", "dynamic"):  # NTK-aware: b' = b s^(r/(r-2)); dynamic: s from the length
        if kind == "dynamic":
            n = L if seq_len is None else max(seq_len, L)
            s = s * n / L - (s - 1)
        b2 = base * s ** (r / (r - 2))
        return [b2 ** (-2.0 * i / r) for i in range(r // 2)], 1.0
    if kind == "yarn":  # NTK-by-parts with the reference code's ramp over dim indices, and the temperature
        fast, slow = cfg.get("beta_fast", 32), cfg.get("beta_slow", 1)

        def dim(rot):  # solve L θ_d / (2π) = rot for d
            return r * math.log(L / (rot * 2 * math.pi)) / (2 * math.log(base))

        lo, hi = dim(fast), dim(slow)
        if cfg.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, r - 1)
        hi = hi + 0.001 if lo == hi else hi
        out = []
        for i, t in enumerate(th):
            gamma = 1 - min(max((i - lo) / (hi - lo), 0.0), 1.0)  # 1: keep θ (extrapolate), 0: θ / s
            out.append((1 - gamma) * t / s + gamma * t)
        if "attention_factor" in cfg:
            a = cfg["attention_factor"]
        elif "mscale" in cfg:
            a = yarn_mscale(s, cfg["mscale"]) / yarn_mscale(s, cfg["mscale_all_dim"])
        else:
            a = yarn_mscale(s)
        return out, a
    if kind == "llama3":
        lo_f, hi_f = cfg["low_freq_factor"], cfg["high_freq_factor"]
        out = []
        for t in th:
            wavelength = 2 * math.pi / t
            if wavelength < L / hi_f:
                out.append(t)
            elif wavelength > L / lo_f:
                out.append(t / s)
            else:
                smooth = (L / wavelength - lo_f) / (hi_f - lo_f)
                out.append((1 - smooth) * t / s + smooth * t)
        return out, 1.0
    if kind == "longrope":
        factors = cfg["long_factor"] if seq_len is not None and seq_len > L else cfg["short_factor"]
        a = cfg.get("attention_factor", math.sqrt(1 + math.log(s) / math.log(L)) if s > 1 else 1.0)
        return [t / lam for t, lam in zip(th, factors, strict=True)], a
    if kind == "p_rope":  # Barbero et al. 2024: keep the floor(p r / 2) highest frequencies
        kept = int(cfg["p"] * r // 2)
        return [t if i < kept else 0.0 for i, t in enumerate(th)], 1.0
    raise AssertionError(kind)


LONGROPE = {
    "rope_type": "longrope",
    "original_max_position_embeddings": 64,
    "factor": 8.0,
    "short_factor": [1.0, 1.1, 1.3, 1.7, 2.0, 2.5, 3.0, 4.0],
    "long_factor": [1.0, 1.5, 2.0, 3.0, 5.0, 8.0, 12.0, 16.0],
}
CONFIGS = [
    pytest.param({}, id="default"),
    pytest.param({"rope_type": "linear", "factor": 4.0}, id="linear"),
    pytest.param({"rope_type": "ntk", "factor": 8.0}, id="ntk"),
    pytest.param({"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 64}, id="dynamic"),
    pytest.param({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}, id="yarn"),
    pytest.param(
        {"rope_type": "yarn", "factor": 16, "original_max_position_embeddings": 4096, "beta_fast": 16, "beta_slow": 2},
        id="yarn-betas",
    ),
    pytest.param(
        {
            "rope_type": "yarn",
            "factor": 40,
            "original_max_position_embeddings": 4096,
            "truncate": False,
            "mscale": 1.0,
            "mscale_all_dim": 0.707,
        },
        id="yarn-deepseek",
    ),
    pytest.param(
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256, "attention_factor": 1.25},
        id="yarn-attention-factor",
    ),
    pytest.param(
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "original_max_position_embeddings": 8192,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
        },
        id="llama3",
    ),
    pytest.param(LONGROPE, id="longrope"),
    pytest.param({"rope_type": "p_rope", "p": 0.75}, id="p_rope"),
    pytest.param(
        {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 512, "partial_rotary_factor": 0.5},
        id="yarn-partial",
    ),
]
SEQ_LENS = [None, 16, 64, 100, 1000]


def rotary(e: int, cfg: dict) -> int:
    return int(e * cfg.get("partial_rotary_factor", 1.0))


def sized(cfg: dict, e: int) -> dict:
    """``cfg`` for head dim e: LongRoPE's factor lists (8 entries above) repeated to e/2 entries."""
    if cfg.get("rope_type") != "longrope":
        return cfg
    return {**cfg, "short_factor": cfg["short_factor"] * (e // 16), "long_factor": cfg["long_factor"] * (e // 16)}


HEADS = [(16, BASE), (64, 500000.0), (128, 1e6)]


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize(("e", "base"), HEADS)
def test_rope_frequencies_match_the_per_frequency_formulas(cfg, e, base):
    cfg = sized(cfg, e)
    for seq_len in SEQ_LENS:
        got, scale = rope_frequencies(e, base, cfg, seq_len)
        want, want_scale = naive_frequencies(rotary(e, cfg), base, cfg, seq_len)
        assert got.dtype == torch.float32 and got.shape == (rotary(e, cfg) // 2,)
        torch.testing.assert_close(got.to(torch.float64), torch.tensor(want, dtype=torch.float64), rtol=1e-6, atol=0)
        assert scale == pytest.approx(want_scale, rel=1e-12)


def test_default_frequencies_are_the_ones_rope_always_used():
    for e in (2, 8, 16, 64):
        want = BASE ** (-torch.arange(0, e, 2, dtype=torch.float32) / e)
        got, scale = rope_frequencies(e, BASE)
        assert torch.equal(got, want) and scale == 1.0
        assert torch.equal(rope_frequencies(e, BASE, {"rope_type": "p_rope", "p": 1.0})[0], want)


# --------------------------------------------------------------------------------------
# the papers' statements as properties
# --------------------------------------------------------------------------------------


def test_linear_interpolation_rotates_position_m_as_m_over_s():
    """Chen et al. 2023, §2.2: f'(x, m) = f(x, m L / L'), i.e. position m is read as m / s."""
    e, s = 8, 4.0
    x = torch.randn(1, 1, 5, e, dtype=torch.float64)
    pos = [0, 3, 10, 41, 200]
    ctx = pezoo.AttentionContext(q_pos=torch.tensor([pos]), k_pos=torch.tensor([pos]))
    got, _ = pezoo.create("rope", head_dim=e, scaling={"rope_type": "linear", "factor": s}).qk(0, x, x, ctx)
    want = torch.empty_like(x)
    for t, m in enumerate(pos):
        for i, th in enumerate(theta(e)):
            c, sn = math.cos(m / s * th), math.sin(m / s * th)
            a, b = x[..., t, 2 * i], x[..., t, 2 * i + 1]
            want[..., t, 2 * i], want[..., t, 2 * i + 1] = a * c - b * sn, a * sn + b * c
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_ntk_keeps_the_highest_frequency_and_interpolates_the_lowest_by_s():
    """NTK-aware scaling (Peng et al. 2023, §3.1): b' = b s^(r/(r-2)) leaves θ_0 and divides θ_(r/2-1) by s."""
    for r, s in ((8, 4.0), (64, 16.0)):
        got, _ = rope_frequencies(r, BASE, {"rope_type": "ntk", "factor": s})
        plain, _ = rope_frequencies(r, BASE)
        assert got[0] == plain[0] == 1.0
        assert float(got[-1]) == pytest.approx(float(plain[-1]) / s, rel=1e-6)


def test_dynamic_is_plain_rope_up_to_the_original_length_and_ntk_beyond():
    cfg = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 64}
    plain, _ = rope_frequencies(16, BASE)
    for seq_len in (None, 1, 64):
        torch.testing.assert_close(rope_frequencies(16, BASE, cfg, seq_len)[0], plain, rtol=1e-6, atol=0)
    # at seq_len = L (2s - 1)/s the dynamic factor s · n / L - (s - 1) equals s: the static NTK frequencies
    ntk, _ = rope_frequencies(16, BASE, {"rope_type": "ntk", "factor": 4.0})
    torch.testing.assert_close(rope_frequencies(16, BASE, cfg, 112)[0], ntk, rtol=1e-6, atol=0)


@pytest.mark.parametrize(("r", "s", "L", "fast", "slow"), [(64, 8.0, 256, 32, 1), (128, 16.0, 4096, 16, 2)])
def test_yarn_keeps_fast_frequencies_and_interpolates_slow_ones(r, s, L, fast, slow):
    """Peng et al. 2023, §3.2 (NTK-by-parts): pairs rotating more than β times over L keep θ_i;
    pairs rotating fewer than α times are interpolated to θ_i / s; §3.4: √(1/t) = 0.1 ln s + 1."""
    cfg = {
        "rope_type": "yarn",
        "factor": s,
        "original_max_position_embeddings": L,
        "beta_fast": fast,
        "beta_slow": slow,
    }
    got, scale = rope_frequencies(r, BASE, cfg)
    rotations = [L * t / (2 * math.pi) for t in theta(r)]
    kept = [i for i, n in enumerate(rotations) if n > fast]
    interpolated = [i for i, n in enumerate(rotations) if n < slow]
    assert kept and interpolated and len(kept) + len(interpolated) < r // 2
    for i in kept:
        assert float(got[i]) == pytest.approx(theta(r)[i], rel=1e-6)
    for i in interpolated:
        assert float(got[i]) == pytest.approx(theta(r)[i] / s, rel=1e-6)
    between = got[kept[-1] + 1 : interpolated[0]].double()
    upper = torch.tensor(theta(r)[kept[-1] + 1 : interpolated[0]], dtype=torch.float64)
    assert bool((between <= upper * (1 + 1e-6)).all() and (between >= upper / s * (1 - 1e-6)).all())
    assert scale == pytest.approx(0.1 * math.log(s) + 1)


def test_p_rope_drops_the_lowest_frequencies():
    """Barbero et al. 2024: p-RoPE keeps the highest ⌊p·r/2⌋ frequencies, the rest rotate by 0."""
    plain, _ = rope_frequencies(16, BASE)
    for p, kept in ((0.0, 0), (0.25, 2), (0.5, 4), (0.75, 6), (0.8, 6), (1.0, 8)):
        got, _ = rope_frequencies(16, BASE, {"rope_type": "p_rope", "p": p})
        assert torch.equal(got[:kept], plain[:kept]) and not got[kept:].any()
    assert bool((plain[:-1] > plain[1:]).all())  # the first frequencies are the highest


def test_p_rope_zero_is_nope():
    q, k = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8)
    pos = torch.arange(6)[None] * 37
    rope = pezoo.create("rope", head_dim=8, scaling={"rope_type": "p_rope", "p": 0.0})
    q2, k2 = rope.qk(0, q, k, pezoo.AttentionContext(q_pos=pos, k_pos=pos))
    torch.testing.assert_close(q2, q, atol=0, rtol=0)
    torch.testing.assert_close(k2, k, atol=0, rtol=0)


# --------------------------------------------------------------------------------------
# the module: attention scale, incremental decoding, the kit
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_attention_scale_multiplies_rotated_q_and_k_so_logits_scale_by_its_square(layout):
    e, r = 16, 8
    cfg = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16}
    scaled = pezoo.create("rope", head_dim=e, layout=layout, rotary_dim=r, scaling=cfg)
    a = scaled.frequencies()[1]
    assert a == pytest.approx(0.1 * math.log(8) + 1)
    same_freqs = dict(cfg, attention_factor=1.0)
    unscaled = pezoo.create("rope", head_dim=e, layout=layout, rotary_dim=r, scaling=same_freqs)
    q, k = torch.randn(1, 2, 7, e), torch.randn(1, 2, 7, e)
    pos = torch.arange(7)[None] * 5
    ctx = lambda: pezoo.AttentionContext(q_pos=pos, k_pos=pos)  # noqa: E731
    (qs, ks), (qu, ku) = scaled.qk(0, q, k, ctx()), unscaled.qk(0, q, k, ctx())
    torch.testing.assert_close(qs[..., :r], a * qu[..., :r], atol=1e-5, rtol=1e-5)
    assert torch.equal(qs[..., r:], q[..., r:])  # as transformers: cos/sin do not touch pass-through features
    logits_rot = qs[..., :r] @ ks[..., :r].transpose(-1, -2)
    torch.testing.assert_close(logits_rot, a**2 * (qu[..., :r] @ ku[..., :r].transpose(-1, -2)), atol=1e-4, rtol=1e-5)


def _kit_model(scaling: dict, seed: int = 0) -> KitModel:
    dims = pezoo.ModelDims(d_model=32, n_heads=4, n_layers=2)
    torch.manual_seed(seed)
    model = KitModel(pezoo.create("rope", dims=dims, scaling=scaling), dims, vocab=16)
    return model.eval()


def test_dynamic_ntk_decodes_as_the_full_pass_when_the_planned_positions_are_known():
    cfg = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 8}
    model, plain = _kit_model(cfg), _kit_model({})
    s, prompt = 24, 5
    tokens = torch.randint(16, (2, s), generator=torch.Generator().manual_seed(1))
    pos = torch.arange(s)[None]
    with torch.no_grad():
        full = model(tokens, pos)
        assert not torch.allclose(full, plain(tokens, pos), atol=1e-3)  # the scaling is active at s > L
        state = {"positions": pos}  # the planned positions, as harness Backbone.start_state keeps them
        steps = [model(tokens[:, :prompt], pos, state=state)]
        steps += [model(tokens[:, t : t + 1], pos, state=state) for t in range(prompt, s)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("seq_len", [None, 1, 64, 65, 100, 1024])
def test_dynamic_yarn_is_yarn_with_s_the_length_over_l(seq_len):
    """YaRN's Dynamic Scaling (Peng et al. 2023, §3.3): s = max(1, l'/L) for a sequence of l'
    positions, so plain RoPE up to L and YaRN at factor l'/L beyond (its temperature too)."""
    L = 64
    dynamic = {"rope_type": "dynamic_yarn", "original_max_position_embeddings": L}
    got, scale = rope_frequencies(16, BASE, dynamic, seq_len)
    s = max(1.0, (seq_len or L) / L)
    if s == 1:
        want, want_scale = rope_frequencies(16, BASE)
    else:
        want, want_scale = rope_frequencies(
            16, BASE, {"rope_type": "yarn", "factor": s, "original_max_position_embeddings": L}
        )
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert scale == want_scale == (1.0 if s == 1 else pytest.approx(0.1 * math.log(s) + 1))


def test_dynamic_yarn_decodes_as_the_full_pass_when_the_planned_positions_are_known():
    cfg = {"rope_type": "dynamic_yarn", "original_max_position_embeddings": 8}
    model, plain = _kit_model(cfg), _kit_model({})
    s, prompt = 24, 5
    tokens = torch.randint(16, (2, s), generator=torch.Generator().manual_seed(1))
    pos = torch.arange(s)[None]
    with torch.no_grad():
        full = model(tokens, pos)
        assert not torch.allclose(full, plain(tokens, pos), atol=1e-3)  # s = 24/8 = 3 at this length
        state = {"positions": pos}
        steps = [model(tokens[:, :prompt], pos, state=state)]
        steps += [model(tokens[:, t : t + 1], pos, state=state) for t in range(prompt, s)]
        torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=2e-5, rtol=1e-4)
        short = torch.arange(8)[None]  # at l' <= L it is plain RoPE
        torch.testing.assert_close(model(tokens[:, :8], short), plain(tokens[:, :8], short), atol=1e-6, rtol=1e-6)


def test_dynamic_ntk_without_a_plan_keeps_the_first_calls_frequencies():
    """Every call of one decode uses the frequencies of its first call (the cached keys' ones)."""
    cfg = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 4}
    rope = pezoo.create("rope", head_dim=8, scaling=cfg)
    state: dict = {}
    q = torch.randn(1, 1, 1, 8)
    first = pezoo.AttentionContext(q_pos=torch.arange(10)[None], k_pos=torch.arange(10)[None], state=state)
    rope.qk(0, torch.randn(1, 1, 10, 8), torch.randn(1, 1, 10, 8), first)
    later = pezoo.AttentionContext(q_pos=torch.tensor([[30]]), k_pos=torch.arange(31)[None], state=state)
    got, _ = rope.qk(0, q, q, later)
    inv, _ = rope_frequencies(8, BASE, cfg, seq_len=10)
    angles = 30 * inv.double()
    a, b = q[..., 0::2].double(), q[..., 1::2].double()
    want = torch.stack([a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()], -1).flatten(-2)
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "options",
    [
        {"scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 6}},
        {"layout": "half", "rotary_fraction": 0.5, "scaling": {"rope_type": "linear", "factor": 2.0}},
        {"layout": "half", "scaling": {"rope_type": "p_rope", "p": 0.5}},
        {"scaling": {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 16}},
        {"scaling": {"rope_type": "dynamic_yarn", "original_max_position_embeddings": 16}},
    ],
    ids=["yarn", "half-partial-linear", "half-p_rope", "dynamic", "dynamic_yarn"],
)
def test_conformance_kit_passes_with_a_scaling(options):
    dims = pezoo.ModelDims(d_model=32, n_heads=4, n_layers=2)
    check_encoding(lambda: pezoo.create("rope", dims=dims, **options), dims)


def test_randomized_rope_accepts_a_scaling():
    pe = pezoo.create("randomized:rope", head_dim=8, max_length=64, scaling={"rope_type": "p_rope", "p": 0.5})
    assert pe.inner.scaling.p == 0.5


# --------------------------------------------------------------------------------------
# strict config
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 8, "beta": 3}, r"unknown key.*'beta'"),
        ({"rope_type": "yrn", "factor": 4}, r"unknown rope_type 'yrn'. Did you mean 'yarn'"),
        ({"rope_type": "linear", "factor": 4, "beta_fast": 32}, r"'linear' does not use 'beta_fast'.*factor"),
        ({"rope_type": "yarn", "factor": 4}, r"'yarn' needs 'original_max_position_embeddings'"),
        ({"rope_type": "dynamic", "factor": 2}, r"'dynamic' needs 'original_max_position_embeddings'"),
        ({"rope_type": "linear", "factor": 0.5}, r"factor must be >= 1"),
        ({"rope_type": "linear", "factor": "4"}, r"factor must be a finite number"),
        ({"rope_type": "linear", "factor": True}, r"factor must be a finite number"),
        ({"rope_type": "p_rope", "p": 1.5}, r"p must be >= 0 and <= 1"),
        ({"rope_type": "dynamic", "factor": 2, "original_max_position_embeddings": 8.5}, "integer"),
        ({"rope_type": "yarn", "factor": 2, "original_max_position_embeddings": 8, "beta_fast": 1}, "must exceed"),
        ({"rope_type": "yarn", "factor": 2, "original_max_position_embeddings": 8, "mscale": 1.0}, "both or neither"),
        (
            {
                "rope_type": "llama3",
                "factor": 8,
                "original_max_position_embeddings": 8,
                "low_freq_factor": 4,
                "high_freq_factor": 1,
            },
            "must exceed",
        ),
        ({"type": "linear", "rope_type": "yarn", "factor": 2}, "disagree"),
        ({**LONGROPE, "short_factor": [1.0, 2.0]}, r"short_factor has 2 entries.*8 frequencies"),
        ({k: v for k, v in LONGROPE.items() if k != "factor"}, r"'factor'.*or 'attention_factor'"),
        ({"rope_theta": 500000.0}, r"rope_theta=500000 disagrees with base=10000"),
        ({"partial_rotary_factor": 0.1}, "rotary dim must be even"),
        ({"rope_type": "ntk", "factor": 2, "partial_rotary_factor": 0.125}, r"rotary dim > 2"),
    ],
)
def test_bad_scaling_is_a_clear_error(cfg, message):
    with pytest.raises(ValueError, match=message):
        rope_frequencies(16, BASE, cfg)
    with pytest.raises(ValueError, match=message):  # and when the encoding is built, before anything runs
        pezoo.create("rope", head_dim=16, scaling=cfg)


def test_scaling_must_be_a_dict():
    with pytest.raises(ValueError, match="scaling must be a table"):
        pezoo.create("rope", head_dim=16, scaling="yarn")


def test_a_pasted_legacy_config_and_json_round_trip():
    pasted = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}  # Qwen2.5's rope_scaling
    cfg = RopeScaling.from_dict(pasted)
    assert cfg.rope_type == "yarn" and cfg.to_dict() == {
        "rope_type": "yarn",
        **{k: pasted[k] for k in pasted if k != "type"},
    }
    assert RopeScaling.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert RopeScaling.from_dict(json.loads(json.dumps(LONGROPE))).to_dict() == LONGROPE
    rope = pezoo.create("rope", head_dim=16, base=1e6, scaling={"rope_theta": 1e6, **pasted})
    assert "yarn" in repr(rope)
    assert set(ROPE_TYPES) == {
        "default", "linear", "ntk", "dynamic", "yarn", "dynamic_yarn", "llama3", "longrope", "p_rope"
    }  # fmt: skip


def test_seq_len_must_be_a_positive_integer():
    with pytest.raises(ValueError, match="seq_len"):
        rope_frequencies(16, BASE, None, seq_len=0)


# --------------------------------------------------------------------------------------
# against transformers' ROPE_INIT_FUNCTIONS (optional: pip install '.[compat]')
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def transformers():
    module = pytest.importorskip("transformers", minversion="5.0")
    module.logging.set_verbosity_error()  # its config validation warns about what pezoo rejects
    return module


def hf_frequencies(transformers, e: int, base: float, cfg: dict, seq_len: int | None):
    """transformers' inverse frequencies and attention factor for pezoo's ``cfg``."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = {"rope_theta": base, **cfg}
    kind = params["rope_type"]
    L = params.get("original_max_position_embeddings", 2048)
    if kind == "dynamic":  # transformers reads L from the model config's max_position_embeddings
        params.pop("original_max_position_embeddings")
        max_positions = L
    elif kind == "p_rope":  # transformers calls it "proportional", p being its partial_rotary_factor
        params = {"rope_type": "proportional", "rope_theta": base, "partial_rotary_factor": params["p"]}
        kind, max_positions = "proportional", L
    else:
        max_positions = int(L * params.get("factor", 1))
    config = transformers.LlamaConfig(
        hidden_size=4 * e,
        num_attention_heads=4,
        head_dim=e,
        max_position_embeddings=max_positions,
        rope_parameters=params,
    )
    inv_freq, scale = ROPE_INIT_FUNCTIONS[kind](config, None, seq_len=seq_len)
    return inv_freq, float(scale)


HF_CONFIGS = [p for p in CONFIGS if p.id not in ("default", "ntk")]  # transformers has no static NTK type


@pytest.mark.parametrize("cfg", HF_CONFIGS)
@pytest.mark.parametrize(("e", "base"), HEADS)
def test_rope_frequencies_match_transformers(transformers, cfg, e, base):
    """To 1e-6 relative, plus, for YaRN, one fp32 rounding of transformers' ramp γ_i times its
    weight θ_i (1 − 1/s): transformers blends in fp32, pezoo in fp64 (at s = 40 that rounding
    alone is 2e-6 of θ_i / s; pezoo stays within 1e-7 of the fp64 formula, tested above)."""
    cfg = sized(cfg, e)
    r = rotary(e, cfg)
    th = torch.tensor(theta(r, base), dtype=torch.float64)
    ramp_rounding = 2.0**-23 * th * (1 - 1 / cfg["factor"]) if cfg["rope_type"] == "yarn" else 0 * th
    for seq_len in SEQ_LENS:
        got, scale = rope_frequencies(e, base, cfg, seq_len)
        want, want_scale = hf_frequencies(transformers, e, base, cfg, seq_len)
        assert got.shape == want.shape
        err = (got.double() - want.double()).abs()
        allowed = 1e-6 * want.double().abs() + ramp_rounding
        assert bool((err <= allowed).all()), f"seq_len={seq_len}: {float((err / allowed).max()):.3g}x the tolerance"
        assert scale == pytest.approx(want_scale, rel=1e-6)


def test_the_scaling_names_are_importable_from_the_rope_module_too():
    """docs/encodings/rope.md calls ``pezoo.encodings.rope.rope_frequencies``: the names of
    ``rope_scaling`` stay importable where they were before it was split off."""
    import pezoo.encodings.rope as rope

    assert rope.RopeScaling is RopeScaling and rope.rope_frequencies is rope_frequencies
    assert rope.ROPE_TYPES is ROPE_TYPES and rope.rotary_dim_of is rotary_dim_of
    assert {"RopeScaling", "rope_frequencies", "ROPE_TYPES", "rotary_dim_of"} <= set(rope.__all__)


def test_one_function_per_rope_type():
    """Every rope_type has exactly one entry in the table rope_frequencies dispatches on."""
    from pezoo.encodings.rope_scaling import ROPE_INIT_FUNCTIONS, ROPE_TYPES

    assert tuple(ROPE_INIT_FUNCTIONS) == ROPE_TYPES
    assert len(set(ROPE_INIT_FUNCTIONS.values())) == len(ROPE_TYPES)
