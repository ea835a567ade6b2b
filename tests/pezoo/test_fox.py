"""FoX (forgetting attention) against the paper's formula written out per (i, j): the forget
gates, D_ij = Σ_{l=j+1}^{i} log f_l and softmax(QKᵀ/√e + D); decoding in pieces equals the
full pass; flex's score_mod equals the materialised bias; gradients reach the gates."""

from __future__ import annotations

import math

import pytest
import torch

import pezoo
from pezoo.backends import flex_compile
from pezoo.biases import DifferenceBias
from pezoo.testing import KitModel

DIMS = pezoo.ModelDims(d_model=16, n_heads=2, n_layers=2)


def _reference_gates(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> list[list[list[float]]]:
    """f[b][h][t] = σ(w_h · LN(x_t) + b_h), LayerNorm written out (no affine weights, eps 1e-5)."""
    out = []
    for row in x.tolist():
        per_head = []
        for h in range(w.shape[0]):
            gates = []
            for token in row:
                mean = sum(token) / len(token)
                var = sum((v - mean) ** 2 for v in token) / len(token)
                normed = [(v - mean) / math.sqrt(var + 1e-5) for v in token]
                z = sum(wi * vi for wi, vi in zip(w[h].tolist(), normed, strict=True)) + b[h].item()
                gates.append(1.0 / (1.0 + math.exp(-z)))
            per_head.append(gates)
        out.append(per_head)
    return out


def _reference_attention(q, k, v, gates, scale):
    """Lin et al. 2025, §3: o_i = Σ_j softmax_j(scale·q_i·k_j + D_ij) v_j, D_ij = Σ_{l=j+1}^{i} log f_l."""
    b, h, s, _ = q.shape
    out = torch.zeros_like(v, dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            for i in range(s):
                logits = []
                for j in range(i + 1):
                    d = sum(math.log(gates[bi][hi][m]) for m in range(j + 1, i + 1))
                    logits.append(scale * float(q[bi, hi, i] @ k[bi, hi, j]) + d)
                top = max(logits)
                weights = [math.exp(z - top) for z in logits]
                total = sum(weights)
                for j, w in enumerate(weights):
                    out[bi, hi, i] += (w / total) * v[bi, hi, j].double()
    return out


def test_attention_matches_the_papers_formula():
    torch.manual_seed(0)
    pe = pezoo.create("fox", dims=DIMS)
    with torch.no_grad():  # gates away from their initial 1/2, some near 1 and some near 0
        pe.gate_weight.normal_(0.0, 1.0)
        pe.gate_bias.copy_(torch.tensor([[2.0, -1.0], [0.5, 0.0]]))
    x = torch.randn(2, 7, DIMS.d_model)
    q, k, v = (torch.randn(2, 2, 7, 8) for _ in range(3))
    pos = torch.arange(7)[None]
    for layer in range(DIMS.n_layers):
        ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
        pe.observe(layer, x, ctx)
        biases = pe.bias(layer, q, k, ctx)
        with torch.no_grad():
            got, _ = pezoo.attend(q, k, v, ctx, biases, backend="eager")
        gates = _reference_gates(x, pe.gate_weight[layer].detach(), pe.gate_bias[layer].detach())
        want = _reference_attention(q, k, v, gates, 1 / math.sqrt(8))
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


def test_the_bias_is_the_sum_of_log_gates_between_key_and_query():
    torch.manual_seed(1)
    pe = pezoo.create("fox", dims=DIMS)
    x = torch.randn(1, 5, DIMS.d_model)
    pos = torch.arange(5)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    pe.observe(0, x, ctx)
    (bias,) = pe.bias(0, torch.zeros(1, 2, 5, 8), torch.zeros(1, 2, 5, 8), ctx)
    assert isinstance(bias, DifferenceBias)
    dense = bias.materialize(ctx, 2, torch.float64)
    gates = _reference_gates(x, pe.gate_weight[0].detach(), pe.gate_bias[0].detach())
    for h in range(2):
        for i in range(5):
            for j in range(i + 1):
                d = sum(math.log(gates[0][h][m]) for m in range(j + 1, i + 1))
                assert dense[0, h, i, j].item() == pytest.approx(d, abs=1e-5)
    assert (dense[0, :, range(5), range(5)] == 0).all()  # D_ii = 0: an empty product of gates


def test_initialisation_follows_the_reference_code():
    torch.manual_seed(2)
    pe = pezoo.create("fox", d_model=256, n_heads=8, n_layers=3)
    assert pe.gate_weight.shape == (3, 8, 256) and pe.gate_bias.shape == (3, 8)
    assert (pe.gate_bias == 0).all()
    assert pe.gate_weight.std().item() == pytest.approx(0.02, rel=0.05)


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_decoding_in_pieces_equals_the_full_pass(backend):
    torch.manual_seed(3)
    model = KitModel(pezoo.create("fox", dims=DIMS), DIMS, vocab=11, backend=backend).eval()
    with torch.no_grad():
        model.pe.gate_weight.normal_(0.0, 0.5)
    tokens = torch.randint(11, (2, 13))
    pos = torch.arange(13)[None]
    with torch.no_grad():
        full = model(tokens, pos)
        state: dict = {}
        pieces = [model(tokens[:, a:z], pos, state=state) for a, z in ((0, 4), (4, 5), (5, 9), (9, 13))]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-5)
    (c,) = [v for key, v in state.items() if isinstance(key, tuple) and key[0] == "fox"]
    assert c[0].shape == (2, DIMS.n_heads, 13)  # c of every key, the last one's included


def test_a_first_step_of_no_tokens_leaves_the_decoding_unchanged():
    """A decoding loop whose first step brings no tokens (an empty prompt) kept an empty ``c``,
    whose last entry the next step then took as its start: a broadcasting error from torch."""
    torch.manual_seed(3)
    model = KitModel(pezoo.create("fox", dims=DIMS), DIMS, vocab=11).eval()
    with torch.no_grad():
        model.pe.gate_weight.normal_(0.0, 0.5)
    tokens = torch.randint(11, (2, 6))
    pos = torch.arange(6)[None]
    with torch.no_grad():
        full = model(tokens, pos)
        state: dict = {}
        assert model(tokens[:, :0], pos, state=state).shape == (2, 0, 11)
        pieces = [model(tokens[:, a:z], pos, state=state) for a, z in ((0, 4), (4, 4), (4, 6))]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-5)


def test_flex_adds_the_difference_in_its_score_mod_as_eager_materialises_it():
    torch.manual_seed(4)
    model = KitModel(pezoo.create("fox", dims=DIMS), DIMS, vocab=11).eval()
    with torch.no_grad():
        model.pe.gate_weight.normal_(0.0, 0.5)
    tokens = torch.randint(11, (2, 9))
    pos = torch.arange(9)[None]
    pad = torch.ones(2, 9, dtype=torch.bool)
    pad[1, 6:] = False
    with torch.no_grad():
        want = model(tokens, pos, key_padding_mask=pad)
        model.set_backend("flex")
        with flex_compile(False):
            got = model(tokens, pos, key_padding_mask=pad)
    torch.testing.assert_close(got[pad], want[pad], atol=2e-5, rtol=1e-4)


def test_gradients_reach_the_gates_as_the_formula_gives_them():
    """d loss / d gates through pezoo's attention equals autograd through the formula itself."""
    torch.manual_seed(5)
    pe = pezoo.create("fox", d_model=8, n_heads=2, n_layers=1)
    x = torch.randn(1, 6, 8)
    q, k, v = (torch.randn(1, 2, 6, 4) for _ in range(3))
    pos = torch.arange(6)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    pe.observe(0, x, ctx)
    for backend in ("eager", "sdpa"):
        pe.zero_grad()
        out, _ = pezoo.attend(q, k, v, pezoo.AttentionContext(q_pos=pos, k_pos=pos), pe.bias(0, q, k, ctx),
                              backend=backend)  # fmt: skip
        out.square().sum().backward(retain_graph=True)
        got = pe.gate_weight.grad.clone()
        w = pe.gate_weight[0].detach().clone().requires_grad_()
        normed = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)
        log_f = torch.log(torch.sigmoid(normed[0] @ w.T))  # (s, h); the bias is 0
        d = torch.zeros(2, 6, 6)
        for i in range(6):
            for j in range(i + 1):
                d[:, i, j] = log_f[j + 1 : i + 1].sum(0)
        mask = torch.ones(6, 6, dtype=torch.bool).tril()
        logits = (q[0] @ k[0].transpose(-1, -2) / 2 + d).masked_fill(~mask, -math.inf)
        (logits.softmax(-1) @ v[0]).square().sum().backward()
        torch.testing.assert_close(got[0], w.grad, atol=1e-5, rtol=1e-4)


def test_a_bias_without_its_gates_is_a_clear_error():
    pe = pezoo.create("fox", dims=DIMS)
    pos = torch.arange(4)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    with pytest.raises(ValueError, match="observe"):
        pe.bias(0, torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 4, 8), ctx)
    with pytest.raises(ValueError, match="n_layers=2"):
        pe.observe(2, torch.zeros(1, 4, DIMS.d_model), ctx)
    with pytest.raises(ValueError, match="d_model=16"):
        pe.observe(0, torch.zeros(1, 4, 9), ctx)
    both_ways = pezoo.AttentionContext(q_pos=pos, k_pos=pos, causal=False)
    pe.observe(0, torch.zeros(1, 4, DIMS.d_model), both_ways)
    with pytest.raises(ValueError, match="causal attention only"):
        pe.bias(0, torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 4, 8), both_ways)


def test_difference_bias_refuses_mismatched_heads():
    with pytest.raises(ValueError, match="same heads"):
        DifferenceBias(torch.zeros(1, 2, 3), torch.zeros(1, 3, 3))
    bias = DifferenceBias(torch.zeros(1, 2, 3), torch.zeros(1, 2, 3))
    ctx = pezoo.AttentionContext(q_pos=torch.arange(3)[None], k_pos=torch.arange(3)[None])
    with pytest.raises(ValueError, match="2 heads"):
        bias.materialize(ctx, 4, torch.float32)
