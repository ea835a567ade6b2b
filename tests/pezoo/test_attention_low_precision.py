"""Attention under CPU autocast (bf16/fp16): ``sdpa`` and ``auto`` take the explicit
matmul-softmax path below CPU_LOW_PRECISION_MATH_MAX_SCORES scores per head (faster there than
SDPA's kernel; a lower limit where the CPU has AMX tiles, docs/performance.md), agree with
eager and with float32 for every encoding's biases, and leave float32 attention on SDPA as it
was."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import pezoo
from pezoo import attention
from pezoo.context import AttentionContext

B, H, S, E = 2, 4, 12, 16


@pytest.fixture
def sdpa_calls(monkeypatch):
    calls = []
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(args[0].dtype)
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    return calls


def encoding_output(name, dtype, backend, x):
    """One attention layer's output with ``name``'s hooks, under autocast ``dtype`` (None: fp32)."""
    torch.manual_seed(0)
    pe = pezoo.create(name, dims=pezoo.ModelDims(E * H, H, 1))
    layer = pezoo.SelfAttention(E * H, H, layer=0, backend=backend)
    pos = torch.arange(S)[None].expand(B, S)
    with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        torch.manual_seed(1)  # randomized positions and the like draw alike
        ctx = AttentionContext(q_pos=pos, k_pos=pos, causal=True, state={}, scale_hint=torch.full((B,), S))
        h = pe.embed(x, ctx.q_pos)
        pe.observe(0, h, ctx)
        out = layer(h, pe, ctx)[0]
    return out.float()


BASES = [n for n in pezoo.available() if not n.startswith("randomized:")]


@pytest.mark.parametrize("name", BASES)
def test_every_encoding_in_bf16_agrees_across_backends_and_with_float32(name, sdpa_calls):
    x = torch.randn(B, S, E * H)
    reference = encoding_output(name, None, "eager", x)
    sdpa_calls.clear()
    takes = pezoo.create(name, dims=pezoo.ModelDims(E * H, H, 1)).attention_backends()  # None: every backend
    backends = [b for b in ("eager", "sdpa", "auto") if takes is None or b in (*takes, "auto")]
    outs = {backend: encoding_output(name, torch.bfloat16, backend, x) for backend in backends}
    assert torch.bfloat16 not in sdpa_calls  # the explicit path, not SDPA's bf16 kernel
    for backend, out in outs.items():
        torch.testing.assert_close(out, outs["eager"], atol=2e-2, rtol=2e-2, msg=backend)
        torch.testing.assert_close(out, reference, atol=6e-2, rtol=6e-2, msg=backend)


def test_fp16_agrees_with_float32_without_overflow_on_large_logits(sdpa_calls):
    """fp16 tops out at 65504: q·k of wide heads with large entries overflows unless q is scaled
    first, as the explicit path does for fp16."""
    q = torch.full((1, 1, 4, 256), 20.0)
    k = torch.full((1, 1, 4, 256), 20.0)  # q·k = 102400 > 65504
    v = torch.randn(1, 1, 4, 8)
    ctx = AttentionContext(q_pos=torch.arange(4)[None], k_pos=torch.arange(4)[None], causal=True, state={})
    reference, _ = pezoo.attend(q, k, v, ctx, backend="sdpa", scale=256**-0.5)
    out, _ = pezoo.attend(q.half(), k.half(), v.half(), ctx, backend="sdpa", scale=256**-0.5)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), reference, atol=1e-2, rtol=1e-2)


def test_float32_and_long_low_precision_calls_stay_on_sdpa(monkeypatch, sdpa_calls):
    q = k = v = torch.randn(1, 2, 16, 8)
    ctx = AttentionContext(q_pos=torch.arange(16)[None], k_pos=torch.arange(16)[None], causal=True, state={})
    pezoo.attend(q, k, v, ctx, backend="sdpa")
    assert sdpa_calls == [torch.float32]  # fp32: the kernel it always ran
    monkeypatch.setattr(attention, "CPU_LOW_PRECISION_MATH_MAX_SCORES", 16 * 16)
    pezoo.attend(q.bfloat16(), k.bfloat16(), v.bfloat16(), ctx, backend="sdpa")
    assert sdpa_calls == [torch.float32, torch.bfloat16]  # from the threshold on: SDPA, no (i, j) scores kept


def test_the_crossover_follows_the_cpus_amx_tiles_and_a_probe_that_cannot_tell_means_none(monkeypatch):
    """The explicit path's limit is set at import from ``torch.cpu``'s AMX probe (a private
    function): where it is missing or raises, the limit measured without AMX holds."""
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert attention._cpu_has_amx() is True

    def broken() -> bool:
        raise RuntimeError("cpuinfo unavailable")

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", broken)
    assert attention._cpu_has_amx() is False
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported")
    assert attention._cpu_has_amx() is False
