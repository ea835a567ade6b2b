"""The cursor stacks' L2 norm (Alg. 3) with its own backward: values, first and second
derivatives equal autograd through the plain formula, a zero stack included."""

from __future__ import annotations

import math

import torch

from pezoo.encodings.prism.streams import normalise_streams, stack_factors


def plain_factors(e: torch.Tensor) -> torch.Tensor:
    """Alg. 3's factor √f / ‖stack‖ through torch's generic norm and its autograd, floored
    (a zero stack: the floor, and no gradient)."""
    return math.sqrt(e.shape[-1]) / e.flatten(-2).norm(dim=-1).clamp_min(1e-12)


def written_out(e: torch.Tensor) -> torch.Tensor:
    """The same for stacks that are not zero, written out: √f / √(Σ e²)."""
    return math.sqrt(e.shape[-1]) / torch.sqrt((e * e).sum(dim=(-2, -1)))


def streams(zero_stack: bool = True) -> torch.Tensor:
    """(s, b, n, c, f) float64 streams, permuted as the scan lays them out (not contiguous)."""
    g = torch.Generator().manual_seed(0)
    e = torch.randn(3, 5, 4, 2, 6, generator=g, dtype=torch.float64)
    if zero_stack:
        e[1, 2, 0] = 0.0  # a token whose stack is empty: factor from the floor, no gradient
    return e.permute(1, 0, 2, 3, 4)


def test_values_and_gradients_equal_the_plain_formula():
    e = streams().requires_grad_()
    e_plain = e.detach().clone().requires_grad_()
    got, want = stack_factors(e, "l2"), plain_factors(e_plain)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=0)
    nonzero = streams(zero_stack=False)
    torch.testing.assert_close(stack_factors(nonzero, "l2"), written_out(nonzero), rtol=1e-12, atol=0)
    weights = torch.randn(got.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    (got * weights).sum().backward()
    (want * weights).sum().backward()
    torch.testing.assert_close(e.grad, e_plain.grad, rtol=1e-10, atol=1e-12)
    assert torch.count_nonzero(e.grad[2, 1, 0]) == 0  # the zero stack (batch 2, step 1 after the permute)


def test_normalised_streams_have_norm_root_f_and_the_plain_gradient():
    e = streams(zero_stack=False).requires_grad_()
    e_plain = e.detach().clone().requires_grad_()
    got = normalise_streams(e, "l2")
    torch.testing.assert_close(
        got.flatten(-2).norm(dim=-1), torch.full(got.shape[:-2], math.sqrt(6.0), dtype=got.dtype)
    )
    want = e_plain * written_out(e_plain)[..., None, None]
    weights = torch.randn(got.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    (got * weights).sum().backward()
    (want * weights).sum().backward()
    torch.testing.assert_close(e.grad, e_plain.grad, rtol=1e-10, atol=1e-12)


def test_first_and_second_derivatives_pass_gradcheck():
    e = streams(zero_stack=False).contiguous().requires_grad_()
    assert torch.autograd.gradcheck(lambda x: stack_factors(x, "l2"), (e,))
    assert torch.autograd.gradgradcheck(lambda x: stack_factors(x, "l2"), (e,))


def test_dtype_is_kept():
    for dtype in (torch.float32, torch.bfloat16):
        e = streams(zero_stack=False).to(dtype).requires_grad_()
        out = stack_factors(e, "l2")
        out.sum().backward()
        assert out.dtype == dtype and e.grad is not None and e.grad.dtype == dtype
