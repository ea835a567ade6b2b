"""Bits per byte by position within the window: where in a window of S bytes the loss is.

The per-token loss curve of the forgetting-transformer paper (Lin et al. 2025, FoX, its
per-position loss figures), at byte level: the windows mode's summed negative
log-likelihood at each position p of a window (the byte predicted from BOS and the p bytes
before it), summed over every window of the length and kept per *bucket* of positions as a
sum of nats and a count of bytes, never a mean (STYLE habit 17). A curve past the training
length L shows *where* an encoding breaks: at the first position past L (RoPE's unseen
rotations), gradually (a bias that fades), or nowhere.

Buckets. Half-octave, the same for every encoding and run at a length S
(:func:`position_edges`): edges at 0, at ``⌊2^(j/2)⌋`` for j = 0, 1, 2, ... below S, and at
S (0, 1, 2, 4, 5, 8, 11, 16, 22, 32, 45, 64, 90, 128, 181, 256, 362, 512, ...), computed in
integers (``math.isqrt``), so every power of two (L = 256 among them) is an edge and a 4096-byte
window has 23 buckets. A bucket [a, b) of a length scored in n windows holds n · (b − a) bytes.

Exact sums. The length's total nats, when its curve is measured, is the exactly rounded sum
(``math.fsum``) of its buckets' nats, and each bucket's the exactly rounded sum of its
positions': the buckets add up to the length's nats and bytes exactly, whatever the order
(:meth:`PositionCurve.check` holds every record to it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

__all__ = ["PositionCurve", "bucket_sums", "position_edges"]


def position_edges(length: int) -> tuple[int, ...]:
    """The bucket edges of a window of ``length`` positions: 0, each ``⌊2^(j/2)⌋`` below
    ``length`` (j = 0, 1, ...), and ``length``, increasing and distinct."""
    if not isinstance(length, int) or isinstance(length, bool) or length < 1:
        raise ValueError(f"a window has at least one position, got {length!r}")
    edges = {0, length}
    j = 0
    while True:
        # 2^(j/2) rounded down, in integers: 2^(j//2) for even j, isqrt(2^j) for odd j
        edge = 1 << (j // 2) if j % 2 == 0 else math.isqrt(1 << j)
        if edge >= length:
            break
        edges.add(edge)
        j += 1
    return tuple(sorted(edges))


def bucket_sums(per_position: Sequence[float], edges: Sequence[int]) -> tuple[float, ...]:
    """Each bucket's exactly rounded sum (``math.fsum``) of ``per_position[a:b]``, per bucket
    [a, b) of ``edges``; ``per_position`` has one value per position, ``edges[-1]`` of them."""
    if len(per_position) != edges[-1]:
        raise ValueError(f"{len(per_position)} positions for buckets up to {edges[-1]}")
    return tuple(math.fsum(per_position[a:b]) for a, b in pairwise(edges))


@dataclass(frozen=True)
class PositionCurve:
    """The windows mode's loss at one length S by position bucket (module docstring).

    Attributes:
        edges: the buckets' edges, :func:`position_edges` of S: bucket k is positions
            ``edges[k] <= p < edges[k + 1]``.
        nats: per bucket, the summed negative log-likelihood (nats) of its bytes.
        n_bytes: per bucket, the bytes it scored (windows times its width).
    """

    edges: tuple[int, ...]
    nats: tuple[float, ...]
    n_bytes: tuple[int, ...]

    @property
    def length(self) -> int:
        return self.edges[-1]

    @classmethod
    def of(cls, per_position: Sequence[float], windows: int) -> PositionCurve:
        """The curve of ``per_position`` (each position's nats summed over ``windows`` windows)."""
        edges = position_edges(len(per_position))
        widths = [b - a for a, b in pairwise(edges)]
        return cls(edges, bucket_sums(per_position, edges), tuple(windows * w for w in widths))

    def total(self) -> tuple[float, int]:
        """(nats, bytes) of the whole length: the exactly rounded sum of the buckets' nats, and their bytes."""
        return math.fsum(self.nats), sum(self.n_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {"edges": list(self.edges), "nats": list(self.nats), "bytes": list(self.n_bytes)}

    @classmethod
    def from_dict(cls, raw: Any, length: int, nats: float | None, n_bytes: int) -> PositionCurve:
        """The curve of a record's JSON at ``length``, whose windows score is ``nats`` over
        ``n_bytes``; ValueError unless it is :func:`position_edges` of the length with a finite
        sum >= 0 and a whole number of windows' bytes per bucket, adding up exactly to the score."""
        if not isinstance(raw, Mapping) or set(raw) != {"edges", "nats", "bytes"}:
            raise ValueError("a position curve has edges, nats and bytes")
        edges, sums, counts = raw["edges"], raw["nats"], raw["bytes"]
        if not isinstance(edges, list) or tuple(edges) != position_edges(length):
            raise ValueError(f"a position curve at {length} has the edges {list(position_edges(length))}")
        buckets = len(edges) - 1
        if not isinstance(sums, list) or not isinstance(counts, list) or len(sums) != buckets or len(counts) != buckets:
            raise ValueError(f"a position curve at {length} has nats and bytes for each of its {buckets} buckets")
        for v in sums:
            if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
                raise ValueError(f"a position curve's nats are finite numbers >= 0, got {v!r}")
        if any(not isinstance(n, int) or isinstance(n, bool) for n in counts):
            raise ValueError("a position curve's bytes are integers")
        curve = cls(tuple(edges), tuple(float(v) for v in sums), tuple(counts))
        curve.check(nats, n_bytes)
        return curve

    def check(self, nats: float | None, n_bytes: int) -> None:
        """ValueError unless each bucket holds the same whole number of windows, its width
        each, and the buckets add up exactly to ``nats`` and ``n_bytes`` (the length's score)."""
        windows, rest = divmod(n_bytes, self.length)
        widths = [b - a for a, b in pairwise(self.edges)]
        if rest or any(n != windows * w for n, w in zip(self.n_bytes, widths, strict=True)):
            raise ValueError(
                f"a position curve at {self.length} counts {windows} windows' bytes per position in every bucket"
            )
        total, _ = self.total()
        if nats is None or total != nats:
            raise ValueError(f"a position curve at {self.length} adds up to {total!r} nats, the score to {nats!r}")
