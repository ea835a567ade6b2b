"""The xformers backend: a clear error without CUDA/xformers, the lowering plan, and (with a
GPU and the package) agreement with eager for every encoding."""

from __future__ import annotations

import math

import pytest
import torch

import pezoo
from pezoo import AttentionContext, LinearBias, WindowMask, attend
from pezoo.backends import xformers_available, xformers_plan
from pezoo.testing import check_encoding

needs_xformers = pytest.mark.skipif(
    not xformers_available(), reason="xformers runs only on CUDA with the xformers package (pip install 'pezoo[gpu]')"
)


def _ctx(pos: torch.Tensor, **kw) -> AttentionContext:
    return AttentionContext(q_pos=pos, k_pos=pos, **kw)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given on a machine without CUDA")
def test_clear_error_without_cuda():
    q = torch.zeros(1, 2, 3, 4)
    with pytest.raises(RuntimeError, match=r"xformers backend needs CUDA tensors.*backend='sdpa'"):
        attend(q, q, q, _ctx(torch.arange(3)[None]), backend="xformers")


def test_plan_groups_hard_alibi_heads_by_window():
    pos = torch.arange(10)[None]
    biases = pezoo.create("hard_alibi", n_heads=8, n_masked=3).bias(0, None, None, _ctx(pos))
    plan = xformers_plan(_ctx(pos), biases, n_queries=10)
    assert plan is not None
    groups = {w: h.tolist() for h, w in plan}
    assert groups == {1.0: [0], 2.0: [1], 3.0: [2], math.inf: [3, 4, 5, 6, 7]}
    # decoding: 1 query after 9 cached keys, still consecutive positions
    assert xformers_plan(AttentionContext(q_pos=pos[:, -1:], k_pos=pos), biases, n_queries=1) is not None


def test_plan_falls_back_to_a_dense_bias_when_it_must():
    pos = torch.arange(6)[None]
    windows = [WindowMask(torch.tensor([2.0, math.inf]))]
    assert xformers_plan(_ctx(pos), [], n_queries=6) == [(None, math.inf)]  # plain causal
    assert xformers_plan(_ctx(pos * 3), windows, n_queries=6) is None  # windows count positions, not indices
    assert xformers_plan(_ctx(pos), [LinearBias(torch.ones(2))], n_queries=6) is None  # no ALiBi class
    padded = _ctx(pos, key_padding_mask=torch.ones(1, 6, dtype=torch.bool))
    assert xformers_plan(padded, windows, n_queries=6) is None
    assert xformers_plan(_ctx(pos, causal=False), windows, n_queries=6) is None
    assert xformers_plan(_ctx(pos, causal=False), [], n_queries=6) == [(None, math.inf)]


@needs_xformers
@pytest.mark.parametrize("name", pezoo.available())
def test_xformers_agrees_with_eager(name):
    dims = pezoo.ModelDims(64, 4, 2)
    check_encoding(
        lambda: pezoo.create(name, dims=dims),
        dims,
        checks=["backend_agreement"],
        backends=("xformers",),
        device="cuda",
        atol=1e-4,
    )
