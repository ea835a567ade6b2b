"""The ``flex`` backend: ``torch.nn.attention.flex_attention`` with each structured bias as a
``score_mod`` / ``mask_mod`` and a block mask built from per-block position ranges (no (i, j)
tensor; see :mod:`pezoo.backends` for the lowering table).

Axis letters: b batch, h heads, i queries, j keys, e q/k head dim, f value head dim;
blocks of 128 queries / keys are ``qb`` / ``kb``.

* ``flex_attention`` is wrapped by ``torch.compile`` once per process; dynamo then
  caches one graph per shape family and bias structure (a second distinct length
  triggers one dynamic-shape recompile, after which lengths vary freely; ALiBi and
  Hard-ALiBi are different structures). If compilation fails for a call configuration
  (shapes, dtype, bias structure, contiguous or gathered positions), that
  configuration is compiled again with static shapes (this makes torch 2.13's
  failing dynamic recompile with randomized positions work), and failing that runs
  the unfused (eager, materialising) flex implementation; one warning gives the
  reason, and other configurations keep the compiled kernel. After three
  configurations failed both ways, compilation is switched off for the process.
  :func:`set_flex_compile` / :func:`flex_compile` switch compilation off (the
  conformance kit does, for speed).
* On CPU, calls with fewer than 128 queries are zero-padded to one block (torch 2.13's
  compiled CPU kernel returns wrong values for them after a dynamic recompile, or
  when the value head dim differs from the q/k one); padded keys are masked.
* With consecutive positions shared by the batch, distances come from the indices;
  otherwise (randomized PE) the kernel reads the (b, i) / (b, j) position vectors.
* A single query (incremental decoding) goes through ``sdpa``: its bias row is O(j),
  not O(i·j), and one-row flex calls would only add compile churn.
* On CPU, flex has no backward pass; when gradients are needed the call goes through
  ``sdpa`` instead (warned once).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor

from pezoo.attention import BACKENDS, register_backend
from pezoo.biases import (
    AttentionBias,
    DenseBias,
    ElementForm,
    ElementSite,
    PositionRanges,
    position_block_blocks,
    window_blocks,
)
from pezoo.context import AttentionContext, contiguous_positions
from pezoo.scores import check_backend

__all__ = ["FLEX_BLOCK_SIZE", "flex_block_mask", "flex_compile", "flex_compile_enabled", "set_flex_compile"]

FLEX_BLOCK_SIZE = 128

_FLEX: dict[str, Any] = {
    "compile": True,
    "compiled": None,  # torch.compile(flex_attention), dynamic shapes after the second length
    "static": None,  # torch.compile(flex_attention, dynamic=False), for keys the first fails on
    "failed": False,
    "failed_keys": {},  # call key -> why both compiles failed (runs unfused)
    "static_keys": {},  # call key -> why the dynamic compile failed (runs the static kernel)
}

FLEX_MAX_FAILED_KEYS = 3
"""After compiled flex has failed for this many distinct call keys, it is switched off for the
process (a missing compiler fails every shape, and each attempt can cost a full compile)."""
_WARNED: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def set_flex_compile(enabled: bool) -> None:
    """Use the compiled flex kernel (default) or the unfused eager flex implementation."""
    _FLEX["compile"] = enabled


@contextmanager
def flex_compile(enabled: bool) -> Iterator[None]:
    """Context manager: set :func:`set_flex_compile` inside, restore the previous setting after."""
    previous = _FLEX["compile"]
    _FLEX["compile"] = enabled
    try:
        yield
    finally:
        _FLEX["compile"] = previous


def flex_compile_enabled() -> bool:
    """Whether flex calls go through the compiled kernel (on, and compilation has not failed)."""
    return bool(_FLEX["compile"]) and not _FLEX["failed"]


def _flex_attention_fn() -> Callable[..., Tensor]:
    from torch.nn.attention.flex_attention import flex_attention

    if not flex_compile_enabled():
        return flex_attention
    if _FLEX["compiled"] is None:
        _FLEX["compiled"] = torch.compile(flex_attention)
    return _FLEX["compiled"]


def _static_flex_fn() -> Callable[..., Tensor]:
    """flex_attention compiled with static shapes: one kernel per shape, no dynamic recompile."""
    from torch.nn.attention.flex_attention import flex_attention

    if _FLEX["static"] is None:
        _FLEX["static"] = torch.compile(flex_attention, dynamic=False)
    return _FLEX["static"]


def _failure_reason(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _run_flex(q: Tensor, k: Tensor, v: Tensor, *, key: tuple[Any, ...] | None = None, **kwargs: Any) -> Any:
    """The compiled flex kernel's output (with ``return_lse=True``, and its log-sum-exp); for a
    call key whose compilation fails, a static-shape compile of that shape, and failing that
    the unfused kernel.

    ``key`` names the call's configuration (shapes, dtype, bias structure; by default the
    shapes and dtype). torch 2.13's CPU compiler fails for some configurations only: a
    second length with non-contiguous (randomized) positions breaks the dynamic-shape
    recompile (``CppCompileError: 'cur_kvSplitSize8' was not declared``), while a
    static-shape compile of the same call works. So a failure first retries that key with
    ``torch.compile(flex_attention, dynamic=False)`` (one more compile per such shape),
    and only if that fails too is the key marked failed and run unfused. Either way one
    warning gives the reason, and other keys keep the compiled kernel. After
    :data:`FLEX_MAX_FAILED_KEYS` keys failed both ways, compilation is off for the process.
    """
    from torch.nn.attention.flex_attention import flex_attention

    if key is None:
        key = (q.device.type, q.dtype, tuple(q.shape), tuple(k.shape), tuple(v.shape))
    failed: dict[tuple[Any, ...], str] = _FLEX["failed_keys"]
    static: dict[tuple[Any, ...], str] = _FLEX["static_keys"]
    if flex_compile_enabled() and key not in failed:
        if key not in static:
            try:
                return _flex_attention_fn()(q, k, v, **kwargs)
            except Exception as exc:  # no compiler toolchain, unsupported config, a shape the compiler breaks on
                static[key] = _failure_reason(exc)
        try:
            out = _static_flex_fn()(q, k, v, **kwargs)
        except Exception as exc:
            failed[key] = f"{static.pop(key)}; static shapes: {_failure_reason(exc)}"
        else:
            _warn_once(
                f"flex-compile:{key}",
                f"compiling flex_attention failed for {_describe_key(key)} ({static[key]}); compiled it with "
                "static shapes for this configuration instead",
            )
            return out
        if len(failed) >= FLEX_MAX_FAILED_KEYS:
            _FLEX["failed"] = True
            _warn_once(
                "flex-compile",
                f"compiling flex_attention failed for {len(failed)} call configurations (last: {failed[key]}); "
                "using the unfused flex for every call from now on",
            )
        else:
            _warn_once(
                f"flex-compile:{key}",
                f"compiling flex_attention failed for {_describe_key(key)} ({failed[key]}); using the unfused flex "
                "for this configuration only",
            )
    with warnings.catch_warnings():  # the unfused path is deliberate here
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
        return flex_attention(q, k, v, **kwargs)


def _describe_key(key: tuple[Any, ...]) -> str:
    return "calls of shape " + ", ".join(str(part) for part in key)


def _batched(t: Tensor, batch: int) -> Tensor:
    """(1|b, n) -> (b, n) float32, contiguous (small: positions, not pairs)."""
    return t.to(torch.float32).expand(batch, -1).contiguous()


def _block_ranges(pos: Tensor, n_blocks: int, block: int) -> tuple[Tensor, Tensor]:
    """Per-block min and max of positions: (b, n) -> (b, n_blocks) twice."""
    pad = n_blocks * block - pos.shape[-1]
    lo = torch.nn.functional.pad(pos, (0, pad), value=math.inf).unflatten(-1, (n_blocks, block)).amin(-1)
    hi = torch.nn.functional.pad(pos, (0, pad), value=-math.inf).unflatten(-1, (n_blocks, block)).amax(-1)
    return lo, hi


def flex_block_mask(
    ctx: AttentionContext,
    windows: Sequence[Tensor],
    n_heads: int,
    n_queries: int,
    n_keys: int,
    mask_mod: Callable[..., Tensor],
    *,
    batch: int = 1,
    block: int = FLEX_BLOCK_SIZE,
    position_blocks: Sequence[Tensor] = (),
) -> Any:
    """A torch ``BlockMask`` for causal + per-head windows (``windows``: each a
    :class:`pezoo.WindowMask`'s (h,) windows) + key padding + blockwise attention
    (``position_blocks``: each a :class:`pezoo.BlockMask`'s block length, a 0-d float
    tensor), from block summaries only (:func:`_block_mask` for any masks' summaries)."""
    summaries = [
        *(functools.partial(window_blocks, w) for w in windows),
        *(functools.partial(position_block_blocks, size) for size in position_blocks),
    ]
    return _block_mask(ctx, summaries, n_heads, n_queries, n_keys, mask_mod, batch=batch, block=block)


def _block_mask(
    ctx: AttentionContext,
    summaries: Sequence[Callable[[PositionRanges], tuple[Tensor, Tensor]]],
    n_heads: int,
    n_queries: int,
    n_keys: int,
    mask_mod: Callable[..., Tensor],
    *,
    batch: int = 1,
    block: int = FLEX_BLOCK_SIZE,
) -> Any:
    """A torch ``BlockMask`` for causal + key padding + the masks whose block ``summaries``
    (:attr:`pezoo.biases.ElementForm.blocks`) are given, from block summaries only.

    For each (query block, key block) the positions' range is bounded by the blocks'
    position minima/maxima; a block is *skipped* when no pair in it can be allowed,
    *full* when every pair is certainly allowed (and the block is not ragged), and
    *partial* otherwise (``mask_mod`` decides per element). Skipping only provably empty
    blocks keeps it exact; memory is O(b·h·(i/128)·(j/128)).
    """
    from torch.nn.attention.flex_attention import BlockMask as TorchBlockMask  # not pezoo.BlockMask

    nqb, nkb = -(-n_queries // block), -(-n_keys // block)
    pad = ctx.key_padding_mask
    b = (
        max(ctx.q_pos.shape[0], ctx.k_pos.shape[0], 1 if pad is None else pad.shape[0])
        if summaries or pad is not None
        else 1
    )
    any_ok, all_ok = _allowed_blocks(ctx, summaries, n_queries, n_keys, b, block)  # (b|1, h|1, qb, kb) each
    # Full (batch, heads) extent, never broadcast: after a dynamic-shape recompile the
    # compiled CPU kernel (torch 2.13) reads a size-1 batch dim of the block mask wrongly.
    shape = (max(b, batch), n_heads, nqb, nkb)
    full = (all_ok & any_ok).expand(shape)
    partial = (any_ok & ~full).expand(shape)

    def to_blocks(sel: Tensor) -> tuple[Tensor, Tensor]:
        counts = sel.sum(-1).to(torch.int32)  # (b, h, qb)
        order = torch.argsort((~sel).to(torch.int8), dim=-1, stable=True).to(torch.int32)  # selected first
        return counts, order

    kv_num, kv_idx = to_blocks(partial)
    full_num, full_idx = to_blocks(full)
    return TorchBlockMask.from_kv_blocks(
        kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=block, mask_mod=mask_mod, seq_lengths=(n_queries, n_keys)
    )


def _allowed_blocks(
    ctx: AttentionContext,
    summaries: Sequence[Callable[[PositionRanges], tuple[Tensor, Tensor]]],
    n_queries: int,
    n_keys: int,
    b: int,
    block: int,
) -> tuple[Tensor, Tensor]:
    """(any pair allowed, every pair allowed) per (query block, key block), each
    broadcastable to (b, h, qb, kb): the causal mask, the masks' summaries, key padding."""
    device = ctx.q_pos.device
    nqb, nkb = -(-n_queries // block), -(-n_keys // block)
    pad = ctx.key_padding_mask
    qb_start = torch.arange(nqb, device=device) * block  # (qb,)
    kb_start = torch.arange(nkb, device=device) * block  # (kb,)
    qb_end = (qb_start + block).clamp(max=n_queries) - 1
    kb_end = (kb_start + block).clamp(max=n_keys) - 1
    ragged = ((qb_end - qb_start + 1) < block)[:, None] | ((kb_end - kb_start + 1) < block)[None, :]  # (qb, kb)
    any_ok = torch.ones(1, 1, nqb, nkb, dtype=torch.bool, device=device)  # (b, h, qb, kb)
    all_ok = ~ragged[None, None]
    if ctx.causal:
        offset = n_keys - n_queries
        any_ok = any_ok & (kb_start[None, :] <= qb_end[:, None] + offset)
        all_ok = all_ok & (kb_end[None, :] <= qb_start[:, None] + offset)
    if summaries:
        q_lo, q_hi = _block_ranges(_batched(ctx.q_pos, b), nqb, block)  # (b, qb)
        k_lo, k_hi = _block_ranges(_batched(ctx.k_pos, b), nkb, block)  # (b, kb)
        ranges = PositionRanges(q_lo, q_hi, k_lo, k_hi)
        for summary in summaries:
            some, every = summary(ranges)  # each (b|1, h|1, qb, kb)
            any_ok, all_ok = any_ok & some, all_ok & every
    if pad is not None:
        kpad = torch.nn.functional.pad(pad.to(device), (0, nkb * block - n_keys), value=False)
        kpad = kpad.unflatten(-1, (nkb, block))  # (b, kb, 128)
        any_ok = any_ok & kpad.any(-1)[:, None, None, :]
        all_ok = all_ok & kpad.all(-1)[:, None, None, :]
    return any_ok, all_ok


def _every_block(ranges: PositionRanges) -> tuple[Tensor, Tensor]:
    """The block summary of a mask that has none: any block may hold an allowed pair, none is surely full."""
    return torch.ones((), dtype=torch.bool), torch.zeros((), dtype=torch.bool)


def _element_site(ctx: AttentionContext, n_heads: int, n_queries: int, n_keys: int, batch: int) -> ElementSite:
    """Where flex reads each bias per element: positions from the indices when they are
    consecutive and shared by the batch (no gathers in the kernel), else from the (b, i) /
    (b, j) position vectors; every captured tensor is O(b·(i+j))."""
    qp, kp = _batched(ctx.q_pos, batch), _batched(ctx.k_pos, batch)  # (b, i), (b, j)
    offset = n_keys - n_queries  # query index qi is key index qi + offset
    if contiguous_positions(ctx):

        def distance(b: Tensor, qi: Tensor, kj: Tensor) -> Tensor:
            return (qi + offset - kj).to(torch.float32)

        first = kp[0, 0]  # () the first key's position: key index kj is at first + kj

        def q_position(b: Tensor, qi: Tensor) -> Tensor:
            return (qi + offset).to(torch.float32) + first

        def k_position(b: Tensor, kj: Tensor) -> Tensor:
            return kj.to(torch.float32) + first

    else:

        def distance(b: Tensor, qi: Tensor, kj: Tensor) -> Tensor:
            return qp[b, qi] - kp[b, kj]

        def q_position(b: Tensor, qi: Tensor) -> Tensor:
            return qp[b, qi]

        def k_position(b: Tensor, kj: Tensor) -> Tensor:
            return kp[b, kj]

    return ElementSite(ctx, batch, n_heads, n_queries, n_keys, qp.device, distance, q_position, k_position)


def _flex_mods(
    ctx: AttentionContext,
    biases: Sequence[AttentionBias],
    n_heads: int,
    n_queries: int,
    n_keys: int,
    batch: int,
    first: Callable[[Tensor], Tensor] | None = None,
) -> tuple[Callable[..., Tensor] | None, Callable[..., Tensor] | None, list[ElementForm]]:
    """(score_mod, mask_mod, the masks' element forms) for flex: every bias through its
    per-element form (:meth:`pezoo.biases.AttentionBias.element`), the causal mask and
    the key padding added here. ``first``: an elementwise score transform applied to the
    raw score before the biases (:meth:`pezoo.scores.ScoreTransform.score_fn`: soft-capping)."""
    site = _element_site(ctx, n_heads, n_queries, n_keys, batch)
    forms = [bias.element(site) for bias in biases]
    scores = [f.score for f in forms if f.score is not None]
    masks = [f for f in forms if f.allowed is not None]
    score_mod = None
    if scores or first is not None:

        def score_mod(score: Tensor, b: Tensor, h: Tensor, qi: Tensor, kj: Tensor) -> Tensor:
            if first is not None:
                score = first(score)
            for add in scores:
                score = add(score, b, h, qi, kj)
            return score

    causal, offset = ctx.causal, n_keys - n_queries
    pad = None if ctx.key_padding_mask is None else ctx.key_padding_mask.expand(batch, -1).contiguous()
    allowed = [f.allowed for f in masks if f.allowed is not None]
    mask_mod = None
    if causal or allowed or pad is not None:

        def mask_mod(b: Tensor, h: Tensor, qi: Tensor, kj: Tensor) -> Tensor:
            ok = kj >= 0
            if causal:
                ok = ok & (kj <= qi + offset)
            for mask in allowed:
                ok = ok & mask(b, h, qi, kj)
            if pad is not None:
                ok = ok & pad[b, kj]
            return ok

    return score_mod, mask_mod, masks


@register_backend("flex")
def _flex(q, k, v, ctx, biases, scale, return_probs, *, transform=None, normaliser=None):
    if return_probs:
        raise ValueError("the flex backend cannot return attention probabilities; use backend='eager'")
    check_backend("flex", transform, normaliser)
    b, h, i, _ = q.shape
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if i == 1 or (needs_grad and q.device.type == "cpu"):
        if i > 1:
            _warn_once(
                "flex-cpu-grad", "flex_attention has no backward pass on CPU; calls that need gradients use sdpa"
            )
        if transform is not None or normaliser is not None:  # sdpa cannot express them: the explicit path
            return BACKENDS["eager"](q, k, v, ctx, biases, scale, False, transform=transform, normaliser=normaliser)
        return BACKENDS["sdpa"](q, k, v, ctx, biases, scale, False)
    if q.device.type == "cpu" and i < FLEX_BLOCK_SIZE:
        q, k, v, ctx, biases = _pad_to_one_block(q, k, v, ctx, biases)
    pi, pj = q.shape[2], k.shape[2]
    first = None if transform is None else transform.score_fn()
    score_mod, mask_mod, masks = _flex_mods(ctx, biases, h, pi, pj, b, first)
    block_mask = None
    if mask_mod is not None:
        summaries = [m.blocks or _every_block for m in masks]
        block_mask = _block_mask(ctx, summaries, h, pi, pj, mask_mod, batch=b)
    key = (
        q.device.type,
        q.dtype,
        tuple(q.shape),
        tuple(k.shape),
        tuple(v.shape),
        "contiguous" if contiguous_positions(ctx) else "gathered positions",
        tuple(type(bias).__name__ for bias in biases),
        "causal" if ctx.causal else "bidirectional",
        ctx.key_padding_mask is not None,
        None if transform is None else type(transform).__name__,
        None if normaliser is None else type(normaliser).__name__,
    )
    factor = None if normaliser is None else normaliser.softmax_factor()
    if normaliser is not None and factor is None:
        raise ValueError(
            f"{type(normaliser).__name__} names flex among its backends but is not softmax times a factor of the "
            "log-sum-exp (its softmax_factor is None), which is all flex can apply"
        )
    if factor is None:
        out = _run_flex(q, k, v, key=key, score_mod=score_mod, block_mask=block_mask, scale=scale)
        return out[:, :, :i], None
    out, lse = _run_flex(q, k, v, key=key, score_mod=score_mod, block_mask=block_mask, scale=scale, return_lse=True)
    return (out[:, :, :i] * factor(lse[:, :, :i]).unsqueeze(-1).to(out.dtype)), None


def _pad_to_one_block(
    q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext, biases: Sequence[AttentionBias]
) -> tuple[Tensor, Tensor, Tensor, AttentionContext, list[AttentionBias]]:
    """Pad a short call to at least one full block of queries (CPU only).

    The compiled CPU flex kernel of torch 2.13 returns wrong values for sequences shorter
    than one block (128) when the value head dim differs from the q/k one, and for any
    such sequence once it has been recompiled for dynamic shapes. Queries and keys are
    padded at the end (i -> 128, j -> j + 128 - i, keeping the causal offset); padded
    keys are masked through the key-padding mask, padded query rows are dropped.
    """
    b, h, i, _ = q.shape
    j = k.shape[2]
    extra = FLEX_BLOCK_SIZE - i

    def more_positions(pos: Tensor) -> Tensor:  # increasing filler after the last position
        tail = pos[:, -1:] + 1 + torch.arange(extra, device=pos.device)
        return torch.cat([pos, tail], dim=1)

    live = torch.ones(1, j, dtype=torch.bool, device=q.device) if ctx.key_padding_mask is None else ctx.key_padding_mask
    live = torch.nn.functional.pad(live.to(q.device), (0, extra), value=False)  # (b|1, j + extra)
    padded_ctx = AttentionContext(
        q_pos=more_positions(ctx.q_pos),
        k_pos=more_positions(ctx.k_pos),
        causal=ctx.causal,
        state=ctx.state,
        key_padding_mask=live,
        scale_hint=ctx.scale_hint,
        scratch=ctx.scratch,
        head_dim=ctx.head_dim,
        state_kept=ctx.state_kept,
    )
    padded_biases: list[AttentionBias] = []
    for bias in biases:
        if bias.reads_positions_only:  # the padded ctx has its positions
            padded_biases.append(bias)
        else:
            t = bias.materialize(ctx, h, torch.float32).to(q.device).expand(b, h, i, j)
            padded_biases.append(DenseBias(torch.nn.functional.pad(t, (0, extra, 0, extra))))
    q, k, v = (torch.nn.functional.pad(t, (0, 0, 0, extra)) for t in (q, k, v))
    return q, k, v, padded_ctx, padded_biases
