"""Recording what PRISM's cursors do: the ``recording()`` side of :class:`PRISM`, below both
the encoding and what reads the records (``diagnostics.py``, and through it the paper card's
cursor trajectories), so neither needs the other's module.

Axis letters: b batch, h heads, c cursors per head, s tokens, p histogram bins.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["CursorRecording"]


class CursorRecording:
    """An encoding whose PRISM layers can record their cursors (mixed into :class:`PRISM`).

    The encoding appends one dict per (call, PRISM layer) to ``_recording`` while it is a
    list (its ``observe`` hook reads it); ``None`` records nothing.
    """

    _recording: list[dict[str, Any]] | None = None

    @contextmanager
    def recording(self) -> Iterator[list[dict[str, Any]]]:
        """Record histograms and gates of every PRISM layer during the forward calls inside.

        Yields a list that receives one dict per (call, PRISM layer):
        ``{"layer", "hist": (b, 2, h, c, s, p), "gates": (b, 2, h, c, s, 4)}`` with side 0 =
        query cursors, 1 = key cursors, and gates ordered reset, inc, dec, keep.
        """
        self._recording = []
        try:
            yield self._recording
        finally:
            self._recording = None
