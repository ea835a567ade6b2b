"""Structured attention biases: an encoding says *what* its bias is (:class:`LinearBias`,
:class:`WindowMask`, :class:`RelativeFunctionBias`, ...), each attention backend
(``pezoo.backends``) decides *how* to apply it."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from pezoo.context import AttentionContext


@dataclass(frozen=True)
class ElementSite:
    """Where a bias is read element by element (flex's ``score_mod`` / ``mask_mod``): one
    call's sizes, and per element the positions, as functions of the element's indices
    (b batch, qi query, kj key; 0-d tensors inside a kernel).

    Attributes:
        ctx: the call's context (for a bias that must materialise).
        batch, n_heads, n_queries, n_keys: the call's (b, h, i, j).
        device: where captured tensors must live.
        distance: ``(b, qi, kj) -> pos_i - pos_j`` (float32).
        q_position: ``(b, qi) -> pos_i`` (float32).
        k_position: ``(b, kj) -> pos_j`` (float32).
    """

    ctx: AttentionContext
    batch: int
    n_heads: int
    n_queries: int
    n_keys: int
    device: torch.device
    distance: Callable[[Tensor, Tensor, Tensor], Tensor]
    q_position: Callable[[Tensor, Tensor], Tensor]
    k_position: Callable[[Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class PositionRanges:
    """Per block of queries / keys, the least and greatest position in it: what a mask's
    block summary (:attr:`ElementForm.blocks`) reads to skip provably empty blocks.

    Attributes:
        q_lo, q_hi: (b, qb) float32.
        k_lo, k_hi: (b, kb) float32.
    """

    q_lo: Tensor
    q_hi: Tensor
    k_lo: Tensor
    k_hi: Tensor


@dataclass(frozen=True)
class ElementForm:
    """A bias as a function of one score element (b, h, qi, kj, score), which a backend
    applies without building the (i, j) tensor (flex's ``score_mod`` and ``mask_mod``).

    Attributes:
        score: ``(score, b, h, qi, kj) -> score`` with the additive bias added, or None.
        allowed: ``(b, h, qi, kj) -> bool`` where attention is allowed, or None (no mask).
        blocks: for a mask, ``PositionRanges -> (any allowed, all allowed)``, each
            broadcastable to (b, h, qb, kb): a sound summary per (query block, key block)
            (``any`` False only where no pair can be allowed, ``all`` True only where every
            pair is), or None when the mask cannot summarise blocks (every block is then visited).
    """

    score: Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor] | None = None
    allowed: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor] | None = None
    blocks: Callable[[PositionRanges], tuple[Tensor, Tensor]] | None = None


class AttentionBias:
    """Base class of the structured biases added to attention scores.

    Scores are ``scale * <q, k> + bias``: biases are added *after* the 1/sqrt(e)
    scaling. A bias may be lowered to a dense additive tensor (``materialize``) by any
    backend, or read element by element (``element``: flex). The default ``element``
    reads the materialised tensor; the structured biases say their per-element form.
    """

    reads_positions_only: ClassVar[bool] = False
    """Whether the bias is a function of the positions and the head alone (its element form
    reads nothing sized by the call), so a call padded with more positions keeps it as is."""

    def materialize(self, ctx: AttentionContext, n_heads: int, dtype: torch.dtype) -> Tensor:
        """Dense additive bias, broadcastable to (b, h, i, j); -inf where masked."""
        raise NotImplementedError

    def element(self, site: ElementSite) -> ElementForm:
        """The bias per score element at ``site``: by default its materialised tensor, indexed."""
        full = (site.batch, site.n_heads, site.n_queries, site.n_keys)
        dense = self.materialize(site.ctx, site.n_heads, torch.float32).to(site.device).expand(full)  # (b, h, i, j)

        def score(score: Tensor, b: Tensor, h: Tensor, qi: Tensor, kj: Tensor) -> Tensor:
            return score + dense[b, h, qi, kj]

        return ElementForm(score=score)


def _check_heads(kind: str, built: int, n_heads: int) -> None:
    """A per-head bias materialised for another head count: name it here, not as a broadcast
    error in the attention that adds it."""
    if built != n_heads:
        raise ValueError(f"{kind} holds {built} heads but was materialised for n_heads={n_heads}")


def _relative_distance(ctx: AttentionContext) -> Tensor:
    """pos_i - pos_j as float, (b|1, 1, i, j)."""
    q = ctx.q_pos.to(torch.float32)[:, None, :, None]
    k = ctx.k_pos.to(torch.float32)[:, None, None, :]
    return q - k


@dataclass(frozen=True, eq=False)
class LinearBias(AttentionBias):
    """ALiBi-style bias ``-slope_h * |pos_i - pos_j|`` (Press et al. 2022).

    Under a causal mask only j <= i matters, where it equals ``-slope_h * (pos_i - pos_j)``.

    Attributes:
        slopes: (h,) non-negative slope per head.
    """

    slopes: Tensor
    reads_positions_only = True

    def materialize(self, ctx: AttentionContext, n_heads: int, dtype: torch.dtype) -> Tensor:
        _check_heads("LinearBias", self.slopes.shape[0], n_heads)
        dist = _relative_distance(ctx).abs()  # (b, 1, i, j)
        return (-self.slopes.to(torch.float32).view(1, -1, 1, 1) * dist).to(dtype)

    def element(self, site: ElementSite) -> ElementForm:
        _check_heads("LinearBias", self.slopes.shape[0], site.n_heads)
        slopes = self.slopes.to(device=site.device, dtype=torch.float32)  # (h,)

        def score(score: Tensor, b: Tensor, h: Tensor, qi: Tensor, kj: Tensor) -> Tensor:
            return score - slopes[h] * site.distance(b, qi, kj).abs()

        return ElementForm(score=score)


@dataclass(frozen=True, eq=False)
class WindowMask(AttentionBias):
    """Per-head local window: head h sees key j only if ``|pos_i - pos_j| < window_h``.

    With the causal mask this is ``0 <= pos_i - pos_j < window_h``.

    Heads whose window is ``math.inf`` are unmasked (beyond the causal mask). Used by
    Hard-ALiBi (Jelassi et al. 2024): window 1..M on M heads, the rest unmasked.

    Attributes:
        windows: (h,) float tensor of window sizes (>= 1) or inf.
    """

    windows: Tensor
    reads_positions_only = True

    def allowed(self, ctx: AttentionContext) -> Tensor:
        """(b|1, h, i, j) bool: True where attention is allowed."""
        dist = _relative_distance(ctx)  # (b, 1, i, j)
        w = self.windows.to(torch.float32).view(1, -1, 1, 1)
        return (dist < w) & (dist > -w)

    def materialize(self, ctx: AttentionContext, n_heads: int, dtype: torch.dtype) -> Tensor:
        _check_heads("WindowMask", self.windows.shape[0], n_heads)
        zero = torch.zeros((), dtype=dtype, device=self.windows.device)
        return torch.where(self.allowed(ctx), zero, zero.new_full((), -math.inf))  # no host tensor: graph-safe

    def element(self, site: ElementSite) -> ElementForm:
        _check_heads("WindowMask", self.windows.shape[0], site.n_heads)
        w = self.windows.to(device=site.device, dtype=torch.float32)  # (h,)

        def allowed(b: Tensor, h: Tensor, qi: Tensor, kj: Tensor) -> Tensor:
            d = site.distance(b, qi, kj)
            return (d < w[h]) & (d > -w[h])

        return ElementForm(allowed=allowed, blocks=lambda ranges: window_blocks(w, ranges))


def window_blocks(windows: Tensor, ranges: PositionRanges) -> tuple[Tensor, Tensor]:
    """A window mask's block summary: (any, all) allowed, (b, h, qb, kb), from the range
    of ``pos_i - pos_j`` over each (query block, key block)."""
    d_min = (ranges.q_lo[:, :, None] - ranges.k_hi[:, None, :])[:, None]  # (b, 1, qb, kb)
    d_max = (ranges.q_hi[:, :, None] - ranges.k_lo[:, None, :])[:, None]
    w = windows.to(device=d_min.device, dtype=torch.float32).view(1, -1, 1, 1)  # (1, h, 1, 1)
    return (d_min < w) & (d_max > -w), (d_max < w) & (d_min > -w)


def position_block_blocks(size: Tensor, ranges: PositionRanges) -> tuple[Tensor, Tensor]:
    """A :class:`BlockMask`'s block summary (``size``: positions per block, 0-d float):
    (any, all) allowed, (b, 1, qb, kb)."""
    size = size.to(device=ranges.q_lo.device, dtype=torch.float32)
    q_first, q_last = (
        torch.floor(ranges.q_lo / size)[:, None, :, None],
        torch.floor(ranges.q_hi / size)[:, None, :, None],
    )
    k_first, k_last = (
        torch.floor(ranges.k_lo / size)[:, None, None, :],
        torch.floor(ranges.k_hi / size)[:, None, None, :],
    )
    return k_last >= q_first - 1, k_first >= q_last - 1


@dataclass(frozen=True, eq=False)
class BlockMask(AttentionBias):
    """Blockwise attention, the same for every head: positions fall into blocks of
    ``block`` consecutive positions (block ``pos // block``), and a query sees the keys of
    its own block and of the block before it, none further back.

    With the causal mask this is the *blockwise causal attention* xPos is evaluated with
    (Sun et al. 2023, "A Length-Extrapolatable Transformer", its section on blockwise
    causal attention): with ``block`` the training length, a query at any length sees
    between ``block`` and ``2·block - 1`` keys back at most, distances training covered
    or came near. It does not mask future keys: the causal mask is the caller's.

    Attributes:
        block: positions per block (>= 1).
    """

    block: int
    reads_positions_only = True

    def __post_init__(self) -> None:
        if isinstance(self.block, bool) or not isinstance(self.block, numbers.Integral) or self.block < 1:
            raise ValueError(f"BlockMask needs a whole number of positions per block >= 1, got {self.block!r}")
        object.__setattr__(self, "block", int(self.block))  # numpy integers too

    def allowed(self, ctx: AttentionContext) -> Tensor:
        """(b|1, 1, i, j) bool: True where attention is allowed."""
        q = torch.div(ctx.q_pos, self.block, rounding_mode="floor")[:, None, :, None]  # (b|1, 1, i, 1)
        k = torch.div(ctx.k_pos, self.block, rounding_mode="floor")[:, None, None, :]  # (b|1, 1, 1, j)
        return k >= q - 1

    def materialize(self, ctx: AttentionContext, n_heads: int, dtype: torch.dtype) -> Tensor:
        zero = torch.zeros((), dtype=dtype, device=ctx.q_pos.device)  # filled on the device: no host copy
        return torch.where(self.allowed(ctx), zero, torch.full((), -math.inf, dtype=dtype, device=ctx.q_pos.device))

    def element(self, site: ElementSite) -> ElementForm:
        size = torch.full((), float(self.block), device=site.device)  # 0-d: captured, not baked into a kernel

        def allowed(b: Tensor, h: Tensor, qi: Tensor, kj: Tensor) -> Tensor:
            return torch.floor(site.k_position(b, kj) / size) >= torch.floor(site.q_position(b, qi) / size) - 1

        return ElementForm(allowed=allowed, blocks=lambda ranges: position_block_blocks(size, ranges))


@dataclass(frozen=True, eq=False)
class DenseBias(AttentionBias):
    """An explicit additive bias tensor, broadcastable to (b, h, i, j)."""

    tensor: Tensor

    def materialize(self, ctx: AttentionContext, n_heads: int, dtype: torch.dtype) -> Tensor:
        if self.tensor.dim() == 4 and self.tensor.shape[1] != 1:
            _check_heads("DenseBias", self.tensor.shape[1], n_heads)
        return self.tensor.to(dtype)


@dataclass(frozen=True, eq=False)
class DifferenceBias(AttentionBias):
    """A bias that is a difference of a per-query and a per-key value, per head:

        bias[b, h, i, j] = q_values[b, h, i] - k_values[b, h, j]

    a rank-2 additive bias held in O(b·h·(i + j)) memory. FoX's forgetting attention is one
    (Lin et al. 2025: ``c_i - c_j`` with ``c`` the cumulative sum of the log forget gates):
    its values come from the residual stream, not from the positions, so no function of
    the positions can say it.

    ``materialize`` builds the (b, h, i, j) tensor (eager, sdpa, xformers); flex subtracts
    the two gathered values in its ``score_mod``, without an (i, j) tensor. The difference
    is taken in float32 at least (each value may be large, their difference small).

    Attributes:
        q_values: (b|1, h, i), the queries' values (the last i of the keys' for self-attention).
        k_values: (b|1, h, j), the keys' values, cached keys included.
    """

    q_values: Tensor
    k_values: Tensor

    def __post_init__(self) -> None:
        q, k = self.q_values, self.k_values
        if q.dim() != 3 or k.dim() != 3 or q.shape[1] != k.shape[1]:
            raise ValueError(
                f"DifferenceBias wants q_values (b|1, h, i) and k_values (b|1, h, j) with the same heads; got "
                f"{tuple(q.shape)} and {tuple(k.shape)}"
            )

    def materialize(self, ctx: AttentionContext, n_heads: int, dtype: torch.dtype) -> Tensor:
        _check_heads("DifferenceBias", self.k_values.shape[1], n_heads)
        wide = torch.promote_types(self.k_values.dtype, torch.float32)  # float32, or float64 for a float64 model
        q = self.q_values.to(wide)[..., :, None]  # (b|1, h, i, 1)
        k = self.k_values.to(wide)[..., None, :]  # (b|1, h, 1, j)
        return (q - k).to(dtype)  # (b|1, h, i, j)

    def element(self, site: ElementSite) -> ElementForm:
        _check_heads("DifferenceBias", self.k_values.shape[1], site.n_heads)
        full = (site.batch, site.n_heads)
        q = self.q_values.to(device=site.device, dtype=torch.float32).expand(*full, -1).contiguous()  # (b, h, i)
        k = self.k_values.to(device=site.device, dtype=torch.float32).expand(*full, -1).contiguous()  # (b, h, j)

        def score(score: Tensor, b: Tensor, h: Tensor, qi: Tensor, kj: Tensor) -> Tensor:
            return score + (q[b, h, qi] - k[b, h, kj])

        return ElementForm(score=score)


@dataclass(frozen=True, eq=False)
class RelativeFunctionBias(AttentionBias):
    """A bias given by a pure elementwise function of the two positions and the head:

        bias[b, h, i, j] = fn(q_pos[b, i], k_pos[b, j], h, *params)

    ``fn`` must be built from broadcasting elementwise tensor ops only (no reductions
    over its inputs, no Python branching on their values), so one definition serves
    both lowerings:

    * ``materialize`` calls it on broadcast grids: positions as float32 ``(b|1, 1, i, 1)``
      and ``(b|1, 1, 1, j)``, the head index as a long ``(1, h, 1, 1)``;
    * flex calls it inside its ``score_mod`` on scalars (one query, key and head at a
      time), so no (i, j) tensor is ever built.

    Parameters a function reads go in ``params`` (indexed by ``h`` inside ``fn``, e.g.
    ``r1[head]``), not in a closure, so ``fn`` can be a plain module-level function and
    the compiled flex kernel is reused across calls. Gradients reach ``params`` through
    every backend that materialises; through flex where flex supports gradients of
    captured tensors.

    ``dense_fn`` optionally replaces ``fn`` in ``materialize`` with a vectorised form
    returning the same (b|1, h, i, j) values faster (FIRE evaluates its MLP as one
    matrix product there, and elementwise, hidden unit by hidden unit, in flex). It
    takes the same arguments without the head index. Tests must show both agree.

    Used by KERPLE (a function of ``|pos_i - pos_j|``), FIRE (a function of
    ``pos_i - pos_j`` and ``pos_i``) and T5 (a lookup in a per-distance table).
    xformers has no class for it and gets a dense tensor bias.

    ``memo`` names a bias that is the same object for every layer of a call (T5's one
    table shared by all layers): ``materialize`` then keeps its result in
    ``ctx.scratch`` and returns it again for the same positions, params and dtype, so
    the backends that materialise build the (i, j) tensor once per call, not per layer.

    ``n_heads`` says how many heads ``params`` hold per-head values for. Every backend
    then refuses, with a ValueError, a call for another head count; without it a
    ``fn`` that reads ``r1[head]`` for fewer heads than ``r1`` holds would silently use
    the first ones (more heads are an IndexError, turned into the same ValueError when
    materialised). A ``dense_fn`` is checked by the head axis of its result.

    Attributes:
        fn: ``(q_pos, k_pos, head, *params) -> bias``, elementwise and broadcasting.
        params: tensors ``fn`` reads (per-head parameters, MLP weights).
        dense_fn: optional ``(q_pos, k_pos, *params) -> (b|1, h, i, j)``, same values.
        memo: optional ``ctx.scratch`` key under which the materialised bias is reused.
        n_heads: optional number of heads ``params`` hold values for, checked by every backend.
    """

    fn: Callable[..., Tensor]
    params: tuple[Tensor, ...] = ()
    dense_fn: Callable[..., Tensor] | None = None
    memo: Hashable | None = None
    n_heads: int | None = None
    reads_positions_only = True

    def element(self, site: ElementSite) -> ElementForm:
        self.check_heads(site.n_heads)
        fn, params = self.fn, self.params

        def score(score: Tensor, b: Tensor, h: Tensor, qi: Tensor, kj: Tensor) -> Tensor:
            return score + fn(site.q_position(b, qi), site.k_position(b, kj), h, *params)

        return ElementForm(score=score)

    def check_heads(self, n_heads: int) -> None:
        """ValueError when built (``self.n_heads``) for another head count than ``n_heads``."""
        if self.n_heads is not None:
            _check_heads("RelativeFunctionBias", self.n_heads, n_heads)

    def materialize(self, ctx: AttentionContext, n_heads: int, dtype: torch.dtype) -> Tensor:
        if self.memo is None:
            return self._materialize(ctx, n_heads, dtype)
        inputs = (ctx.q_pos, ctx.k_pos, *self.params)
        kept = ctx.scratch.get(self.memo)
        if kept is not None and kept[1] == (n_heads, dtype) and len(kept[0]) == len(inputs):
            if all(a is b for a, b in zip(kept[0], inputs, strict=True)):  # same tensors, not equal values
                return kept[2]
        out = self._materialize(ctx, n_heads, dtype)
        ctx.scratch[self.memo] = (inputs, (n_heads, dtype), out)
        return out

    def _materialize(self, ctx: AttentionContext, n_heads: int, dtype: torch.dtype) -> Tensor:
        self.check_heads(n_heads)
        q = ctx.q_pos.to(torch.float32)[:, None, :, None]  # (b|1, 1, i, 1)
        k = ctx.k_pos.to(torch.float32)[:, None, None, :]  # (b|1, 1, 1, j)
        if self.dense_fn is not None:
            out = self.dense_fn(q, k, *self.params)  # (b|1, h, i, j)
            _check_heads("RelativeFunctionBias", out.shape[1], n_heads)
        else:
            head = torch.arange(n_heads, device=q.device).view(1, -1, 1, 1)  # (1, h, 1, 1)
            try:
                out = self.fn(q, k, head, *self.params)  # (b|1, h, i, j)
            except IndexError as err:  # fn indexes per-head params by head: fewer than n_heads
                raise ValueError(
                    f"RelativeFunctionBias materialised for n_heads={n_heads}, more heads than its "
                    f"parameters hold ({err})"
                ) from err
        return out.to(dtype)
