"""The PRISM layer's scan against a naive reference written from the paper's equations.

The reference (``reference_streams``) rebuilds each step as Lee 2025 writes it: a dense
(2P+1)×(2P+1) row-stochastic transition matrix per cursor (§5.1.2: reset re-centres and
moves once, otherwise increment / decrement / keep with the edge bins keeping what would
leave the support, Alg. 1 steps 1–3), the copy branch ``p_no_copy · h + p_pos`` (§5.0.4,
Alg. 1 step 4) with the copied mass of token j on the bin of the paired key cursor, and
power sharpening ``(h + ε)^γ`` renormalised over the reachable bins (Alg. 1 step 5). It
loops over tokens one at a time and never slices a shared copy tensor, so it checks the
layer's outputs *and* gradients whatever storage the fast scan uses.
"""

from __future__ import annotations

import pytest
import torch

from pezoo.encodings.prism import PRISMConfig
from pezoo.encodings.prism.config import support_for
from pezoo.encodings.prism.layer import PRISMLayer
from pezoo.encodings.prism.streams import normalise_streams, offset_table

D, H = 16, 2


def dense_transition(p_reset, p_inc, p_dec, p_keep, bins: int) -> torch.Tensor:
    """(..., p, p) row-stochastic M with new = h @ M (rows: from-bin, columns: to-bin)."""
    mid = bins // 2
    eye = torch.eye(bins, dtype=p_reset.dtype)
    up = torch.zeros(bins, bins, dtype=p_reset.dtype)  # k -> min(k+1, 2P)
    down = torch.zeros(bins, bins, dtype=p_reset.dtype)  # k -> max(k-1, 0)
    for k in range(bins):
        up[k, min(k + 1, bins - 1)] = 1.0
        down[k, max(k - 1, 0)] = 1.0
    centre = torch.zeros(3, bins, dtype=p_reset.dtype)  # every row -> mid-1 / mid / mid+1
    centre[0, mid - 1], centre[1, mid], centre[2, mid + 1] = 1.0, 1.0, 1.0
    e = lambda v: v[..., None, None]  # noqa: E731
    stay = 1.0 - p_reset
    move = e(stay * p_keep) * eye + e(stay * p_inc) * up + e(stay * p_dec) * down
    reset_row = p_dec[..., None] * centre[0] + p_keep[..., None] * centre[1] + p_inc[..., None] * centre[2]
    return move + e(p_reset) * reset_row[..., None, :].expand(*reset_row.shape[:-1], bins, bins)


def reference_streams(layer: PRISMLayer, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The layer's (g_q, g_k) for a whole sequence x (b, s, d), step by step from the equations."""
    cfg = layer.cfg
    b, s, _ = x.shape
    support = support_for(s, cfg.min_support, cfg.max_support)  # a cap clamps offsets at ±P (the edge bins)
    bins = 2 * support + 1
    offsets = torch.arange(-support, support + 1)
    xn = layer.norm(x)
    gates, _ = layer.gates(xn, None)  # (b, s, n, 4): reset, inc, dec, keep
    gamma = layer.gamma()  # (n,)
    n, k, nq = layer.n_scan, layer.n_copy, layer.n_query
    if k:
        probs, _ = layer.copy(xn, None)  # (b, k, s, s+1)
    key_of_copy = [nq + int(i) for i in layer.copy_keys_in_scan]  # scanned key paired with copy cursor i

    def scan(copy_from: list[torch.Tensor] | None) -> list[torch.Tensor]:
        h = torch.zeros(b, n, bins)
        h[..., support] = 1.0
        hists = []  # per token: (b, n, p)
        for t in range(s):
            new = torch.einsum("bnp,bnpq->bnq", h, dense_transition(*gates[:, t].unbind(-1), bins))
            if copy_from is not None:
                rows = []
                for i in range(k):
                    a_pos, a_null = probs[:, i, t, : t + 1], probs[:, i, t, -1]  # (b, t+1), (b,)
                    p_pos = torch.zeros(b, bins)
                    for j in range(t + 1):
                        if layer.learned_copy_keys:  # the paired key cursor's histogram after token j
                            p_pos = p_pos + a_pos[:, j, None] * copy_from[j][:, key_of_copy[i]]
                        else:  # the fixed increment-only key after token j: one-hot at offset j + 1 (<= P)
                            p_pos = p_pos + a_pos[:, j, None] * (offsets == min(j + 1, support)).to(p_pos.dtype)
                    rows.append(a_null[:, None] * new[:, i] + p_pos)
                new = torch.cat([torch.stack(rows, 1), new[:, k:]], 1)
            logits = gamma[:, None] * torch.log(new + cfg.eps)
            if cfg.eps_support == "reachable":
                logits = logits.masked_fill(offsets.abs() > t + 1, -torch.inf)
            h = torch.softmax(logits, dim=-1)
            hists.append(h)
        return hists

    # key cursors have no copy branch: a first pass gives their histograms, which the
    # learned-key copy branch mixes into the query cursors in the second
    hists = scan(None)
    if k:
        hists = scan(hists)
    table = offset_table(support, cfg.d_pe).to(hists[0].dtype)  # float64 when the test runs in float64
    streams = torch.stack(hists, 0) @ table  # (s, b, n, f)
    if layer.n_fixed:
        fixed = torch.stack([table[support + min(t + 1, support)] for t in range(s)])  # (s, f)
        streams = torch.cat([streams, fixed[:, None, None].expand(s, b, layer.n_fixed, -1)], 2)
    streams = streams[:, :, layer.unpermute]
    streams = streams.reshape(s, b, 2, cfg.n_heads, cfg.n_cursors, cfg.d_pe).permute(2, 1, 3, 0, 4, 5)
    streams = normalise_streams(streams, cfg.stream_norm)
    return streams[0], streams[1]


CASES = [
    {"copy_cursors": (0,)},
    {"copy_cursors": (0,), "scan_window": False},
    {"copy_cursors": (1,), "copy_every": 3, "min_support": 4},
    {"copy_cursors": (0,), "eps_support": "full"},
    {"copy_cursors": (1,), "copy_key": "learned"},
    {},
    # a fixed window (P = 4 < 9 tokens: offsets clamp at the edge bins) and chunked recomputation
    {"copy_cursors": (0,), "max_support": 4},
    {"copy_cursors": (0,), "max_support": 4, "scan_window": False},
    {"copy_cursors": (1,), "copy_key": "learned", "max_support": 4},
    {"max_support": 3, "eps_support": "full"},
    {"copy_cursors": (0,), "scan_checkpoint": 4},
    {"copy_cursors": (0,), "max_support": 4, "scan_checkpoint": 3},
]


@pytest.mark.parametrize("options", CASES, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_layer_equals_the_naive_reference(options):
    torch.manual_seed(0)
    opts = {"n_cursors": 2, "d_pe": 8, "gru_hidden": 12, "copy_null_bias": 0.0, **options}
    layer = PRISMLayer(PRISMConfig(d_model=D, n_heads=H, n_layers=1, **opts))
    x = torch.randn(2, 9, D, requires_grad=True)
    weights = torch.randn(2, H, 9, 2, 8), torch.randn(2, H, 9, 2, 8)  # a loss that weighs every output

    def run(fn):
        layer.zero_grad()
        x.grad = None
        g_q, g_k = fn()
        ((g_q * weights[0]).sum() + (g_k * weights[1]).sum()).backward()
        grads = {name: p.grad.clone() for name, p in layer.named_parameters() if p.grad is not None}
        return g_q.detach(), g_k.detach(), x.grad.clone(), grads

    fast = run(lambda: layer(x, None)[:2])
    ref = run(lambda: reference_streams(layer, x))
    torch.testing.assert_close(fast[0], ref[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(fast[1], ref[1], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(fast[2], ref[2], rtol=1e-4, atol=1e-5)
    assert fast[3].keys() == ref[3].keys() and fast[3]
    for name in fast[3]:
        torch.testing.assert_close(fast[3][name], ref[3][name], rtol=1e-4, atol=1e-5, msg=name)
    if layer.copy is not None:  # the copy branch is exercised: its parameters get gradients
        assert fast[3]["copy.key.weight"].abs().sum() > 0


def test_checkpointed_scan_keeps_less_and_equals_the_plain_scan():
    """scan_checkpoint recomputes chunks in backward: same outputs and gradients, and less
    saved for backward by the fused scan's node than the plain windowed scan keeps (its
    windows, one block) where the checkpointed one keeps each chunk's starting window."""
    x = torch.randn(1, 24, D)
    results = {}
    for every in (0, 5):
        torch.manual_seed(0)
        layer = PRISMLayer(PRISMConfig(d_model=D, n_heads=H, n_layers=1, d_pe=8, scan_checkpoint=every))
        g_q, g_k, _, _ = layer(x, None)
        scan = [node for node in _graph(g_q.grad_fn) if "WindowedScan" in node.name()]
        kept = sum(t.numel() for node in scan for t in node.saved_tensors if t is not None)
        (g_q.square().sum() + g_k.sum()).backward()
        grads = {n: p.grad.clone() for n, p in layer.named_parameters() if p.grad is not None}
        results[every] = (g_q.detach(), grads, kept)
    torch.testing.assert_close(results[5][0], results[0][0])
    for name, grad in results[0][1].items():
        torch.testing.assert_close(results[5][1][name], grad, msg=name)
    assert 0 < results[5][2] < results[0][2] / 2


def _graph(root):
    """Every node of the autograd graph below ``root``."""
    seen, todo = set(), [root]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo.extend(next_node for next_node, _ in node.next_functions)
    return seen
