"""Exact numbers: every metric is a count over a stated total, and every fraction, mean,
threshold and rounding made from it is exact (``fractions.Fraction``), with one rounding
rule.

A scale's exact match is ``exact`` of ``n`` examples; its per-token accuracy is
``tokens_right`` of ``tokens`` scored tokens. Their fractions, a seed's mean over scales,
a row's mean over seeds and every comparison with a threshold ("exact match ≥ 0.9") are
computed on these counts, so 90 of 100 is exactly 9/10 and no boundary depends on binary
floating point (a float32 mean of 90 ones and 10 zeros is 0.8999999761581421).

A number is shown by :data:`ROUNDING_RULE`: rounded half up on its exact value
(37/200 = 0.185 reads 0.19), and two rows are compared as shown.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction
from numbers import Rational
from typing import Any

ROUNDING_RULE = (
    "Every number is computed exactly from counts (examples right of examples, tokens right of tokens) and shown "
    "rounded half up on its exact value: 37 of 200 = 0.185 reads 0.19, and 90 of 100 is exactly 0.9."
)
"""The one rounding rule, quoted by the site, the README and docs/leaderboard.md."""

RECOVERY_TOLERANCE = 1e-3
RECOVERY_RELATIVE = 2.0**-17
"""How far ``value × total`` may be from a whole number for :func:`recover` to take it as
that count: ``max(RECOVERY_TOLERANCE, total × RECOVERY_RELATIVE)``, at most 1/4. A float32
mean of a hundred per-example fractions is off by some 10⁻⁷ of its value (0.0013 of a
token at 9600 tokens); the counts are a whole number apart, so any bound below 1/2
names one count."""

Number = Fraction | int | float
"""A value the board shows: a Fraction from counts, or NaN (nothing to show)."""


def fraction(part: int, total: int) -> Fraction:
    """``part / total`` exactly; ``total`` must be positive."""
    if total <= 0:
        raise ValueError(f"a fraction needs a positive total, got {part}/{total}")
    return Fraction(part, total)


def exact(value: Any) -> Fraction:
    """``value`` as a Fraction: a Fraction or int as it is; a float by its shortest decimal
    (``repr``: ``0.9`` is 9/10, not the binary value next to it) — for thresholds and
    numbers written by hand, never for a measured metric (those come as counts)."""
    if type(value) is Fraction:
        return value
    if isinstance(value, Rational):
        return Fraction(value)
    if isinstance(value, float) and math.isfinite(value):
        return Fraction(repr(float(value)))  # a float subclass (NumPy's float64) may repr otherwise
    raise ValueError(f"not a finite number: {value!r}")


def is_missing(value: Any) -> bool:
    """Whether ``value`` is the board's "no value" (None or a float NaN)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def mean(values: Iterable[Any]) -> Fraction | float:
    """The exact mean of the present values (NaN/None left out); NaN when none is."""
    present = [exact(v) for v in values if not is_missing(v)]
    if not present:
        return math.nan
    return Fraction(sum(present), len(present))


def rounded(value: Any, digits: int) -> Fraction | float:
    """``value`` rounded half up to ``digits`` decimals (:data:`ROUNDING_RULE`); NaN stays NaN."""
    if is_missing(value):
        return math.nan
    q = exact(value) * 10**digits
    whole = math.floor(q)
    if q - whole >= Fraction(1, 2):
        whole += 1
    return Fraction(whole, 10**digits)


def fixed(value: Any, digits: int) -> str:
    """``value`` with ``digits`` decimals, rounded half up: ``fixed(Fraction(37, 200), 2)``
    is ``0.19``; ``nan`` for a missing value."""
    if is_missing(value):
        return "nan"
    r = rounded(value, digits)
    assert isinstance(r, Fraction)
    sign = "-" if r < 0 else ""
    whole, rest = divmod(abs(r.numerator) * 10**digits // r.denominator, 10**digits)
    return f"{sign}{whole}" + (f".{rest:0{digits}d}" if digits else "")


def significant(value: Any, digits: int = 2) -> str:
    """``value`` to ``digits`` significant figures, rounded half up, trailing zeros dropped
    (as ``format(x, ".2g")`` writes a number from 0.001 to below 10**digits): ``9.4``, ``1.3``, ``2``."""
    if is_missing(value):
        return "nan"
    v = abs(exact(value))
    if v == 0:
        return "0"
    exponent = 0  # the power of ten of the first significant digit: 10**exponent <= v < 10**(exponent + 1)
    while v >= Fraction(10) ** (exponent + 1):
        exponent += 1
    while v < Fraction(10) ** exponent:
        exponent -= 1
    text = fixed(exact(value), max(0, digits - 1 - exponent))
    return text.rstrip("0").rstrip(".") if "." in text else text


def recover(value: float, total: int, what: str = "a metric") -> int:
    """The count ``k`` of ``total`` that a stored fraction ``value`` was computed from
    (``round(value × total)``), refused when ``value × total`` is not within the recovery
    tolerance (:data:`RECOVERY_RELATIVE`) of a whole number in ``0..total``: then it was
    not a count over ``total``."""
    scaled = value * total
    k = round(scaled)
    tolerance = min(0.25, max(RECOVERY_TOLERANCE, total * RECOVERY_RELATIVE))
    if not (0 <= k <= total) or abs(scaled - k) > tolerance:
        raise ValueError(f"{what} {value!r} is not a count over {total} (× {total} = {scaled!r})")
    return k
