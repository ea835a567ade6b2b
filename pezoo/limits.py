"""Upper bounds for an encoding's size-like options: generous for every paper's setup, far
below what fills a machine. One table, read by ``pezoo.hf`` (a saved config's record is
built as it says) and by the benchmark harness (``harness.config.limits``), so the two cannot drift.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = [
    "MAX_DEPTH",
    "MAX_POSITIONS",
    "MAX_WIDTH",
    "POSITION_OPTIONS",
    "WIDTH_OPTIONS",
    "option_bound",
    "oversized_options",
]

MAX_POSITIONS = 262_144
"""Largest position-like option (a learned table's rows, randomized PE's range L, a distance
or support bound)."""

MAX_WIDTH = 4096
"""Largest width-like option (a width or a count of parts)."""

POSITION_OPTIONS = (
    "max_length",
    "max_position",
    "max_index",
    "max_k",
    "max_distance",
    "num_buckets",
    "npos_max",
    "min_support",
    "max_support",
    "support",
    "scan_checkpoint",
    "blockwise",
    "original_max_position_embeddings",
)
"""Options that count positions or tokens, bounded by :data:`MAX_POSITIONS`."""

WIDTH_OPTIONS = (
    "d_pe",
    "gru_hidden",
    "hidden",
    "mlp_width",
    "copy_dim",
    "rotary_dim",
    "n_slots",
    "n_cursors",
    "depth",
    "copy_every",
    "n_masked",
)
"""Options that are a width or a count of parts, bounded by :data:`MAX_WIDTH`."""

MAX_DEPTH = 16
"""Most levels of nested tables and lists in an encoding's options."""


def option_bound(key: str) -> int | None:
    """The bound of option ``key``, or None for an option that is no size."""
    if key in POSITION_OPTIONS:
        return MAX_POSITIONS
    if key in WIDTH_OPTIONS:
        return MAX_WIDTH
    return None


def oversized_options(options: Any, where: str = "", depth: int = 0) -> Iterator[tuple[str, int | float, int]]:
    """``(path, value, bound)`` of each size-like option in ``options`` (a mapping, searched
    through nested mappings and lists; ``path`` like ``scaling.factor`` or ``stages[0]``)
    that is a number above its bound. Values of any other type or sign are the encoding's to
    judge. ValueError when the options nest deeper than :data:`MAX_DEPTH` levels. The one walk
    ``pezoo.hf`` and the benchmark harness word their own refusals from."""
    if depth > MAX_DEPTH:
        raise ValueError(f"options nested deeper than {MAX_DEPTH} levels")
    items: Any = ()
    if isinstance(options, Mapping):
        items = options.items()
    elif isinstance(options, list | tuple):
        items = enumerate(options)
    for key, value in items:
        path = (f"{where}.{key}" if where else key) if isinstance(key, str) else f"{where}[{key}]"
        bound = option_bound(key) if isinstance(key, str) else None
        if bound is not None and isinstance(value, int | float) and not isinstance(value, bool) and value > bound:
            yield path, value, bound
        if isinstance(value, Mapping | list | tuple):
            yield from oversized_options(value, path, depth + 1)
