"""RoPE's two layouts and partial rotary against hand-written formulas and, when the
``transformers`` package is installed (the ``compat`` extra), against its Llama (rotate half),
GPT-NeoX (rotate half, partial) and GPT-J (interleaved, partial) implementations.

Reference formulas, written out per feature in float64 (Su et al., "RoFormer", §3.4): pair i
of the first r features, with θ_i = base^(-2i/r), is rotated by pos · θ_i:

    interleaved   (x_2i, x_2i+1)      -> (x_2i cos − x_2i+1 sin, x_2i sin + x_2i+1 cos)
    half          (x_i, x_i+r/2)      -> (x_i cos − x_i+r/2 sin, x_i sin + x_i+r/2 cos)

and features r.. pass through unchanged.
"""

from __future__ import annotations

import math

import pytest
import torch

import pezoo
from pezoo.encodings.rope import LAYOUTS, apply_rotary, rotate_complex
from pezoo.testing import check_encoding

POSITIONS = [0, 1, 2, 7, 31, 100, 2049, 4097]


def naive_rotation(x: torch.Tensor, pos: list[int], layout: str, rotary_dim: int, base: float = 10000.0):
    """x (b, h, s, e) rotated feature by feature in float64, positions pos (s,)."""
    x = x.to(torch.float64)
    out = x.clone()
    half = rotary_dim // 2
    for t, p in enumerate(pos):
        for i in range(half):
            a_idx, b_idx = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + half)
            angle = p * base ** (-2.0 * i / rotary_dim)
            c, s = math.cos(angle), math.sin(angle)
            a, b = x[..., t, a_idx], x[..., t, b_idx]
            out[..., t, a_idx] = a * c - b * s
            out[..., t, b_idx] = a * s + b * c
    return out


def assert_rotation_close(got: torch.Tensor, want: torch.Tensor) -> None:
    """Tight below position 2048; past it fp32 angles are off by up to ~2^-24 · pos rad (see test_rope_precision)."""
    got, want = got.to(torch.float64), want.to(torch.float64)
    small = [t for t, p in enumerate(POSITIONS) if p < 2048]
    torch.testing.assert_close(got[..., small, :], want[..., small, :], atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(got, want, atol=2e-3, rtol=0)


def ctx_at(pos: list[int]) -> pezoo.AttentionContext:
    p = torch.tensor([pos])
    return pezoo.AttentionContext(q_pos=p, k_pos=p)


def qk(e: int, s: int = len(POSITIONS), seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 3, s, e, generator=g), torch.randn(2, 3, s, e, generator=g)


# --------------------------------------------------------------------------------------
# the default is what it always was
# --------------------------------------------------------------------------------------


def rope_before_layouts(x: torch.Tensor, pos: torch.Tensor, head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """pezoo's RoPE as it was before layouts and scaling existed (frozen copy)."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = (pos.to(torch.float32)[..., None] * inv_freq)[:, None]
    rotation = torch.polar(torch.ones_like(angles), angles)
    pairs = torch.view_as_complex(x.to(torch.float32).unflatten(-1, (-1, 2)).contiguous())
    return torch.view_as_real(pairs * rotation).flatten(-2).to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_default_rope_is_bit_identical_to_before(dtype):
    q, k = qk(16)
    q, k = q.to(dtype), k.to(dtype)
    pos = torch.tensor([POSITIONS])
    rope = pezoo.create("rope", head_dim=16)
    assert rope.layout == "interleaved" and rope.rotary_dim == 16 and rope.scaling.rope_type == "default"
    q2, k2 = rope.qk(0, q, k, ctx_at(POSITIONS))
    assert torch.equal(q2, rope_before_layouts(q, pos, 16)) and torch.equal(k2, rope_before_layouts(k, pos, 16))


def test_default_rope_values_are_pinned():
    """Values recorded from the implementation before this change (same seed and inputs)."""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 2, 5, 8, generator=g), torch.randn(1, 2, 5, 8, generator=g)
    q2, k2 = pezoo.create("rope", head_dim=8).qk(0, q, k, ctx_at([0, 1, 7, 100, 4097]))
    assert q2[0, 1, 4].tolist() == [
        -1.327752709388733, -1.0927002429962158, 0.34891682863235474, -0.5984810590744019,
        1.201827049255371, -0.968064546585083, 0.7391435503959656, -0.3502771854400635,
    ]  # fmt: skip
    assert k2[0, 0, 3].tolist() == [
        0.25186222791671753, -0.05873393267393112, -0.036406904458999634, -0.5651578903198242,
        0.9750707149505615, -0.08306023478507996, 0.8699291944503784, -0.8441586494445801,
    ]  # fmt: skip


# --------------------------------------------------------------------------------------
# layouts and partial rotary against the hand-written formulas
# --------------------------------------------------------------------------------------

CASES = [(layout, e, r) for layout in LAYOUTS for e, r in ((16, 16), (16, 8), (24, 6), (10, 2), (9, 4))]


@pytest.mark.parametrize(("layout", "e", "r"), CASES)
def test_module_matches_the_naive_rotation(layout, e, r):
    q, k = qk(e)
    rope = pezoo.create("rope", head_dim=e, layout=layout, rotary_dim=r)
    q2, k2 = rope.qk(0, q, k, ctx_at(POSITIONS))
    for got, x in ((q2, q), (k2, k)):
        assert_rotation_close(got, naive_rotation(x, POSITIONS, layout, r))
        assert torch.equal(got[..., r:], x[..., r:])  # the pass-through features are untouched


@pytest.mark.parametrize(("layout", "e", "r"), CASES)
def test_apply_rotary_matches_the_naive_rotation(layout, e, r):
    x, _ = qk(e)
    pos = torch.tensor(POSITIONS, dtype=torch.float64)
    angles = pos[:, None] * 10000.0 ** (-torch.arange(0, r, 2, dtype=torch.float64) / r)  # (s, r/2)
    got = apply_rotary(x, angles.cos().float(), angles.sin().float(), layout)
    assert_rotation_close(got, naive_rotation(x, POSITIONS, layout, r))
    rotation = torch.polar(torch.ones_like(angles), angles).to(torch.complex64)
    torch.testing.assert_close(rotate_complex(x, rotation, layout), got, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_scores_depend_only_on_the_offset(layout):
    q, k = qk(12, s=1, seed=3)
    rope = pezoo.create("rope", head_dim=12, layout=layout, rotary_fraction=0.5)

    def score(m: int, n: int) -> float:
        qm, _ = rope.qk(0, q, q, ctx_at([m]))
        kn, _ = rope.qk(0, k, k, ctx_at([n]))
        return float((qm * kn).sum())

    for shift in (1, 17, 1000):
        assert score(9 + shift, 4 + shift) == pytest.approx(score(9, 4), abs=1e-3)


def test_half_layout_is_interleaved_under_a_permutation():
    """Rotate-half on x equals interleaved rotation of x with features (i, i + r/2) moved to (2i, 2i+1)."""
    e = 12
    to_interleaved = torch.arange(e).view(2, e // 2).t().flatten()  # [0, 6, 1, 7, ...]
    q, k = qk(e)
    half = pezoo.create("rope", head_dim=e, layout="half").qk(0, q, k, ctx_at(POSITIONS))[0]
    inter = pezoo.create("rope", head_dim=e).qk(0, q[..., to_interleaved], k, ctx_at(POSITIONS))[0]
    torch.testing.assert_close(half[..., to_interleaved], inter, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(half, pezoo.create("rope", head_dim=e).qk(0, q, k, ctx_at(POSITIONS))[0], atol=1e-2)


def test_rotary_fraction_is_int_of_head_dim_times_fraction():
    assert pezoo.create("rope", head_dim=24, rotary_fraction=0.25).rotary_dim == 6  # GPT-NeoX's rotary_pct
    assert pezoo.create("rope", head_dim=64, rotary_fraction=0.5).rotary_dim == 32
    assert pezoo.create("rope", head_dim=24, scaling={"partial_rotary_factor": 0.5}).rotary_dim == 12
    assert pezoo.create("rope", head_dim=9, rotary_dim=8).rotary_dim == 8


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"head_dim": 8, "layout": "rotate_half"}, r"unknown RoPE layout 'rotate_half'.*interleaved, half"),
        ({"head_dim": 8, "rotary_dim": 4, "rotary_fraction": 0.5}, "not both"),
        ({"head_dim": 8, "rotary_dim": 3}, "even"),
        ({"head_dim": 8, "rotary_dim": 10}, r"2\.\.head_dim=8"),
        ({"head_dim": 8, "rotary_fraction": 0.1}, "gives 0"),
        ({"head_dim": 8, "rotary_fraction": 1.5}, r"\(0, 1\]"),
        ({"head_dim": 7}, "even head_dim"),
        ({"head_dim": 8, "rotary_dim": 4, "scaling": {"partial_rotary_factor": 1.0}}, "give one of them"),
    ],
)
def test_bad_options_are_clear_errors(options, message):
    with pytest.raises(ValueError, match=message):
        pezoo.create("rope", **options)


def test_gradients_flow_through_both_layouts_and_the_pass_through():
    for layout in LAYOUTS:
        q = torch.randn(1, 2, 4, 8, requires_grad=True)
        rope = pezoo.create("rope", head_dim=8, layout=layout, rotary_dim=4)
        q2, _ = rope.qk(0, q, q, ctx_at([0, 1, 2, 3]))
        q2.pow(2).sum().backward()
        torch.testing.assert_close(q.grad, 2 * q.detach(), atol=1e-5, rtol=1e-5)  # rotations keep norms


@pytest.mark.parametrize(
    "options",
    [{"layout": "interleaved", "rotary_fraction": 0.5}, {"layout": "half"}, {"layout": "half", "rotary_dim": 4}],
    ids=["interleaved-partial", "half", "half-partial"],
)
def test_conformance_kit_passes_for_each_layout(options):
    dims = pezoo.ModelDims(d_model=32, n_heads=4, n_layers=2)
    check_encoding(lambda: pezoo.create("rope", dims=dims, **options), dims)


# --------------------------------------------------------------------------------------
# against transformers (optional: pip install '.[compat]')
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def transformers():
    return pytest.importorskip("transformers", minversion="5.0")


@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_half_layout_matches_transformers_llama(transformers, base):
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    e = 16
    params = {"rope_type": "default", "rope_theta": base}
    config = transformers.LlamaConfig(hidden_size=4 * e, num_attention_heads=4, head_dim=e, rope_parameters=params)
    q, k = qk(e)
    pos = torch.tensor([POSITIONS])
    cos, sin = LlamaRotaryEmbedding(config)(q, pos)  # (1, s, e)
    want_q, want_k = apply_rotary_pos_emb(q, k, cos, sin)
    got_q, got_k = pezoo.create("rope", head_dim=e, base=base, layout="half").qk(0, q, k, ctx_at(POSITIONS))
    assert_rotation_close(got_q, want_q)
    assert_rotation_close(got_k, want_k)


def test_partial_half_layout_matches_transformers_gpt_neox(transformers):
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding, apply_rotary_pos_emb

    e = 24
    config = transformers.GPTNeoXConfig(hidden_size=4 * e, num_attention_heads=4, rotary_pct=0.25)
    q, k = qk(e)
    pos = torch.tensor([POSITIONS])
    cos, sin = GPTNeoXRotaryEmbedding(config)(q, pos)  # (1, s, 6): rotary dim int(24 · 0.25)
    assert cos.shape[-1] == 6
    want_q, want_k = apply_rotary_pos_emb(q, k, cos, sin)
    rope = pezoo.create("rope", head_dim=e, layout="half", rotary_fraction=0.25)
    got_q, got_k = rope.qk(0, q, k, ctx_at(POSITIONS))
    assert_rotation_close(got_q, want_q)
    assert_rotation_close(got_k, want_k)


def test_partial_interleaved_layout_matches_transformers_gptj(transformers):
    from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb, create_sinusoidal_positions

    e, r = 16, 8
    q, _ = qk(e)
    sincos = create_sinusoidal_positions(max(POSITIONS) + 1, r)[torch.tensor([POSITIONS])]  # (1, s, r)
    sin, cos = torch.split(sincos, r // 2, dim=-1)
    x = q.transpose(1, 2)  # GPT-J rotates (b, s, h, e)
    want = torch.cat([apply_rotary_pos_emb(x[..., :r], sin, cos), x[..., r:]], dim=-1).transpose(1, 2)
    got, _ = pezoo.create("rope", head_dim=e, rotary_dim=r).qk(0, q, q, ctx_at(POSITIONS))
    assert_rotation_close(got, want)
