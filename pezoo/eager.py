"""Functions that run eagerly under ``torch.compile``, declared without importing dynamo.

``@torch.compiler.disable`` imports ``torch._dynamo`` where it decorates, so five decorated
functions made ``import pezoo`` pay for the compiler's import although most programs never
compile: 5.6 s of CPU for ``import pezoo``, 2.9 s without it, 2.2-2.7 s for ``import torch``
alone (torch 2.13, the 2-core x86 machine CI runs on). torch's lazy form,
``torch._compile._disable_dynamo``, imports dynamo at the first call instead; dynamo skips its
wrapper (``torch._compile`` is on its skip list), so under ``torch.compile`` the function
still runs as ``torch.compiler.disable`` runs it: eagerly, between two graphs. (Training
still imports dynamo on its first step: torch's optimizers and its meta-device operators
decorate with the same lazy form.)

``reason`` is said where the function is declared, for its reader; it is passed on to dynamo's
graph-break message only where torch's own form is missing (torch's private API moved), and
there only on torch >= 2.8, the first whose ``torch.compiler.disable`` takes one (``import
pezoo`` failed on 2.5-2.7 when it passed it everywhere; 2.7 is pyproject.toml's floor).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

__all__ = ["eager_under_compile"]

F = TypeVar("F", bound=Callable[..., Any])

try:
    from torch._compile import _disable_dynamo
except ImportError:  # pragma: no cover - torch's private helper moved: the public decorator, eager import
    _disable_dynamo = None  # type: ignore[assignment]


def eager_under_compile(reason: str) -> Callable[[F], F]:
    """Decorate a function (or method) that must run eagerly under ``torch.compile``, and say why."""
    if not reason:
        raise ValueError("say why the function must run eagerly under torch.compile")

    def decorate(fn: F) -> F:
        if _disable_dynamo is not None:
            return _disable_dynamo(fn)  # type: ignore[return-value]
        try:
            return torch.compiler.disable(fn, reason=reason)
        except TypeError:  # torch < 2.8: no reason= yet
            return torch.compiler.disable(fn)

    return decorate
