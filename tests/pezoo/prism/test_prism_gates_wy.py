"""PRISM's orthogonal W_hh in compact WY form equals torch's Householder parametrisation.

The reference is the product of reflectors written out one by one in float64, and
torch's own ``orthogonal`` parametrisation built from the same seed.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils.parametrizations import orthogonal

from pezoo.encodings.prism.gates import GateNet, _orthogonal_fast, householder_product_wy


def reflector_product(a: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """H_1 H_2 ⋯ H_k (first k columns), H_i = I - tau_i v_i v_iᵀ, v_i = e_i + tril(a, -1)[:, i]."""
    n, k = a.shape
    v = a.tril(-1) + torch.eye(n, k, dtype=a.dtype)
    q = torch.eye(n, dtype=a.dtype)
    for i in range(k):
        q = q @ (torch.eye(n, dtype=a.dtype) - tau[i] * torch.outer(v[:, i], v[:, i]))
    return q[:, :k]


@pytest.mark.parametrize(("n", "k", "scale"), [(6, 3, 1.0), (30, 10, 0.3), (30, 10, 5.0), (300, 100, 0.1)])
def test_wy_equals_the_product_of_reflectors(n, k, scale):
    gen = torch.Generator().manual_seed(n + k)
    a = torch.randn(n, k, generator=gen, dtype=torch.float64) * scale
    tau = 2.0 / (1.0 + (a.tril(-1) ** 2).sum(0))  # what the orthogonal map uses: exact reflections
    want = reflector_product(a, tau)
    torch.testing.assert_close(householder_product_wy(a, tau), want, rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.linalg.householder_product(a.tril(-1), tau), want, rtol=0, atol=1e-12)


def test_wy_gradient_matches_torchs_householder_product():
    gen = torch.Generator().manual_seed(0)
    a = (torch.randn(40, 12, generator=gen, dtype=torch.float64) * 0.5).requires_grad_()
    weights = torch.randn(40, 12, generator=gen, dtype=torch.float64)

    def loss(fn):  # the orthogonal map's use: exact reflections from tril(a, -1)
        low = a.tril(-1)
        return (fn(low, 2.0 / (1.0 + (low * low).sum(-2))) * weights).sum()

    (g_wy,) = torch.autograd.grad(loss(householder_product_wy), a)
    (g_torch,) = torch.autograd.grad(loss(torch.linalg.householder_product), a)
    torch.testing.assert_close(g_wy, g_torch, rtol=1e-10, atol=1e-12)

    def wy_of(x: torch.Tensor) -> torch.Tensor:
        low = x.tril(-1)
        return householder_product_wy(low, 2.0 / (1.0 + (low * low).sum(-2)))

    assert torch.autograd.gradcheck(wy_of, (a.detach()[:8, :4].clone().requires_grad_(),))


def test_parametrisation_initialises_like_torch_orthogonal():
    """Same seed: same W_hh, same state-dict keys, same random draws consumed."""
    grus = []
    for register in (_orthogonal_fast, orthogonal):
        torch.manual_seed(3)
        gru = nn.GRU(16, 12, batch_first=True)
        register(gru, "weight_hh_l0")
        grus.append((gru, torch.rand(3)))
    (ours, after_ours), (ref, after_ref) = grus
    assert torch.equal(after_ours, after_ref)
    assert ours.state_dict().keys() == ref.state_dict().keys()
    for key, value in ours.state_dict().items():
        assert torch.equal(value, ref.state_dict()[key]), key
    w = ours.weight_hh_l0  # (3g, g)
    torch.testing.assert_close(w, ref.weight_hh_l0, rtol=0, atol=2e-6)
    torch.testing.assert_close(w.T @ w, torch.eye(12), rtol=0, atol=2e-6)


def test_gate_net_gradients_match_torch_orthogonal():
    torch.manual_seed(0)
    ours = GateNet(16, 5, hidden=12)
    ref = GateNet(16, 5, hidden=12, regulariser="none")
    orthogonal(ref.gru, "weight_hh_l0")
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(2, 7, 16)
    for net in (ours, ref):
        gates, _ = net(x)  # (b, i, n, 4)
        (gates * torch.linspace(-1, 1, gates.numel()).view_as(gates)).sum().backward()
    for (name, p_ours), p_ref in zip(ours.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p_ours.grad, p_ref.grad, rtol=1e-4, atol=1e-6, msg=name)
