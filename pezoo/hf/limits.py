"""Upper bounds for an encoding's size-like options in a Hugging Face model.

A saved config's ``pezoo`` record is read by ``from_pretrained`` and built as it says, so a
record with ``randomized:ape{max_length=300000000}`` (18.8 s and 2.6 GB per 16-token
forward), ``1e12`` (8 TB) or ``learned_ape`` with ``max_position=1e8`` (25.6 GB) would
allocate before anything runs. The bounds are :mod:`pezoo.limits`, the same table the benchmark
harness checks its runs against.
"""

from __future__ import annotations

from typing import Any

from pezoo.limits import MAX_POSITIONS, MAX_WIDTH, POSITION_OPTIONS, WIDTH_OPTIONS, option_bound, oversized_options

__all__ = ["MAX_POSITIONS", "MAX_WIDTH", "POSITION_OPTIONS", "WIDTH_OPTIONS", "check_option_sizes", "option_bound"]


def check_option_sizes(options: Any, spec: str) -> None:
    """ValueError naming ``spec`` and the option when a size-like one in ``options`` (searched
    through nested mappings and lists, :func:`pezoo.limits.oversized_options`) is a number
    above its bound; other values are the encoding's to judge."""
    try:
        found = next(oversized_options(options), None)
    except ValueError as exc:  # nested too deep
        raise ValueError(f"{spec}: {exc}") from None
    if found is not None:
        path, value, bound = found
        raise ValueError(f"{spec}: option {path}={value:g} is above pezoo.hf's bound {bound}")
