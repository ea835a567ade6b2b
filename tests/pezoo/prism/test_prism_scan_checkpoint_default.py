"""Default PRISM checkpoints its scan by itself above SCAN_CHECKPOINT_ABOVE tokens: the same
outputs and gradients as the plain scan, memory linear in the length; below, bit for bit the
plain scan (the board's sequences)."""

from __future__ import annotations

import pytest
import torch

import pezoo
from pezoo.encodings.prism import PRISMConfig, fused_scan
from pezoo.encodings.prism import config as prism_config
from pezoo.encodings.prism.layer import PRISMLayer

D, H = 16, 2


def run(x, spy, **options):
    """(streams, parameter gradients, checkpointed chunks) of one forward + backward pass."""
    torch.manual_seed(0)
    layer = PRISMLayer(PRISMConfig(d_model=D, n_heads=H, n_layers=1, d_pe=8, **options))
    spy.clear()
    g_q, g_k, _, _ = layer(x, None)
    (g_q.square().sum() + g_k.sum()).backward()
    grads = {n: p.grad.clone() for n, p in layer.named_parameters() if p.grad is not None}
    return torch.cat([g_q, g_k]).detach(), grads, len(spy)


@pytest.fixture
def spy(monkeypatch):
    """The chunks the fused scan recomputes in a backward pass (its checkpointing)."""
    calls = []
    real = fused_scan._scan_forward

    def counting(*args, **kwargs):
        if not kwargs.get("emit", True):  # a chunk's windows recomputed for its reverse scan
            calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(fused_scan, "_scan_forward", counting)
    return calls


def test_the_default_is_automatic_and_recorded_runs_keep_their_options():
    assert PRISMConfig(d_model=D, n_heads=H, n_layers=1).scan_checkpoint is None
    cfg = PRISMConfig(d_model=D, n_heads=H, n_layers=1)
    above = prism_config.SCAN_CHECKPOINT_ABOVE
    assert cfg.scan_chunk(above) == 0 and cfg.scan_chunk(above + 1) == prism_config.SCAN_CHECKPOINT_CHUNK
    assert PRISMConfig(d_model=D, n_heads=H, n_layers=1, scan_checkpoint=0).scan_chunk(10**6) == 0  # off, as asked
    with pytest.raises(ValueError, match="scan_checkpoint"):
        PRISMConfig(d_model=D, n_heads=H, n_layers=1, scan_checkpoint=-1)


def test_above_the_threshold_the_default_checkpoints_with_the_plain_scans_outputs_and_gradients(monkeypatch, spy):
    monkeypatch.setattr(prism_config, "SCAN_CHECKPOINT_ABOVE", 8)
    monkeypatch.setattr(prism_config, "SCAN_CHECKPOINT_CHUNK", 4)
    x = torch.randn(2, 24, D)
    plain = run(x, spy, scan_checkpoint=0)
    default = run(x, spy)
    assert plain[2] == 0 and default[2] == 6  # 24 tokens in chunks of 4
    torch.testing.assert_close(default[0], plain[0])
    assert default[1].keys() == plain[1].keys()
    for name, grad in plain[1].items():
        torch.testing.assert_close(default[1][name], grad, msg=name)


def test_below_the_threshold_the_default_is_the_plain_scan_bit_for_bit(spy):
    x = torch.randn(2, 40, D)
    plain, default = run(x, spy, scan_checkpoint=0), run(x, spy)
    assert default[2] == 0
    assert torch.equal(default[0], plain[0])
    assert all(torch.equal(default[1][n], g) for n, g in plain[1].items())


def test_decoding_and_evaluation_never_checkpoint(monkeypatch, spy):
    monkeypatch.setattr(prism_config, "SCAN_CHECKPOINT_ABOVE", 4)
    layer = PRISMLayer(PRISMConfig(d_model=D, n_heads=H, n_layers=1, d_pe=8))
    with torch.no_grad():
        layer(torch.randn(1, 16, D), None)
    assert not spy


def _saved_mib(model, length):
    """MiB of the tensors a forward pass keeps for its backward pass (each storage once), a
    backward pass taken: what grows with the length in training memory."""
    from torch.autograd.graph import saved_tensors_hooks

    tokens = torch.randint(1, 64, (1, length), generator=torch.Generator().manual_seed(length))
    model.zero_grad(set_to_none=True)
    storages: dict[int, int] = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with saved_tensors_hooks(pack, lambda t: t):
        out = model(tokens)
    out.float().mean().backward()
    return sum(storages.values()) / 2**20


class _Model(torch.nn.Module):
    """Embeddings -> the encoding's hooks over one attention layer: PRISM's own memory."""

    def __init__(self, **options):
        super().__init__()
        self.embed = torch.nn.Embedding(64, 32)
        self.pe = pezoo.create("prism", dims=pezoo.ModelDims(32, 2, 1), **options)
        self.attn = pezoo.SelfAttention(32, 2, layer=0, backend="sdpa")

    def forward(self, tokens):
        pos = torch.arange(tokens.shape[1])[None]
        ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos, causal=True, state={})
        x = self.embed(tokens)
        self.pe.observe(0, x, ctx)
        return self.attn(x, self.pe, ctx)[0]


@pytest.mark.slow
def test_default_prism_memory_grows_linearly_with_the_length():
    """Forward + backward at batch 1: what the plain scan keeps for backward grows ~3x per
    doubling of a long sequence (3.2x from 300 to 600 tokens: per-step windows of up to 2P+1 bins, P ~ S), the default's
    at most 2.5x (1.6x: one starting histogram per chunk)."""
    torch.manual_seed(0)
    default, plain = _Model(), _Model(scan_checkpoint=0)
    grow = {name: _saved_mib(m, 600) / _saved_mib(m, 300) for name, m in (("default", default), ("plain", plain))}
    assert grow["default"] <= 2.5 < grow["plain"], grow
