"""KERPLE-log and KERPLE-power against the paper's formulas, written out per (i, j)."""

from __future__ import annotations

import math

import pytest
import torch

import pezoo
from pezoo.backends import flex_compile
from pezoo.testing import KitModel

DIMS = pezoo.ModelDims(d_model=32, n_heads=4, n_layers=2)


def _naive_log(r1: float, r2: float, pi: int, pj: int) -> float:
    return -r1 * math.log(1 + r2 * abs(pi - pj))  # Chi et al. 2022, §4, logarithmic variant


def _naive_power(r1: float, r2: float, pi: int, pj: int) -> float:
    return -r1 * abs(pi - pj) ** r2  # §4, power variant


@pytest.mark.parametrize(("name", "naive"), [("kerple_log", _naive_log), ("kerple_power", _naive_power)])
def test_bias_matches_the_formula_per_layer_and_head(name, naive):
    pe = pezoo.create(name, dims=DIMS)
    pos = torch.tensor([[0, 1, 4, 9, 30, 1000]])
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    for layer in range(DIMS.n_layers):
        (bias,) = pe.bias(layer, torch.zeros(1, 4, 6, 8), torch.zeros(1, 4, 6, 8), ctx)
        dense = bias.materialize(ctx, 4, torch.float32)
        assert dense.shape == (1, 4, 6, 6)
        for h in range(4):
            r1, r2 = pe.r1[layer, h].item(), pe.r2[layer, h].item()
            for i, pi in enumerate(pos[0].tolist()):
                for j, pj in enumerate(pos[0].tolist()):
                    assert dense[0, h, i, j].item() == pytest.approx(naive(r1, r2, pi, pj), rel=1e-5, abs=1e-6)


def test_initialisation_ranges_follow_the_reference():
    torch.manual_seed(0)
    log = pezoo.create("kerple_log", n_heads=64, n_layers=8)
    power = pezoo.create("kerple_power", n_heads=64, n_layers=8)
    assert log.r1.shape == (8, 64) and log.r2.shape == (8, 64)
    # log: r1 ~ U(0, 2), r2 ~ U(0, 1); power: r1 ~ U(0, 1), r2 ~ U(0, 2)  (then clipped at 0.01)
    assert 0.01 <= log.r1.min() and log.r1.max() <= 2 and log.r1.max() > 1.5
    assert 0.01 <= log.r2.min() and log.r2.max() <= 1
    assert 0.01 <= power.r1.min() and power.r1.max() <= 1
    assert 0.01 <= power.r2.min() and power.r2.max() <= 2 and power.r2.max() > 1.5


def test_parameters_are_projected_into_range_and_gradients_flow_at_the_bound():
    pe = pezoo.create("kerple_power", n_heads=2, n_layers=1)
    with torch.no_grad():  # what an optimizer step could leave behind
        pe.r1.copy_(torch.tensor([[-0.5, 0.3]]))
        pe.r2.copy_(torch.tensor([[3.0, -1.0]]))
    pos = torch.arange(5)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    (bias,) = pe.bias(0, torch.zeros(1, 2, 5, 4), torch.zeros(1, 2, 5, 4), ctx)
    assert pe.r1[0].tolist() == pytest.approx([0.01, 0.3])
    assert pe.r2[0].tolist() == pytest.approx([2.0, 0.01])
    dense = bias.materialize(ctx, 2, torch.float32)
    assert dense[0, 0, 4, 0].item() == pytest.approx(-0.01 * 4**2.0)
    dense.sum().backward()
    assert (pe.r1.grad != 0).all() and (pe.r2.grad != 0).all()  # projected, not frozen by the clamp


class _OneBias(torch.nn.Module):
    """A module whose forward is the encoding's materialised bias of layer 0 (functional_call
    swaps the parameters of a module's forward)."""

    def __init__(self, pe: pezoo.PositionalEncoding) -> None:
        super().__init__()
        self.pe = pe

    def forward(self, ctx: pezoo.AttentionContext) -> torch.Tensor:
        (bias,) = self.pe.bias(0, torch.zeros(1, 2, 5, 4), torch.zeros(1, 2, 5, 4), ctx)
        return bias.materialize(ctx, 2, torch.float32)


def test_functional_call_leaves_the_callers_tensors_alone():
    """forward projected whatever tensors torch.func.functional_call swapped in, in place,
    so the caller's r1/r2 (MAML fast weights, say) changed under it."""
    pe = pezoo.create("kerple_power", n_heads=2, n_layers=1)
    own = [pe.r1.detach().clone(), pe.r2.detach().clone()]
    given = [torch.tensor([[-0.5, 0.3]]), torch.tensor([[3.0, -1.0]])]  # out of range, as a step may leave them
    r1, r2 = (t.clone().requires_grad_() for t in given)
    pos = torch.arange(5)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    dense = torch.func.functional_call(_OneBias(pe), {"pe.r1": r1, "pe.r2": r2}, (ctx,))
    assert torch.equal(r1, given[0]) and torch.equal(r2, given[1])
    assert torch.equal(pe.r1, own[0]) and torch.equal(pe.r2, own[1])
    for i in range(5):  # the projected values: r1 = (0.01, 0.3), r2 = (2, 0.01)
        for j in range(i + 1):
            assert dense[0, 0, i, j].item() == pytest.approx(_naive_power(0.01, 2.0, i, j), abs=1e-6)
            assert dense[0, 1, i, j].item() == pytest.approx(_naive_power(0.3, 0.01, i, j), abs=1e-6)
    dense.sum().backward()
    # the gradients of the module's own parameters left there and projected in place
    with torch.no_grad():
        pe.r1.copy_(r1)
        pe.r2.copy_(r2)
    _OneBias(pe)(ctx).sum().backward()
    torch.testing.assert_close(r1.grad, pe.r1.grad)
    torch.testing.assert_close(r2.grad, pe.r2.grad)
    assert (r1.grad != 0).all() and (r2.grad != 0).all()


def test_log_parameters_have_no_upper_bound():
    pe = pezoo.create("kerple_log", n_heads=1, n_layers=1)
    with torch.no_grad():
        pe.r1.fill_(5.0)
        pe.r2.fill_(3.0)
    pos = torch.arange(3)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    (bias,) = pe.bias(0, torch.zeros(1, 1, 3, 4), torch.zeros(1, 1, 3, 4), ctx)
    assert bias.materialize(ctx, 1, torch.float32)[0, 0, 2, 0].item() == pytest.approx(-5 * math.log(1 + 3 * 2))


@pytest.mark.parametrize("name", ["kerple_log", "kerple_power"])
def test_flex_adds_the_bias_in_score_mod_and_matches_eager(name, monkeypatch):
    """flex never materialises the bias: the score_mod path alone reproduces eager."""
    torch.manual_seed(0)
    model = KitModel(pezoo.create(name, dims=DIMS), DIMS, vocab=16).eval()
    tokens = torch.randint(16, (2, 40))
    pos = torch.tensor([[0, 3, 4, 9, *range(20, 56)]])  # non-contiguous: the kernel gathers positions
    calls = []
    original = pezoo.RelativeFunctionBias.materialize
    monkeypatch.setattr(
        pezoo.RelativeFunctionBias, "materialize", lambda self, *a: calls.append(1) or original(self, *a)
    )
    with torch.no_grad():
        want = model(tokens, pos)
        eager_calls = len(calls)
        model.set_backend("flex")
        with flex_compile(False):
            got = model(tokens, pos)
    assert eager_calls == DIMS.n_layers and len(calls) == eager_calls
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


def test_randomized_kerple_is_available():
    assert {"randomized:kerple_log", "randomized:kerple_power"} <= set(pezoo.available())
