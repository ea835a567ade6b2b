"""Checks of config values as a config is built: strict keys (:func:`strict`), and each
field's type and range (``check_int``, ``check_number``, ...), with the short form an error
message shows a value in (:func:`shown`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

# The one number checker (harness.config.numbers) is the config's too; re-exported here for the
# config's modules, which import their checks from this module.
from harness.config.numbers import INT64_MAX, check_int, check_number, shown
from harness.config.numbers import is_number as is_finite_number

__all__ = [
    "INT64_MAX", "as_float", "check_choice", "check_int", "check_name", "check_number", "check_plain",
    "is_finite_number", "shown", "strict",
]

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
