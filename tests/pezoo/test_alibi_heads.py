"""ALiBi on a subset of heads (x-transformers' ``alibi_num_heads``): ``alibi{n_biased=k}``."""

from __future__ import annotations

import math

import pytest
import torch

import pezoo
from pezoo.testing import check_encoding


def _dense(pe: pezoo.PositionalEncoding, n_heads: int, s: int) -> torch.Tensor:
    pos = torch.arange(s)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    q = torch.zeros(1, n_heads, s, 2)
    (bias,) = pe.bias(0, q, q, ctx)
    return bias.materialize(ctx, n_heads, torch.float32)[0]  # (h, i, j)


@pytest.mark.parametrize(("n_heads", "n_biased"), [(8, 4), (8, 3), (6, 6), (4, 0)])
def test_biased_heads_get_the_slopes_of_a_smaller_model_and_the_rest_none(n_heads, n_biased):
    dense = _dense(pezoo.create("alibi", n_heads=n_heads, n_biased=n_biased), n_heads, 7)
    # independent formula (Press et al. §3): k heads, k a power of two: m_h = 2^(-8h/k), h = 1..k;
    # otherwise the 2^a slopes of the largest power of two below k, then every other slope of the
    # 2^(a+1) sequence (odd h).
    if n_biased and math.log2(n_biased).is_integer():
        slopes = [2.0 ** (-8.0 * h / n_biased) for h in range(1, n_biased + 1)]
    elif n_biased:
        low = 2 ** math.floor(math.log2(n_biased))
        slopes = [2.0 ** (-8.0 * h / low) for h in range(1, low + 1)]
        slopes += [2.0 ** (-8.0 * h / (2 * low)) for h in range(1, 4 * low, 2)][: n_biased - low]
    else:
        slopes = []
    slopes += [0.0] * (n_heads - n_biased)
    i = torch.arange(7)[:, None]
    j = torch.arange(7)[None, :]
    expected = torch.stack([-m * (i - j).abs().float() for m in slopes])  # (h, i, j)
    torch.testing.assert_close(dense, expected, atol=1e-7, rtol=0)
    assert (dense[n_biased:] == 0).all()


def test_plain_heads_attend_as_nope_and_biased_heads_as_a_smaller_alibi():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 1, 4, 6, 8).unbind(0)  # (b, h, s, e) each
    pos = torch.arange(6)[None]

    def attend(pe, heads):
        ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
        qq, kk = pe.qk(0, q[:, heads], k[:, heads], ctx)
        return pezoo.attend(qq, kk, v[:, heads], ctx, pe.bias(0, qq, kk, ctx), backend="eager")[0]

    split = attend(pezoo.create("alibi", n_heads=4, n_biased=2), slice(None))
    torch.testing.assert_close(split[:, :2], attend(pezoo.create("alibi", n_heads=2), slice(0, 2)))
    torch.testing.assert_close(split[:, 2:], attend(pezoo.create("nope"), slice(2, 4)))


def test_default_is_every_head_and_the_split_is_in_the_repr():
    assert torch.equal(pezoo.create("alibi", n_heads=8).slopes, pezoo.create("alibi", n_heads=8, n_biased=8).slopes)
    assert "n_biased=3" in repr(pezoo.create("alibi", n_heads=8, n_biased=3))
    assert "n_biased" not in repr(pezoo.create("alibi", n_heads=8))


@pytest.mark.parametrize("bad", [9, -1, 2.5, True, "4"])
def test_bad_head_counts_are_value_errors(bad):
    with pytest.raises(ValueError, match="n_biased"):
        pezoo.create("alibi", n_heads=8, n_biased=bad)


def test_subset_alibi_passes_the_conformance_kit():
    dims = pezoo.ModelDims(d_model=32, n_heads=4, n_layers=2)
    check_encoding(lambda: pezoo.create("alibi", dims=dims, n_biased=2), dims)
