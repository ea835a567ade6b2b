"""The Triton kernels of PRISM's scan (``triton_scan.py``) against the torch scan, the
dense-matrix reference of Alg. 1 and finite differences: outputs and every gradient.

On a machine with CUDA the kernels run compiled on the GPU; without one they run in
Triton's interpreter on CPU tensors (numpy, one program for all rows: slow, so the shapes
here are tiny). Without triton these tests skip; the backend choice tests run anyway.
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch

from pezoo.encodings.prism import PAPER_OPTIONS, PRISMConfig, fused_scan
from pezoo.encodings.prism.fused_scan import fused_windowed_scan, scan_backend, set_scan_backend
from pezoo.encodings.prism.layer import PRISMLayer
from pezoo.encodings.prism.streams import offset_table
from tests.pezoo.prism.test_prism_fused_scan import CASES, run_scan, scan_inputs
from tests.pezoo.prism.test_prism_scan_reference import reference_streams

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

try:
    import triton.language as tl
except ImportError:  # the tests that need it skip (triton_kernels)
    tl = None


def _count_kernel(out, n):
    """A loop to a bound given at launch, as the scan kernels' loop over its steps."""
    i = tl.arange(0, 2)
    acc = tl.load(out + i) * 0.0
    for _ in range(n):
        acc = acc + 1.0
    tl.store(out + i, acc)


@functools.cache
def _interpreter_fault() -> str | None:
    """Why Triton's interpreter cannot run a loop to a launch argument here, or None. Older
    interpreters (triton 3.3 and 3.4: torch 2.7's and 2.8's) pass a kernel's scalar arguments as
    1-element arrays, which numpy 2.4 no longer turns into the int a loop bound needs: a fault
    of that pairing, not of the kernels (their tests pass there with numpy 2.3)."""
    from triton.runtime.interpreter import InterpretedFunction

    out = torch.zeros(2)
    try:
        InterpretedFunction(_count_kernel)[(1,)](out, 3)
    except Exception as exc:  # any failure of the probe is the reason to skip
        return f"triton's interpreter cannot run a loop to a launch argument here ({type(exc).__name__}: {exc})"
    return None if out.tolist() == [3.0, 3.0] else f"triton's interpreter counted {out.tolist()} of 3 steps"


@pytest.fixture
def triton_kernels():
    """Skip without triton (or, on CPU, without an interpreter that runs the kernels); run the
    test with the kernels as the scan's backend."""
    pytest.importorskip("triton")
    fault = _interpreter_fault() if DEVICE == "cpu" else None
    if fault is not None:
        pytest.skip(fault)
    with scan_backend("triton"):
        yield


def to_device(inputs):
    *tensors, weights = inputs
    moved = [x.detach().to(DEVICE).requires_grad_(x.requires_grad) for x in tensors]
    return [*moved, tuple(w.to(DEVICE) for w in weights)]


def scan_both(case, dtype, checkpoint_every=0):
    t, b, n, k, start, support = CASES[case]
    inputs = to_device(scan_inputs(t, b, n, k, start, support, dtype))
    with scan_backend("torch"):
        old = run_scan(True, *inputs, k=k, start=start, checkpoint_every=checkpoint_every)
    with scan_backend("triton"):
        new = run_scan(True, *inputs, k=k, start=start, checkpoint_every=checkpoint_every)
    return old, new


# (case, dtype, checkpoint_every): a growing window with the copy branch; a start inside the
# support, the window reaching P (clamp) and chunks of 4 under checkpointing; a start beyond
# the support (more tokens than P: copied mass piles on the top bin); the smallest support
# (the reset's three bins are the whole window); float32 with the copy branch
KERNEL_CASES = [
    ("copy", torch.float64, 0),
    ("clamp-copy-start", torch.float64, 4),
    ("start-beyond-support", torch.float64, 0),
    ("support-1", torch.float64, 0),
    ("clamp-copy", torch.float32, 0),
]


@pytest.mark.parametrize(("case", "dtype", "checkpoint_every"), KERNEL_CASES, ids=lambda v: str(v).split(".")[-1])
def test_triton_scan_equals_the_torch_scan(triton_kernels, case, dtype, checkpoint_every):
    old, new = scan_both(case, dtype, checkpoint_every)
    # float32: the chain of 1/(x + ε) factors amplifies one rounding of ~6e-8 to a few 1e-6
    tol = {"rtol": 1e-10, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-4, "atol": 1e-5}
    torch.testing.assert_close(new[0], old[0], **tol)
    torch.testing.assert_close(new[1], old[1], **tol)
    names = ["gates", "gamma", "h0", "copy probabilities"]
    for name, g_new, g_old in zip(names, new[2], old[2], strict=False):
        torch.testing.assert_close(g_new, g_old, **tol, msg=lambda m, name=name: f"{name}: {m}")
        assert g_new.abs().sum() > 0, name


def test_triton_scan_gradcheck(triton_kernels):
    """Finite differences of the kernels (float64, fast mode: one random direction per input):
    the window grows, stops at P = 2 and clamps, with more tokens than P."""
    gen = torch.Generator().manual_seed(1)
    start, support, t, b, n, k = 1, 2, 3, 1, 2, 1
    d = torch.float64
    h0 = torch.rand(b, n, 2 * min(start, support) + 1, generator=gen, dtype=d) + 0.1
    coef = torch.rand(t, b, n, 6, generator=gen, dtype=d) + 0.05
    gamma = 1.5 + torch.rand(n, generator=gen, dtype=d)
    probs = torch.rand(t, b, k, start + t + 1, generator=gen, dtype=d) + 0.05
    table = torch.randn(2 * support + 1, 4, generator=gen, dtype=d).to(DEVICE)  # a constant of the node
    inputs = [x.to(DEVICE).requires_grad_() for x in (h0, coef, gamma, probs)]

    def fn(h0, coef, gamma, probs):
        return fused_windowed_scan(h0, coef, gamma, table, 1e-3, start=start, support=support, copy_probs=probs)

    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7, rtol=1e-5, fast_mode=True)


# prism{paper}'s cursor setup at a tiny width: C = 4 pairs per head, every fifth query cursor
# copying from its increment-only key cursor; then the default copy cursor under a support cap
LAYER_OPTIONS = [
    {"n_cursors": PAPER_OPTIONS["n_cursors"], "copy_every": 5, "copy_key": "absolute", "d_pe": 8},
    {"copy_cursors": (0,), "max_support": 4, "d_pe": 8},
]


@pytest.mark.parametrize("options", LAYER_OPTIONS, ids=["paper-cursors", "copy-max-support"])
def test_layer_on_the_triton_scan_equals_the_naive_reference(triton_kernels, options, monkeypatch):
    """The whole layer (gates, copy attention, kernels, streams) in float64 against the
    dense-matrix reference of Alg. 1: outputs, the input's gradient and every parameter's.

    The offsets' sinusoid table is float32 (``offset_table``), and a GPU's sin/cos round
    differently from the CPU's in the last bit (on an H200 the layer on CUDA missed this
    test's 1e-9 against a CPU-made table while the kernels' own tests passed): the reference
    takes the table the layer's device makes."""
    import tests.pezoo.prism.test_prism_scan_reference as reference

    def device_table(support, d_pe, device=None):
        return offset_table(support, d_pe, DEVICE).cpu()

    monkeypatch.setattr(reference, "offset_table", device_table)
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # the reference builds its tensors in the default dtype
    try:
        opts = {"n_cursors": 2, "gru_hidden": 12, "copy_null_bias": 0.0, **options}
        layer = PRISMLayer(PRISMConfig(d_model=16, n_heads=2, n_layers=1, **opts))
        x = torch.randn(2, 7, 16)
        c, f = layer.cfg.n_cursors, layer.cfg.d_pe
        weights = torch.randn(2, 2, 7, c, f), torch.randn(2, 2, 7, c, f)

        def run(layer, x, fn):
            x = x.detach().requires_grad_()
            g_q, g_k = fn(layer, x)
            ((g_q * weights[0].to(x.device)).sum() + (g_k * weights[1].to(x.device)).sum()).backward()
            grads = {name: p.grad.cpu() for name, p in layer.named_parameters() if p.grad is not None}
            return g_q.detach().cpu(), g_k.detach().cpu(), x.grad.cpu(), grads

        # the kernels on the test device (compiled on CUDA); the reference on the CPU
        fast = run(copy.deepcopy(layer).to(DEVICE), x.to(DEVICE), lambda layer, x: layer(x, None)[:2])
        with scan_backend("torch"):  # the reference reads only the layer's gates, copy and γ
            ref = run(layer, x, reference_streams)
    finally:
        torch.set_default_dtype(previous)
    tol = {"rtol": 1e-9, "atol": 1e-11}
    for a, b_ in zip(fast[:3], ref[:3], strict=True):
        torch.testing.assert_close(a, b_, **tol)
    assert fast[3].keys() == ref[3].keys() and fast[3]
    for name in fast[3]:
        torch.testing.assert_close(fast[3][name], ref[3][name], **tol, msg=lambda m, name=name: f"{name}: {m}")


def test_layer_in_float32_equals_the_torch_scan_and_decodes_in_pieces(triton_kernels):
    """float32, prism{paper}'s cursors: the layer on the kernels equals the layer on the torch
    scan, and (without gradients) feeding the sequence in pieces, the support growing between
    calls, gives the one-call streams."""
    torch.manual_seed(0)
    cfg = PRISMConfig(d_model=16, n_heads=2, n_layers=1, n_cursors=4, copy_every=5, d_pe=8, min_support=4)
    layer = PRISMLayer(cfg).to(DEVICE)
    x = torch.randn(2, 9, 16, device=DEVICE)
    with torch.no_grad():
        with scan_backend("torch"):
            want = layer(x, None)[:2]
        whole = layer(x, None)[:2]
        state, pieces = None, []
        for lo, hi in ((0, 3), (3, 4), (4, 9)):  # support 4, then 8, then 16
            g_q, g_k, state, _ = layer(x[:, lo:hi], state)
            pieces.append((g_q, g_k))
    for side in range(2):
        torch.testing.assert_close(whole[side], want[side], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(torch.cat([p[side] for p in pieces], dim=2), want[side], rtol=1e-4, atol=1e-5)


# -- which scan runs (no triton needed) -------------------------------------------------


def test_an_unknown_scan_backend_is_refused():
    with pytest.raises(ValueError, match="valid: auto, torch, triton"):
        set_scan_backend("cuda")


def test_an_unknown_backend_from_the_environment_is_refused_at_the_scan(monkeypatch):
    """PEZOO_PRISM_SCAN is read at import: a typo there is named when the scan runs."""
    monkeypatch.setattr(fused_scan, "_backend", "trition")
    t, b, n, k, start, support = CASES["plain"]
    gates, gamma, _, h0, table, _ = scan_inputs(t, b, n, k, start, support, torch.float64)
    coef = fused_scan.scan_coefficients(gates)
    with pytest.raises(ValueError, match="PEZOO_PRISM_SCAN='trition'"):
        fused_windowed_scan(h0[..., support : support + 1], coef, gamma, table, 1e-6, start=0, support=support)


def test_auto_keeps_cpu_tensors_on_the_torch_scan(monkeypatch):
    """Under "auto" only CUDA tensors go to the kernels: a CPU scan never reaches triton_scan."""
    from pezoo.encodings.prism import triton_scan

    def refuse(*args, **kwargs):
        raise AssertionError("the Triton scan ran on CPU tensors under 'auto'")

    monkeypatch.setattr(triton_scan, "triton_windowed_scan", refuse)
    with scan_backend("auto"):
        run_scan(True, *scan_inputs(*CASES["copy"], torch.float64), k=2, start=0)


def test_the_triton_backend_without_triton_says_so(monkeypatch):
    from pezoo.encodings.prism import triton_scan

    monkeypatch.setattr(triton_scan, "triton", None)
    t, b, n, k, start, support = CASES["plain"]
    gates, gamma, _, h0, table, _ = scan_inputs(t, b, n, k, start, support, torch.float64)
    coef = fused_scan.scan_coefficients(gates)
    with scan_backend("triton"), pytest.raises(RuntimeError, match="needs triton"):
        fused_windowed_scan(h0[..., support : support + 1], coef, gamma, table, 1e-6, start=0, support=support)


def test_a_failing_kernel_names_the_torch_scan(triton_kernels, monkeypatch):
    """A kernel that cannot run (a Triton without what it uses, a compiler error) fails with
    the way back to the torch scan in the message."""
    from pezoo.encodings.prism import triton_scan

    class Broken:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                raise ValueError("unsupported")

            return launch

    monkeypatch.setattr(triton_scan, "_kernels", lambda interpreted: (Broken(), Broken()))
    t, b, n, k, start, support = CASES["plain"]
    gates, gamma, _, h0, table, _ = scan_inputs(t, b, n, k, start, support, torch.float64)
    coef = fused_scan.scan_coefficients(gates)
    with pytest.raises(RuntimeError, match="PEZOO_PRISM_SCAN=torch"):
        fused_windowed_scan(h0[..., support : support + 1], coef, gamma, table, 1e-6, start=0, support=support)
