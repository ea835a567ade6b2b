"""The sdpa backend zero-pads narrow values on CPU (PRISM's widened q/k) and still computes
softmax(scale · q kᵀ + mask) v, checked against the formula written out."""

from __future__ import annotations

import math

import pytest
import torch

import pezoo
from pezoo.attention import CPU_VALUE_PAD_MIN_SCORES, _fused_sdpa


def reference(q, k, v, scale, causal):
    scores = torch.einsum("bhie,bhje->bhij", q.double(), k.double()) * scale  # (b, h, i, j)
    if causal:
        i, j = scores.shape[-2:]
        allowed = torch.arange(j)[None, :] <= torch.arange(i)[:, None] + (j - i)
        scores = scores.masked_fill(~allowed, -math.inf)
    return torch.einsum("bhij,bhjf->bhif", scores.softmax(-1), v.double())


@pytest.mark.parametrize(("i", "j"), [(300, 300), (256, 256), (12, 12), (1, 400)])
@pytest.mark.parametrize("causal", [True, False])
def test_narrow_values_give_the_attention_formula(i, j, causal):
    gen = torch.Generator().manual_seed(i + j)
    q = torch.randn(2, 3, i, 40, generator=gen)
    k = torch.randn(2, 3, j, 40, generator=gen)
    v = torch.randn(2, 3, j, 8, generator=gen)
    padded = i * j >= CPU_VALUE_PAD_MIN_SCORES
    assert padded == ((i, j) in [(300, 300), (256, 256)])
    out = _fused_sdpa(q, k, v, is_causal=causal and i == j, scale=0.3)
    assert out.shape == (2, 3, i, 8)
    want = reference(q, k, v, 0.3, causal and i == j)
    torch.testing.assert_close(out.double(), want, rtol=0, atol=2e-5)


def test_backend_agrees_with_eager_for_widened_queries_and_keys():
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 2, 260, 24, generator=gen), torch.randn(1, 2, 260, 24, generator=gen)
    v = torch.randn(1, 2, 260, 8, generator=gen)
    pos = torch.arange(260)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    biases = [pezoo.LinearBias(torch.tensor([0.5, 0.1]))]
    for bias_list in ([], biases):
        fused, _ = pezoo.attend(q, k, v, ctx, bias_list, scale=0.25, backend="sdpa")
        eager, _ = pezoo.attend(q, k, v, ctx, bias_list, scale=0.25, backend="eager")
        torch.testing.assert_close(fused, eager, rtol=0, atol=2e-5)
