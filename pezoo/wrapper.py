"""An encoding around another one: the base of ``randomized:``, ``ssmax:`` and ``dape:``.

A wrapper changes one or two things about the encoding it holds (randomized PE its
positions, SSMax a factor on the queries, DAPE the scores) and leaves the rest to it.
:class:`Wrapper` passes every hook of the interface on to ``inner``; a subclass overrides
the hooks it does its own work in and nothing else. The forwards are marked
(:func:`pezoo.interface.forwards`), so what a built wrapper does is read off what it holds
(:func:`pezoo.interface.acts_through`): ``dape:alibi`` acts through ``bias`` because ALiBi
does, and a hook added to the interface reaches every wrapper's inner encoding here, once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor

from pezoo.biases import AttentionBias
from pezoo.context import AttentionContext
from pezoo.interface import PositionalEncoding, forwards
from pezoo.scores import Normaliser, ScoreTransform


class Wrapper(PositionalEncoding):
    """``inner`` with every hook its own, until a subclass overrides one.

    Args:
        inner: the wrapped encoding. Its ``uses_positions`` and ``max_position`` become the
            wrapper's (a subclass may set its own after ``super().__init__``).

    Raises:
        TypeError: ``inner`` is not a :class:`PositionalEncoding`.
    """

    def __init__(self, inner: PositionalEncoding, /) -> None:
        super().__init__()
        if not isinstance(inner, PositionalEncoding):
            raise TypeError(f"{type(self).__name__} wraps a pezoo PositionalEncoding, got {type(inner).__name__}")
        self.inner = inner
        self.uses_positions = inner.uses_positions
        self.max_position = inner.max_position

    def delegates(self) -> tuple[PositionalEncoding, ...]:
        return (self.inner,)

    @forwards
    def positions(self, batch: int, length: int, device: torch.device | str = "cpu") -> Tensor:
        return self.inner.positions(batch, length, device)

    @forwards
    def padded_positions(self, lengths: Tensor, width: int, device: torch.device | str = "cpu") -> Tensor:
        return self.inner.padded_positions(lengths, width, device)

    @forwards
    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        return self.inner.embed(x, pos)

    @forwards
    def embed_tokens(self, x: Tensor, tokens: Tensor, ctx: AttentionContext) -> Tensor:
        return self.inner.embed_tokens(x, tokens, ctx)

    @forwards
    def observe(self, layer: int, x: Tensor, ctx: AttentionContext) -> None:
        self.inner.observe(layer, x, ctx)

    @forwards
    def qk(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor]:
        return self.inner.qk(layer, q, k, ctx)

    @forwards
    def bias(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> list[AttentionBias]:
        return self.inner.bias(layer, q, k, ctx)

    @forwards
    def score_transform(self, layer: int, ctx: AttentionContext) -> ScoreTransform | None:
        return self.inner.score_transform(layer, ctx)

    @forwards
    def normaliser(self, layer: int, ctx: AttentionContext) -> Normaliser | None:
        return self.inner.normaliser(layer, ctx)

    def attention_backends(self) -> tuple[str, ...] | None:
        return self.inner.attention_backends()

    def optimizer_groups(self) -> list[dict[str, Any]]:
        return self.inner.optimizer_groups()

    def regularisation(self) -> Tensor:
        return self.inner.regularisation()

    @property
    def random_at_eval(self) -> bool:
        return self.inner.random_at_eval

    @contextmanager
    def seeded(self, seed: int) -> Iterator[torch.Generator | None]:
        with self.inner.seeded(seed) as generator:
            yield generator
