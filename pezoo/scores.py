"""How attention turns scores into weights beyond an additive bias: a **score transform** that
sees every head's scores and biases at once (DAPE; Gemma 2's logit soft-capping) and a
**normaliser** that replaces softmax row by row (stick-breaking attention; gpt-oss's
attention sinks).

Axis letters: b batch, h heads, i queries, j keys.

As with the structured biases (:mod:`pezoo.biases`), an encoding says *what* (a
:class:`ScoreTransform` or :class:`Normaliser` object from its ``score_transform`` /
``normaliser`` hook) and a backend *how*; unlike a bias, most backends cannot express them,
so each object declares the backends that take it (``backends``). :func:`pezoo.attend`
refuses any other with a ValueError naming those that can; ``auto`` picks one of them.

The attention they sit in, per layer:

    S = scale · q kᵀ                                   (b, h, i, j)
    B = Σ biases, masks left out (0 where masked)        (b|1, h|1, i, j)
    S' = transform(S, B)      or  S + B  without one
    A  = normaliser(S', allowed)  or  softmax(S' masked)  without one
    out = A v

*Causality.* A transform acts on each (b, i, j) pair's vector over the heads (its inputs
have the head axis last): it mixes heads, never pairs, so no future score can reach a past
one, and the causal mask and every other mask are applied after it. A normaliser is a
function of each query's row alone, and is told which keys are allowed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

__all__ = ["Normaliser", "ScoreTransform", "Sinks", "SoftCap", "apply_transform", "check_backend", "hook_backends"]


class ScoreTransform:
    """Base class of score transforms: ``S' = transform(S, B)`` on every head at once.

    Subclasses implement :meth:`__call__` and set ``backends``; a transform that is an
    elementwise function of each raw score with the biases added after it (``S' = g(S) + B``,
    soft-capping) may also give :meth:`score_fn`, which flex applies in its ``score_mod``.
    """

    backends: ClassVar[tuple[str, ...]] = ("eager",)
    """The attention backends that take this transform (besides ``auto``, which picks one)."""

    def __call__(self, scores: Tensor, bias: Tensor) -> Tensor:
        """scores (b, i, j, h), the scaled dot products; bias (b|1, i, j, h|1), the sum of the
        additive biases (0 where a mask would be: masks are applied after) -> the transformed
        scores (b, i, j, h). The head axis is last: a transform reads and mixes the heads of
        one (i, j) pair, never other pairs."""
        raise NotImplementedError

    def score_fn(self) -> Callable[[Tensor], Tensor] | None:
        """``g`` where the transform is ``S' = g(S) + B`` elementwise (flex's ``score_mod``
        applies it before the biases); None when it is not of that form (the default)."""
        return None


@dataclass(frozen=True, eq=False)
class SoftCap(ScoreTransform):
    """Attention-logit soft-capping, ``S' = cap · tanh(S / cap) + B`` (Gemma 2: its
    ``attn_logit_softcapping``, applied to the scaled logits before the mask).

    Elementwise per score, so flex takes it too (in its ``score_mod``).

    Attributes:
        cap: the cap c > 0; scores are squashed into (−c, c).
    """

    cap: float
    backends: ClassVar[tuple[str, ...]] = ("eager", "flex")

    def __post_init__(self) -> None:
        if isinstance(self.cap, bool) or not isinstance(self.cap, (int, float)) or not (0 < self.cap < math.inf):
            raise ValueError(f"SoftCap needs a finite cap > 0, got {self.cap!r}")

    def __call__(self, scores: Tensor, bias: Tensor) -> Tensor:
        return self.cap * torch.tanh(scores / self.cap) + bias

    def score_fn(self) -> Callable[[Tensor], Tensor]:
        cap = float(self.cap)

        def capped(score: Tensor) -> Tensor:
            return cap * torch.tanh(score / cap)

        return capped


class Normaliser:
    """Base class of normalisers: the attention weights of each query from its row of scores,
    in place of softmax.

    Subclasses implement :meth:`__call__` and set ``backends``.
    """

    backends: ClassVar[tuple[str, ...]] = ("eager",)
    """The attention backends that take this normaliser (besides ``auto``, which picks one)."""

    def __call__(self, scores: Tensor, allowed: Tensor | None) -> Tensor:
        """scores (b, h, i, j), finite (biases and transform applied, masks not); ``allowed``
        (b|1, h|1, i, j) bool, True where the query may see the key (causal mask, key padding,
        masking biases), or None: every key -> weights (b, h, i, j), zero where not allowed.

        Keys are in sequence order and the last i keys are the queries' own (query index
        ``a`` is key index ``a + j - i``), as for the causal mask. Each row of the result
        depends on its own row of scores only."""
        raise NotImplementedError

    def softmax_factor(self) -> Callable[[Tensor], Tensor] | None:
        """``f`` where the weights are softmax's times a factor of each row's log-sum-exp alone,
        ``A = softmax(S) · f(lse)`` with ``lse`` (b, h, i) the log of the row's denominator
        (flex returns it with its fused softmax, and applies ``f``); None when the normaliser
        is not of that form (the default)."""
        return None


class Sinks(Normaliser):
    """Softmax with one learned logit per head in every row's denominator, whose value is
    nothing ("attention sinks"; gpt-oss's ``sinks``):

        A_ij = exp(S_ij) / (exp(t_h) + Σ_k allowed exp(S_ik))

    so a row's weights sum to less than 1 and a query may attend to nothing. The sink logits
    t stay the caller's tensor (h,), so gradients reach them. A row with no allowed key gets
    zero weights. The weights are softmax's times σ(lse − t), so flex takes it too (its fused
    softmax returns the log-sum-exp).

    Args:
        logits: t, one per head (h,).
    """

    backends: ClassVar[tuple[str, ...]] = ("eager", "flex")

    def __init__(self, logits: Tensor) -> None:
        if logits.dim() != 1:
            raise ValueError(f"Sinks takes one logit per head, a (heads,) tensor; got shape {tuple(logits.shape)}")
        self.logits = logits

    def __call__(self, scores: Tensor, allowed: Tensor | None) -> Tensor:
        b, h, i, _ = scores.shape
        if self.logits.shape[0] != h:
            raise ValueError(f"Sinks has {self.logits.shape[0]} logits for scores of {h} heads")
        rows = scores.float() if allowed is None else scores.float().masked_fill(~allowed, -math.inf)
        sink = self.logits.float().view(1, h, 1, 1).expand(b, h, i, 1)
        return torch.softmax(torch.cat([rows, sink], dim=-1), dim=-1)[..., :-1].to(scores.dtype)

    def softmax_factor(self) -> Callable[[Tensor], Tensor]:
        """Σ exp(S) / (Σ exp(S) + exp(t)) = σ(lse − t): softmax's weights scaled by it."""
        logits = self.logits

        def factor(lse: Tensor) -> Tensor:  # lse (b, h, i) -> (b, h, i)
            return torch.sigmoid(lse.float() - logits.float().view(1, -1, 1))

        return factor


def hook_backends(
    transform: ScoreTransform | None = None, normaliser: Normaliser | None = None
) -> tuple[str, ...] | None:
    """The backends that take both hooks (in ``transform``'s order), or None when neither is given."""
    declared = [hook.backends for hook in (transform, normaliser) if hook is not None]
    if not declared:
        return None
    return tuple(name for name in declared[0] if all(name in other for other in declared[1:]))


def check_backend(backend: str, transform: ScoreTransform | None, normaliser: Normaliser | None) -> None:
    """ValueError unless ``backend`` takes ``transform`` and ``normaliser`` (``auto`` always
    does: it picks a backend that takes them); the message names the backends that can."""
    allowed = hook_backends(transform, normaliser)
    if allowed is None or backend == "auto" or backend in allowed:
        return
    hooks = [f"{type(hook).__name__} ({kind})" for kind, hook in (("score transform", transform),
             ("normaliser", normaliser)) if hook is not None]  # fmt: skip
    raise ValueError(
        f"the {backend} backend cannot express {' and '.join(hooks)}: it runs on backend "
        f"{_names(allowed)} (or auto, which picks one)"
    )


def _names(names: Iterable[str]) -> str:
    listed = [repr(n) for n in names]
    return " or ".join(listed) if listed else "(none)"


def apply_transform(transform: ScoreTransform, scores: Tensor, bias: Tensor | None) -> Tensor:
    """``transform`` on scores (b, h, i, j) and the summed biases (b|1, h|1, i, j) or None (no
    bias): the head axis moved last for it and back -> (b, h, i, j)."""
    if bias is None:
        bias = scores.new_zeros(()).expand(1, 1, *scores.shape[2:])
    out = transform(scores.permute(0, 2, 3, 1), bias.permute(0, 2, 3, 1))  # (b, i, j, h): a view each
    return out.permute(0, 3, 1, 2)  # (b, h, i, j)
