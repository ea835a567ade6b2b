"""histogram_step (PRISM Alg. 1) against independent constructions: the dense row-stochastic
matrix of §5.1.2, exact mass bookkeeping, closed-form special cases, and gradcheck."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pezoo.encodings.prism import (
    centre_one_hot,
    histogram_scan,
    histogram_step,
    histogram_transition,
    reachable_mask,
)

SETTINGS = settings(max_examples=60, deadline=None)


@st.composite
def filter_inputs(draw, copy: bool = False):
    """A random support P, batch of histograms (sum 1) and valid gates, float64."""
    support = draw(st.integers(1, 6))
    batch = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    bins = 2 * support + 1
    raw = rng.exponential(size=(batch, bins)) * (rng.random((batch, bins)) < 0.7)  # some exact zeros
    raw[:, support] += 1e-3  # never all zero
    h = raw / raw.sum(-1, keepdims=True)
    reset = {"zero": np.zeros(batch), "one": np.ones(batch), "random": rng.random(batch)}[
        draw(st.sampled_from(["zero", "one", "random"]))
    ]
    moves = rng.dirichlet(np.ones(3) * draw(st.sampled_from([0.2, 1.0, 5.0])), size=batch)
    out = {
        "h": torch.tensor(h),
        "p_reset": torch.tensor(reset),
        "p_inc": torch.tensor(moves[:, 0]),
        "p_dec": torch.tensor(moves[:, 1]),
        "p_keep": torch.tensor(moves[:, 2]),
    }
    if copy:
        copy_mass = rng.dirichlet(np.ones(bins + 1), size=batch)
        copy_mass[:, : bins // 2] *= rng.random((batch, 1)) < 0.5  # sometimes only some bins
        out["p_copy"] = torch.tensor(copy_mass / copy_mass.sum(-1, keepdims=True))
    return out


def dense_transition(support: int, r: float, inc: float, dec: float, keep: float) -> np.ndarray:
    """M[i, j] = probability of moving from bin i to bin j in one step (§5.1.2 with Alg. 1's
    symmetric support and clamped edges), built entry by entry."""
    bins, mid = 2 * support + 1, support
    m = np.zeros((bins, bins))
    for i in range(bins):
        for target, p in ((min(i + 1, bins - 1), inc), (i, keep), (max(i - 1, 0), dec)):
            m[i, target] += (1 - r) * p
        for target, p in ((mid + 1, inc), (mid, keep), (mid - 1, dec)):
            m[i, target] += r * p
    return m


@SETTINGS
@given(filter_inputs(), st.floats(1.0, 4.0), st.sampled_from([0.0, 1e-6, 1e-2]))
def test_output_is_a_distribution(x, gamma, eps):
    out = histogram_step(**x, gamma=torch.full_like(x["p_reset"], gamma), eps=eps)
    assert (out >= 0).all()
    torch.testing.assert_close(out.sum(-1), torch.ones_like(x["p_reset"]), rtol=0, atol=1e-12)


@SETTINGS
@given(filter_inputs(copy=True), st.floats(1.0, 4.0), st.sampled_from([0.0, 1e-6]))
def test_output_is_a_distribution_with_copy(x, gamma, eps):
    out = histogram_step(**x, gamma=torch.full_like(x["p_reset"], gamma), eps=eps)
    assert (out >= 0).all()
    torch.testing.assert_close(out.sum(-1), torch.ones_like(x["p_reset"]), rtol=0, atol=1e-12)


@SETTINGS
@given(filter_inputs(), st.floats(0.1, 10.0))
def test_mass_is_conserved_before_sharpening(x, scale):
    """Any non-negative h (not only distributions): the transition keeps its total exactly."""
    x = {**x, "h": x["h"] * scale}
    out = histogram_transition(**x)
    assert (out >= 0).all()
    torch.testing.assert_close(out.sum(-1), x["h"].sum(-1), rtol=1e-12, atol=0)


@SETTINGS
@given(filter_inputs(copy=True))
def test_mass_is_conserved_with_copy(x):
    out = histogram_transition(**x)
    torch.testing.assert_close(out.sum(-1), torch.ones_like(x["p_reset"]), rtol=0, atol=1e-12)


@SETTINGS
@given(filter_inputs())
def test_plain_step_equals_dense_matrix(x):
    """gamma = 1, eps = 0: one step is h @ M_t for the dense row-stochastic M_t."""
    out = histogram_step(**x, gamma=torch.ones_like(x["p_reset"]), eps=0.0)
    support = x["h"].shape[-1] // 2
    for row in range(x["h"].shape[0]):
        m = dense_transition(support, *(x[k][row].item() for k in ("p_reset", "p_inc", "p_dec", "p_keep")))
        np.testing.assert_allclose(m.sum(1), 1.0, atol=1e-12)  # row-stochastic
        np.testing.assert_allclose(out[row].numpy(), x["h"][row].numpy() @ m, atol=1e-12)


@SETTINGS
@given(filter_inputs(copy=True))
def test_copy_step_equals_dense_matrix_mixture(x):
    """With the copy branch: p_no_copy · (h @ M_t) + copied mass, then renormalised (γ=1, ε=0)."""
    out = histogram_step(**x, gamma=torch.ones_like(x["p_reset"]), eps=0.0)
    support = x["h"].shape[-1] // 2
    for row in range(x["h"].shape[0]):
        m = dense_transition(support, *(x[k][row].item() for k in ("p_reset", "p_inc", "p_dec", "p_keep")))
        copy = x["p_copy"][row].numpy()
        expected = copy[-1] * (x["h"][row].numpy() @ m) + copy[:-1]
        np.testing.assert_allclose(out[row].numpy(), expected, atol=1e-12)


def test_sharpening_is_the_normalised_power():
    h = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.0]], dtype=torch.float64)
    gamma, eps = 2.5, 1e-3
    ones, zeros = torch.ones(1, dtype=torch.float64), torch.zeros(1, dtype=torch.float64)
    out = histogram_step(h, zeros, zeros, zeros, ones, torch.tensor([gamma], dtype=torch.float64), eps)
    powered = (h + eps) ** gamma
    torch.testing.assert_close(out, powered / powered.sum(), rtol=1e-12, atol=0)


@SETTINGS
@given(filter_inputs(), st.floats(1.0, 4.0))
def test_reset_with_keep_gives_the_centre(x, gamma):
    n = x["p_reset"].shape[0]
    one, zero = torch.ones(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
    out = histogram_step(x["h"], one, zero, zero, one, torch.full((n,), gamma, dtype=torch.float64), 0.0)
    expected = torch.zeros_like(x["h"])
    expected[:, x["h"].shape[-1] // 2] = 1.0
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


@pytest.mark.parametrize("support", [1, 3, 8])
def test_pure_increments_move_the_mode_by_one_until_the_edge(support):
    h = centre_one_hot((1,), support, dtype=torch.float64)
    one, zero = torch.ones(1, dtype=torch.float64), torch.zeros(1, dtype=torch.float64)
    gamma = torch.tensor([2.0], dtype=torch.float64)
    for t in range(1, 2 * support + 3):
        h = histogram_step(h, zero, one, zero, zero, gamma, 1e-6)
        assert h.argmax().item() - support == min(t, support)
        assert h.max().item() > 0.999


@pytest.mark.parametrize("with_copy", [False, True])
def test_gradcheck_float64(with_copy):
    torch.manual_seed(0)
    support, n = 3, 2
    bins = 2 * support + 1
    h = torch.softmax(torch.randn(n, bins, dtype=torch.float64), -1).requires_grad_()
    reset = torch.rand(n, dtype=torch.float64, requires_grad=True)
    moves = torch.softmax(torch.randn(n, 3, dtype=torch.float64), -1)
    inc, dec, keep = (m.detach().clone().requires_grad_() for m in moves.unbind(-1))
    gamma = torch.tensor([1.7, 2.3], dtype=torch.float64, requires_grad=True)
    copy = torch.softmax(torch.randn(n, bins + 1, dtype=torch.float64), -1).requires_grad_() if with_copy else None
    mask = reachable_mask(torch.tensor([1, 2]), support)

    def f(h, reset, inc, dec, keep, gamma, *copy_arg):
        return histogram_step(h, reset, inc, dec, keep, gamma, 1e-3, copy_arg[0] if copy_arg else None, mask=mask)

    args = (h, reset, inc, dec, keep, gamma) + ((copy,) if with_copy else ())
    assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-6)


@SETTINGS
@given(st.integers(0, 2**31 - 1), st.integers(1, 9), st.sampled_from([True, False]))
def test_reachable_support_makes_the_scan_independent_of_p(seed, steps, copy):
    """With ε only on reachable bins, every P >= T gives the same histograms (cropped)."""
    g = torch.Generator().manual_seed(seed)
    n = 3
    reset = torch.rand(steps, n, 1, generator=g, dtype=torch.float64)
    moves = torch.softmax(3 * torch.randn(steps, n, 3, generator=g, dtype=torch.float64), -1)
    gates = torch.cat([reset, moves], -1)
    gamma = 1 + 3 * torch.rand(n, generator=g, dtype=torch.float64)
    results = []
    for support in (steps, steps + 4, 2 * steps + 7):
        bins = 2 * support + 1
        p_copy = None
        if copy:  # copy mass only on bins offset 1..t+1, as the model's absolute keys produce
            p_copy = torch.zeros(steps, n, bins + 1, dtype=torch.float64)
            for t in range(steps):
                w = torch.rand(n, t + 2, generator=torch.Generator().manual_seed(seed + t), dtype=torch.float64)
                w = w / w.sum(-1, keepdim=True)
                p_copy[t, :, support + 1 : support + t + 2] = w[:, :-1]
                p_copy[t, :, -1] = w[:, -1]
        masks = reachable_mask(torch.arange(steps), support)
        out = histogram_scan(centre_one_hot((n,), support, dtype=torch.float64), gates, gamma, 1e-6, p_copy, masks)
        results.append(out[..., support - steps : support + steps + 1])
        assert out[..., : support - steps].abs().sum() == 0 and out[..., support + steps + 1 :].abs().sum() == 0
    for other in results[1:]:
        torch.testing.assert_close(other, results[0], rtol=0, atol=1e-13)


def test_rejects_malformed_inputs():
    h = torch.ones(1, 4) / 4
    z = torch.zeros(1)
    with pytest.raises(ValueError, match="2P\\+1"):
        histogram_step(h, z, z, z, z + 1, z + 2, 1e-6)
    h = torch.ones(1, 5) / 5
    with pytest.raises(ValueError, match="p_copy"):
        histogram_step(h, z, z, z, z + 1, z + 2, 1e-6, torch.ones(1, 5) / 5)


def test_gates_that_do_not_sum_to_one_are_an_error():
    h = centre_one_hot((2,), 3, dtype=torch.float64)
    zeros, third = torch.zeros(2, dtype=torch.float64), torch.full((2,), 0.4, dtype=torch.float64)
    with pytest.raises(ValueError, match="sum to 1"):
        histogram_step(h, zeros, third, third, third, 2.0, 1e-6)  # 1.2 in all


def test_gamma_may_be_a_plain_float():
    """A float γ is the same as a tensor of it: the normalised power (h + ε)^γ / Σ (h + ε)^γ."""
    h = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.0]], dtype=torch.float64)
    ones, zeros = torch.ones(1, dtype=torch.float64), torch.zeros(1, dtype=torch.float64)
    out = histogram_step(h, zeros, zeros, zeros, ones, 2.5, 1e-3)
    powered = (h + 1e-3) ** 2.5
    torch.testing.assert_close(out, powered / powered.sum(), rtol=1e-12, atol=0)


def test_negative_eps_is_an_error():
    h = centre_one_hot((1,), 2, dtype=torch.float64)
    ones, zeros = torch.ones(1, dtype=torch.float64), torch.zeros(1, dtype=torch.float64)
    with pytest.raises(ValueError, match="eps"):
        histogram_step(h, zeros, zeros, zeros, ones, 2.0, -1e-3)
