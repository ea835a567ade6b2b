"""The ``hook_shapes`` conformance check: each hook called on plain tensors, what it returns
and what it leaves alone, and what the encoding declares of itself (see :mod:`pezoo.testing`).

Axis letters: b batch, s sequence, d model width, h heads, e head dim.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pezoo.attention import BACKENDS
from pezoo.biases import AttentionBias
from pezoo.context import AttentionContext
from pezoo.interface import PositionalEncoding
from pezoo.scores import Normaliser, ScoreTransform
from pezoo.testing.kit import Factory, KitConfig, build_model, fail, finite, random_tokens, scale_hints


def _described(value: Any) -> str:
    """``value`` in a few words for a message: a tensor by dtype and shape, a list by its items'
    kinds, never a tensor's full repr."""
    if isinstance(value, Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)} on {value.device}"
    if isinstance(value, (list, tuple)):
        items = ", ".join(_described(v) if isinstance(v, Tensor) else type(v).__name__ for v in value[:3])
        return f"a {type(value).__name__} of {len(value)} ({items}{', ...' if len(value) > 3 else ''})"
    return f"{type(value).__name__} {value!r}"[:200]


def _a_tensor(check: str, call: str, value: Any, device: torch.device) -> Tensor:
    """``value``, what ``call`` returned, if it is a tensor on ``device``; fail naming ``call`` otherwise."""
    if not isinstance(value, Tensor):
        fail(check, f"{call} must return a tensor, got {_described(value)}")
    if value.device.type != device.type or (device.index is not None and value.device.index != device.index):
        fail(check, f"{call} returned a tensor on {value.device}, not on the inputs' device {device}")
    return value


def _left_alone(check: str, call: str, **inputs: tuple[Tensor, Tensor]) -> None:
    """Fail unless each input (a copy taken before ``call``, the tensor after) is unchanged: a
    hook that writes into its inputs changes what the caller computes next (the residual
    stream, the q and k attention uses) without anything failing."""
    for arg, (before, after) in inputs.items():
        if not torch.equal(before, after):
            fail(check, f"{call} changed its input {arg} in place; hooks must leave their inputs alone")


def _check_declarations(check: str, pe: PositionalEncoding, cfg: KitConfig) -> None:
    """What the encoding says of itself, read before it runs: the backends it runs on and the
    head widths its qk takes."""
    takes = pe.attention_backends()
    if takes is not None:
        if not isinstance(takes, (tuple, list)) or not all(isinstance(t, str) for t in takes):
            fail(check, f"attention_backends() must return None or a tuple of backend names, got {_described(takes)}")
        unknown = [t for t in takes if t not in BACKENDS]
        if unknown:
            fail(
                check,
                f"attention_backends() names {', '.join(map(repr, unknown))}, no registered backend "
                f"(registered: {', '.join(sorted(BACKENDS))})",
            )
    n, e = cfg.dims.n_layers, cfg.dims.head_dim
    widths = pe.qk_head_dims(e, n)
    if not isinstance(widths, (list, tuple)) or len(widths) != n:
        fail(check, f"qk_head_dims({e}, {n}) must return one entry per layer ({n}), got {_described(widths)}")
    for layer, width in enumerate(widths):
        if width is not None and (not isinstance(width, int) or isinstance(width, bool) or width != e):
            fail(
                check,
                f"qk_head_dims({e}, {n}) says layer {layer} takes q/k {width!r} wide, but the kit model's heads are "
                f"{e} wide (ModelDims.head_dim): build the encoding for the dims given to the kit",
            )


def check_hook_shapes(factory: Factory, cfg: KitConfig) -> None:
    """Hooks on plain tensors: shapes, dtypes, devices, sorted positions, materialisable
    biases, inputs left unchanged, and what the encoding declares of itself."""
    name = "hook_shapes"
    d, h, e, b = cfg.dims.d_model, cfg.dims.n_heads, cfg.dims.head_dim, cfg.batch
    device = torch.device(cfg.device)
    for mode in ("train", "eval"):
        model = build_model(factory, cfg, cfg.seed)
        model.train(mode == "train")
        pe = model.pe
        _check_declarations(name, pe, cfg)
        for s in sorted({1, 2, 5, cfg.length}):
            pos = _a_tensor(name, f"positions({b}, {s})", pe.positions(b, s, cfg.device), device)
            if pos.dtype not in (torch.int32, torch.int64) or pos.dim() != 2 or pos.shape[-1] != s:
                fail(
                    name,
                    f"positions({b}, {s}) must be an integer (b|1, {s}) tensor, got {pos.dtype} {tuple(pos.shape)}",
                )
            if pos.shape[0] not in (1, b):
                fail(name, f"positions({b}, {s}) has batch dim {pos.shape[0]}, expected 1 or {b}")
            if s > 1 and not bool((pos[:, 1:] > pos[:, :-1]).all()):
                fail(name, f"positions({b}, {s}) are not strictly increasing ({mode} mode): {pos.tolist()}")
            ctx = AttentionContext(q_pos=pos, k_pos=pos, scale_hint=scale_hints(cfg, b, s))
            x = torch.randn(b, s, d, device=cfg.device)
            kept = x.clone(), pos.clone()
            y = _a_tensor(name, "embed(x, pos)", pe.embed(x, pos), device)
            _left_alone(name, "embed(x, pos)", x=(kept[0], x), pos=(kept[1], pos))
            if y.shape != x.shape or y.dtype != x.dtype:
                fail(name, f"embed changed {tuple(x.shape)} {x.dtype} into {tuple(y.shape)} {y.dtype}")
            finite(name, f"embed output at length {s}", y)
            tokens = random_tokens(cfg, s)
            kept = y.clone(), tokens.clone()
            y2 = _a_tensor(name, "embed_tokens(x, tokens, ctx)", pe.embed_tokens(y, tokens, ctx), device)
            _left_alone(name, "embed_tokens(x, tokens, ctx)", x=(kept[0], y), tokens=(kept[1], tokens))
            if y2.shape != y.shape or y2.dtype != y.dtype:
                fail(name, f"embed_tokens changed {tuple(y.shape)} {y.dtype} into {tuple(y2.shape)} {y2.dtype}")
            finite(name, f"embed_tokens output at length {s}", y2)
            y = y2
            for layer in range(cfg.dims.n_layers):
                kept_y = y.clone()
                pe.observe(layer, y, ctx)
                _left_alone(name, f"observe({layer}, x, ctx)", x=(kept_y, y))
                q, k = torch.randn(b, h, s, e, device=cfg.device), torch.randn(b, h, s, e, device=cfg.device)
                kept = q.clone(), k.clone()
                call = f"qk({layer}, q, k, ctx)"
                pair = pe.qk(layer, q, k, ctx)
                if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                    fail(name, f"{call} must return the pair (q, k), got {_described(pair)}")
                q2, k2 = (_a_tensor(name, call, t, device) for t in pair)
                _left_alone(name, call, q=(kept[0], q), k=(kept[1], k))
                if q2.shape[:3] != (b, h, s) or k2.shape[:3] != (b, h, s) or q2.shape[-1] != k2.shape[-1]:
                    fail(name, f"qk turned q, k {tuple(q.shape)} into {tuple(q2.shape)}, {tuple(k2.shape)}")
                if q2.shape[-1] < e:
                    fail(name, f"qk shrank the head dim from {e} to {q2.shape[-1]}")
                if q2.dtype != q.dtype or k2.dtype != k.dtype:
                    fail(name, f"{call} turned {q.dtype} q, k into {q2.dtype}, {k2.dtype}; return the inputs' dtype")
                if q2.shape[-1] != e and ctx.head_dim != e:
                    fail(
                        name,
                        f"{call} widened q/k from {e} to {q2.shape[-1]} but left ctx.head_dim = {ctx.head_dim}: record "
                        f"the model's head dim ({e}) there when it is None, or attend's default scale is "
                        f"1/sqrt({q2.shape[-1] if ctx.head_dim is None else ctx.head_dim})",
                    )
                kept = q2.clone(), k2.clone()
                call = f"bias({layer}, q, k, ctx)"
                biases = pe.bias(layer, q2, k2, ctx)
                _left_alone(name, call, q=(kept[0], q2), k=(kept[1], k2))
                if not isinstance(biases, (list, tuple)) or not all(isinstance(t, AttentionBias) for t in biases):
                    fail(name, f"{call} must return a list of AttentionBias, got {_described(biases)}")
                for bias in biases:
                    for dtype in (torch.float32, torch.bfloat16):
                        what = f"{type(bias).__name__}.materialize(ctx, {h}, {dtype})"
                        dense = _a_tensor(name, what, bias.materialize(ctx, h, dtype), device)
                        if dense.dtype != dtype:
                            fail(name, f"{what} returned {dense.dtype}: materialise in the dtype asked for")
                    dense = bias.materialize(ctx, h, torch.float32)
                    try:
                        torch.broadcast_shapes(dense.shape, (b, h, s, s))
                    except RuntimeError:
                        fail(name, f"{type(bias).__name__} materialises to {tuple(dense.shape)}, not (b, h, {s}, {s})")
                    if torch.isnan(dense).any():
                        fail(name, f"{type(bias).__name__} materialises NaN")
                transform, normaliser = pe.score_transform(layer, ctx), pe.normaliser(layer, ctx)
                if transform is not None and not isinstance(transform, ScoreTransform):
                    fail(name, f"score_transform must return a ScoreTransform or None, got {transform!r}")
                if normaliser is not None and not isinstance(normaliser, Normaliser):
                    fail(name, f"normaliser must return a Normaliser or None, got {normaliser!r}")
            out = model(random_tokens(cfg, s), pos, scale_hint=scale_hints(cfg, b, s))
            if out.shape != (b, s, cfg.vocab):
                fail(name, f"kit model output {tuple(out.shape)} != {(b, s, cfg.vocab)}")
            finite(name, f"kit model output at length {s}", out)
