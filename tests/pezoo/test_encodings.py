"""nope / ape / rope / alibi against independent formulas from their papers."""

from __future__ import annotations

import cmath
import math

import pytest
import torch

import pezoo
from pezoo.encodings import alibi_slopes, sinusoid_table


def test_sinusoid_table_matches_vaswani_formula():
    d = 16
    table = sinusoid_table(torch.arange(50), d)
    for pos in (0, 1, 7, 49):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)


def test_ape_adds_the_table_to_embeddings():
    ape = pezoo.create("ape", d_model=8)
    x = torch.randn(2, 5, 8)
    pos = torch.arange(5)[None]
    expected = x + torch.tensor(
        [[[math.sin(p / 10000 ** (2 * (f // 2) / 8)) if f % 2 == 0 else math.cos(p / 10000 ** (2 * (f // 2) / 8))
           for f in range(8)] for p in range(5)]]
    )  # fmt: skip
    torch.testing.assert_close(ape.embed(x, pos), expected, atol=1e-5, rtol=0)


def test_alibi_slopes_power_of_two_and_twelve_heads():
    # Press et al.: 8 heads -> 1/2, 1/4, ..., 1/256.
    assert alibi_slopes(8) == pytest.approx([2.0**-k for k in range(1, 9)])
    # 12 heads: the 8-head slopes, then every other slope of the 16-head sequence
    # (2^-0.5, 2^-1, 2^-1.5, ...), starting with the first: 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
    expected12 = [2.0**-k for k in range(1, 9)] + [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5]
    assert alibi_slopes(12) == pytest.approx(expected12)
    assert len(alibi_slopes(5)) == 5 and len(alibi_slopes(1)) == 1


def test_alibi_bias_is_minus_slope_times_distance():
    alibi = pezoo.create("alibi", n_heads=4)
    pos = torch.arange(6)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    (bias,) = alibi.bias(0, torch.zeros(1, 4, 6, 2), torch.zeros(1, 4, 6, 2), ctx)
    dense = bias.materialize(ctx, 4, torch.float32)
    slopes = [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]
    for h, m in enumerate(slopes):
        for i in range(6):
            for j in range(i + 1):
                assert dense[0, h, i, j].item() == pytest.approx(-m * (i - j))


def test_rope_is_complex_multiplication():
    e, s = 8, 7
    rope = pezoo.create("rope", head_dim=e)
    q, k = torch.randn(1, 2, s, e), torch.randn(1, 2, s, e)
    pos = torch.tensor([[3, 5, 8, 13, 21, 34, 2000]])
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    q_rot, _ = rope.qk(0, q, k, ctx)
    for t in range(s):
        for i in range(e // 2):
            z = complex(q[0, 1, t, 2 * i].item(), q[0, 1, t, 2 * i + 1].item())
            rotated = z * cmath.exp(1j * pos[0, t].item() * 10000 ** (-2 * i / e))
            assert q_rot[0, 1, t, 2 * i].item() == pytest.approx(rotated.real, abs=1e-4)
            assert q_rot[0, 1, t, 2 * i + 1].item() == pytest.approx(rotated.imag, abs=1e-4)


@pytest.mark.parametrize("name", ["rope", "alibi"])
def test_relative_encodings_are_shift_invariant(name):
    """Shifting every position by a constant leaves the attention output unchanged."""
    torch.manual_seed(0)
    pe = pezoo.create(name, dims=pezoo.ModelDims(d_model=32, n_heads=4, n_layers=1))
    q, k, v = (torch.randn(2, 4, 9, 8) for _ in range(3))

    def attention(offset: int) -> torch.Tensor:
        pos = torch.arange(9)[None] + offset
        ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
        q2, k2 = pe.qk(0, q, k, ctx)
        return pezoo.attend(q2, k2, v, ctx, pe.bias(0, q2, k2, ctx))[0]

    torch.testing.assert_close(attention(0), attention(517), atol=1e-4, rtol=1e-4)


def test_unknown_encoding_lists_valid_names():
    with pytest.raises(pezoo.UnknownNameError) as err:
        pezoo.create("ropee")
    message = str(err.value)
    assert "rope" in message and "alibi" in message and "Did you mean" in message


def test_unknown_option_names_valid_options():
    with pytest.raises(TypeError, match="valid options: base, head_dim"):
        pezoo.create("rope", head_dim=8, theta=3)


def test_every_name_is_importable_standalone():
    from pezoo import ALiBi, NoPE, RoPE, SinusoidalAPE

    assert isinstance(RoPE(head_dim=4), pezoo.PositionalEncoding)
    assert {ALiBi.name, NoPE.name, RoPE.name, SinusoidalAPE.name} <= set(pezoo.available())


def test_get_accepts_wrapped_names():
    factory = pezoo.get("randomized:rope")
    pe = factory(head_dim=8)
    assert isinstance(pe, pezoo.PositionalEncoding) and pe.name == "randomized:rope"
    with pytest.raises(pezoo.UnknownNameError, match="Valid encodings"):
        pezoo.get("randomized:nope")  # NoPE reads no positions: nothing to randomize


@pytest.mark.parametrize("name", [*pezoo.available(), "abacus+fire"])
def test_every_encoding_offers_the_training_extras(name):
    """Generic training code calls ``pe.optimizer_groups()`` and adds ``pe.regularisation()``
    for any encoding (docs/use-in-your-model.md), not only PRISM's."""
    pe = pezoo.create(name, dims=pezoo.ModelDims(d_model=16, n_heads=2, n_layers=1))
    groups = pe.optimizer_groups()
    assert isinstance(groups, list) and all("params" in g for g in groups)
    term = pe.regularisation()
    assert isinstance(term, torch.Tensor) and term.shape == ()
    if "prism" not in name.replace("+", ":").split(":"):  # PRISM's α groups, bare or wrapped (ssmax:prism)
        assert groups == [] and term.item() == 0.0
