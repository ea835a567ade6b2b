"""Training windows and held-out regions of a corpus, as byte tensors.

Axis letters: b batch (windows), s sequence (tokens).

Training reads random windows of L bytes inside training documents: every valid window
start of every training document is equally likely, drawn from a generator seeded by the
run's seed and the step alone (:func:`training_batch`), so every encoding trained with one
seed reads the same windows in the same order, and a resumed run reads what it would have.
A window's tokens are ``BOS`` then its first L - 1 bytes; its targets are its L bytes.

Evaluation scores held-out *regions* of M bytes (M the longest test length): region k is
the k-th M-byte slice of the held-out documents taken round robin (document 0's first slice,
document 1's first, ..., then document 0's second, ...).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch
from torch import Tensor

from harness.lm.tasks import BOS

__all__ = ["TrainingWindows", "heldout_regions", "window_tokens"]


def _seed(*parts: object) -> int:
    digest = hashlib.sha256("/".join(map(str, ("pezoo/lm", *parts))).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class TrainingWindows:
    """Random L-byte windows inside ``documents`` (``(name, bytes)`` pairs).

    Documents shorter than L bytes contribute no window. ValueError when none is long enough.
    """

    def __init__(self, documents: Sequence[tuple[str, bytes]], length: int) -> None:
        kept = [data for _, data in documents if len(data) >= length]
        if not kept:
            raise ValueError(f"no training document holds a window of {length} bytes")
        self.length = length
        self.data = torch.frombuffer(bytearray(b"".join(kept)), dtype=torch.uint8)  # (total bytes,)
        starts = torch.tensor([len(d) - length + 1 for d in kept], dtype=torch.int64)  # valid starts per document
        self.cum = torch.cumsum(starts, 0)  # (documents,)
        offsets = torch.tensor([0, *[len(d) for d in kept]], dtype=torch.int64).cumsum(0)[:-1]
        self.offsets = offsets  # where each document begins in ``data``

    @property
    def n_windows(self) -> int:
        return int(self.cum[-1])

    def batch(self, seed: int, step: int, batch_size: int) -> tuple[Tensor, Tensor]:
        """(tokens (b, L) int64, targets (b, L) int64) of step ``step``'s windows."""
        g = torch.Generator().manual_seed(_seed("train", seed, step))
        flat = torch.randint(self.n_windows, (batch_size,), generator=g)  # (b,) a valid start, all documents
        doc = torch.searchsorted(self.cum, flat, right=True)  # (b,)
        before = torch.where(doc > 0, self.cum[(doc - 1).clamp(min=0)], torch.zeros_like(doc))
        start = self.offsets[doc] + (flat - before)  # (b,) into ``data``
        idx = start[:, None] + torch.arange(self.length)[None, :]  # (b, L)
        targets = self.data[idx].to(torch.int64)
        return window_tokens(targets), targets


def window_tokens(targets: Tensor) -> Tensor:
    """The tokens a window of bytes ``targets`` (b, s) is read from: BOS, then all but its last byte."""
    bos = torch.full_like(targets[:, :1], BOS)
    return torch.cat([bos, targets[:, :-1]], dim=1)


def heldout_regions(documents: Sequence[tuple[str, bytes]], size: int, count: int) -> list[bytes]:
    """``count`` regions of ``size`` bytes from the held-out ``documents`` (round robin over
    their successive slices); ValueError when they hold fewer."""
    slices = [[data[i * size : (i + 1) * size] for i in range(len(data) // size)] for _, data in documents]
    regions: list[bytes] = []
    depth = 0
    while len(regions) < count and any(depth < len(s) for s in slices):
        regions.extend(s[depth] for s in slices if depth < len(s))
        depth += 1
    if len(regions) < count:
        raise ValueError(
            f"the held-out documents hold {len(regions)} regions of {size} bytes, fewer than the {count} asked for "
            "(lower eval.regions)"
        )
    return regions[:count]
