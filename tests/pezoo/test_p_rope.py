"""p-RoPE (Barbero et al. 2024, "Round and Round We Go! What makes Rotary Positional Encodings
useful?"): the registered ``p_rope`` against the rotation written out here with complex numbers,
pair i turned by pos · base^(−2i/e) for i < ⌊p·e/2⌋ and left alone after."""

from __future__ import annotations

import cmath

import pytest
import torch

import pezoo
from pezoo import AttentionContext
from pezoo.testing import KitConfig, check_incremental_decoding

DIMS = pezoo.ModelDims(d_model=64, n_heads=4, n_layers=2)  # head dim 16: 8 pairs


def reference(x, pos, p, layout, base=10000.0):
    """x (e,) at position pos: pair i = (2i, 2i+1) or (i, i+e/2) as a complex number, turned by
    pos·θ_i for the ⌊p·e/2⌋ highest frequencies."""
    e = len(x)
    out = [float(v) for v in x]
    for i in range(int(p * e // 2)):
        a, b = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + e // 2)
        z = complex(out[a], out[b]) * cmath.exp(1j * pos * base ** (-2 * i / e))
        out[a], out[b] = z.real, z.imag
    return torch.tensor(out)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("p", [0.0, 0.25, 0.75, 1.0])
def test_only_the_highest_frequency_pairs_turn(p, layout):
    torch.manual_seed(0)
    pe = pezoo.create("p_rope", dims=DIMS, p=p, layout=layout)
    q, k = torch.randn(1, 4, 4, 16), torch.randn(1, 4, 4, 16)
    pos = torch.tensor([[0, 7, 300, 5000]])
    q2, k2 = pe.qk(0, q, k, AttentionContext(q_pos=pos, k_pos=pos))
    for h in range(4):
        for t in range(4):
            want = reference(q[0, h, t], int(pos[0, t]), p, layout)
            torch.testing.assert_close(q2[0, h, t], want, atol=2e-4, rtol=1e-4)
            torch.testing.assert_close(k2[0, h, t], reference(k[0, h, t], int(pos[0, t]), p, layout), atol=2e-4,
                                       rtol=1e-4)  # fmt: skip


def test_p_one_is_rope_and_p_zero_is_nope():
    q, k = torch.randn(2, 4, 5, 16), torch.randn(2, 4, 5, 16)
    pos = torch.arange(5)[None] * 3

    def ctx():  # one per instance: a context's memo is keyed by the instance
        return AttentionContext(q_pos=pos, k_pos=pos)

    rope = pezoo.create("rope", dims=DIMS).qk(0, q, k, ctx())
    for got, want in zip(pezoo.create("p_rope", dims=DIMS, p=1.0).qk(0, q, k, ctx()), rope, strict=True):
        assert torch.equal(got, want)
    for got, want in zip(pezoo.create("p_rope", dims=DIMS, p=0.0).qk(0, q, k, ctx()), (q, k), strict=True):
        torch.testing.assert_close(got, want)


def test_scores_stay_relative():
    pe = pezoo.create("p_rope", dims=DIMS)
    q, k = torch.randn(1, 4, 6, 16), torch.randn(1, 4, 6, 16)
    scores = []
    for shift in (0, 91):
        pos = torch.arange(6)[None] + shift
        q2, k2 = pe.qk(1, q, k, AttentionContext(q_pos=pos, k_pos=pos))
        scores.append(q2 @ k2.transpose(-1, -2))
    torch.testing.assert_close(scores[0], scores[1], atol=1e-4, rtol=1e-4)


def test_default_is_the_papers_p_and_the_setup_says_so():
    from pezoo.setups import paper_options

    pe = pezoo.create("p_rope", dims=DIMS)
    assert pe.p == 0.75 and pe.scaling.to_dict() == {"rope_type": "p_rope", "p": 0.75}
    assert paper_options("p_rope", "copy", DIMS) == {"p": 0.75}
    assert "p=0.75" in repr(pe)


@pytest.mark.parametrize("p", [0.5, 0.75])
def test_cached_decoding_equals_the_full_pass(p):
    check_incremental_decoding(lambda: pezoo.create("p_rope", dims=DIMS, p=p), KitConfig(dims=DIMS, length=13))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        # named as p_rope's option (it read "rope scaling: p must be ...", the scaling it becomes)
        ({"p": 1.5}, r"^p_rope: p must be a number in \[0, 1\] \(1 is RoPE, 0 is NoPE\), got 1.5$"),
        ({"p": -0.1}, r"^p_rope: p must be a number in \[0, 1\]"),
        ({"p": float("nan")}, r"^p_rope: p must be a number in \[0, 1\]"),
        ({"p": "half"}, r"p must be a number, got the string 'half'"),
        ({"layout": "pairs"}, r"unknown RoPE layout 'pairs'"),
    ],
)
def test_bad_options_are_errors_naming_them(options, message):
    with pytest.raises(ValueError, match=message):
        pezoo.create("p_rope", head_dim=16, **options)
