"""Combinations of encodings: ``create("abacus+fire")`` is Abacus embeddings on the input
and FIRE's bias in attention, one encoding behind the one interface.

Papers combine encodings: McLeish et al. 2024 ("Transformers Can Do Arithmetic with the
Right Embeddings", §3-4) pair Abacus embeddings with NoPE, FIRE or RoPE in attention.
:class:`Combined` runs each hook of every part in the order the parts are given:

- ``embed`` and ``embed_tokens`` pass the embeddings through each part in turn (two
  additive embeddings add);
- ``observe`` shows the residual stream to every part;
- ``qk`` lets the one part that transforms queries and keys do so (two such parts are
  refused: the second would rotate or widen the first's output, which no paper defines);
- ``bias`` returns every part's biases, which attention adds;
- ``score_transform`` and ``normaliser`` are the one part's that has one (two parts with a
  score transform, or two with a normaliser, are refused: they would have to compose), and
  the combination runs on the backends every part runs on (``attention_backends``);
- ``optimizer_groups`` and ``regularisation`` gather the parts'.

Positions are the plain ``0..s-1`` (``max_position`` the smallest of the parts'). A
randomized part is refused: randomization wraps the whole combination
(``randomized:abacus+fire`` randomizes the positions FIRE reads), since the parts must
share one set of positions. Each part keeps its own ``ctx.state`` keys, so one encoding
may not appear twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, cast

import torch
from torch import Tensor, nn

from pezoo.biases import AttentionBias
from pezoo.context import AttentionContext
from pezoo.interface import PositionalEncoding, acts_through, forwards
from pezoo.scores import Normaliser, ScoreTransform

SEPARATOR = "+"


class Combined(PositionalEncoding):
    """Several encodings as one; see the module docstring for how each hook combines.

    Args:
        parts: two or more built encodings, in the order their hooks run.
    """

    def __init__(self, parts: Sequence[PositionalEncoding]) -> None:
        super().__init__()
        parts = list(parts)
        if len(parts) < 2:
            raise ValueError(f"a combination needs two or more encodings, got {len(parts)}")
        names = [getattr(p, "name", "") or type(p).__name__ for p in parts]
        for part, name in zip(parts, names, strict=True):
            if not isinstance(part, PositionalEncoding):
                raise TypeError(f"{name!r} is not a pezoo PositionalEncoding")
            if isinstance(part, Combined):
                raise ValueError(f"{name!r} is already a combination: list its parts instead")
            if acts_through(part, "positions"):
                # a randomized part is named by what it randomizes: randomized (of ape) + fire -> randomized:ape+fire
                whole = SEPARATOR.join(
                    getattr(getattr(p, "inner", None), "name", None) or n.split(":")[-1]
                    for p, n in zip(parts, names, strict=True)
                )
                raise ValueError(
                    f"{name!r} chooses its own positions, which the other parts would not share; "
                    f"randomize the whole combination instead (randomized:{whole})"
                )
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"{', '.join(repeated)} appears twice; each part keeps its own state, once")
        rotating = [n for p, n in zip(parts, names, strict=True) if acts_through(p, "qk")]
        if len(rotating) > 1:
            raise ValueError(
                f"{' and '.join(rotating)} both transform queries and keys; a combination may hold one such part"
            )
        for hook, what in (("score_transform", "transform attention scores"), ("normaliser", "replace softmax")):
            both = [n for p, n in zip(parts, names, strict=True) if acts_through(p, hook)]
            if len(both) > 1:
                raise ValueError(f"{' and '.join(both)} both {what}; a combination may hold one such part")
        self.parts = nn.ModuleList(parts)
        self.name = SEPARATOR.join(names)
        self.uses_positions = any(p.uses_positions for p in parts)
        bounds = [p.max_position for p in parts if p.max_position is not None]
        self.max_position = min(bounds) if bounds else None

    def delegates(self) -> tuple[PositionalEncoding, ...]:
        return tuple(self._parts())

    def _parts(self) -> Iterator[PositionalEncoding]:
        """The parts, as the encodings they are (``self.parts`` is their ``nn.ModuleList``)."""
        return cast("Iterator[PositionalEncoding]", iter(self.parts))

    @forwards
    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        for part in self._parts():
            x = part.embed(x, pos)
        return x

    @forwards
    def embed_tokens(self, x: Tensor, tokens: Tensor, ctx: AttentionContext) -> Tensor:
        for part in self._parts():
            x = part.embed_tokens(x, tokens, ctx)
        return x

    @forwards
    def observe(self, layer: int, x: Tensor, ctx: AttentionContext) -> None:
        for part in self._parts():
            part.observe(layer, x, ctx)

    @forwards
    def qk(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor]:
        for part in self._parts():
            q, k = part.qk(layer, q, k, ctx)
        return q, k

    @forwards
    def bias(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> list[AttentionBias]:
        return [b for part in self._parts() for b in part.bias(layer, q, k, ctx)]

    @forwards
    def score_transform(self, layer: int, ctx: AttentionContext) -> ScoreTransform | None:
        found = [t for part in self._parts() if (t := part.score_transform(layer, ctx)) is not None]
        return found[0] if found else None

    @forwards
    def normaliser(self, layer: int, ctx: AttentionContext) -> Normaliser | None:
        found = [n for part in self._parts() if (n := part.normaliser(layer, ctx)) is not None]
        return found[0] if found else None

    def attention_backends(self) -> tuple[str, ...] | None:
        """The backends every part runs on (None: every backend)."""
        declared = [b for part in self._parts() if (b := part.attention_backends()) is not None]
        if not declared:
            return None
        return tuple(name for name in declared[0] if all(name in other for other in declared[1:]))

    def optimizer_groups(self) -> list[dict[str, Any]]:
        """The parts' own parameter groups (e.g. PRISM's α), if any."""
        return [g for part in self._parts() for g in getattr(part, "optimizer_groups", list)()]

    def regularisation(self) -> Tensor:
        """The sum of the parts' loss terms (0 when none has one)."""
        terms = [term() for part in self._parts() if (term := getattr(part, "regularisation", None)) is not None]
        return sum(terms, torch.zeros(()))

    def extra_repr(self) -> str:
        return self.name


def combine(*parts: PositionalEncoding) -> Combined:
    """``combine(abacus, fire)``: built encodings as one (:class:`Combined`)."""
    return Combined(parts)
