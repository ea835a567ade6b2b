"""The fused windowed scan (one autograd node, hand-written reverse scan) against the
per-op autograd scan, the naive dense-matrix reference of Alg. 1, and finite differences.

Outputs and *all* gradients (starting histogram, gates, γ, copy probabilities) must agree:
in float64 to ~1e-10, in float32 to ~1e-5.
"""

from __future__ import annotations

import pytest
import torch

from pezoo.encodings.prism import PRISMConfig
from pezoo.encodings.prism.config import support_for
from pezoo.encodings.prism.fused_scan import fused_windowed_scan, scan_coefficients
from pezoo.encodings.prism.layer import PRISMLayer
from pezoo.encodings.prism.scan import scan_emitting
from pezoo.encodings.prism.streams import offset_table
from tests.pezoo.prism.test_prism_scan_reference import reference_streams

EPS = 1e-6


def scan_inputs(t, b, n, k, start, support, dtype, seed=0, f=6):
    """Random gates (t, b, n, 4), γ (n,), causal copy probabilities (t, b, k, start+t+1) and a
    starting window of radius min(start, P) with mass on every bin (all requiring grad)."""
    gen = torch.Generator().manual_seed(seed)
    reset = torch.sigmoid(torch.randn(t, b, n, 1, generator=gen, dtype=dtype) - 1.0)
    moves = torch.softmax(torch.randn(t, b, n, 3, generator=gen, dtype=dtype), dim=-1)
    gates = torch.cat([reset, moves], dim=-1).requires_grad_()
    gamma = (1.5 + torch.rand(n, generator=gen, dtype=dtype)).requires_grad_()
    tokens = start + t
    logits = torch.randn(t, b, k, tokens + 1, generator=gen, dtype=dtype)
    future = torch.arange(tokens)[None, :] > (start + torch.arange(t))[:, None]  # (t, tokens)
    logits[..., :-1] = logits[..., :-1].masked_fill(future[:, None, None], -torch.inf)
    probs = torch.softmax(logits, dim=-1).requires_grad_()
    radius = min(start, support)
    h0 = torch.softmax(torch.randn(b, n, 2 * radius + 1, generator=gen, dtype=dtype), dim=-1)
    h0 = torch.nn.functional.pad(h0, (support - radius, support - radius)).requires_grad_()
    table = offset_table(support, f).to(dtype)
    weights = torch.randn(t, b, n, f, generator=gen, dtype=dtype), torch.randn(b, n, 2 * support + 1, dtype=dtype)
    return gates, gamma, probs, h0, table, weights


def run_scan(fused, gates, gamma, probs, h0, table, weights, *, k, start, checkpoint_every=0):
    from pezoo.encodings.prism.layer import PRISMLayer as Layer

    layer = Layer(PRISMConfig(d_model=8, n_heads=1, n_layers=1))  # only its _step (the old path) is used
    last, out = scan_emitting(
        h0, gates, gamma, EPS, None, None, layer._step, table,
        start=start, windowed=True, copy_probs=probs if k else None, checkpoint_every=checkpoint_every, fused=fused,
    )  # fmt: skip
    loss = (out * weights[0]).sum() + (last * weights[1]).sum()  # every output and the carried state
    tensors = [gates, gamma, h0] + ([probs] if k else [])
    grads = torch.autograd.grad(loss, tensors)
    return last.detach(), out.detach(), grads


# (t, b, n, k, start, support): no copy, copy, continuing from a state, clamping at a capped support
CASES = {
    "plain": (9, 2, 3, 0, 0, 16),
    "copy": (9, 2, 3, 2, 0, 16),
    "start": (7, 2, 3, 2, 5, 16),
    "clamp": (12, 2, 3, 0, 0, 4),
    "clamp-copy": (12, 2, 3, 2, 0, 4),
    "clamp-copy-start": (6, 2, 3, 1, 3, 4),
    "start-beyond-support": (5, 2, 3, 2, 9, 4),
    "support-1": (5, 2, 3, 2, 0, 1),  # three bins: the reset's three bins are the whole window
    "support-2-start": (4, 1, 2, 1, 2, 2),
}


@pytest.mark.parametrize("checkpoint_every", [0, 4])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fused_scan_equals_the_autograd_scan(case, dtype, checkpoint_every):
    t, b, n, k, start, support = CASES[case]
    inputs = scan_inputs(t, b, n, k, start, support, dtype)
    old = run_scan(False, *inputs, k=k, start=start)
    new = run_scan(True, *inputs, k=k, start=start, checkpoint_every=checkpoint_every)
    # float32: the chain of 1/(x + ε) factors amplifies one rounding of ~6e-8 to a few 1e-6
    tol = {"rtol": 1e-10, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-4, "atol": 1e-5}
    torch.testing.assert_close(new[0], old[0], **tol)
    torch.testing.assert_close(new[1], old[1], **tol)
    names = ["gates", "gamma", "h0", "copy probabilities"]
    for name, g_new, g_old in zip(names, new[2], old[2], strict=False):
        torch.testing.assert_close(g_new, g_old, **tol, msg=lambda m, name=name: f"{name}: {m}")
        assert g_new.abs().sum() > 0, name


def test_no_grad_forward_equals_the_graph_forward():
    """Decoding runs without a graph: the same last state and streams."""
    t, b, n, k, start, support = CASES["clamp-copy-start"]
    gates, gamma, probs, h0, table, _ = scan_inputs(t, b, n, k, start, support, torch.float64)
    radius = min(start, support)
    h = h0[..., support - radius : support + radius + 1]
    coef = scan_coefficients(gates)
    with_graph = fused_windowed_scan(h, coef, gamma, table, EPS, start=start, support=support, copy_probs=probs)
    assert with_graph[1].requires_grad
    with torch.no_grad():
        without = fused_windowed_scan(h, coef, gamma, table, EPS, start=start, support=support, copy_probs=probs)
    assert not without[1].requires_grad
    for a, b_ in zip(with_graph, without, strict=True):
        torch.testing.assert_close(a.detach(), b_, rtol=0, atol=0)


@pytest.mark.parametrize("tokens_beyond_support", [False, True])
def test_fused_scan_gradcheck(tokens_beyond_support):
    """Finite differences of the fused node on a tiny float64 case: the window grows, then
    stops at P = 3 and clamps (the move and, with more tokens than P, the copy)."""
    gen = torch.Generator().manual_seed(1)
    start, support, t, b, n, k = (1, 3, 4, 2, 2, 1) if tokens_beyond_support else (0, 3, 3, 1, 2, 1)
    tokens = start + t
    d = torch.float64
    h0 = torch.rand(b, n, 2 * min(start, support) + 1, generator=gen, dtype=d) + 0.1
    coef = torch.rand(t, b, n, 6, generator=gen, dtype=d) + 0.05
    gamma = 1.5 + torch.rand(n, generator=gen, dtype=d)
    probs = torch.rand(t, b, k, tokens + 1, generator=gen, dtype=d) + 0.05  # copied mass per token, then p_null
    table = offset_table(support, 4).to(d)
    inputs = [x.requires_grad_() for x in (h0, coef, gamma, probs)]

    def fn(h0, coef, gamma, probs):
        return fused_windowed_scan(h0, coef, gamma, table, 1e-3, start=start, support=support, copy_probs=probs)

    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


LAYER_CASES = [
    {},
    {"copy_cursors": (0,)},
    {"copy_cursors": (0,), "max_support": 4},
    {"copy_cursors": (1,), "copy_every": 3, "min_support": 4, "scan_checkpoint": 4},
]


@pytest.mark.parametrize("options", LAYER_CASES, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_layer_in_float64_equals_the_naive_reference(options):
    """The whole layer (fused scan by default) in float64 against the dense-matrix reference of Alg. 1."""
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # the reference builds its tensors in the default dtype
    try:
        opts = {"n_cursors": 2, "d_pe": 8, "gru_hidden": 12, "copy_null_bias": 0.0, **options}
        layer = PRISMLayer(PRISMConfig(d_model=16, n_heads=2, n_layers=1, **opts))
        x = torch.randn(2, 9, 16, requires_grad=True)
        weights = torch.randn(2, 2, 9, 2, 8), torch.randn(2, 2, 9, 2, 8)

        def run(fn):
            layer.zero_grad()
            x.grad = None
            g_q, g_k = fn()
            ((g_q * weights[0]).sum() + (g_k * weights[1]).sum()).backward()
            grads = {name: p.grad.clone() for name, p in layer.named_parameters() if p.grad is not None}
            return g_q.detach(), g_k.detach(), x.grad.clone(), grads

        fast = run(lambda: layer(x, None)[:2])
        ref = run(lambda: reference_streams(layer, x))
    finally:
        torch.set_default_dtype(previous)
    tol = {"rtol": 1e-9, "atol": 1e-11}
    for a, b_ in zip(fast[:3], ref[:3], strict=True):
        torch.testing.assert_close(a, b_, **tol)
    assert fast[3].keys() == ref[3].keys() and fast[3]
    for name in fast[3]:
        torch.testing.assert_close(fast[3][name], ref[3][name], **tol, msg=lambda m, name=name: f"{name}: {m}")


def test_incremental_decoding_equals_one_call_in_float64():
    """Feeding a sequence in pieces (start > 0, the support growing between calls) gives
    the streams of one call over the whole sequence."""
    torch.manual_seed(0)
    layer = PRISMLayer(PRISMConfig(d_model=16, n_heads=2, n_layers=1, d_pe=8, copy_cursors=(0,), min_support=4))
    layer = layer.double()
    x = torch.randn(2, 11, 16, dtype=torch.float64)
    assert support_for(11, 4) > support_for(3, 4)
    with torch.no_grad():
        whole = layer(x, None)
        state, pieces = None, []
        for lo, hi in ((0, 3), (3, 4), (4, 11)):
            g_q, g_k, state, _ = layer(x[:, lo:hi], state)
            pieces.append((g_q, g_k))
    torch.testing.assert_close(torch.cat([p[0] for p in pieces], dim=2), whole[0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(torch.cat([p[1] for p in pieces], dim=2), whole[1], rtol=1e-10, atol=1e-12)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fused_scan_on_cuda_equals_the_autograd_scan():
    t, b, n, k, start, support = CASES["clamp-copy-start"]
    inputs = scan_inputs(t, b, n, k, start, support, torch.float64)
    inputs = [x.detach().cuda().requires_grad_(x.requires_grad) for x in inputs[:5]] + [
        tuple(w.cuda() for w in inputs[5])
    ]
    old = run_scan(False, *inputs, k=k, start=start)
    new = run_scan(True, *inputs, k=k, start=start)
    for a, b_ in zip([old[0], old[1], *old[2]], [new[0], new[1], *new[2]], strict=True):
        torch.testing.assert_close(b_, a, rtol=1e-10, atol=1e-12)


def test_double_backward_is_refused():
    """The reverse scan is written for first derivatives only: asking for a second one raises."""
    t, b, n, k, start, support = CASES["copy"]
    gates, gamma, probs, h0, table, weights = scan_inputs(t, b, n, k, start, support, torch.float64)
    coef = scan_coefficients(gates)
    _, out = fused_windowed_scan(
        h0[..., support : support + 1],
        coef,
        gamma,
        table,
        EPS,
        start=start,
        support=support,
        copy_probs=probs,
    )
    (grad,) = torch.autograd.grad((out * weights[0]).sum(), gamma, create_graph=True)
    with pytest.raises(RuntimeError):
        grad.sum().backward()
