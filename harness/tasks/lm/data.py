"""Training windows and held-out regions of a corpus, as byte tensors.

Axis letters: b batch (windows), s sequence (tokens).

Training reads random windows of L bytes inside training documents: every valid window
start of every training document is equally likely, drawn from a generator seeded by the
run's seed and the step alone (:func:`training_batch`), so every encoding trained with one
seed reads the same windows in the same order, and a resumed run reads what it would have.
A window's tokens are ``BOS`` then its first L - 1 bytes; its targets are its L bytes.

Evaluation scores held-out *regions* of M bytes (M the longest test length), spread through
every held-out document (:func:`scored_regions`): each document gets regions in proportion to
its length (every one at least one when there are as many regions as documents), evenly
spaced along it, and no region holds a 64-byte run of the training text (a region that would
is moved to the nearest place that holds none: ``harness.tasks.lm.split`` keeps near-duplicate
documents on one side, and this keeps the text common to many documents out of what is scored).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from harness.tasks.data import Batch
from harness.tasks.lm import BOS, lm_task
from harness.tasks.lm.corpora import load_corpus
from harness.tasks.lm.overlap import RUN, Flags
from harness.tasks.lm.split import Split, split

__all__ = [
    "LmBatches",
    "Region",
    "TrainingWindows",
    "lm_batches",
    "place_regions",
    "scored_regions",
    "task_regions",
    "task_split",
    "window_tokens",
]


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


@dataclass(frozen=True)
class LmBatches:
    """A language-modelling run's training data as the training loop takes it
    (``harness.training.feed``): step ``step``'s batch is :meth:`TrainingWindows.batch` of the
    run's seed and that step, as a ``harness.tasks.data.Batch`` whose every label is scored
    and whose rows have no padding (``BOS`` and bytes: any id, ``PAD``'s included, is a byte).
    A pure function of (seed, step), so a resumed run reads what it would have.

    Attributes:
        task: the task's name (``lm_en``).
        windows: the training windows of its split's training documents.
        seed: the run's seed.
    """

    task: str
    windows: TrainingWindows
    seed: int

    @property
    def name(self) -> str:
        return self.task

    def batch(self, step: int, batch_size: int) -> Batch:
        """Step ``step``'s ``batch_size`` windows."""
        tokens, targets = self.windows.batch(self.seed, step, batch_size)  # (b, L) each
        b, length = targets.shape
        scales = torch.full((b,), length, dtype=torch.int64)  # (b,): the window's length
        return Batch(tokens, targets, scales, torch.ones_like(targets, dtype=torch.bool))


def window_tokens(targets: Tensor) -> Tensor:
    """The tokens a window of bytes ``targets`` (b, s) is read from: BOS, then all but its last byte."""
    bos = torch.full_like(targets[:, :1], BOS)
    return torch.cat([bos, targets[:, :-1]], dim=1)


@dataclass(frozen=True)
class Region:
    """A scored region: ``data`` is ``document[start : start + len(data)]``."""

    document: str
    start: int
    data: bytes


def _clean_starts(found: Flags, n: int, size: int) -> npt.NDArray[np.bool_]:
    """(n - size + 1,) bool: whether the region [p, p + size) holds no run ``found`` marks."""
    marks = np.zeros(n + 1, dtype=np.int64)
    marks[1 : len(found) + 1] = np.cumsum(found)  # marks[i]: runs found at offsets below i
    starts = np.arange(n - size + 1)  # (n - size + 1,)
    last = np.clip(starts + size - RUN + 1, starts, len(found))  # runs starting in [p, last) lie inside
    return marks[last] == marks[np.minimum(starts, len(found))]


class _Slots:
    """The clean region starts of one document, to pack regions of ``size`` among them."""

    def __init__(self, clean: npt.NDArray[np.bool_], size: int) -> None:
        self.size, self.last = size, len(clean) - 1
        at = np.arange(len(clean))
        self.next = np.minimum.accumulate(np.where(clean, at, len(clean))[::-1])[::-1]  # first clean start >= p
        self.prev = np.maximum.accumulate(np.where(clean, at, -1))  # last clean start <= p

    def following(self, p: int) -> int | None:
        """The first clean start at or after p."""
        return int(self.next[p]) if p <= self.last and self.next[p] <= self.last else None

    def preceding(self, p: int) -> int | None:
        return int(self.prev[min(p, self.last)]) if p >= 0 and self.prev[min(p, self.last)] >= 0 else None

    def fit(self, p: int, most: int) -> int:
        """How many regions fit from p on (greedily, which is the most), counted up to ``most``."""
        count, at = 0, self.following(p)
        while at is not None and count < most:
            count, at = count + 1, self.following(at + self.size)
        return count


def place_regions(
    documents: Sequence[tuple[str, bytes]], size: int, count: int, runs: Callable[[bytes], Flags]
) -> tuple[Region, ...]:
    """``count`` regions of ``size`` bytes spread through ``documents`` (module docstring),
    none holding a run that ``runs(document)`` marks; ValueError when they do not fit."""
    slots = [(name, data, _Slots(_clean_starts(runs(data), len(data), size), size)) for name, data in documents]
    slots = [s for s in slots if len(s[1]) >= size]
    room = [s[2].fit(0, count) for s in slots]
    have = [1 if count >= sum(r > 0 for r in room) and r > 0 else 0 for r in room]
    while sum(have) < count:  # the next region by the highest average (bytes per region, Sainte-Laguë)
        open_ = [i for i in range(len(slots)) if have[i] < room[i]]
        if not open_:
            raise ValueError(
                f"the held-out documents hold {sum(room)} regions of {size} bytes free of training text, fewer "
                f"than the {count} asked for (lower eval.regions)"
            )
        best = max(open_, key=lambda i: (len(slots[i][1]) / (2 * have[i] + 1), -i))  # Sainte-Laguë
        have[best] += 1
    regions = []
    for (name, data, free), k in zip(slots, have, strict=True):
        lo = 0
        for j in range(k):
            target = min(max(round((2 * j + 1) * len(data) / (2 * k) - size / 2), 0), len(data) - size)
            near = [p for p in (free.following(max(lo, target)), free.preceding(target)) if p is not None and p >= lo]
            fits = [p for p in near if free.fit(p + size, k - j - 1) >= k - j - 1]
            p = min(fits, key=lambda q: (abs(q - target), q)) if fits else free.following(lo)
            assert p is not None  # the greedy packing from lo holds the k - j regions still to place
            regions.append(Region(name, p, data[p : p + size]))
            lo = p + size
    return tuple(regions)


_REGIONS: dict[tuple[str, int, int], tuple[Region, ...]] = {}


def scored_regions(split: Split, size: int, count: int) -> tuple[Region, ...]:
    """The split's ``count`` scored regions of ``size`` bytes (:func:`place_regions` against its
    training text); computed once per split, size and count in a process."""
    key = (split.sha256, size, count)
    if key not in _REGIONS:
        _REGIONS[key] = place_regions(split.heldout, size, count, split.training_index.runs)
    return _REGIONS[key]


_SPLITS: dict[str, Split] = {}


def task_split(task: str) -> Split:
    """The split of language-modelling task ``task``'s corpus (``harness.tasks.lm.corpora.load_corpus``,
    ``harness.tasks.lm.split.split``), made once per corpus (by its SHA-256) in a process;
    ValueError for an unknown task, ``CorpusError`` for a corpus that cannot be had."""
    corpus = load_corpus(lm_task(task).corpus)
    if corpus.sha256 not in _SPLITS:
        _SPLITS[corpus.sha256] = split(corpus)
    return _SPLITS[corpus.sha256]


def lm_batches(task: str, seed: int, length: int) -> LmBatches:
    """The training batches of a run of ``task`` under ``seed`` at windows of ``length`` bytes."""
    return LmBatches(task, TrainingWindows(task_split(task).train, length), seed)


def task_regions(task: str, size: int, count: int) -> tuple[Region, ...]:
    """The ``count`` scored regions of ``size`` bytes of ``task`` (:func:`scored_regions` of its split)."""
    return scored_regions(task_split(task), size, count)
