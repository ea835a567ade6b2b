"""DAPE against the paper's formula written out per (i, j): A = S + B + W2·LeakyReLU(W1·[S; B] + b1)
+ b2 over all heads of the pair, the causal mask after; decoding in pieces equals the full pass;
gradients reach the MLP as the formula gives them; only eager runs it; what it wraps."""

from __future__ import annotations

import math

import pytest
import torch

import pezoo
from pezoo.backends import flex_compile
from pezoo.encodings.dape import DapeTransform
from pezoo.testing import KitModel

DIMS = pezoo.ModelDims(d_model=16, n_heads=2, n_layers=2)


def _leaky(x: float) -> float:
    return x if x >= 0 else 0.01 * x  # torch's default negative slope, the reference code's LeakyReLU()


def _reference_logits(scores, bias, w1, b1, w2, b2):
    """Zheng et al. 2024, §3.2: per pair (i, j), the 2h inputs [S_ij(heads); B_ij(heads)] through the MLP,
    added to S + B. ``scores``, ``bias``: (h, i, j) float64."""
    h, n_i, n_j = scores.shape
    out = torch.zeros(h, n_i, n_j, dtype=torch.float64)
    for i in range(n_i):
        for j in range(n_j):
            x = [float(scores[a, i, j]) for a in range(h)] + [float(bias[a, i, j]) for a in range(h)]
            hidden = [_leaky(sum(w1[u, c].item() * x[c] for c in range(2 * h)) + b1[u].item()) for u in range(len(b1))]
            for a in range(h):
                f = sum(w2[a, u].item() * hidden[u] for u in range(len(hidden))) + b2[a].item()
                out[a, i, j] = scores[a, i, j] + bias[a, i, j] + f
    return out


def test_attention_matches_the_papers_formula_over_alibi():
    torch.manual_seed(0)
    pe = pezoo.create("dape:alibi", dims=DIMS)
    q, k, v = (torch.randn(1, 2, 6, 8) * 2 for _ in range(3))
    pos = torch.arange(6)[None]
    for layer in range(DIMS.n_layers):
        ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
        transform = pe.score_transform(layer, ctx)
        assert isinstance(transform, DapeTransform)
        with torch.no_grad():
            got, _ = pezoo.attend(q, k, v, ctx, pe.bias(layer, q, k, ctx), transform=transform)
        mlp = pe.mlp[layer]
        slopes = pezoo.encodings.alibi_slopes(2)
        scores = (q[0] @ k[0].transpose(-1, -2) / math.sqrt(8)).double()  # (h, i, j)
        bias = torch.tensor([[[-slopes[a] * abs(i - j) for j in range(6)] for i in range(6)] for a in range(2)],
                            dtype=torch.float64)  # fmt: skip
        logits = _reference_logits(scores, bias, mlp[0].weight, mlp[0].bias, mlp[2].weight, mlp[2].bias)
        mask = torch.ones(6, 6, dtype=torch.bool).tril()
        want = logits.masked_fill(~mask, -math.inf).softmax(-1) @ v[0].double()
        torch.testing.assert_close(got[0].double(), want, atol=1e-5, rtol=1e-5)


def test_the_bare_name_is_dape_over_kerple_log_and_nope_gives_no_bias():
    d = pezoo.create("dape", dims=DIMS)
    assert d.name == "dape" and type(d.inner).__name__ == "KerpleLog"
    assert pezoo.card_of("dape:fire") is pezoo.card_of("dape")
    torch.manual_seed(1)
    pe = pezoo.create("dape:nope", dims=DIMS)
    scores = torch.randn(1, 3, 3, 2)  # (b, i, j, h)
    ctx = pezoo.AttentionContext(q_pos=torch.arange(3)[None], k_pos=torch.arange(3)[None])
    mlp = pe.mlp[0]
    out = pe.score_transform(0, ctx)(scores, torch.zeros(1, 3, 3, 1))
    want = scores + mlp(torch.cat([scores, torch.zeros_like(scores)], -1))
    torch.testing.assert_close(out, want)


@pytest.mark.parametrize("name", ["dape", "dape:alibi", "dape:fire"])
def test_decoding_in_pieces_equals_the_full_pass(name):
    torch.manual_seed(2)
    model = KitModel(pezoo.create(name, dims=DIMS), DIMS, vocab=11, backend="auto").eval()
    tokens, pos = torch.randint(11, (2, 12)), torch.arange(12)[None]
    with torch.no_grad():
        full = model(tokens, pos)
        state: dict = {}
        pieces = [model(tokens[:, a:z], pos, state=state) for a, z in ((0, 5), (5, 6), (6, 11), (11, 12))]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-5)


def test_gradients_reach_the_mlp_as_the_formula_gives_them():
    torch.manual_seed(3)
    pe = pezoo.create("dape:alibi", n_heads=2, n_layers=1, dims=pezoo.ModelDims(8, 2, 1))
    q, k, v = (torch.randn(1, 2, 5, 4) for _ in range(3))
    pos = torch.arange(5)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    out, _ = pezoo.attend(q, k, v, ctx, pe.bias(0, q, k, ctx), transform=pe.score_transform(0, ctx))
    out.square().sum().backward()
    first, second = pe.mlp[0][0], pe.mlp[0][2]
    w1, b1, w2, b2 = (
        p.detach().clone().requires_grad_() for p in (first.weight, first.bias, second.weight, second.bias)
    )
    s = q[0] @ k[0].transpose(-1, -2) / 2  # (h, i, j)
    slopes = torch.tensor(pezoo.encodings.alibi_slopes(2))
    bias = -slopes[:, None, None] * (torch.arange(5)[:, None] - torch.arange(5)[None, :]).abs()
    x = torch.cat([s, bias]).permute(1, 2, 0)  # (i, j, 2h): the pair's scores, then its biases
    f = (torch.nn.functional.leaky_relu(x @ w1.T + b1) @ w2.T + b2).permute(2, 0, 1)  # (h, i, j)
    logits = (s + bias + f).masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), -math.inf)
    (logits.softmax(-1) @ v[0]).square().sum().backward()
    for p, ref in ((first.weight, w1), (first.bias, b1), (second.weight, w2), (second.bias, b2)):
        torch.testing.assert_close(p.grad, ref.grad, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("backend", ["sdpa", "flex", "xformers"])
def test_backends_without_the_scores_refuse_it_naming_eager(backend):
    model = KitModel(pezoo.create("dape:alibi", dims=DIMS), DIMS, vocab=11, backend=backend).eval()
    with pytest.raises(ValueError, match=rf"the {backend} backend cannot express DapeTransform.*'eager'"):
        with torch.no_grad(), flex_compile(False):
            model(torch.randint(11, (1, 4)), torch.arange(4)[None])


def test_it_wraps_additive_biases_only():
    names = {n for n in pezoo.available() if n.startswith("dape:")}
    assert {"dape:alibi", "dape:kerple_log", "dape:kerple_power", "dape:fire", "dape:t5", "dape:nope"} <= names
    assert not names & {"dape:rope", "dape:ape", "dape:prism", "dape:fox", "dape:stick_breaking", "dape:dape"}
    with pytest.raises(ValueError, match=r"cannot wrap 'rope'.*acts through qk"):
        pezoo.create("dape:rope", dims=DIMS)
    with pytest.raises(ValueError, match="n_layers=2"):
        pe = pezoo.create("dape:alibi", dims=DIMS)
        pe.score_transform(2, pezoo.AttentionContext(q_pos=torch.zeros(1, 1), k_pos=torch.zeros(1, 1)))
    assert pezoo.create("dape:alibi", dims=DIMS, mlp_width=8).mlp[0][0].weight.shape == (8, 4)
