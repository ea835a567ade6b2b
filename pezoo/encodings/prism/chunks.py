"""A scan over tokens run in chunks whose intermediates the backward pass recomputes
(``torch.utils.checkpoint``): shared by the per-op scan (``scan.py``) and the Triton scan's
caller (``fused_scan.py``), below both.

Axis letters: s steps (new tokens), b batch, n cursors, p bins, f stream width.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.utils.checkpoint
from torch import Tensor

__all__ = ["run_chunked"]


def run_chunked(
    run: Callable[[Tensor, int, int], tuple[Tensor, Tensor]], h: Tensor, steps: int, checkpoint_every: int
) -> tuple[Tensor, Tensor]:
    """``run(h, 0, steps)`` -> (last window (b, n, p), streams (s, b, n, f)), or, when
    ``checkpoint_every`` asks for it and a backward pass will follow, chunk by chunk under
    ``torch.utils.checkpoint``: each chunk keeps its first histogram and its streams and
    recomputes the rest in backward."""
    if not (checkpoint_every and torch.is_grad_enabled() and steps > checkpoint_every):
        return run(h, 0, steps)
    out = []
    for first in range(0, steps, checkpoint_every):
        stop = min(first + checkpoint_every, steps)
        h, streams = torch.utils.checkpoint.checkpoint(run, h, first, stop, use_reentrant=False)
        out.append(streams)
    return h, torch.cat(out, dim=0)
