"""The example plugin's own tests: what every out-of-tree encoding should have."""

from __future__ import annotations

import math

import torch
from pezoo_example_plugin import KerpleLog

import pezoo
from pezoo.testing import check_encoding

DIMS = pezoo.ModelDims(d_model=32, n_heads=4, n_layers=2)


def test_registered_through_the_entry_point():
    assert "kerple_log_example" in pezoo.available()
    assert "randomized:kerple_log_example" in pezoo.available()
    assert isinstance(pezoo.create("kerple_log_example", dims=DIMS), KerpleLog)


def test_bias_formula():
    pe = KerpleLog(n_heads=2)
    with torch.no_grad():
        pe.raw_r1.copy_(torch.tensor([0.3, 2.0]))
        pe.raw_r2.copy_(torch.tensor([-1.0, 0.5]))
    pos = torch.tensor([[0, 2, 7]])
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    (bias,) = pe.bias(0, torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4), ctx)
    dense = bias.materialize(ctx, 2, torch.float32)
    for h in range(2):
        r1 = math.log1p(math.exp(pe.raw_r1[h].item()))
        r2 = math.log1p(math.exp(pe.raw_r2[h].item()))
        for i, pi in enumerate([0, 2, 7]):
            for j, pj in enumerate([0, 2, 7]):
                assert abs(dense[0, h, i, j].item() + r1 * math.log(1 + r2 * abs(pi - pj))) < 1e-5


def test_passes_the_conformance_kit():
    check_encoding(lambda: pezoo.create("kerple_log_example", dims=DIMS), DIMS)
    check_encoding(lambda: pezoo.create("randomized:kerple_log_example", dims=DIMS), DIMS)
