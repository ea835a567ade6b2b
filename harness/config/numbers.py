"""The one number checker: whether a value from outside (a config, a results record, a
kept result, a store row, a diagnostics file) is a number of the kind and range it must be.

Every such check in the harness and the leaderboard goes through :func:`number_problem`,
so "a number" means one thing everywhere: an ``int`` or ``float``, never a ``bool``
(``True == 1`` in Python, not here), finite, and an integer within what SQLite stores (a
signed 64-bit INTEGER). An integer too large for a float (JSON allows 400 digits) is not
finite: comparing it with floats or ``math.isfinite`` would raise OverflowError where a
checker must answer.
"""

from __future__ import annotations

import math
import reprlib
from typing import Any, TypeGuard

INT64_MAX = 2**63 - 1
"""The largest integer SQLite stores (a signed 64-bit INTEGER): no stored integer exceeds it."""

INT64_MIN = -INT64_MAX - 1


def shown(value: Any) -> str:
    """A short repr of ``value`` for an error message (a huge integer by its size, long text cut)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    return reprlib.repr(value)


def number_problem(
    what: str,
    value: Any,
    *,
    integer: bool = False,
    minimum: float | None = None,
    above: float | None = None,
    maximum: float | None = None,
) -> str | None:
    """Why ``value`` is not a number with ``value >= minimum``, ``value > above`` and
    ``value <= maximum`` (the bounds given), naming ``what``; None when it is.

    A number is a finite int or float, not a bool. With ``integer`` it must be an int
    (not a float, not a bool), and within SQLite's signed 64 bits whatever the bounds."""
    if integer:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{what} must be an integer, got {shown(value)}"
        low = INT64_MIN if minimum is None else minimum
        if value < low:
            return f"{what} must be an integer >= {low}, got {shown(value)}"
        if above is not None and value <= above:
            return f"{what} must be an integer > {above}, got {shown(value)}"
        high = INT64_MAX if maximum is None else min(maximum, INT64_MAX)
        if value > high:
            limit = " (the largest integer SQLite stores)" if high == INT64_MAX else " (harness.config.limits)"
            return f"{what} must be at most {high}{limit}, got {shown(value)}"
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{what} must be a number, got {shown(value)}"
    try:
        finite = math.isfinite(value)
    except OverflowError:
        finite = False
    if not finite:
        return f"{what} must be a finite number, got {shown(value)}"
    if minimum is not None and value < minimum:
        return f"{what} must be >= {minimum}, got {shown(value)}"
    if above is not None and value <= above:
        return f"{what} must be > {above}, got {shown(value)}"
    if maximum is not None and value > maximum:
        return f"{what} must be <= {maximum}, got {shown(value)}"
    return None


def check_number(
    what: str,
    value: Any,
    *,
    integer: bool = False,
    minimum: float | None = None,
    above: float | None = None,
    maximum: float | None = None,
) -> None:
    """:func:`number_problem` as a ValueError (naming ``what``)."""
    problem = number_problem(what, value, integer=integer, minimum=minimum, above=above, maximum=maximum)
    if problem is not None:
        raise ValueError(problem)


def check_int(what: str, value: Any, minimum: int = 0, maximum: int = INT64_MAX) -> None:
    """``value`` is an int (not a bool, not a float) in ``minimum..maximum``; ValueError names ``what``."""
    check_number(what, value, integer=True, minimum=minimum, maximum=maximum)


def is_number(
    value: Any, *, minimum: float | None = None, above: float | None = None, maximum: float | None = None
) -> bool:
    """Whether ``value`` is a finite int or float (not a bool) within the bounds given."""
    return number_problem("", value, minimum=minimum, above=above, maximum=maximum) is None


def is_int(value: Any, *, minimum: int | None = None, maximum: int | None = None) -> TypeGuard[int]:
    """Whether ``value`` is an int (not a bool) within the bounds given and SQLite's 64 bits."""
    return number_problem("", value, integer=True, minimum=minimum, maximum=maximum) is None
