"""Upper bounds for an encoding's size-like options: generous for every paper's setup, far
below what fills a machine. One table, read by ``pezoo.hf`` (a saved config's record is
built as it says) and by the benchmark harness (``harness.config.limits``), so the two cannot drift.
"""

from __future__ import annotations

__all__ = ["MAX_POSITIONS", "MAX_WIDTH", "POSITION_OPTIONS", "WIDTH_OPTIONS", "option_bound"]

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


def option_bound(key: str) -> int | None:
    """The bound of option ``key``, or None for an option that is no size."""
    if key in POSITION_OPTIONS:
        return MAX_POSITIONS
    if key in WIDTH_OPTIONS:
        return MAX_WIDTH
    return None
