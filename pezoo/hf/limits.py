"""Upper bounds for an encoding's size-like options in a Hugging Face model.

A saved config's ``pezoo`` record is read by ``from_pretrained`` and built as it says, so a
record with ``randomized:ape{max_length=300000000}`` (18.8 s and 2.6 GB per 16-token
forward), ``1e12`` (8 TB) or ``learned_ape`` with ``max_position=1e8`` (25.6 GB) would
allocate before anything runs. These bounds are the benchmark harness's for the same options
(its ``limits`` module; pezoo does not import the harness, and a test keeps the two equal):
generous for every paper's setup, far below what fills a machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


def check_option_sizes(options: Any, spec: str, where: str = "", depth: int = 0) -> None:
    """ValueError naming the option when a size-like one in ``options`` (searched through
    nested mappings and lists) is a number above its bound; other values are the encoding's
    to judge."""
    if depth > 16:
        raise ValueError(f"{spec}: options nested deeper than 16 levels")
    items: Any = ()
    if isinstance(options, Mapping):
        items = options.items()
    elif isinstance(options, list | tuple):
        items = enumerate(options)
    for key, value in items:
        path = (f"{where}.{key}" if where else str(key)) if isinstance(key, str) else f"{where}[{key}]"
        bound = option_bound(key) if isinstance(key, str) else None
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if bound is not None and number and value > bound:
            raise ValueError(f"{spec}: option {path}={value:g} is above pezoo.hf's bound {bound}")
        if isinstance(value, Mapping | list | tuple):
            check_option_sizes(value, spec, path, depth + 1)
