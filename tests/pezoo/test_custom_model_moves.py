"""An encoding inside a model of one's own (its attention, its KV cache, ``pezoo.attend``
without ``scale=``), moved across dtypes: decoding token by token equals the full pass for
every registered encoding, and attend's default scale is the model's head dim even after
PRISM widened q/k (issue 18, items 1 and 3)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import Tensor, nn

import pezoo

D, HEADS, LAYERS, VOCAB = 32, 4, 2, 12
DIMS = pezoo.ModelDims(D, HEADS, LAYERS)


class CachedGPT(nn.Module):
    """Pre-LN decoder with its own attention and KV cache (kept in the state dict it is given).

    ``manual=True`` computes attention by hand with the scale 1/sqrt(e) of the model's head
    dim (the reference); otherwise ``pezoo.attend`` is called without ``scale=``.
    """

    def __init__(self, pe: pezoo.PositionalEncoding, *, manual: bool = False) -> None:
        super().__init__()
        self.pe, self.manual = pe, manual
        self.emb = nn.Embedding(VOCAB, D)
        self.ln = nn.ModuleList(nn.LayerNorm(D) for _ in range(LAYERS))
        self.qkv = nn.ModuleList(nn.Linear(D, 3 * D, bias=False) for _ in range(LAYERS))
        self.proj = nn.ModuleList(nn.Linear(D, D, bias=False) for _ in range(LAYERS))
        self.out = nn.Linear(D, VOCAB)

    def forward(self, tokens: Tensor, pos: Tensor, state: dict | None = None) -> Tensor:
        state = {} if state is None else state
        b, s = tokens.shape
        start = state.get("length", 0)
        hint = torch.full((b,), 5, device=tokens.device)  # instance scale, read by learned_prf_sh only
        ctx = pezoo.AttentionContext(
            q_pos=pos[:, start : start + s], k_pos=pos[:, : start + s], state=state, scale_hint=hint
        )
        x = self.pe.embed(self.emb(tokens), ctx.q_pos)  # (b, s, d)
        x = self.pe.embed_tokens(x, tokens, ctx)
        e = D // HEADS
        for layer in range(LAYERS):
            self.pe.observe(layer, x, ctx)
            q, k, v = self.qkv[layer](self.ln[layer](x)).view(b, s, 3, HEADS, e).permute(2, 0, 3, 1, 4)
            q, k = self.pe.qk(layer, q, k, ctx)  # (b, h, s, e'), e' >= e
            if ("kv", layer) in state:  # the model's own cache
                k_old, v_old = state[("kv", layer)]
                k, v = torch.cat([k_old, k], 2), torch.cat([v_old, v], 2)
            state[("kv", layer)] = (k, v)
            biases = self.pe.bias(layer, q, k, ctx)
            if self.manual:
                scores = q @ k.transpose(-1, -2) / math.sqrt(e)  # (b, h, i, j)
                scores = scores + pezoo.attention.dense_mask(
                    ctx, biases, HEADS, q.shape[2], k.shape[2], scores.dtype, scores.device
                )
                a = scores.softmax(-1) @ v
            else:
                a, _ = pezoo.attend(q, k, v, ctx, biases)  # no scale=: the default must be 1/sqrt(e)
            x = x + self.proj[layer](a.transpose(1, 2).reshape(b, s, D))
        state["length"] = start + s
        return self.out(x)


def _build(name: str, **kw) -> CachedGPT:
    torch.manual_seed(0)
    pe = pezoo.create(name, dims=DIMS)
    torch.manual_seed(1)
    return CachedGPT(pe, **kw).eval()


def test_attend_default_scale_is_the_model_head_dim_after_prism_widens_qk():
    tokens = torch.randint(VOCAB, (2, 10), generator=torch.Generator().manual_seed(0))
    pos = torch.arange(10)[None]
    default, manual = _build("prism"), _build("prism", manual=True)
    with torch.no_grad():
        got, want = default(tokens, pos), manual(tokens, pos)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_context_head_dim_sets_the_default_scale():
    q, k, v = torch.randn(3, 1, 2, 5, 40).unbind(0)
    ctx = pezoo.AttentionContext(q_pos=torch.arange(5)[None], k_pos=torch.arange(5)[None], head_dim=8)
    out, _ = pezoo.attend(q, k, v, ctx)
    want = (torch.einsum("bhie,bhje->bhij", q, k) / math.sqrt(8)).masked_fill(
        torch.ones(5, 5, dtype=torch.bool).triu(1), -math.inf
    ).softmax(-1) @ v
    torch.testing.assert_close(out, want)


TOLERANCE = {torch.float64: 1e-4, torch.float16: 0.05, torch.bfloat16: 0.25}


@pytest.mark.parametrize("name", pezoo.available())
def test_moved_across_dtypes_it_decodes_like_the_full_pass(name):
    s, prompt = 9, 4
    tokens = torch.randint(VOCAB, (2, s), generator=torch.Generator().manual_seed(1))
    reference_model = _build(name)
    pos = reference_model.pe.positions(2, s)  # eval mode: planned once for the whole sequence
    with torch.no_grad():
        reference = reference_model(tokens, pos)
    scale = reference.abs().max().item()
    for dtype in (torch.float64, torch.bfloat16, torch.float16):
        model = copy.deepcopy(reference_model).to(dtype)  # .to() rounds in place: move a copy
        with torch.no_grad():
            full = model(tokens, pos)
            state: dict = {}
            steps = [model(tokens[:, :prompt], pos, state)]
            steps += [model(tokens[:, t : t + 1], pos, state) for t in range(prompt, s)]
        step = torch.cat(steps, dim=1)
        assert full.dtype == step.dtype == dtype, name
        assert torch.isfinite(full).all() and torch.isfinite(step).all(), (name, dtype)
        tol = TOLERANCE[dtype] * scale
        assert (full.float() - reference).abs().max().item() <= tol, (name, dtype, "vs fp32")
        assert (step.float() - full.float()).abs().max().item() <= tol, (name, dtype, "incremental vs full")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", pezoo.available())
def test_moved_to_cuda_every_buffer_follows(name):
    tokens = torch.randint(VOCAB, (2, 7), generator=torch.Generator().manual_seed(2))
    model = _build(name)
    pos = model.pe.positions(2, 7)
    with torch.no_grad():
        want = model(tokens, pos)
        model = model.to("cuda")
        assert all(t.device.type == "cuda" for t in [*model.parameters(), *model.buffers()]), name
        got = model(tokens.cuda(), pos.cuda())
    assert got.device.type == "cuda"
    torch.testing.assert_close(got.cpu(), want, rtol=1e-3, atol=1e-4)
