"""PRISM's training pass is linear in resident memory, not only in the allocator's live bytes
(issue 65).

Under the automatic checkpoint (``PRISMConfig.scan_checkpoint``) the fused scan ran as one
node per chunk under ``torch.utils.checkpoint``, and each node's forward kept three freshly
allocated windows per step (x + ε, log(x + ε), y), each two bins wider than the step before,
between short-lived temporaries, then dropped them. The allocator's live bytes stayed linear
in S, but glibc's heap reused almost none of a chunk's freed, slightly too small holes for the
next chunk: the process's peak RSS grew ×3 per doubling of S at S = 4096 (the quick backbone:
496 → 1488 MiB from S = 2048 to 4096). Now the node's forward keeps no windows, only each
chunk's starting window, and its backward recomputes each chunk's windows into one block
(``fused_scan._Windows``); docs/performance.md, "PRISM's resident memory".
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from pezoo.encodings.prism.chunks import run_chunked
from pezoo.encodings.prism.fused_scan import fused_windowed_scan, scan_coefficients
from tests.pezoo.prism.test_prism_fused_scan import CASES, EPS, run_scan, scan_inputs


def fused_pass(case, dtype, chunk, *, old_chunking=False):
    """(last window, streams, gradients of gates, γ, h0 and copy probabilities) of the fused
    scan over ``chunk``-step chunks (0: none), recomputed inside the node, or with
    ``old_chunking`` as before: ``torch.utils.checkpoint`` around one node per chunk."""
    t, b, n, k, start, support = CASES[case]
    torch.manual_seed(0)  # scan_inputs draws the last window's loss weights from the global generator
    gates, gamma, probs, h0, table, weights = scan_inputs(t, b, n, k, start, support, dtype)
    radius = min(start, support)
    h = h0[..., support - radius : support + radius + 1]
    coef = scan_coefficients(gates)
    copy = probs if k else None
    if old_chunking:

        def run(h, first, stop):
            return fused_windowed_scan(
                h, coef[first:stop], gamma, table, EPS, start=start + first, support=support,
                copy_probs=None if copy is None else copy[first:stop],
            )  # fmt: skip

        last, out = run_chunked(run, h, t, chunk)
    else:
        last, out = fused_windowed_scan(
            h, coef, gamma, table, EPS, start=start, support=support, copy_probs=copy, checkpoint_every=chunk
        )
    edge = support - min(start + t, support)  # the last window padded to the support, as run_scan's
    loss = (out * weights[0]).sum() + (torch.nn.functional.pad(last, (edge, edge)) * weights[1]).sum()
    grads = torch.autograd.grad(loss, [gates, gamma, h0] + ([probs] if k else []))
    return last, out.detach(), grads


@pytest.mark.parametrize("chunk", [0, 2, 3, 5])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_fused_scan_gives_the_old_checkpointed_scans_results_bit_for_bit(case, dtype, chunk):
    """Windows in one block and chunks recomputed inside the node: the same floats as one
    node per chunk under ``torch.utils.checkpoint`` (γ's gradient summed per chunk, last
    chunk first, as autograd summed the chunks' nodes); and, to float rounding, as the
    per-op autograd scan (the plain reference of the math)."""
    new = fused_pass(case, dtype, chunk)
    last = new[0]  # its own tensor: a view into the block would keep every saved window alive
    assert last.untyped_storage().nbytes() == last.numel() * last.element_size()
    old = fused_pass(case, dtype, chunk, old_chunking=True)
    assert torch.equal(new[0].detach(), old[0].detach())
    assert torch.equal(new[1], old[1])
    names = ["gates", "gamma", "h0", "copy probabilities"]
    for name, g_new, g_old in zip(names, new[2], old[2], strict=False):
        assert torch.equal(g_new, g_old), name

    t, b, n, k, start, support = CASES[case]
    torch.manual_seed(0)
    per_op = run_scan(False, *scan_inputs(t, b, n, k, start, support, dtype), k=k, start=start)
    tol = {"rtol": 1e-10, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-4, "atol": 1e-5}
    torch.testing.assert_close(new[1], per_op[1], **tol)
    for name, g_new, g_ref in zip(names, new[2], per_op[2], strict=False):
        torch.testing.assert_close(g_new, g_ref, **tol, msg=lambda m, name=name: f"{name}: {m}")


_CHILD = """
import json, resource, sys
import torch
from pezoo.encodings.prism.fused_scan import scan_coefficients
from pezoo.encodings.prism.scan import scan_emitting

torch.set_num_threads(1)
N_CURSORS, CHUNK = 16, 64  # the default PRISM's scanned cursors at 4 heads (2 sides x 4 heads x 2)


def rss_kib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def train_pass(tokens):
    # one checkpointed forward + backward of the default (windowed, fused) scan over `tokens`
    # tokens with support P = tokens, as PRISMLayer runs it in a training call
    gen = torch.Generator().manual_seed(0)
    hist = torch.zeros(1, N_CURSORS, 2 * tokens + 1)
    hist[..., tokens] = 1.0
    gates = torch.softmax(torch.randn(tokens, 1, N_CURSORS, 4, generator=gen), dim=-1).requires_grad_()
    gamma = torch.full((N_CURSORS,), 2.0, requires_grad=True)
    table = torch.randn(2 * tokens + 1, 8, generator=gen)
    _, out = scan_emitting(
        hist, gates, gamma, 1e-6, None, None, None, table, windowed=True, checkpoint_every=CHUNK
    )
    out.sum().backward()


train_pass(256)  # the code paths' first use (pages, kernels) before the baseline
before = rss_kib()
train_pass(int(sys.argv[1]))
print(json.dumps((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads VmRSS from /proc and ru_maxrss in KiB")
def test_the_scans_resident_memory_grows_linearly_with_the_sequence():
    """Peak RSS growth of one training pass of the scan, S = 512 and 1024, each in a fresh
    process (run side by side): linear is ×2 per doubling, quadratic ×4. Measured: ×2.15–2.25
    now (13 → 28 MiB); ×4.0–4.6 before (19–21 → 85 MiB)."""
    children = {
        tokens: subprocess.Popen([sys.executable, "-c", _CHILD, str(tokens)], stdout=subprocess.PIPE, text=True)
        for tokens in (512, 1024)
    }
    peak = {}
    for tokens, child in children.items():
        out, _ = child.communicate(timeout=120)
        assert child.returncode == 0, f"the child for S = {tokens} failed"
        peak[tokens] = json.loads(out.strip().splitlines()[-1])
    assert peak[1024] / peak[512] <= 2.9, f"peak RSS growth {peak} MiB: ×{peak[1024] / peak[512]:.2f} per doubling"
