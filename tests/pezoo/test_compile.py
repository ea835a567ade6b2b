"""torch.compile of a user's own decoder: the same numbers as eager, and a bounded number of
compilations however many sequence lengths it sees (docs/use-in-your-model.md, "torch.compile").

The graphs are counted by a backend that records each graph dynamo hands it and runs it
as traced (``backend="eager"`` behind a counter: dynamo's tracing, guards and recompiles
without code generation, a second or two per encoding). With ``dynamic=None`` (plain
``torch.compile(model)``) dynamo compiles the first length with static shapes and the
second with dynamic ones; a third length must then reuse them. Before the fix PRISM's
streams recompiled for every new length until the recompile limit. One test runs inductor
itself, on RoPE (the encoding whose complex product inductor could not generate code for).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

import pezoo

LENGTHS = (5, 8, 11, 16)
DIMS = pezoo.ModelDims(d_model=16, n_heads=2, n_layers=2)


class Decoder(nn.Module):
    """A decoder of one's own: pezoo's hooks + ``pezoo.attend`` (docs/use-in-your-model.md)."""

    def __init__(self, pe: pezoo.PositionalEncoding, vocab: int = 16, d: int = 16, heads: int = 2, layers: int = 2):
        super().__init__()
        self.pe, self.heads, self.layers = pe, heads, layers
        self.emb = nn.Embedding(vocab, d)
        self.ln = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers))
        self.proj = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.mlp = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d)) for _ in range(layers)
        )
        self.out = nn.Linear(d, vocab)

    def forward(self, tokens: Tensor) -> Tensor:
        b, s = tokens.shape
        pos = self.pe.positions(b, s, tokens.device)  # (b|1, s)
        n = torch.full((b,), float(s))  # the instance scale, for learned_prf_sh
        ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos, state_kept=False, scale_hint=n)
        x = self.pe.embed_tokens(self.pe.embed(self.emb(tokens), pos), tokens, ctx)  # (b, s, d)
        e = x.shape[-1] // self.heads
        for layer in range(self.layers):
            self.pe.observe(layer, x, ctx)
            q, k, v = self.qkv[layer](self.ln[layer](x)).view(b, s, 3, self.heads, e).permute(2, 0, 3, 1, 4)
            q, k = self.pe.qk(layer, q, k, ctx)  # (b, h, s, e'), e' >= e
            a, _ = pezoo.attend(q, k, v, ctx, self.pe.bias(layer, q, k, ctx), backend="sdpa")  # (b, h, s, e)
            x = x + self.proj[layer](a.transpose(1, 2).reshape(b, s, -1))
            x = x + self.mlp[layer](x)
        return self.out(x)  # (b, s, vocab)


class GraphCounter:
    """A dynamo backend that records every graph it is given and runs it as traced."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Tensor]):
        self.graphs.append(gm)
        return gm.forward


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _pair(name: str) -> tuple[Decoder, Decoder]:
    """Two decoders with the same weights: one to compile, one to run eagerly."""
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        models.append(Decoder(pezoo.create(name, dims=DIMS)))
    return models[0], models[1]


def _loss_and_grads(model: nn.Module, tokens: Tensor, seed: int) -> tuple[Tensor, list[Tensor]]:
    torch.manual_seed(seed)  # randomized PE draws its positions from torch's global generator
    model.zero_grad(set_to_none=True)
    loss = model(tokens).float().square().mean()
    loss.backward()
    return loss.detach(), [p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


def _names() -> list[str]:
    return [*pezoo.available(), "abacus+fire"]


WIDER_QK = {"pope": 16, "randomized:pope": 16, "ssmax:pope": 16}
"""Encodings whose q/k are wider than their values here (PoPE: 2e = 16), by that width: on CPU,
``pezoo.attend``'s sdpa takes its scores-first path while the key count is below the q/k width
(``pezoo.attention._fused_sdpa``), so the length reaching it is one more shape regime."""


@pytest.mark.parametrize("name", _names())
def test_compiled_equals_eager_and_compiles_once_per_shape_regime(name, fresh_dynamo):
    """Plain ``torch.compile(model)``: compiled == eager (loss and every gradient) at every
    length, and no new graph after the second length (static, then dynamic shapes)."""
    compiled_model, eager_model = _pair(name)
    counter = GraphCounter()
    compiled = torch.compile(compiled_model, backend=counter)
    graphs_after = []
    for i, s in enumerate(LENGTHS):
        tokens = torch.randint(16, (3, s), generator=torch.Generator().manual_seed(s))
        want, want_grads = _loss_and_grads(eager_model, tokens, seed=i)
        got, got_grads = _loss_and_grads(compiled, tokens, seed=i)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        for g, w in zip(got_grads, want_grads, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)
        graphs_after.append(len(counter.graphs))
    regimes = [graphs_after[1] + (name in WIDER_QK and s >= WIDER_QK[name]) for s in LENGTHS[1:]]
    assert graphs_after[1:] == regimes, f"graphs compiled after each length: {graphs_after}"
    # inductor draws random operators from its own generator: a traced draw would differ from eager's
    assert [op for gm in counter.graphs for op in _random_ops(gm)] == []


@pytest.mark.parametrize("name", ["prism", "randomized:rope", "rope"])
def test_dynamic_true_compiles_once(name, fresh_dynamo):
    """``torch.compile(model, dynamic=True)``: every graph is compiled at the first length."""
    compiled_model, _ = _pair(name)
    counter = GraphCounter()
    compiled = torch.compile(compiled_model, backend=counter, dynamic=True)
    graphs_after = []
    for i, s in enumerate(LENGTHS):
        _loss_and_grads(compiled, torch.randint(16, (3, s)), seed=i)
        graphs_after.append(len(counter.graphs))
    assert graphs_after == [graphs_after[0]] * len(LENGTHS), f"graphs compiled after each length: {graphs_after}"


def _graphs_at_depth(name: str, depth: int, **config) -> list[int]:
    dims = pezoo.ModelDims(d_model=16, n_heads=2, n_layers=depth)
    torch.manual_seed(0)
    model = Decoder(pezoo.create(name, dims=dims, **config), layers=depth)
    counter = GraphCounter()
    compiled = torch.compile(model, backend=counter, dynamic=True)
    graphs_after = []
    for i, s in enumerate(LENGTHS[:2]):
        _loss_and_grads(compiled, torch.randint(16, (3, s)), seed=i)
        graphs_after.append(len(counter.graphs))
    return graphs_after


@pytest.mark.parametrize("config", [{}, {"layers": (0, 2)}])
def test_prism_compiles_the_same_graphs_at_every_depth(config, fresh_dynamo):
    """PRISM's eager filter splits the decoder's layer loop, so dynamo compiles each hook as a
    frame of its own; no hook may pin that frame to its layer (a dict keyed by the layer, or
    ``str(layer)``, which dynamo cannot trace: before the fix each layer compiled its own, and a
    12-layer decoder hit dynamo's recompile limit, 8, running the rest eagerly)."""
    # a limit no depth here reaches, so a graph per layer shows as one (torch < 2.6 names it cache_size_limit)
    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    with torch._dynamo.config.patch({limit: 64}):
        shallow = _graphs_at_depth("prism", 4, **config)
        deep = _graphs_at_depth("prism", 16, **config)
    assert deep == shallow, f"graphs compiled after each length: 4 layers {shallow}, 16 layers {deep}"


def test_seeded_evaluation_compiles_once_per_shape_regime(fresh_dynamo):
    """An evaluation draws randomized positions under ``with pe.seeded(seed):``, a fresh
    ``torch.Generator`` per block: compiled, it draws the positions eager draws, and new
    lengths (or generators) compile nothing new after the second length."""
    torch.manual_seed(0)
    model = Decoder(pezoo.create("randomized:rope", dims=DIMS)).eval()
    counter = GraphCounter()
    compiled = torch.compile(model, backend=counter)
    graphs_after = []
    for i, s in enumerate(LENGTHS):
        tokens = torch.randint(16, (2, s))
        with torch.no_grad(), model.pe.seeded(i):
            got = compiled(tokens)
        with torch.no_grad(), model.pe.seeded(i):
            want = model(tokens)
        torch.testing.assert_close(got, want)  # the same draw: the same positions
        graphs_after.append(len(counter.graphs))
    assert graphs_after[1:] == [graphs_after[1]] * (len(LENGTHS) - 1), f"graphs after each length: {graphs_after}"


RANDOM_OPS = {torch.rand, torch.randn, torch.randint, torch.randperm, torch.bernoulli, torch.multinomial}


def _random_ops(gm: torch.fx.GraphModule) -> list[str]:
    return [str(node.target) for node in gm.graph.nodes if node.target in RANDOM_OPS]


def _complex_values(gm: torch.fx.GraphModule) -> list[str]:
    found = []
    for node in gm.graph.nodes:
        val = node.meta.get("example_value", node.meta.get("val"))
        if isinstance(val, Tensor) and val.dtype.is_complex:
            found.append(f"{node.op} {node.target}")
    return found


@pytest.mark.parametrize("name", ["rope", "xpos", "randomized:rope"])
@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_rotations_trace_without_complex_tensors(name, layout, fresh_dynamo):
    """Inductor has no code generation for complex operators: the traced graphs must hold none."""
    if name == "xpos" and layout == "half":
        pytest.skip("xPos has one layout")
    options = {"layout": layout} if name != "xpos" else {}
    torch.manual_seed(0)
    model = Decoder(pezoo.create(name, dims=DIMS, **options))
    counter = GraphCounter()
    torch.compile(model, backend=counter)(torch.randint(16, (2, 7)))
    assert counter.graphs
    assert [c for gm in counter.graphs for c in _complex_values(gm)] == []


@pytest.mark.parametrize("name", ["rope", "xpos"])
def test_rotations_are_computed_once_per_call(name, fresh_dynamo):
    """Under compile the rotation table (a cos, a sin) is one opaque operator per call (RoPE:
    one, shared by q and k; xPos: one for q, one for k), not elementwise ops that inductor
    inlines into every layer's q/k kernels: there it recomputed cos, sin and xPos's ζ^x for
    each feature of q and k, forward and backward, and compiled xPos ran at 1.27× eager."""
    model = Decoder(pezoo.create(name, dims=DIMS))
    counter = GraphCounter()
    torch.compile(model, backend=counter)(torch.randint(16, (2, 7)))
    tables = [n for gm in counter.graphs for n in gm.graph.nodes if "rotation_table" in str(n.target)]
    assert len(tables) == (1 if name == "rope" else 2)


def test_rope_with_inductor_equals_eager(fresh_dynamo):
    """The real code path: inductor compiles RoPE's forward and backward, at two lengths with
    dynamic shapes (one compilation), and gives eager's numbers to float rounding (xPos goes
    the same way; `pezoo perf --sections compile` compares it, a compile too slow for here)."""
    compiled_model, eager_model = _pair("rope")
    compiled = torch.compile(compiled_model, dynamic=True)
    for i, s in enumerate((6, 9)):
        tokens = torch.randint(16, (2, s), generator=torch.Generator().manual_seed(s))
        want, want_grads = _loss_and_grads(eager_model, tokens, seed=i)
        got, got_grads = _loss_and_grads(compiled, tokens, seed=i)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        for g, w in zip(got_grads, want_grads, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    assert math.isfinite(float(got))
