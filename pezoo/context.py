"""The context an encoding sees inside attention (:class:`AttentionContext`), and the
argument checks every hook shares.

Axis letters used in shape comments throughout pezoo:
    b batch, s sequence, i query positions, j key positions, d model width,
    h heads, e head dim (q/k), f value head dim, p histogram bins, c cursors.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor


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
        key_padding_mask: (b, j) or (1, j) bool, True for real keys (cached ones included), or
            None (no padding); another dtype or shape is a ValueError.
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
        for name, pos in (("q_pos", self.q_pos), ("k_pos", self.k_pos)):
            if pos.dtype == torch.bool or pos.is_complex():  # True - False: distances of 0 and 1, silently
                raise ValueError(f"AttentionContext wants positions that are numbers, got {name} of {pos.dtype}")
        if self.k_pos.shape[-1] < self.q_pos.shape[-1]:
            raise ValueError(
                f"k_pos holds the positions of all keys, cached ones included, so at least the "
                f"{self.q_pos.shape[-1]} of q_pos; got {self.k_pos.shape[-1]}"
            )
        self._check_key_padding_mask()
        hint = self.scale_hint
        if hint is not None and (not isinstance(hint, Tensor) or hint.dtype == torch.bool or hint.is_complex()):
            raise ValueError(  # a bool hint was taken as n = 1 silently, a number failed on its missing .ndim
                "AttentionContext wants scale_hint as a tensor of real numbers: (b,), each example's instance "
                f"scale n, or (b, i), one per query token; got {_kind(hint)} (one n for every example: "
                "torch.tensor([n]))"
            )

    def _check_key_padding_mask(self) -> None:
        """A ValueError unless ``key_padding_mask`` is None or a bool (b|1, j) tensor, one flag
        per key of ``k_pos``: another dtype (a 0/1 mask, an additive 0/-inf one) or shape
        failed deep inside attention in torch's words."""
        mask = self.key_padding_mask
        if mask is None:
            return
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
            raise ValueError(
                f"AttentionContext wants key_padding_mask as a bool tensor, True for real keys; got {_kind(mask)} "
                "(a 1/0 mask: mask.bool(); an additive 0/-inf one: mask == 0)"
            )
        j, batch = self.k_pos.shape[-1], self.k_pos.shape[0]
        if mask.dim() != 2 or mask.shape[-1] != j or (batch > 1 and mask.shape[0] not in (1, batch)):
            raise ValueError(
                f"AttentionContext wants key_padding_mask of shape (b|1, j): one flag per key of k_pos "
                f"({tuple(self.k_pos.shape)}, cached keys included); got {tuple(mask.shape)}"
            )

    @property
    def n_cached(self) -> int:
        """How many keys precede the current queries (0 for a full forward pass)."""
        return self.k_pos.shape[-1] - self.q_pos.shape[-1]


def _kind(value: Any) -> str:
    """A tensor's dtype, or any other value's type, for an error message."""
    return str(value.dtype) if isinstance(value, Tensor) else f"a {type(value).__name__}"


def contiguous_positions(ctx: AttentionContext) -> bool:
    """Keys at consecutive positions shared by the batch, the queries being the last keys
    (so distances follow from indices: the fused backends' lowering without gathers)."""
    kp = ctx.k_pos
    if kp.shape[0] > 1 and not bool((kp == kp[:1]).all()):
        return False
    row = kp[0]
    if not bool((row - row[0] == torch.arange(row.shape[0], device=row.device)).all()):
        return False
    n_q = ctx.q_pos.shape[-1]
    return bool((ctx.q_pos == row[row.shape[0] - n_q :]).all())


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


def check_embed(name: str, x: Tensor, index: Tensor, d_model: int, what: str = "pos", *, rows: bool = False) -> None:
    """Raise a ValueError naming the mistake unless ``x`` is (b, s, ``d_model``) and
    ``index`` (the positions, or the tokens) is (b|1, s): for the ``embed`` hooks, which
    would otherwise fail with a broadcast error or unpack one. With ``rows`` (``index``
    picks a learned table's rows), it must also hold integers (float positions gave
    torch's IndexError), int64 or int32 ones: torch indexes with those only (int16 was its
    error, and a uint8 tensor a boolean mask: other rows, silently)."""
    if rows and index.dtype not in (torch.int64, torch.int32):
        raise ValueError(
            f"{name}: {what} picks rows of a learned table, so it must hold integers (int64 or int32), "
            f"got {index.dtype}"
        )
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(f"{name} was built for d_model={d_model}: x must be (b, s, {d_model}), got {tuple(x.shape)}")
    if index.dim() != 2 or index.shape[-1] != x.shape[1] or index.shape[0] not in (1, x.shape[0]):
        raise ValueError(
            f"{name}: {what} must be (b|1, s) = ({x.shape[0]}|1, {x.shape[1]}) for x of shape {tuple(x.shape)}, "
            f"got {tuple(index.shape)}"
        )


def check_layer(name: str, layer: int, n_layers: int) -> None:
    """Raise a ValueError unless ``layer`` is one of the ``n_layers`` an encoding with
    per-layer parameters was built for (instead of an IndexError from inside it). A bool is
    no layer index (True indexed a per-layer table as a mask: a broadcast error, or another
    shape), nor is a float (torch's IndexError)."""
    if isinstance(layer, (bool, float)) or (
        isinstance(layer, Tensor) and (layer.dtype == torch.bool or layer.is_floating_point() or layer.dim() != 0)
    ):
        raise ValueError(f"{name}: layer must be an integer index (0..{n_layers - 1}), got {layer!r}")
    if not 0 <= layer < n_layers:
        raise ValueError(f"{name} was built for n_layers={n_layers} (layers 0..{n_layers - 1}), got layer {layer}")


def check_batch(where: str, q: Tensor, k: Tensor, ctx: AttentionContext) -> None:
    """Raise a ValueError unless q and k are of one batch and ``ctx``'s positions and padding
    mask of it or of 1 ((b, s) or (1, s)); ``where`` names the caller ("rope.qk", "attend"). A
    hook that broadcasts positions over q (RoPE's rotation, learned PRF's features) failed
    with torch's broadcast error for positions of another batch."""
    if k.shape[0] != q.shape[0]:
        raise ValueError(f"{where} wants q and k of one batch; got {q.shape[0]} and {k.shape[0]}")
    sides = (("q_pos", ctx.q_pos, "q"), ("k_pos", ctx.k_pos, "k"), ("key_padding_mask", ctx.key_padding_mask, "k"))
    for name, given, against in sides:
        if given is not None and given.shape[0] not in (1, q.shape[0]):
            raise ValueError(
                f"{where} got ctx.{name} for a batch of {given.shape[0]} and {against} for a batch of {q.shape[0]}: "
                "positions and padding are (b, s) or (1, s)"
            )


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
    check_batch(f"{name}.{hook}", q, k, ctx)
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
