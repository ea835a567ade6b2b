"""What an adapted model's patched forwards share: :class:`Adapter`, below the forwards that
read it (``families.py``, ``forward.py``) and :func:`pezoo.hf.use_encoding`, which makes it.

Axis letters: b batch.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from pezoo.hf import calls
from pezoo.interface import PositionalEncoding
from pezoo.scores import SoftCap

__all__ = ["Adapter"]


class Adapter:
    """What an adapted model's patched forwards share (not a module: the encoding is the
    model's submodule ``pezoo_encoding``, this only points at it).

    Attributes:
        encoding: the encoding.
        backend: the :func:`pezoo.attend` backend.
        planned_width: columns to plan positions for, while ``generate`` runs (from
            ``max_new_tokens``).
        next_width: the same for the next sequence batch only (:func:`pezoo.hf.plan`).
        generating: whether ``generate`` runs (its position_ids, derived from the mask, are
            not checked against pezoo's; a caller's are).
        scale_hint: the instance scale n per row (b,), for encodings that read one
            (:func:`pezoo.hf.set_scale_hint`).
        call: the current forward call's context (:class:`pezoo.hf.calls.Call`).
        softcap: the model's own attention-logit soft-capping (Gemma 2), or None.
    """

    def __init__(self, encoding: PositionalEncoding, backend: str, head_dim: int) -> None:
        self.encoding = encoding
        self.backend = backend
        self.head_dim = head_dim
        self.planned_width = 0
        self.next_width = 0
        self.generating = False  # inside generate, whose position_ids are derived from the mask as pezoo's
        self.window: int | None = None
        self.dropout = 0.0  # the model's attention-probability dropout, which pezoo.attend does not apply
        self.scale_hint: Tensor | None = None
        self.call: calls.Call | None = None
        self.softcap: SoftCap | None = None  # the model's attention-logit soft-capping (Gemma 2)

    def __getstate__(self) -> dict[str, Any]:
        """Without the last call's context (its tensors may hang on an autograd graph, which
        neither a deep copy nor pickle can take): a copy starts with no call, as a fresh model."""
        return {**self.__dict__, "call": None}
