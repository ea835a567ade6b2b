"""Using one pezoo encoding inside a model pezoo never saw (docs/use-in-your-model.md).

``MiniGPT`` below has its own attention (no pezoo backbone, no ``pezoo.attend``) and
calls the encoding's hooks on plain tensors: ``positions``, ``embed``, ``observe``,
``qk`` (which may widen q/k, as PRISM does) and ``bias`` (materialised and added to its
own scores). It trains on "output the token two places back", which needs relative
position information.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

import pezoo


class MiniGPT(nn.Module):
    def __init__(self, pe: pezoo.PositionalEncoding, vocab: int, d: int, heads: int, layers: int) -> None:
        super().__init__()
        self.pe, self.heads, self.layers = pe, heads, layers
        self.emb = nn.Embedding(vocab, d)
        self.ln1 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d, bias=False) for _ in range(layers))
        self.proj = nn.ModuleList(nn.Linear(d, d, bias=False) for _ in range(layers))
        self.ln2 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.mlp = nn.ModuleList(
            nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)) for _ in range(layers)
        )
        self.out = nn.Linear(d, vocab)

    def forward(self, tokens: Tensor) -> Tensor:
        b, s = tokens.shape
        pos = self.pe.positions(b, s, tokens.device)  # (b|1, s): random under randomized PE
        ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)  # fresh per forward pass
        x = self.pe.embed(self.emb(tokens), pos)  # (b, s, d)
        x = self.pe.embed_tokens(x, tokens, ctx)
        future = torch.ones(s, s, dtype=torch.bool).triu(1)
        e = x.shape[-1] // self.heads
        for layer in range(self.layers):
            self.pe.observe(layer, x, ctx)
            q, k, v = self.qkv[layer](self.ln1[layer](x)).view(b, s, 3, self.heads, e).permute(2, 0, 3, 1, 4)
            q, k = self.pe.qk(layer, q, k, ctx)  # (b, h, s, e'), e' >= e
            scores = q @ k.transpose(-1, -2) / math.sqrt(e)  # scale of the *original* head dim
            for bias in self.pe.bias(layer, q, k, ctx):
                scores = scores + bias.materialize(ctx, self.heads, scores.dtype)
            att = scores.masked_fill(future, -math.inf).softmax(-1)  # (b, h, s, s)
            x = x + self.proj[layer]((att @ v).transpose(1, 2).reshape(b, s, -1))
            x = x + self.mlp[layer](self.ln2[layer](x))
        return self.out(x)


def _train(name: str, steps: int = 60) -> tuple[float, float]:
    torch.manual_seed(0)
    d, heads, layers, vocab, s = 32, 4, 2, 10, 16
    pe = pezoo.create(name, dims=pezoo.ModelDims(d, heads, layers))
    model = MiniGPT(pe, vocab, d, heads, layers)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(steps):
        tokens = torch.randint(vocab, (16, s))
        logits = model(tokens)[:, 2:]  # predict tokens[t - 2] at t
        loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, :-2].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return sum(losses[:5]) / 5, sum(losses[-5:]) / 5


ENCODINGS = ["rope", "alibi", "hard_alibi", "randomized:rope", "learned_prf"]
if "prism" in pezoo.available():
    ENCODINGS.append("prism")


@pytest.mark.slow
@pytest.mark.parametrize("name", ENCODINGS)
def test_trains_inside_a_foreign_model(name):
    first, last = _train(name)
    assert math.isfinite(last)
    assert last < 0.75 * first, (first, last)  # chance level is log(10) = 2.30


def test_the_foreign_attention_equals_pezoo_attention():
    """Same weights, same encoding: MiniGPT's hand-written attention block = pezoo.SelfAttention."""
    torch.manual_seed(0)
    pe = pezoo.create("learned_prf", dims=pezoo.ModelDims(32, 4, 1))
    model = MiniGPT(pe, 10, 32, 4, 1)
    attn = pezoo.SelfAttention(32, 4, layer=0)
    attn.qkv.weight.data.copy_(model.qkv[0].weight)
    attn.out.weight.data.copy_(model.proj[0].weight)
    tokens = torch.randint(10, (2, 9))
    x = model.emb(tokens)
    with torch.no_grad():
        want = model(tokens)
        pos = torch.arange(9)[None]
        a, _ = attn(model.ln1[0](x), pe, pezoo.AttentionContext(q_pos=pos, k_pos=pos))
        h = x + a
        got = model.out(h + model.mlp[0](model.ln2[0](h)))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", pezoo.available())
def test_every_encoding_can_be_evaluated_under_seeded(name):
    """docs/use-in-your-model.md: "wrap an evaluation in ``with pe.seeded(seed):``". Generic
    evaluation code did that for randomized PE only: rope, abacus+fire... raised
    AttributeError. Every encoding takes it; only those that draw at evaluation change."""
    pe = pezoo.create(name, dims=pezoo.ModelDims(d_model=64, n_heads=4, n_layers=2)).eval()
    draws = []
    for _ in range(2):
        with pe.seeded(7) as generator:
            draws.append(pe.positions(2, 6))
        assert (generator is not None) == pe.random_at_eval
    assert torch.equal(draws[0], draws[1])  # the same seed, the same positions
    if not pe.random_at_eval:  # and a deterministic encoding's are its plain ones
        assert torch.equal(draws[0], pe.positions(2, 6))

