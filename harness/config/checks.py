"""Checks of config values as a config is built: strict keys (:func:`strict`), and each
field's type and range (``check_int``, ``check_number``, ...), with the short form an error
message shows a value in (:func:`shown`).
"""

from __future__ import annotations

import dataclasses
import math
import reprlib
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def strict(cls: type[T], values: Mapping[str, Any], what: str | None = None) -> T:
    """Build dataclass ``cls`` from ``values``; an unknown or missing key is a ValueError naming the valid ones."""
    what = what or cls.__name__
    if not isinstance(values, Mapping):
        raise ValueError(f"{what} must be an object (a mapping of keys to values), got {shown(values)}")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    names = [f.name for f in fields]
    unknown = sorted(repr(k) if not isinstance(k, str) else k for k in values if k not in names)
    if unknown:
        raise ValueError(f"unknown {what} key(s) {', '.join(unknown)}; valid keys: {', '.join(names)}")
    missing = [
        f.name
        for f in fields
        if f.name not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValueError(f"{what}: missing key(s) {', '.join(missing)}")
    return cls(**values)


INT64_MAX = 2**63 - 1
"""The largest integer SQLite stores (a signed 64-bit INTEGER): no config integer exceeds it."""


def shown(value: Any) -> str:
    """A short repr of ``value`` for an error message (a huge integer by its size, long text cut)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    return reprlib.repr(value)


def check_int(what: str, value: Any, minimum: int = 0, maximum: int = INT64_MAX) -> None:
    """``value`` is an int (not a bool, not a float) in ``minimum..maximum``; ValueError names ``what``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer, got {shown(value)}")
    if value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value}")
    if value > maximum:
        limit = " (the largest integer SQLite stores)" if maximum == INT64_MAX else " (harness.limits)"
        raise ValueError(f"{what} must be at most {maximum}{limit}, got {shown(value)}")


def is_finite_number(value: Any) -> bool:
    """Whether ``value`` is a finite int or float (not a bool). An int beyond the float range
    (JSON allows 400 digits) is not: comparing it with floats or ``math.isfinite`` would
    raise OverflowError where a checker must answer."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def check_number(
    what: str, value: Any, *, minimum: float | None = None, above: float | None = None, maximum: float | None = None
) -> None:
    """``value`` is a finite int or float (not a bool) with ``value >= minimum``, ``value > above``
    and ``value <= maximum`` for the bounds given; ValueError names ``what``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} must be a number, got {shown(value)}")
    if not is_finite_number(value):
        raise ValueError(f"{what} must be a finite number, got {shown(value)}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {value}")
    if above is not None and value <= above:
        raise ValueError(f"{what} must be > {above}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{what} must be <= {maximum}, got {value}")


def as_float(config: Any, name: str, what: str) -> None:
    """Make the number field ``name`` of the frozen dataclass ``config`` a float (1 -> 1.0), so
    one configuration has one canonical form and one run id; ValueError if it is not a number."""
    value = getattr(config, name)
    check_number(what, value)
    object.__setattr__(config, name, float(value))


def check_choice(what: str, value: Any, valid: Sequence[str]) -> None:
    """``value`` is one of the strings ``valid``; ValueError names ``what`` and the valid ones."""
    if not isinstance(value, str) or value not in valid:
        raise ValueError(f"unknown {what} {shown(value)}; valid: {', '.join(valid)}")


def check_name(what: str, value: Any) -> None:
    """``value`` is a non-empty string without surrounding whitespace (a registry name, a label)."""
    if not isinstance(value, str) or not value or value != value.strip():
        raise ValueError(f"{what} must be a non-empty name, got {shown(value)}")


def check_plain(what: str, value: Any, depth: int = 0) -> None:
    """``value`` is plain JSON data an encoding's options may hold: None, bools, strings,
    integers SQLite can store, finite floats, and lists / string-keyed mappings of them."""
    if depth > 16:
        raise ValueError(f"{what} is nested more than 16 levels deep")
    if value is None or isinstance(value, bool | str):
        return
    if isinstance(value, int):
        check_int(what, value, minimum=-INT64_MAX)
    elif isinstance(value, float):
        check_number(what, value)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_plain(f"{what}[{i}]", item, depth + 1)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{what} keys must be strings, got {shown(key)}")
            check_plain(f"{what}.{key}", item, depth + 1)
    else:
        raise ValueError(f"{what} must be plain JSON data, got {type(value).__name__}")
