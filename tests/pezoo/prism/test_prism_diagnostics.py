"""Diagnostics: traces of a full pass and of token-by-token decoding agree; the plot is written."""

from __future__ import annotations

import math

import pytest
import torch

import pezoo
from pezoo.encodings.prism.diagnostics import plot_traces, trace

D, H = 16, 2


def observe_all(pe, x, state, start):
    s = x.shape[1]
    pos = torch.arange(start + s)[None]
    ctx = pezoo.AttentionContext(q_pos=pos[:, start:], k_pos=pos, state=state)
    for layer in range(3):
        pe.observe(layer, x, ctx)


@pytest.fixture
def traced():
    torch.manual_seed(0)
    pe = pezoo.create("prism", dims=pezoo.ModelDims(d_model=D, n_heads=H, n_layers=3), layers=(0, 2))
    x = torch.randn(2, 19, D) * math.sqrt(D)
    with torch.no_grad():
        with trace(pe) as full:
            observe_all(pe, x, {}, 0)
        with trace(pe) as stepwise:
            state: dict = {}
            for t in range(19):
                observe_all(pe, x[:, t : t + 1], state, t)
    return full(), stepwise()


def test_trace_of_decoding_equals_trace_of_full_pass(traced):
    full, stepwise = traced
    assert [t.layer for t in full] == [0, 2] == [t.layer for t in stepwise]
    for a, b in zip(full, stepwise, strict=True):
        assert a.hist.shape == b.hist.shape == (2, 2, H, 2, 19, 2 * 32 + 1)
        torch.testing.assert_close(b.hist, a.hist, rtol=0, atol=1e-5)
        torch.testing.assert_close(b.gates, a.gates, rtol=0, atol=1e-5)
        assert (a.modes == a.hist.argmax(-1) - 32).all()
        assert (a.confidence <= 1).all() and (a.modes.abs() <= torch.arange(19) + 1).all()


@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_plot_is_written(traced, tmp_path, suffix):
    pytest.importorskip("matplotlib")
    path = plot_traces(traced[0][1:], tmp_path / f"prism.{suffix}", tokens=list("0123456789=012345678"), title="t")
    assert path.exists() and path.stat().st_size > 1000
