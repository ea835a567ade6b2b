"""One forward call of an adapted Hugging Face model, as pezoo's hooks see it.

Axis letters: b batch, s new tokens, j all keys (cached and new), h heads, e head dim, d width.

A causal LM's batch is left-padded for generation: row r's real tokens start at column
``first[r]``. pezoo's hooks are written for rows whose real tokens come first, so every call
gets positions *planned* per row (:func:`plan_positions`: ``padded_positions`` of each row's
real length, shifted right by its padding), which start at 0 on the first real token, and a
key padding mask that keeps the padding out of every attention. That is all a position-reading
encoding needs.

An encoding that reads the tokens in order (PRISM's GRU through ``observe``, Abacus counting
digits through ``embed_tokens``, or a plugin that overrides either) would also read the
padding in front of a row. For those, a batch whose rows start at different columns is split
into groups of rows that start at the same column, and every hook runs on each group's real
tokens only, with a context and a recurrent state of the group's own (:class:`Group`); the
groups' biases are then joined as one dense bias. Batches without left padding, and every
other encoding, take one context for the whole batch and keep pezoo's structured biases.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from pezoo.biases import AttentionBias, DenseBias
from pezoo.context import AttentionContext
from pezoo.interface import PositionalEncoding, acts_through


def reads_tokens_in_order(pe: PositionalEncoding) -> bool:
    """Whether some part of ``pe`` keeps state along the sequence through ``observe`` or
    ``embed_tokens`` (PRISM, Abacus, such a plugin): left padding would feed it the padding."""
    return acts_through(pe, "observe") or acts_through(pe, "embed_tokens")


def first_real(mask: Tensor) -> Tensor:
    """Column of each row's first real token, (b,) long; a row without one gets its width."""
    real = mask.to(torch.bool)  # (b, j)
    width = real.shape[1]
    index = torch.arange(width, device=real.device).expand_as(real)
    return torch.where(real, index, width).amin(dim=1) if width else real.new_zeros(real.shape[0], dtype=torch.long)


def plan_positions(pe: PositionalEncoding, first: Tensor, width: int) -> Tensor:
    """Positions for rows whose real tokens run from column ``first[r]`` to ``width``: (b|1, width).

    Row r gets what ``pe.padded_positions`` gives a right-padded row of ``width - first[r]``
    tokens, moved right by ``first[r]``; its padding gets position 0."""
    device = first.device
    lengths = (width - first).clamp(min=0)
    if acts_through(pe, "padded_positions"):  # randomized PE: positions depend on each row's length
        right = pe.padded_positions(lengths, width, device)  # (b|1, width): real tokens first
    else:  # the default padded_positions, without its check of lengths made here in range (a sync under compile)
        right = pe.positions(int(first.shape[0]), width, device)
    if not torch.compiler.is_compiling() and not bool((first > 0).any()):
        return right  # no left padding: shared (1, width) positions where the encoding gives them (compiled: no sync)
    b = first.shape[0]
    right = right.expand(b, -1)
    column = torch.arange(width, device=device)[None, :]  # (1, width)
    source = (column - first[:, None]).clamp(min=0)  # (b, width): the right-padded index of each column
    shifted = right.gather(1, source)
    return torch.where(column >= first[:, None], shifted, torch.zeros_like(shifted))


@dataclass
class Group:
    """Rows that start at the same column, with the context its hooks see in this call.

    ``start``: index, within this call's new tokens, of the group's first real one (0 once
    the prompt is in the cache); ``ctx``: positions, keys and state of the group's real
    tokens only (its own ``state``, kept across calls, and a fresh ``scratch``)."""

    rows: Tensor
    first: int
    start: int
    ctx: AttentionContext


@dataclass
class Call:
    """What the hooks of one forward call share: the whole batch's context, and the groups
    when the encoding reads tokens in order and the rows start at different columns."""

    ctx: AttentionContext
    groups: list[Group] | None = None
    probs: bool = False  # return attention probabilities (output_attentions)
    per_layer: bool = False  # memos computed afresh in every layer (gradient checkpointing)

    def last(self, n: int) -> Call:
        """This call for its last ``n`` queries only, over the same keys: Gemma 4's layers that
        reuse another layer's keys see only the tokens whose logits are kept. A fresh per-call
        memo: one built for every query (T5's table) does not fit these."""
        if n == self.ctx.q_pos.shape[-1]:
            return self
        if self.groups is not None:
            raise ValueError(
                "pezoo.hf: this model's last layers see only the last tokens (they reuse an earlier layer's keys), "
                "which an encoding that reads the tokens in order does not do on a left-padded batch; pad on the right"
            )
        return Call(replace(self.ctx, q_pos=self.ctx.q_pos[:, -n:], scratch={}), None, self.probs, self.per_layer)

    def start_layer(self) -> None:
        """Before a layer's hooks: under gradient checkpointing, empty the per-call memos
        (``ctx.scratch``: a table the first layer built and later layers reuse), so that each
        layer, recomputed alone in the backward pass, runs the same operations it ran forward."""
        if self.per_layer:
            self.ctx.scratch.clear()
            for g in self.groups or ():
                g.ctx.scratch.clear()


def build_call(
    pe: PositionalEncoding,
    state: dict[Any, Any],
    mask: Tensor,
    n_cached: int,
    n_new: int,
    planned_width: int,
    *,
    kept: bool,
    scale_hint: Tensor | None,
    head_dim: int,
) -> Call:
    """The call's context from the key padding ``mask`` (b, j) of all keys, planning the
    positions on the first call of a sequence batch (``state`` empty) for ``planned_width``
    tokens, and growing the plan when a later call runs past it."""
    hf = state.setdefault("pezoo.hf", {})
    total = n_cached + n_new
    if "first" not in hf:  # the first call of this sequence batch (the prompt)
        if n_cached:
            raise ValueError(
                "this cache was filled without pezoo's state (by another model, or before use_encoding): "
                "start generation from an empty cache"
            )
        hf["first"] = first_real(mask)
        # a position-only encoding never groups, so it never reads the padding here (a graph break under compile)
        hf["grouped"] = reads_tokens_in_order(pe) and bool((hf["first"] > 0).any())
    first: Tensor = hf["first"]
    plan = hf.get("plan")
    if plan is None or plan.shape[-1] < total:
        hf["plan"] = _grow(pe, plan, first, max(total, planned_width))
        plan = hf["plan"]
    state["positions"] = plan  # the plan, for length-dependent encodings (RoPE's dynamic scaling)
    padding = mask.to(torch.bool) if torch.compiler.is_compiling() or not bool(mask.all()) else None
    ctx = AttentionContext(
        q_pos=plan[:, n_cached:total],
        k_pos=plan[:, :total],
        state=state,
        key_padding_mask=padding,
        scale_hint=scale_hint,
        head_dim=head_dim,
        state_kept=kept,
    )
    if not hf["grouped"]:
        return Call(ctx)
    groups = [
        _group(hf, plan, first, f, n_cached, n_new, scale_hint, head_dim=head_dim, kept=kept)
        for f in sorted(set(first.tolist()))
    ]
    return Call(ctx, groups)


def _group(
    hf: dict[Any, Any],
    plan: Tensor,
    first: Tensor,
    f: int,
    n_cached: int,
    n_new: int,
    scale_hint: Tensor | None,
    *,
    head_dim: int,
    kept: bool,
) -> Group:
    """The rows whose first real token is ``f`` (left padding): their own context, positions
    counted from ``f`` and queries from the first of their real tokens in this call, with the
    state kept per group in ``hf``."""
    total = n_cached + n_new
    rows = (first == f).nonzero().flatten()
    start = max(f - n_cached, 0)
    if start >= n_new:  # no real token of these rows in this call
        start = n_new
    substate = hf.setdefault(("group", f), {})
    full_plan = plan.expand(first.shape[0], -1)
    hint = None
    if scale_hint is not None:
        hint = scale_hint[rows] if scale_hint.shape[0] == first.shape[0] else scale_hint
        if hint.dim() == 2:
            hint = hint[:, start:]
    sub = AttentionContext(
        q_pos=full_plan[rows, n_cached + start : total],
        k_pos=full_plan[rows, f:total],
        state=substate,
        scale_hint=hint,
        head_dim=head_dim,
        state_kept=kept,
    )
    substate["positions"] = full_plan[rows, f:]
    return Group(rows, f, start, sub)


def _grow(pe: PositionalEncoding, plan: Tensor | None, first: Tensor, width: int) -> Tensor:
    """A plan for ``width`` columns; an existing ``plan`` must be its prefix on the real tokens
    (positions that depend on the length, such as randomized PE's, cannot grow: plan them
    once, which ``generate`` does from ``max_new_tokens``)."""
    new = plan_positions(pe, first, width)
    if plan is None:
        return new
    real = torch.arange(plan.shape[-1], device=first.device)[None, :] >= first[:, None]  # (b, old)
    old, grown = plan.expand(first.shape[0], -1), new[:, : plan.shape[-1]].expand(first.shape[0], -1)
    if not bool(((old == grown) | ~real).all()):
        raise ValueError(
            f"{pe.name or type(pe).__name__}'s positions depend on the sequence length, and this call runs "
            f"past the {plan.shape[-1]} planned: generate with max_new_tokens (model.generate plans for it), "
            "or call pezoo.hf.plan(model, width) before the first call; a sequence that continues from a "
            "returned cache cannot grow its plan: generate it again from its start with the total max_new_tokens"
        )
    return new


def group_rows(x: Tensor, group: Group, dim: int) -> Tensor:
    """The group's rows of ``x`` (batch on axis 0), from its first real new token on axis ``dim``."""
    return x.index_select(0, group.rows).narrow(dim, group.start, x.shape[dim] - group.start)


def embed(pe: PositionalEncoding, call: Call, x: Tensor, tokens: Tensor | None) -> Tensor:
    """The ``embed`` and ``embed_tokens`` hooks on x (b, s, d)."""
    if call.groups is None:
        x = pe.embed(x, call.ctx.q_pos)
        return _embed_tokens(pe, x, tokens, call.ctx)
    out = x.clone()
    for g in call.groups:
        if g.start == x.shape[1]:
            continue
        xg = pe.embed(group_rows(x, g, 1), g.ctx.q_pos)
        xg = _embed_tokens(pe, xg, None if tokens is None else group_rows(tokens, g, 1), g.ctx)
        out[g.rows, g.start :] = xg
    return out


def _embed_tokens(pe: PositionalEncoding, x: Tensor, tokens: Tensor | None, ctx: AttentionContext) -> Tensor:
    if tokens is not None:
        return pe.embed_tokens(x, tokens, ctx)
    if acts_through(pe, "embed_tokens"):
        raise ValueError(f"{pe.name} reads the token ids (embed_tokens): call the model with input_ids")
    return x


def observe(pe: PositionalEncoding, call: Call, layer: int, x: Tensor) -> None:
    """The ``observe`` hook on the residual stream (b, s, d) entering ``layer``."""
    if call.groups is None:
        pe.observe(layer, x, call.ctx)
        return
    for g in call.groups:
        if g.start < x.shape[1]:
            pe.observe(layer, group_rows(x, g, 1), g.ctx)


def qk(pe: PositionalEncoding, call: Call, layer: int, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    """The ``qk`` hook on the new q, k (b, h, s, e) -> (b, h, s, e')."""
    if call.groups is None:
        return pe.qk(layer, q, k, call.ctx)
    done = [
        (g, *pe.qk(layer, group_rows(q, g, 2), group_rows(k, g, 2), g.ctx)) for g in call.groups if g.start < q.shape[2]
    ]
    width = max([q.shape[-1], *(qg.shape[-1] for _, qg, _ in done)])
    q_out = torch.nn.functional.pad(q, (0, width - q.shape[-1]))  # padding's q/k: zeros where widened
    k_out = torch.nn.functional.pad(k, (0, width - k.shape[-1]))
    for g, qg, kg in done:
        q_out[g.rows, :, g.start :] = qg.to(q_out.dtype)
        k_out[g.rows, :, g.start :] = kg.to(k_out.dtype)
    return q_out, k_out


def biases(pe: PositionalEncoding, call: Call, layer: int, q: Tensor, k: Tensor) -> list[AttentionBias]:
    """The ``bias`` hook for q (b, h, s, e') and all keys k (b, h, j, e'); the groups' as one dense bias."""
    if call.groups is None:
        return pe.bias(layer, q, k, call.ctx)
    b, h, s, j = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    dense: Tensor | None = None
    for g in call.groups:
        if g.start == s:
            continue
        kg = k.index_select(0, g.rows)[:, :, g.first :]
        found = pe.bias(layer, group_rows(q, g, 2), kg, g.ctx)
        if not found:
            continue
        if dense is None:
            dense = q.new_zeros(b, h, s, j, dtype=torch.float32)
        part = sum(bias.materialize(g.ctx, h, torch.float32) for bias in found)  # (b_g|1, h|1, i_g, j_g)
        assert isinstance(part, Tensor)
        block = dense[g.rows]  # (b_g, h, s, j): a copy, written back
        block[:, :, g.start :, g.first :] = part.expand(len(g.rows), h, s - g.start, j - g.first)
        dense[g.rows] = block
    return [] if dense is None else [DenseBias(dense)]
