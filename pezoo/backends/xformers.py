"""The ``xformers`` backend: ``xformers.ops.memory_efficient_attention`` with its ``attn_bias``
classes (CUDA only: it refuses CPU tensors, so xformers is an optional extra). Causal heads
and per-head windows are grouped into one call per window; every other bias is a dense
tensor (see :mod:`pezoo.backends` for the lowering table).

Axis letters: b batch, h heads, i queries, j keys, s sequence (xformers' (b, s, h, e)
layout), e q/k head dim.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from pezoo.attention import dense_mask, register_backend
from pezoo.biases import AttentionBias, WindowMask
from pezoo.context import AttentionContext, contiguous_positions

__all__ = ["xformers_available", "xformers_plan"]


def xformers_available() -> bool:
    """Whether ``xformers.ops`` imports and CUDA is usable."""
    if not torch.cuda.is_available():
        return False
    try:
        import xformers.ops  # noqa: F401
    except Exception:
        return False
    return True


def xformers_plan(
    ctx: AttentionContext, biases: Sequence[AttentionBias], *, n_queries: int
) -> list[tuple[Tensor | None, float]] | None:
    """How xformers can run these biases without a dense tensor, or None (use a dense bias).

    Returns a list of (head indices or None for all heads, window) groups; window is
    ``inf`` for plain causal heads. Structured lowering needs causal attention, no key
    padding, only :class:`WindowMask` biases, and consecutive positions (windows are
    counted in positions, xformers' local masks in indices).
    """
    windowed = [bias for bias in biases if isinstance(bias, WindowMask)]
    if len(windowed) < len(biases):
        return None
    if not ctx.causal or ctx.key_padding_mask is not None:
        return None if biases or ctx.key_padding_mask is not None else [(None, math.inf)]
    if not biases:
        return [(None, math.inf)]
    if not contiguous_positions(ctx):
        return None
    windows = torch.stack([bias.windows.to(torch.float32).cpu() for bias in windowed]).amin(0)  # (h,)
    groups = []
    for w in torch.unique(windows).tolist():
        heads = (windows == w).nonzero().squeeze(1)
        window = math.inf if math.isinf(w) else float(math.ceil(w))  # |d| < w on integers
        groups.append((heads, window))
    return groups


def _require_xformers(q: Tensor) -> Any:
    if not q.is_cuda:
        raise RuntimeError(
            "the xformers backend needs CUDA tensors (xformers.ops.memory_efficient_attention refuses CPU "
            "tensors); use backend='sdpa', 'flex' or 'auto' on this device"
        )
    try:
        import xformers.ops as xops
    except Exception as exc:
        raise RuntimeError(
            f"the xformers backend needs the xformers package ({exc}); install the gpu extra: "
            "pip install 'pezoo[gpu]', or use backend='sdpa', 'flex' or 'auto'"
        ) from exc
    return xops


@register_backend("xformers")
def _xformers(q, k, v, ctx, biases, scale, return_probs):
    if return_probs:
        raise ValueError("the xformers backend cannot return attention probabilities; use backend='eager'")
    xops = _require_xformers(q)
    from xformers.ops import fmha

    b, h, i, _ = q.shape
    j = k.shape[2]
    qx, kx, vx = (t.transpose(1, 2) for t in (q, k, v))  # (b, s, h, e): xformers' layout
    plan = xformers_plan(ctx, biases, n_queries=i)
    if plan is None:
        mask = dense_mask(ctx, biases, h, i, j, q.dtype, q.device)
        aligned = torch.zeros(b, h, i, -(-j // 8) * 8, dtype=q.dtype, device=q.device)  # kernels want j % 8 == 0
        aligned[..., :j] = mask.expand(b, h, i, j)
        out = xops.memory_efficient_attention(qx, kx, vx, attn_bias=aligned[..., :j], scale=scale)
        return out.transpose(1, 2), None
    out = torch.empty(b, i, h, v.shape[-1], dtype=v.dtype, device=v.device)
    for heads, window in plan:
        if not ctx.causal:
            attn_bias = None
        elif math.isinf(window):
            attn_bias = fmha.attn_bias.LowerTriangularFromBottomRightMask()
        else:
            attn_bias = fmha.attn_bias.LowerTriangularFromBottomRightLocalAttentionMask(int(window))
        if heads is None:
            return xops.memory_efficient_attention(qx, kx, vx, attn_bias=attn_bias, scale=scale).transpose(1, 2), None
        heads = heads.to(q.device)
        part = xops.memory_efficient_attention(
            qx[:, :, heads].contiguous(),
            kx[:, :, heads].contiguous(),
            vx[:, :, heads].contiguous(),
            attn_bias=attn_bias,
            scale=scale,
        )
        out = out.index_copy(2, heads, part)
    return out.transpose(1, 2), None
