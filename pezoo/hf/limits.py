"""Upper bounds for an encoding's size-like options in a Hugging Face model.

A saved config's ``pezoo`` record is read by ``from_pretrained`` and built as it says, so a
record with ``randomized:ape{max_length=300000000}`` (18.8 s and 2.6 GB per 16-token
forward), ``1e12`` (8 TB) or ``learned_ape`` with ``max_position=1e8`` (25.6 GB) would
allocate before anything runs. The bounds are :mod:`pezoo.limits`, the same table the benchmark
harness checks its runs against.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pezoo.limits import MAX_POSITIONS, MAX_WIDTH, POSITION_OPTIONS, WIDTH_OPTIONS, option_bound

__all__ = ["MAX_POSITIONS", "MAX_WIDTH", "POSITION_OPTIONS", "WIDTH_OPTIONS", "check_option_sizes", "option_bound"]


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
