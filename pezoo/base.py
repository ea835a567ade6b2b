"""The one interface every positional encoding implements, structured attention biases,
and the registry.

Axis letters used in shape comments throughout pezoo:
    b batch, s sequence, i query positions, j key positions, d model width,
    h heads, e head dim (q/k), f value head dim, p histogram bins, c cursors.

A positional encoding (PE) can act at seven points. Every hook defaults to the identity,
so an encoding implements only what it changes:

    positions(b, s)            which integer position each token gets (randomized PE)
    padded_positions(lens, w)  the same for right-padded rows of several lengths
    embed(x, pos)              token embeddings, before layer 0        (sin/cos, learned APE)
    embed_tokens(x, ids, ctx)  the same, indexed by the token ids      (Abacus)
    observe(layer, x, ctx)     read the residual stream before a layer (PRISM's gates)
    qk(layer, q, k, ctx)       rotate or extend per-head q/k           (RoPE, PRISM)
    bias(layer, q, k, ctx)     structured additive bias / mask          (ALiBi, Hard-ALiBi, PRF)

Positions are explicit integer tensors. Incremental decoding works through
``ctx.state``: a dict the caller keeps alive across calls for one sequence batch, in
which an encoding may keep whatever recurrent state it needs (PRISM keeps its GRU hidden
state and histograms there). For a full forward pass the dict is fresh.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import math
import numbers
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

__all__ = [
    "AttentionBias",
    "AttentionContext",
    "BlockMask",
    "DenseBias",
    "LinearBias",
    "ModelDims",
    "PositionalEncoding",
    "RelativeFunctionBias",
    "UnknownNameError",
    "WindowMask",
    "available",
    "create",
    "get",
    "register",
]


# --------------------------------------------------------------------------------------
# The context an encoding sees inside attention
# --------------------------------------------------------------------------------------


@dataclass
class AttentionContext:
    """Everything about the current attention call that is not q/k/v.

    Attributes:
        q_pos: positions of the queries, (b, i) or (1, i).
        k_pos: positions of *all* keys, cached ones included, (b, j) or (1, j).
        causal: whether query t may see only keys at sequence index <= t.
        state: per-sequence-batch scratch/recurrent state, kept by the caller across
            incremental decoding calls (fresh dict for a full forward pass). An encoding
            keys its entries by instance (:meth:`PositionalEncoding.ctx_key`); the caller
            may set ``"positions"``, the positions planned for the whole sequence batch
            (b|1, planned), which length-dependent encodings read (docs/use-in-your-model.md).
        key_padding_mask: (b, j) bool, True for real keys, or None (no padding).
        scale_hint: optional instance scale n, for encodings that take one (learned-PRF
            with scale hint): per example (b,), or per query token (b, i) when a row
            holds several instances (packed training rows).
        scratch: per-call memo (fresh for every forward call, shared by all layers), for
            values computed once per call such as RoPE's cos/sin of ``q_pos``.
        head_dim: the model's q/k head dim e *before* any encoding widened q/k; the
            default scale of :func:`pezoo.attend` is 1/sqrt(head_dim). A model may set
            it; an encoding whose ``qk`` widens q/k (PRISM) sets it when it is None, so
            ``attend`` without ``scale=`` does not fall back to 1/sqrt(widened dim).
        state_kept: whether the caller keeps ``state`` for later calls (incremental
            decoding). False for one full forward pass whose state is then dropped, as in
            training: an encoding may then compute a term in a form a KV cache could not
            hold (PRISM on CPU adds its position score as a dense bias instead of widening
            q/k). The default True is always safe.
    """

    q_pos: Tensor
    k_pos: Tensor
    causal: bool = True
    state: dict[Any, Any] = field(default_factory=dict)
    key_padding_mask: Tensor | None = None
    scale_hint: Tensor | None = None
    scratch: dict[Any, Any] = field(default_factory=dict)
    head_dim: int | None = None
    state_kept: bool = True

    def __post_init__(self) -> None:
        if self.q_pos.dim() != 2 or self.k_pos.dim() != 2:
            raise ValueError(
                f"AttentionContext wants positions of shape (b|1, s); got q_pos {tuple(self.q_pos.shape)} and "
                f"k_pos {tuple(self.k_pos.shape)} (a 1-D arange needs [None])"
            )
        if self.k_pos.shape[-1] < self.q_pos.shape[-1]:
            raise ValueError(
                f"k_pos holds the positions of all keys, cached ones included, so at least the "
                f"{self.q_pos.shape[-1]} of q_pos; got {self.k_pos.shape[-1]}"
            )

    @property
    def n_cached(self) -> int:
        """How many keys precede the current queries (0 for a full forward pass)."""
        return self.k_pos.shape[-1] - self.q_pos.shape[-1]


def check_number(
    name: str,
    option: str,
    value: Any,
    *,
    above: float | None = None,
    at_least: float | None = None,
    integer: bool = False,
) -> None:
    """ValueError unless the option ``value`` is a finite real number (not a bool) above
    ``above`` / at least ``at_least``: a bad frequency base or init scale built a model
    that turned into NaN at its first step, or trained with nonsense silently. With
    ``integer``, it must be an integer (a size: ``check_number(name, "n_heads", n,
    integer=True, at_least=1)``)."""
    kinds = (numbers.Integral,) if integer else (int, float)
    ok = isinstance(value, kinds) and not isinstance(value, bool) and math.isfinite(value)
    if ok and above is not None:
        ok = value > above
    if ok and at_least is not None:
        ok = value >= at_least
    if not ok:
        bound = f" > {above:g}" if above is not None else f" >= {at_least:g}" if at_least is not None else ""
        what = "an integer" if integer else "a finite number"
        raise ValueError(f"{name}: {option} must be {what}{bound}, got {value!r}")


def check_sizes(name: str, **sizes: Any) -> None:
    """:func:`check_number` for each keyword: an integer >= 1 (a width, head or layer count)."""
    for option, value in sizes.items():
        check_number(name, option, value, integer=True, at_least=1)


def check_length(name: str, length: int) -> None:
    """ValueError unless a sequence ``length`` given to ``positions`` is >= 0 (a negative one
    gave torch's arange error, or, for randomized PE, all but a few positions of its range)."""
    if length < 0:
        raise ValueError(f"{name}: length must be >= 0, got {length}")


def check_embed(name: str, x: Tensor, index: Tensor, d_model: int, what: str = "pos") -> None:
    """Raise a ValueError naming the mistake unless ``x`` is (b, s, ``d_model``) and
    ``index`` (the positions, or the tokens) is (b|1, s): for the ``embed`` hooks, which
    would otherwise fail with a broadcast error or unpack one."""
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(f"{name} was built for d_model={d_model}: x must be (b, s, {d_model}), got {tuple(x.shape)}")
    if index.dim() != 2 or index.shape[-1] != x.shape[1] or index.shape[0] not in (1, x.shape[0]):
        raise ValueError(
            f"{name}: {what} must be (b|1, s) = ({x.shape[0]}|1, {x.shape[1]}) for x of shape {tuple(x.shape)}, "
            f"got {tuple(index.shape)}"
        )


def check_layer(name: str, layer: int, n_layers: int) -> None:
    """Raise a ValueError unless ``layer`` is one of the ``n_layers`` an encoding with
    per-layer parameters was built for (instead of an IndexError from inside it)."""
    if not 0 <= layer < n_layers:
        raise ValueError(f"{name} was built for n_layers={n_layers} (layers 0..{n_layers - 1}), got layer {layer}")


def check_qk(name: str, q: Tensor, k: Tensor, ctx: AttentionContext, head_dim: int, *, all_keys: bool = False) -> None:
    """Raise a ValueError naming the mistake unless q and k are the *new* queries and keys
    of this call in the (b, h, s, e) layout with e = ``head_dim``: for encodings whose
    ``qk`` would otherwise broadcast a wrong layout into a silently wrong result.

    With ``all_keys`` (for a ``bias`` hook, which reads the keys after the KV cache), k
    must instead hold every key of ``ctx.k_pos``, cached ones included."""
    hook = "bias" if all_keys else "qk"
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(
            f"{name}.{hook} wants q and k of shape (b, h, s, e); got {tuple(q.shape)} and {tuple(k.shape)}"
        )
    if q.shape[-1] != head_dim or k.shape[-1] != head_dim:
        raise ValueError(f"{name} was built for head_dim={head_dim}, got q/k of width {q.shape[-1]}/{k.shape[-1]}")
    if q.shape[-2] != ctx.q_pos.shape[-1]:
        raise ValueError(
            f"{name}.{hook} got {q.shape[-2]} queries on axis 2 of q for {ctx.q_pos.shape[-1]} positions in "
            f"ctx.q_pos; q's layout must be (b, h, s, e)"
        )
    if all_keys:
        if k.shape[-2] != ctx.k_pos.shape[-1]:
            raise ValueError(
                f"{name}.bias reads all keys, cached ones included: {ctx.k_pos.shape[-1]} for the positions in "
                f"ctx.k_pos; got {k.shape[-2]} keys on axis 2 of k (layout (b, h, j, e))"
            )
        if k.shape[:2] != q.shape[:2]:
            raise ValueError(
                f"{name}.bias wants q and k with the same batch and heads (b, h); got {tuple(q.shape[:2])} and "
                f"{tuple(k.shape[:2])}"
            )
    elif k.shape[-2] != q.shape[-2]:
        raise ValueError(
            f"{name}.qk transforms the new keys only, one per query ({q.shape[-2]}), before they enter "
            f"a KV cache; got {k.shape[-2]} keys"
        )


# --------------------------------------------------------------------------------------
# Structured biases: an encoding says *what*, each attention backend decides *how*
# --------------------------------------------------------------------------------------


class AttentionBias:
    """Base class of the structured biases added to attention scores.

    Scores are ``scale * <q, k> + bias``: biases are added *after* the 1/sqrt(e)
    scaling. A bias may be lowered to a dense additive tensor (``materialize``) by any
    backend; backends that can do better (flex, xformers) read its fields instead.
    """

    def materialize(self, ctx: AttentionContext, n_heads: int, dtype: torch.dtype) -> Tensor:
        """Dense additive bias, broadcastable to (b, h, i, j); -inf where masked."""
        raise NotImplementedError


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

    def materialize(self, ctx: AttentionContext, n_heads: int, dtype: torch.dtype) -> Tensor:
        _check_heads("LinearBias", self.slopes.shape[0], n_heads)
        dist = _relative_distance(ctx).abs()  # (b, 1, i, j)
        return (-self.slopes.to(torch.float32).view(1, -1, 1, 1) * dist).to(dtype)


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

    def allowed(self, ctx: AttentionContext) -> Tensor:
        """(b|1, h, i, j) bool: True where attention is allowed."""
        dist = _relative_distance(ctx)  # (b, 1, i, j)
        w = self.windows.to(torch.float32).view(1, -1, 1, 1)
        return (dist < w) & (dist > -w)

    def materialize(self, ctx: AttentionContext, n_heads: int, dtype: torch.dtype) -> Tensor:
        _check_heads("WindowMask", self.windows.shape[0], n_heads)
        zero = torch.zeros((), dtype=dtype, device=self.windows.device)
        return torch.where(self.allowed(ctx), zero, torch.tensor(-math.inf, dtype=dtype))


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
        zero = torch.zeros((), dtype=dtype, device=ctx.q_pos.device)
        return torch.where(self.allowed(ctx), zero, torch.tensor(-math.inf, dtype=dtype, device=ctx.q_pos.device))


@dataclass(frozen=True, eq=False)
class DenseBias(AttentionBias):
    """An explicit additive bias tensor, broadcastable to (b, h, i, j)."""

    tensor: Tensor

    def materialize(self, ctx: AttentionContext, n_heads: int, dtype: torch.dtype) -> Tensor:
        if self.tensor.dim() == 4 and self.tensor.shape[1] != 1:
            _check_heads("DenseBias", self.tensor.shape[1], n_heads)
        return self.tensor.to(dtype)


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


# --------------------------------------------------------------------------------------
# The interface
# --------------------------------------------------------------------------------------


def check_lengths(lengths: Tensor, width: int) -> None:
    """ValueError unless ``lengths`` is a 1-D integer tensor of row lengths in ``[0, width]``
    (the real tokens of right-padded rows ``width`` tokens wide)."""
    integer = isinstance(lengths, Tensor) and not (
        lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool
    )
    if not integer or lengths.ndim != 1:
        raise ValueError(f"lengths must be a 1-D integer tensor, one length per row; got {_describe(lengths)}")
    if lengths.numel():
        low, high = (int(v) for v in torch.stack(torch.aminmax(lengths)).tolist())  # one transfer, not two
        if low < 0 or high > width:
            raise ValueError(f"row lengths must lie in [0, {width}] for rows {width} tokens wide; got {low}..{high}")


def _describe(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return type(value).__name__


class PositionalEncoding(nn.Module):
    """Base class of every pezoo encoding. All hooks are the identity by default.

    Subclasses set ``name`` (the registry key) and override the hooks they need. Hooks
    work on plain tensors, so an encoding can be used inside any attention code:

    >>> import torch, pezoo
    >>> rope = pezoo.create("rope", head_dim=16)
    >>> q = k = torch.randn(2, 4, 10, 16)                       # (b, h, s, e)
    >>> pos = torch.arange(10)
    >>> ctx = pezoo.AttentionContext(q_pos=pos[None], k_pos=pos[None])
    >>> q2, k2 = rope.qk(0, q, k, ctx)
    >>> q2.shape
    torch.Size([2, 4, 10, 16])

    Class attributes:
        name: registry key.
        uses_positions: whether the encoding reads ``pos`` at all (randomized PE wraps
            only those that do).
        max_position: largest position supported, or None for unbounded.
    """

    name: str = ""  # per class; a wrapper (Combined, Randomized) sets its own per instance
    uses_positions: bool = True
    max_position: int | None = None

    # -- positions -----------------------------------------------------------------
    def positions(self, batch: int, length: int, device: torch.device | str = "cpu") -> Tensor:
        """Integer positions for a sequence of ``length`` tokens: (b|1, s) long.

        Plain encodings use 0..s-1 shared by the batch. Randomized PE overrides this
        during training (sorted random subset of a larger range).
        """
        check_length(self.name or type(self).__name__, length)
        if self.max_position is not None and length > self.max_position:
            raise ValueError(
                f"{type(self).__name__} supports positions < {self.max_position}, got a sequence of {length} tokens"
            )
        return torch.arange(length, device=device)[None]

    def padded_positions(self, lengths: Tensor, width: int, device: torch.device | str = "cpu") -> Tensor:
        """Positions for a batch of right-padded rows: row i holds ``lengths[i]`` real
        tokens, then padding, ``width`` tokens in all. (b|1, width) long.

        Every row's real tokens get what :meth:`positions` would give a sequence of
        their own length; what the padding gets is unspecified (no real token of a
        causal model sees it). By default that is :meth:`positions` for the whole width,
        since a plain encoding's positions do not depend on the length. Randomized PE
        overrides it: a sequence's random positions depend on how many tokens it has.

        Raises:
            ValueError: ``lengths`` is not a 1-D integer tensor of values in ``[0, width]``.
        """
        check_lengths(lengths, width)
        return self.positions(int(lengths.shape[0]), width, device)

    # -- hooks ---------------------------------------------------------------------
    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        """Token embeddings (b, s, d) and positions (b|1, s) -> embeddings (b, s, d)."""
        return x

    def embed_tokens(self, x: Tensor, tokens: Tensor, ctx: AttentionContext) -> Tensor:
        """Embeddings (b, s, d) after :meth:`embed`, and the token ids (b, s) they embed ->
        embeddings (b, s, d): for encodings whose positions come from the content (Abacus
        numbers each digit within its number). ``tokens`` are the current tokens only;
        an encoding that needs earlier ones keeps what it needs in ``ctx.state``."""
        return x

    def observe(self, layer: int, x: Tensor, ctx: AttentionContext) -> None:
        """Read the residual stream (b, s, d) entering ``layer``; no return value."""

    def qk(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor]:
        """Transform the *new* queries (b, h, i, e) and keys (b, h, i, e) of ``layer``.

        Keys are transformed once, before they enter a KV cache. The output head dim
        may be larger than e (PRISM concatenates position streams); the attention scale
        stays the caller's 1/sqrt(e), and an encoding that widens q/k records e in
        ``ctx.head_dim`` (if unset) so that ``attend``'s default scale is that one.
        """
        return q, k

    def bias(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> list[AttentionBias]:
        """Structured biases for ``layer`` given the (transformed) q (b,h,i,e), k (b,h,j,e)."""
        return []

    # -- training extras -------------------------------------------------------------
    def optimizer_groups(self) -> list[dict[str, Any]]:
        """Parameters that need their own optimiser settings, as ``torch.optim`` parameter
        groups (PRISM's α scales, say); the rest belong in the caller's default group.
        None by default."""
        return []

    def regularisation(self) -> Tensor:
        """A loss term to add during training (PRISM's optional Frobenius penalty); a
        zero scalar by default."""
        return torch.zeros(())

    # -- evaluation ------------------------------------------------------------------
    @property
    def random_at_eval(self) -> bool:
        """Whether eval-mode positions are random draws (randomized PE, as its paper
        evaluates it): an evaluation is then reproducible only under :meth:`seeded`.
        False by default."""
        return False

    @contextmanager
    def seeded(self, seed: int) -> Iterator[torch.Generator | None]:
        """Inside the block, the encoding's random draws come from a generator seeded with
        ``seed``, leaving torch's global RNG alone. An encoding that draws nothing yields
        None and the block changes nothing, so evaluation code can wrap any encoding."""
        yield None

    def ctx_key(self, name: str) -> tuple[str, int]:
        """A key for this instance's entries in ``ctx.scratch`` and ``ctx.state``.

        One context is shared by every layer of a forward call, so two instances in one
        model (RoPE with one base for local layers and another for global ones, two T5
        tables) would read each other's memo under a fixed key; keyed by instance, each
        reads its own. (Valid while the instance lives, which is as long as any context
        that holds its entries is used.)
        """
        return (name, id(self))

    def extra_repr(self) -> str:
        return self.name


# --------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------

ENTRY_POINT_GROUP = "pezoo.encodings"


class UnknownNameError(KeyError):
    """A name that is not in a registry. The message lists the valid names."""

    def __str__(self) -> str:  # KeyError quotes its message; show it plainly
        return str(self.args[0])


def unknown_name_message(kind: str, name: str, valid: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, valid, n=3)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"unknown {kind} {name!r}.{hint} Valid {kind}s: {', '.join(valid)}"


def _source(factory: Any) -> str:
    """Where a factory comes from, for messages: ``module.QualName`` or an entry point's value."""
    if isinstance(factory, _LazyEntryPoint):
        return factory.source
    return f"{getattr(factory, '__module__', '?')}.{getattr(factory, '__qualname__', repr(factory))}"


class Registry(Mapping[str, Callable[..., Any]]):
    """Name -> factory. Hard error on clashes; entry points are found lazily and imported on
    first lookup, or all at once by :meth:`load_plugins`.

    A plugin (entry point) whose name is already taken, by a built-in or by another plugin,
    is an error naming both sources, never a silent shadowing. A plugin that fails to import
    is left out and kept in :attr:`broken` with its error.

    Args:
        kind: what is registered ("encoding", "task"), used in messages.
        entry_point_group: Python entry-point group third-party packages register in.
    """

    def __init__(self, kind: str, entry_point_group: str | None = None) -> None:
        self.kind = kind
        self._group = entry_point_group
        self._factories: dict[str, Callable[..., Any] | _LazyEntryPoint] = {}  # a plugin: lazy until looked up
        self._entry_points_loaded = entry_point_group is None
        self.broken: dict[str, str] = {}
        """Plugins that failed to load: name -> error message (filled by lookups and :meth:`load_plugins`)."""

    def register(self, name: str, factory: Callable[..., Any]) -> None:
        if name in self._factories and self._factories[name] is not factory:
            first, second = _source(self._factories[name]), _source(factory)
            raise ValueError(f"{self.kind} {name!r} is registered twice: by {first} and by {second}")
        self._factories[name] = factory

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded or self._group is None:
            return
        found: dict[str, _LazyEntryPoint] = {}
        clashes = []
        for ep in metadata.entry_points(group=self._group):
            plugin = _LazyEntryPoint(ep)
            other = found.get(ep.name) or self._factories.get(ep.name)
            if other is None:
                found[ep.name] = plugin
            elif isinstance(other, _LazyEntryPoint) or _source(other) != f"{ep.module}.{ep.attr}":
                # (an already imported plugin that registered itself is the same factory, not a clash)
                origin = "plugin" if isinstance(other, _LazyEntryPoint) else "built-in"
                clashes.append(f"{ep.name!r}: plugin {plugin.source} and {origin} {_source(other)}")
        if clashes:  # raised on every listing or lookup until the clash is resolved
            raise ValueError(
                f"{self.kind} plugin names clash (entry-point group {self._group!r}): "
                + "; ".join(clashes)
                + ". Rename the plugin's entry point or uninstall one of the two."
            )
        self._entry_points_loaded = True
        self._factories.update(found)

    def __getitem__(self, name: str) -> Callable[..., Any]:
        self._load_entry_points()
        try:
            factory = self._factories[name]
        except KeyError:
            if name in self.broken:
                raise ImportError(self.broken[name]) from None
            raise UnknownNameError(unknown_name_message(self.kind, name, sorted(self))) from None
        if isinstance(factory, _LazyEntryPoint):  # import a plugin on first use
            try:
                factory = self._factories[name] = factory.load()
            except ImportError as exc:
                del self._factories[name]
                self.broken[name] = str(exc)
                raise
        return factory

    def load_plugins(self) -> dict[str, str]:
        """Import every plugin now (``pezoo list`` and ``pezoo bench`` do, before anything
        else): broken ones leave the registry. Returns :attr:`broken` (name -> error)."""
        self._load_entry_points()
        for name in [n for n, f in self._factories.items() if isinstance(f, _LazyEntryPoint)]:
            try:
                self[name]
            except ImportError:
                pass  # recorded in self.broken
        return dict(self.broken)

    def is_loaded(self, name: str) -> bool:
        return not isinstance(self._factories.get(name), _LazyEntryPoint)

    def __iter__(self) -> Iterator[str]:
        self._load_entry_points()
        return iter(sorted(self._factories))

    def __len__(self) -> int:
        self._load_entry_points()
        return len(self._factories)


class _LazyEntryPoint:
    """Placeholder for a third-party factory, imported on first lookup.

    The registry key is the entry point's name. An encoding class that leaves ``name``
    empty gets it from the key; one whose ``name`` says otherwise does not load (the key
    and ``name`` must agree, or ``create(key).name`` would be another encoding's name).
    """

    def __init__(self, ep: metadata.EntryPoint) -> None:
        self._ep = ep
        dist = getattr(ep, "dist", None)
        where = f" (distribution {dist.name})" if dist is not None and getattr(dist, "name", None) else ""
        self.source = f"entry point {ep.name} = {ep.value!r}{where}"

    def load(self) -> Callable[..., Any]:
        try:
            factory = self._ep.load()
        except Exception as exc:
            raise ImportError(f"could not load plugin {self._ep.name!r} from {self._ep.value!r}: {exc}") from exc
        if isinstance(factory, type) and issubclass(factory, PositionalEncoding):
            if not factory.name:
                factory.name = self._ep.name  # derived from the entry-point key
            elif factory.name != self._ep.name:
                raise ImportError(
                    f"plugin {self._ep.name!r} from {self._ep.value!r}: its class sets name = {factory.name!r}, "
                    f"which differs from the entry-point key {self._ep.name!r}; make them agree or leave name unset"
                )
        return factory

    def __repr__(self) -> str:
        return f"<{self.source}>"


ENCODINGS = Registry("encoding", ENTRY_POINT_GROUP)
WRAPPERS: dict[str, Callable[..., PositionalEncoding]] = {}
"""Prefix wrappers: ``create("randomized:rope")`` -> ``WRAPPERS["randomized"](create("rope"))``."""


_Encoding = TypeVar("_Encoding", bound=type[PositionalEncoding])


def register(name: str) -> Callable[[_Encoding], _Encoding]:
    """Class decorator: register an encoding class under ``name`` (sets ``cls.name``); the
    class is returned as it is, so type checkers keep its own type."""

    def deco(cls: _Encoding) -> _Encoding:
        cls.name = name
        ENCODINGS.register(name, cls)
        return cls

    return deco


def available() -> list[str]:
    """Names ``create`` accepts (wrapped forms such as ``randomized:rope`` included)."""
    names = list(ENCODINGS)
    for prefix in WRAPPERS:
        names += [f"{prefix}:{n}" for n in ENCODINGS if _wrappable(n)]
    return sorted(set(names))


def _wrappable(name: str) -> bool:
    if not ENCODINGS.is_loaded(name):
        return True
    factory = ENCODINGS[name]
    if getattr(factory, "wrappable", True) is False:  # e.g. an already-randomized alias
        return False
    return bool(getattr(factory, "uses_positions", True))


def is_known(name: str) -> bool:
    """Whether ``name`` names an encoding :func:`create` can build: a registered or wrapped
    name (:func:`available`), or registered names joined by ``+`` (a combination,
    optionally wrapped as a whole: ``randomized:abacus+fire``)."""
    if name in available():
        return True
    prefix, _, base = name.rpartition(":")
    if prefix and prefix not in WRAPPERS:
        return False
    parts = base.split("+")
    if len(parts) < 2 or not all(p in ENCODINGS for p in parts) or len(set(parts)) < len(parts):
        return False
    # the rules Combined and the wrappers enforce on built parts, read from the classes
    classes = [f for f in (ENCODINGS[p] for p in parts) if isinstance(f, type)]
    if any(_class_overrides(c, "positions") for c in classes):
        return False  # a part that chooses its own positions cannot share them (Combined)
    if sum(_class_overrides(c, "qk") for c in classes) > 1:
        return False  # two parts transforming q and k
    if prefix and len(classes) == len(parts):
        return any(getattr(c, "uses_positions", True) for c in classes)  # else nothing to randomize
    return True


def _class_overrides(cls: type, hook: str) -> bool:
    return getattr(cls, hook, None) is not getattr(PositionalEncoding, hook)


def get(name: str) -> Callable[..., PositionalEncoding]:
    """The factory registered under ``name``: usually the class; for a wrapped name such
    as ``randomized:rope`` or a combination such as ``abacus+fire``, a function taking
    the same keywords as :func:`create`."""
    if "+" in name:
        if not is_known(name):
            bad = [p for p in name.rpartition(":")[2].split("+") if p not in ENCODINGS]
            raise UnknownNameError(unknown_name_message("encoding", bad[0] if bad else name, available()))
        return functools.partial(create, name)
    if ":" in name:
        if name not in available():
            raise UnknownNameError(unknown_name_message("encoding", name, available()))
        return functools.partial(create, name)
    return ENCODINGS[name]


@dataclass(frozen=True)
class ModelDims:
    """The shape of the model an encoding is built for.

    ``create(name, dims=ModelDims(...))`` passes each field to the encoding's
    constructor only if the constructor takes a keyword of that name, so one call
    builds any encoding for a given backbone (NoPE takes none, RoPE takes
    ``head_dim``, ALiBi ``n_heads``, APE ``d_model``, PRISM several).
    """

    d_model: int
    n_heads: int
    n_layers: int

    def __post_init__(self) -> None:
        if min(self.d_model, self.n_heads, self.n_layers) < 1:
            raise ValueError(f"ModelDims needs positive sizes, got {self}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}: heads would be "
                f"{self.d_model / self.n_heads:g} wide"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def as_kwargs(self) -> dict[str, int]:
        return {"d_model": self.d_model, "n_heads": self.n_heads, "n_layers": self.n_layers, "head_dim": self.head_dim}


def create(name: str, *, dims: ModelDims | None = None, **config: Any) -> PositionalEncoding:
    """Build the encoding registered as ``name`` with keyword ``config``.

    ``prefix:base`` applies a wrapper (e.g. ``randomized:rope``); config keys the
    wrapper does not take are passed to the base encoding. ``dims`` supplies the model
    shape to whichever constructor keywords want it. Unknown names raise
    :class:`UnknownNameError` listing the valid names; unknown config keys raise
    ``TypeError`` naming the accepted ones.
    """
    if ":" in name:
        prefix, base = name.split(":", 1)
        if "+" in prefix:
            raise ValueError(
                f"{name!r}: a wrapper goes in front of the whole combination ({prefix.split('+')[-1]}:"
                f"{'+'.join([*prefix.split('+')[:-1], base])}), not in front of one part"
            )
        if prefix not in WRAPPERS:
            raise UnknownNameError(unknown_name_message("encoding", name, available()))
        wrapper = WRAPPERS[prefix]
        own = _accepted_keys(wrapper)
        inner = create(base, dims=dims, **{k: v for k, v in config.items() if k not in own})
        return wrapper(inner, **{k: v for k, v in config.items() if k in own})
    if "+" in name:
        return _create_combined(name, dims, config)
    factory = ENCODINGS[name]
    if dims is not None:
        wanted = _accepted_keys(factory)
        config = {**{k: v for k, v in dims.as_kwargs().items() if k in wanted}, **config}
    return _call_strict(factory, name, config)


def resolved_options(name: str, **config: Any) -> dict[str, Any]:
    """Every option :func:`create` builds ``name`` with: ``config`` over the defaults of the
    constructors it calls (a wrapper's and its base's; each part's of a combination). The
    model-shape keywords :class:`ModelDims` supplies are not options and are left out.

    A record that stores this, not only the options given, keeps its meaning when a default
    changes later. Raises like :func:`create` for an unknown name or option.

    >>> resolved_options("hard_alibi")
    {'n_masked': None}
    """
    if ":" in name:
        prefix, base = name.split(":", 1)
        if prefix not in WRAPPERS:
            raise UnknownNameError(unknown_name_message("encoding", name, available()))
        own = _accepted_keys(WRAPPERS[prefix])
        inner = resolved_options(base, **{k: v for k, v in config.items() if k not in own})
        wrapper = _defaults(WRAPPERS[prefix], {k: v for k, v in config.items() if k in own}, prefix)
        return dict(sorted({**inner, **wrapper}.items()))
    if "+" in name:
        parts = name.split("+")
        out: dict[str, Any] = {}
        for part in parts:  # each key is taken by one part (create refuses a shared one)
            accepted = _accepted_keys(ENCODINGS[part])
            out.update(_defaults(ENCODINGS[part], {k: v for k, v in config.items() if k in accepted}, part))
        unknown = sorted(set(config) - set(out))
        if unknown:
            raise TypeError(f"encoding {name!r} got unknown option(s) {', '.join(unknown)}")
        return dict(sorted(out.items()))
    return _defaults(ENCODINGS[name], config, name)


def _defaults(factory: Callable[..., Any], config: Mapping[str, Any], name: str) -> dict[str, Any]:
    """``config`` over ``factory``'s keyword defaults, without the model-shape keywords."""
    unknown = sorted(set(config) - _accepted_keys(factory))
    if unknown:
        raise TypeError(f"encoding {name!r} got unknown option(s) {', '.join(unknown)}")
    shape = set(ModelDims(1, 1, 1).as_kwargs())
    params = inspect.signature(factory).parameters.values()
    out = {
        p.name: p.default
        for p in params
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is not p.empty and p.name not in shape
    }
    return dict(sorted({**out, **config}.items()))


def _create_combined(name: str, dims: ModelDims | None, config: Mapping[str, Any]) -> PositionalEncoding:
    """``a+b``: each part built with ``dims`` and the ``config`` keys it alone accepts."""
    from pezoo.encodings.combined import Combined

    names = name.split("+")
    if any(not n for n in names):
        raise ValueError(f"{name!r}: expected encoding names joined by '+', e.g. abacus+fire")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:  # before the options, which such a part would take twice
        raise ValueError(f"{', '.join(repeated)} appears twice; each part keeps its own state, once")
    accepted = {n: _accepted_keys(ENCODINGS[n]) for n in names}  # unknown part: UnknownNameError
    own: dict[str, dict[str, Any]] = {n: {} for n in names}
    for key, value in config.items():
        takers = [n for n in names if key in accepted[n]]
        if not takers:
            valid = "; ".join(f"{n}: {', '.join(sorted(accepted[n])) or '(none)'}" for n in names)
            raise TypeError(f"encoding {name!r} got unknown option {key}; valid options: {valid}")
        if len(takers) > 1:
            raise ValueError(
                f"option {key} of {name!r} is taken by {' and '.join(takers)}; build the parts yourself and "
                "join them with pezoo.combine(...)"
            )
        own[takers[0]][key] = value
    return Combined([create(n, dims=dims, **own[n]) for n in names])


def _accepted_keys(factory: Callable[..., Any]) -> set[str]:
    params = inspect.signature(factory).parameters.values()
    return {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}


def _call_strict(factory: Callable[..., Any], name: str, config: Mapping[str, Any]) -> Any:
    accepted = _accepted_keys(factory)
    unknown = sorted(set(config) - accepted)
    if unknown:
        raise TypeError(
            f"encoding {name!r} got unknown option(s) {', '.join(unknown)}; "
            f"valid options: {', '.join(sorted(accepted)) or '(none)'}"
        )
    return factory(**config)
