"""Position coupling (Cho et al., "Position Coupling: Improving Length Generalization of
Arithmetic Transformers Using Task Structure", NeurIPS 2024, arXiv 2405.20671, §3): tokens
the task relates share a position id, and the id indexes a learned absolute position
embedding added before layer 0.

For addition the paper gives digits of equal significance, in both operands and in the
answer, one id; its data pipeline computes the ids of each example from the task's format
(operands zero-padded to one length, the answer reversed and padded to one digit more, a
random starting id in training, a fixed one at evaluation; ``<bos>``/``<eos>``/padding at id 0).

Here the *task declares* its coupling as data (:class:`Coupling`), and the encoding *reads*
it from the token ids, as Abacus reads digit places: the ids are a causal function of the
tokens, so a prompt fed at once and an answer decoded token by token get the ids the
teacher-forced pass gives them. A coupling cuts the sequence into **segments** at
**separator** tokens and numbers the **member** tokens of each segment by their step in it:

    members     the tokens numbered within their segment (the digits, say)
    fixed       tokens outside the numbering, at id 0 (the paper's <bos>, <eos>, padding)
    separators  every other token: each closes the segment it ends and opens the next

The t-th member of segment g (t = 0, 1, ...) with spec (width w, down_from r) has the
significance ``σ = ⌊t/w⌋ + 1`` (counting up: least significant digit first), or
``σ = max(0, S_r − ⌊t/w⌋)`` (counting down from the S_r steps, ``⌈members/w_r⌉``, of an
earlier segment r: a reversed copy). A separator gets the significance just before the first
member of the segment it opens: 0 before a segment counting up, ``S_r + 1`` before one
counting down. Segments past the declared ones count up, one member per step, so the default
coupling (members: the digits, no segments) couples digits by their place in their number.
Then (eq. 1 of docs/encodings/position_coupling.md)

    id = 0                  for a fixed token
    id = 1 + k + σ          for every other token

with k the training offset, drawn uniformly from ``{0, ..., max_k}`` once per batch (the
paper draws a starting id per example; one per batch, as Abacus's offset, keeps a batch run
as groups of rows equal to its one pass) and 0 in evaluation, and the embedding is
``x + P[id]``, P a learned ``(max_index, d)`` table. No positions are read
(``uses_positions = False``); attention has no other positional term, the paper's setup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from pezoo.cards import PaperCard, PaperClaim, RunFacts
from pezoo.context import AttentionContext, check_embed, check_number, check_sizes
from pezoo.eager import eager_under_compile
from pezoo.interface import PositionalEncoding, to_device
from pezoo.registry import ModelDims, register

__all__ = ["CoupledSegment", "Coupling", "CouplingState", "PositionCoupling", "coupled_significance", "draw_offset"]

DEFAULT_MAX_K = 170
"""The paper's addition runs (1..30 digits, max_pos 202) start the ids anywhere in 1..171."""
DEFAULT_MAX_INDEX = 1024

_STATE = "coupling_state"  # ctx.state (under ctx_key): CouplingState after the tokens fed so far
_OFFSET = "coupling_offset"  # ctx.state (under ctx_key): () long, the offset k of this sequence batch
_FED = "coupling_fed"  # ctx.state (under ctx_key): int, tokens of this sequence batch fed so far


@dataclass(frozen=True)
class CoupledSegment:
    """How a segment numbers its members: ``width`` members per step (a chain-of-thought
    step of four digits and a comma is one step of width 5), counting up from 1, or down
    from the steps of segment ``down_from`` (an earlier segment's index)."""

    width: int = 1
    down_from: int | None = None

    def as_option(self) -> dict[str, Any]:
        return {"width": self.width} if self.down_from is None else {"width": self.width, "down_from": self.down_from}


@dataclass(frozen=True)
class Coupling:
    """A task's coupling: which tokens share a position id (module docstring).

    Attributes:
        members: token ids numbered within their segment.
        segments: the declared segments' specs, in order (segment 0 is the tokens before the
            first separator); later segments count up, one member per step.
        fixed: token ids outside the numbering (id 0): ``<bos>``, ``<eos>``, padding.
    """

    members: tuple[int, ...]
    segments: tuple[CoupledSegment, ...] = ()
    fixed: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for what, ids in (("members", self.members), ("fixed", self.fixed)):
            if any(not isinstance(i, int) or isinstance(i, bool) or i < 0 for i in ids) or len(set(ids)) != len(ids):
                raise ValueError(f"coupling {what} must be distinct non-negative token ids, got {list(ids)}")
        if not self.members:
            raise ValueError("a coupling needs at least one member token")
        both = sorted(set(self.members) & set(self.fixed))
        if both:
            raise ValueError(f"coupling: token ids {both} are both members and fixed")
        for g, spec in enumerate(self.segments):
            check_number("coupling", f"segments[{g}].width", spec.width, integer=True, at_least=1)
            r = spec.down_from
            if r is not None and (not isinstance(r, int) or isinstance(r, bool) or not 0 <= r < g):
                raise ValueError(
                    f"coupling: segments[{g}].down_from must name an earlier segment (0..{g - 1}), got {r!r}"
                )

    def as_option(self) -> dict[str, Any]:
        """The coupling as plain data (the ``coupling`` option a run's record can hold)."""
        return {
            "members": list(self.members),
            "segments": [s.as_option() for s in self.segments],
            "fixed": list(self.fixed),
        }

    @classmethod
    def from_option(cls, value: Coupling | Mapping[str, Any] | None) -> Coupling:
        """A :class:`Coupling` from itself, from :meth:`as_option`'s data (strict keys), or
        None: the default, the digits 0-9 as members and no declared segment."""
        if value is None:
            return DEFAULT_COUPLING
        if isinstance(value, Coupling):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(f"coupling must be a Coupling or a mapping, got {type(value).__name__}")
        _strict_keys("coupling", value, ("members", "segments", "fixed"))
        segments = []
        for g, spec in enumerate(value.get("segments", ())):
            if not isinstance(spec, Mapping):
                raise ValueError(f"coupling: segments[{g}] must be a mapping, got {type(spec).__name__}")
            _strict_keys(f"coupling segments[{g}]", spec, ("width", "down_from"))
            segments.append(CoupledSegment(spec.get("width", 1), spec.get("down_from")))
        members = value.get("members")
        if members is None:
            raise ValueError("coupling needs its members (the token ids numbered within their segment)")
        return cls(tuple(members), tuple(segments), tuple(value.get("fixed", ())))


def _strict_keys(what: str, value: Mapping[str, Any], valid: Sequence[str]) -> None:
    unknown = sorted(set(value) - set(valid))
    if unknown:
        raise ValueError(f"{what} has no key(s) {unknown}; valid keys: {list(valid)}")


DEFAULT_COUPLING = Coupling(members=tuple(range(10)))
"""Digits 0-9 coupled by their place in their number (least significant first); every other
token a separator."""


class CouplingState(NamedTuple):
    """Where a sequence batch stands after the tokens fed so far (incremental decoding).

    Attributes:
        segment: (b,) long, the index of the open segment.
        filled: (b,) long, members of the open segment so far.
        counts: (b, n) long, members of each declared segment so far.
    """

    segment: Tensor
    filled: Tensor
    counts: Tensor


def coupled_significance(
    tokens: Tensor,
    members: Tensor,
    fixed: Tensor,
    widths: Tensor,
    down_from: Tensor,
    state: CouplingState | None = None,
) -> tuple[Tensor, CouplingState]:
    """Each token's significance σ under a coupling (module docstring), -1 for a fixed token.

    Args:
        tokens: (b, s) token ids, continuing ``state`` (None: the start of the sequences).
        members, fixed: (m,), (f,) the coupling's member and fixed token ids.
        widths, down_from: (n + 1,) long, the declared segments' widths and referenced
            segments (-1: counting up), then the spec of every later segment (1, -1).
        state: where the earlier tokens left each sequence.

    Returns:
        σ (b, s) long, and the state after these tokens.
    """
    b, s = tokens.shape
    n = widths.shape[0] - 1  # declared segments
    if state is None:
        zero = tokens.new_zeros(b)
        state = CouplingState(zero, zero, tokens.new_zeros(b, n))
    is_fixed = torch.isin(tokens, fixed)  # (b, s)
    is_member = torch.isin(tokens, members) & ~is_fixed
    is_sep = ~(is_member | is_fixed)
    sep = is_sep.long()
    segment = state.segment[:, None] + torch.cumsum(sep, dim=1) - sep  # (b, s): the segment a separator closes
    seen = torch.cumsum(is_member.long(), dim=1)  # (b, s): members up to and including t
    # members seen when the token's segment opened: at its last separator, or -filled before any
    opened = torch.cummax(torch.where(is_sep, seen, -state.filled[:, None].expand(b, s)), dim=1).values
    step_in = seen - 1 - opened  # (b, s): a member's place in its segment, from 0
    # members of each declared segment (all of segment r precede every token that reads it)
    declared = torch.arange(n, device=tokens.device)
    in_segment = (segment[..., None] == declared) & is_member[..., None]  # (b, s, n)
    counts = state.counts + in_segment.sum(dim=1)  # (b, n)
    steps = (counts + widths[:n] - 1) // widths[:n]  # (b, n): ⌈members / width⌉
    steps = torch.cat([steps, steps.new_zeros(b, 1)], dim=1)  # (b, n + 1): a column for "counting up"
    spec = torch.where(is_sep, segment + 1, segment).clamp(max=n)  # a member's segment, a separator's next one
    width, ref = widths[spec], down_from[spec]  # (b, s) each
    start = torch.gather(steps, 1, torch.where(ref < 0, n, ref))  # (b, s): S_r (0 where counting up)
    up = ref < 0
    step = torch.div(step_in.clamp(min=0), width, rounding_mode="floor")
    member = torch.where(up, step + 1, (start - step).clamp(min=0))
    separator = torch.where(up, torch.zeros_like(start), start + 1)
    sig = torch.where(is_sep, separator, member)
    sig = torch.where(is_fixed, torch.full_like(sig, -1), sig)
    if s:
        after = CouplingState(state.segment + sep.sum(dim=1), seen[:, -1] - opened[:, -1], counts)
    else:
        after = state
    return sig, after


@eager_under_compile("the offset is drawn as in eager mode: see draw_offset")
def draw_offset(max_k: int, device: torch.device | str, generator: torch.Generator | None = None) -> Tensor:
    """The training offset k, uniform on 0..max_k: () long, from torch's global generator
    on ``device``, or drawn on the CPU from ``generator`` and moved (on a CPU the same
    number either way, from the same state).

    Eager under ``torch.compile``: inductor replaces random operators with its own
    generator, so a traced draw would give a compiled model another offset than eager."""
    if generator is None:
        return torch.randint(max_k + 1, (), device=device)
    return to_device(torch.randint(max_k + 1, (), generator=generator), device)


# -- the paper's card --------------------------------------------------------------

PAPER = (
    "Cho, Cha, Awasthi, Bhojanapalli, Gupta & Yun, “Position Coupling: Improving Length Generalization of "
    "Arithmetic Transformers Using Task Structure” (NeurIPS 2024)"
)

CLAIM = PaperClaim(
    order=75,
    source=f"{PAPER}, abstract",
    says="With position coupling, a 1-layer Transformer trained on additions of 1 to 30 digits adds 200-digit "
    "numbers: 6.67× the training length.",
    test="as PRISM's: every seed keeps exact match ≥ {em_ok} at every tested scale on a table tested to 6.67× N "
    "(holds), “holds to the tested k×; claimed 6.67×: untested” short of that multiple, partly from "
    "{partly_multiple}× N on the weakest seed and not below NoPE. The task is pezoo's addition (least "
    "significant digit first, unpadded, with a chain of thought), coupled as it declares, not the paper's format.",
    rule="reach",
    against=("nope",),
    row="position_coupling",
    tasks=("addition",),
    multiple=200 / 30,
)


def paper_options(task: str, dims: ModelDims) -> dict[str, Any]:
    """The paper's addition setup (max_pos 202 for 1..30-digit training): starting ids over
    171 values, whatever the task (the coupling itself is the task's to declare)."""
    return {"max_k": DEFAULT_MAX_K}


def departures(run: RunFacts) -> list[str]:
    """How a run departs from the paper: its task's layout, and the batch's one offset."""
    out = []
    if run.task == "addition":
        out.append(
            "pezoo's addition writes both operands least significant digit first, unpadded, and a chain of thought "
            "before the sum; the paper zero-pads the operands (most significant first) to one length and reverses "
            "only the answer. Each chain step a_k b_k c_k d_k and its comma share the operands' id for digit k"
        )
    elif run.task == "lp_addition":
        out.append("the operands are written least significant digit first too (the paper reverses only the answer)")
    out.append(
        "one training offset per batch, drawn whatever the example's length, where the paper draws each example's "
        "starting id so that its ids stay within max_pos"
    )
    return out


CARD = PaperCard(
    paper=PAPER,
    setup=paper_options,
    departures=departures,
    extra_input="the task's declared coupling: which tokens share a position id, read from the token ids",
    extra_input_badge="task coupling",
    claims=(CLAIM,),
)


@register("position_coupling", card=CARD)
class PositionCoupling(PositionalEncoding):
    """Position coupling (Cho et al. 2024): ``x + P[id]``, the id shared by the tokens the
    task couples (digits of equal significance in operands and answer).

    Args:
        d_model: embedding width d.
        coupling: the task's :class:`Coupling` (or its :meth:`Coupling.as_option` data);
            None: digits 0-9 coupled by their place in their number. The pezoo harness
            passes the coupling the run's task declares.
        max_k: training offsets are drawn from ``{0, ..., max_k}``, one per batch.
        max_index: rows of P; an id at or beyond it raises ``ValueError``.
        init_std: standard deviation of P's normal initialisation (0.02, as GPT-2).
    """

    uses_positions = False
    members: Tensor  # (m,) the coupling's member token ids: non-persistent buffers, as the three below
    fixed: Tensor  # (f,) its fixed token ids
    widths: Tensor  # (n + 1,) each declared segment's width, then 1 (every later segment)
    down_from: Tensor  # (n + 1,) the segment each counts down from, -1 counting up

    def __init__(
        self,
        *,
        d_model: int,
        coupling: Coupling | Mapping[str, Any] | None = None,
        max_k: int = DEFAULT_MAX_K,
        max_index: int = DEFAULT_MAX_INDEX,
        init_std: float = 0.02,
    ) -> None:
        super().__init__()
        check_sizes("position_coupling", d_model=d_model)
        check_number("position_coupling", "max_k", max_k, integer=True, at_least=0)
        check_number("position_coupling", "max_index", max_index, integer=True, at_least=max_k + 3)
        check_number("position_coupling", "init_std", init_std, at_least=0)
        self.coupling = Coupling.from_option(coupling)
        self.d_model, self.max_k, self.max_index, self.init_std = d_model, max_k, max_index, init_std
        self._register_rule()
        self.table = nn.Parameter(torch.randn(max_index, d_model) * init_std)  # (max_index, d)

    def _register_rule(self, device: torch.device | str | None = None) -> None:
        """The coupling as non-persistent buffers (token ids, then the segments' specs)."""
        c = self.coupling
        widths = [s.width for s in c.segments] + [1]
        refs = [-1 if s.down_from is None else s.down_from for s in c.segments] + [-1]
        for name, values in (("members", c.members), ("fixed", c.fixed), ("widths", widths), ("down_from", refs)):
            self.register_buffer(name, torch.tensor(values, dtype=torch.long, device=device), persistent=False)

    def reset_parameters(self) -> None:
        """Re-initialise P and rebuild the coupling's buffers (non-persistent), e.g. after
        building on ``meta`` and ``to_empty``."""
        self._register_rule(self.table.device)
        with torch.no_grad():
            self.table.normal_(0.0, self.init_std)

    def coupled_ids(self, tokens: Tensor, ctx: AttentionContext) -> Tensor:
        """The coupled position ids of ``tokens`` (b, s) continuing ``ctx.state``: (b, s)
        long (eq. 1); the coupling's place and the batch's offset carry in ``ctx.state``."""
        sig, after = coupled_significance(
            tokens, self.members, self.fixed, self.widths, self.down_from, ctx.state.get(self.ctx_key(_STATE))
        )
        ctx.state[self.ctx_key(_STATE)] = after
        offset = ctx.state.get(self.ctx_key(_OFFSET))
        if offset is None:
            offset = draw_offset(self.max_k, tokens.device, self._generator) if self.training else tokens.new_zeros(())
            ctx.state[self.ctx_key(_OFFSET)] = offset
        return torch.where(sig < 0, torch.zeros_like(sig), 1 + offset + sig)  # (b, s)

    def embed_tokens(self, x: Tensor, tokens: Tensor, ctx: AttentionContext) -> Tensor:
        """x (b, s, d), tokens (b|1, s) -> x + P[id]."""
        check_embed(self.name, x, tokens, self.d_model, what="tokens", rows=True)
        ids = self.coupled_ids(tokens, ctx)
        # σ is at most the tokens fed so far plus one, so the host knows every id has a row
        # without reading them (no sync, no graph break) unless the sequence is long
        fed = ctx.state.get(self.ctx_key(_FED), 0) + tokens.shape[1]
        ctx.state[self.ctx_key(_FED)] = fed
        if fed + self.max_k + 2 >= self.max_index:
            self._check_rows(ids)
        return x + self.table[ids].to(x.dtype)  # (b, s, d)

    def _check_rows(self, ids: Tensor) -> None:
        """Raise unless every id has a row of P (eager: ValueError; compiled: device assert)."""
        if torch.compiler.is_compiling():
            torch._assert_async(
                (ids < self.max_index).all(), f"position_coupling has rows for ids 0..{self.max_index - 1} only"
            )
        elif ids.numel() and int(ids.max()) >= self.max_index:
            raise ValueError(
                f"position_coupling has rows for ids 0..{self.max_index - 1} but a token got id {int(ids.max())}; "
                "build it with a larger max_index"
            )

    def own_draws(self, device: torch.device) -> dict[Any, Tensor]:
        """The training offset k of the next pass (``plan_draws``), where the pass looks for it."""
        return {self.ctx_key(_OFFSET): draw_offset(self.max_k, device, self._generator)} if self.training else {}

    def extra_repr(self) -> str:
        c = self.coupling
        segments = [s.as_option() for s in c.segments]
        return (
            f"d_model={self.d_model}, members={list(c.members)}, segments={segments}, fixed={list(c.fixed)}, "
            f"max_k={self.max_k}, max_index={self.max_index}"
        )
