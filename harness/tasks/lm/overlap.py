"""The chunk-overlap scan: which bytes of one text occur verbatim in another.

Held-out text is held out only if it is not in the training text as well: a near-duplicate
document (two codecs generated from one template, two help topics quoting one paragraph, one
text under two names) on both sides of the split lets a model score well by remembering
instead of modelling. The scan finds every *run* of :data:`RUN` bytes (64) that two texts
share, wherever it lies in either, exactly:

* every RUN-byte window of a text (at every offset, never across a document's end) is hashed
  by a polynomial hash mod 2^64 over a fixed random table of the byte values (vectorised:
  a window's hash is built from its halves' by doubling, so RUN is a power of two);
* a window is *in* the training text when its hash is among the training text's window
  hashes and its bytes equal those of a training window with that hash (every hit is
  checked byte for byte, so a hash collision is never counted: the scan is exact).

:class:`TextIndex` holds the training text's windows; :meth:`TextIndex.runs` marks, for each
offset of another text, whether the run starting there is in it. :func:`leak_report`
measures a split the way the track's acceptance states it: the share of the held-out
documents' 128-byte windows (:data:`WINDOW`, non-overlapping) holding a 64-byte run of
training text, and the 64-byte chunks of the scored regions that occur in the training text.
:func:`shared_runs` counts, per pair of documents of a corpus, the distinct runs they share:
``harness.tasks.lm.split`` groups documents by it before splitting.

Axis letters: n bytes of a text, w windows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "COMMON",
    "RUN",
    "WINDOW",
    "Flags",
    "LeakReport",
    "TextIndex",
    "aligned_chunks_in",
    "leak_report",
    "run_hashes",
    "shared_runs",
    "windows_holding_runs",
]

RUN = 64
"""The length of a shared run that counts as leaked text (bytes; a power of two)."""

WINDOW = 128
"""The held-out windows the leak share is measured over (bytes, non-overlapping)."""

_TABLE = np.array(
    [int.from_bytes(hashlib.sha256(bytes([b])).digest()[:8], "little") | 1 for b in range(256)], dtype=np.uint64
)  # (256,) an odd 64-bit value per byte value, so that a run's hash mixes all its bits
_BASE = np.uint64(0x9E3779B97F4A7C15)  # an odd multiplier (2^64 / golden ratio)

Hashes = npt.NDArray[np.uint64]
Flags = npt.NDArray[np.bool_]


def run_hashes(data: bytes, run: int = RUN) -> Hashes:
    """The hash of every ``run``-byte window of ``data``: (n - run + 1,) uint64 (empty when
    ``data`` is shorter than ``run``). Equal windows have equal hashes."""
    if run < 1 or run & (run - 1):
        raise ValueError(f"the run length must be a power of two, got {run}")
    if len(data) < run:
        return np.empty(0, dtype=np.uint64)
    h = _TABLE[np.frombuffer(data, dtype=np.uint8)]  # (n,) the hash of each 1-byte window
    width, power = 1, _BASE
    with np.errstate(over="ignore"):
        while width < run:
            h = h[:-width] * power + h[width:]  # (n - 2·width + 1,): two halves of width, joined
            power = power * power
            width *= 2
    return h


class TextIndex:
    """Every RUN-byte window of some documents, to ask whether a run of another text is among them.

    Args:
        documents: ``(name, bytes)`` pairs (runs never cross from one document into the next).
        run: the run length (:data:`RUN`).
    """

    def __init__(self, documents: Sequence[tuple[str, bytes]], run: int = RUN) -> None:
        self.run = run
        texts = [data for _, data in documents]
        self.data = np.frombuffer(b"".join(texts), dtype=np.uint8)  # (n,) every document, end to end
        parts = [run_hashes(data, run) for data in texts]
        starts = np.cumsum([0, *map(len, texts)])[:-1]  # where each document begins in ``data``
        hashes = np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)  # (w,)
        where = [s + np.arange(len(p), dtype=np.int64) for s, p in zip(starts, parts, strict=True)]
        offsets = np.concatenate(where) if where else np.empty(0, dtype=np.int64)  # (w,)
        order = np.argsort(hashes)
        self.hashes = hashes[order]  # (w,) sorted
        self.where = offsets[order]  # (w,) each one's offset in data

    def runs(self, data: bytes) -> Flags:
        """(n - run + 1,) bool: whether ``data[i : i + run]`` occurs in the indexed documents,
        for every offset i (each hash hit checked byte for byte)."""
        h = run_hashes(data, self.run)
        if not len(h) or not len(self.hashes):
            return np.zeros(len(h), dtype=bool)
        lo = np.searchsorted(self.hashes, h, side="left")
        hi = np.searchsorted(self.hashes, h, side="right")
        hits = np.flatnonzero(hi > lo)  # offsets whose hash the index holds
        text = np.frombuffer(data, dtype=np.uint8)
        span = np.arange(self.run)
        found = np.zeros(len(h), dtype=bool)
        for part in np.array_split(hits, max(1, len(hits) // 65536)):  # (k,) at most ~64k offsets at a time
            mine = text[part[:, None] + span]  # (k, run)
            theirs = self.data[self.where[lo[part]][:, None] + span]  # (k, run): the first window with that hash
            found[part] = (mine == theirs).all(axis=1)
        for i in hits[~found[hits]].tolist():  # a hash collision with the first: try the others
            wanted = text[i : i + self.run]
            found[i] = any(
                bool((self.data[int(self.where[j]) : int(self.where[j]) + self.run] == wanted).all())
                for j in range(int(lo[i]) + 1, int(hi[i]))
            )
        return found


def windows_holding_runs(found: Flags, n: int, run: int = RUN, window: int = WINDOW) -> tuple[int, int]:
    """(windows holding a run, windows): of the ``n // window`` non-overlapping windows of a
    text of ``n`` bytes, those holding a whole run that ``found`` marks (``found[i]``: the run
    at offset i)."""
    windows = n // window
    if not windows:
        return 0, 0
    inside = np.zeros((windows, window), dtype=bool)  # (w, window): runs starting at each offset of a window
    starts = found[: windows * window]
    inside.reshape(-1)[: len(starts)] = starts
    return int(inside[:, : window - run + 1].any(axis=1).sum()), windows


def aligned_chunks_in(found: Flags, n: int, run: int = RUN) -> tuple[int, int]:
    """(chunks found, chunks): of the ``n // run`` run-aligned chunks of a text of ``n`` bytes,
    those that ``found`` marks."""
    chunks = n // run
    return sum(bool(found[c * run]) for c in range(chunks)), chunks


@dataclass(frozen=True)
class LeakReport:
    """How much of a split's held-out text occurs in its training text.

    Attributes:
        windows_leaked, windows: the held-out documents' non-overlapping WINDOW-byte windows
            holding a RUN-byte run of training text, and all of them.
        chunks_leaked, chunks: the scored regions' RUN-aligned chunks that occur in the
            training text, and all of them (0, 0 without regions).
        by_document: per held-out document, (name, windows leaked, windows).
    """

    windows_leaked: int
    windows: int
    chunks_leaked: int
    chunks: int
    by_document: tuple[tuple[str, int, int], ...]

    @property
    def window_share(self) -> float:
        return self.windows_leaked / self.windows if self.windows else 0.0

    @property
    def chunk_share(self) -> float:
        return self.chunks_leaked / self.chunks if self.chunks else 0.0


def leak_report(
    train: Sequence[tuple[str, bytes]],
    heldout: Sequence[tuple[str, bytes]],
    regions: Sequence[bytes] = (),
    *,
    index: TextIndex | None = None,
) -> LeakReport:
    """The :class:`LeakReport` of a split (``index``: the training documents' TextIndex, when
    already built)."""
    index = TextIndex(train) if index is None else index
    by_document = []
    for name, data in heldout:
        held, total = windows_holding_runs(index.runs(data), len(data), index.run)
        by_document.append((name, held, total))
    chunks_leaked = chunks = 0
    for region in regions:
        got, total = aligned_chunks_in(index.runs(region), len(region), index.run)
        chunks_leaked += got
        chunks += total
    return LeakReport(
        sum(d[1] for d in by_document), sum(d[2] for d in by_document), chunks_leaked, chunks, tuple(by_document)
    )


COMMON = 32
"""A run held by more than this many documents is common text (a run of spaces or dashes, a
licence line), not a sign that two of them are near-duplicates: :func:`shared_runs` skips it."""


def shared_runs(
    documents: Sequence[tuple[str, bytes]], run: int = RUN, common: int = COMMON
) -> dict[tuple[int, int], int]:
    """{(i, j): the number of distinct runs documents i < j both hold}, for every pair that
    shares one, runs held by more than ``common`` documents left out (hash-equal runs:
    :func:`run_hashes`)."""
    per_doc = [np.unique(run_hashes(data, run)) for _, data in documents]  # distinct runs of each document
    hashes = np.concatenate(per_doc) if per_doc else np.empty(0, dtype=np.uint64)
    doc = np.repeat(np.arange(len(per_doc), dtype=np.int64), [len(p) for p in per_doc])
    order = np.argsort(hashes, kind="stable")
    hashes, doc = hashes[order], doc[order]  # documents in increasing order within one hash
    starts = np.flatnonzero(np.r_[True, hashes[1:] != hashes[:-1]])  # where each distinct run's holders begin
    holders = np.r_[starts[1:], len(hashes)] - starts
    starts, holders = starts[holders <= common], holders[holders <= common]
    n = len(per_doc)
    ids = [
        doc[starts[holders > b] + a] * n + doc[starts[holders > b] + b]  # the a-th and b-th holder of each run
        for a in range(min(common, int(holders.max(initial=0))))
        for b in range(a + 1, min(common, int(holders.max(initial=0))))
    ]
    pair, count = np.unique(np.concatenate(ids) if ids else np.empty(0, dtype=np.int64), return_counts=True)
    return {(int(p // n), int(p % n)): int(c) for p, c in zip(pair.tolist(), count.tolist(), strict=True)}
