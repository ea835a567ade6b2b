"""Text that is safe to print on a terminal: names from stores and results files escaped.

A run's names (encoding, task, preset, label) come from a results store or a contributed
results file, so they may hold anything: ANSI and OSC escape sequences (which recolour,
retitle or rewrite the terminal, or plant a hyperlink), NUL, carriage returns, and the
Unicode bidirectional overrides that make a line read differently from what it holds
(Boucher and Anderson, "Trojan Source: Invisible Vulnerabilities", 2021). :func:`printable`
writes each such character as a Python escape (``\\x1b``, ``\\u202e``), so what is shown
is what is there, on one line.
"""

from __future__ import annotations

import unicodedata

_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
"""Control (C0, DEL, C1), format (bidi overrides and isolates, zero-width characters),
lone surrogates (undecodable bytes of a file name), private-use and unassigned code
points, and the line and paragraph separators."""


def _escape(ch: str) -> str:
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(s: str) -> str:
    """``s`` with every control, format, surrogate and line-separator character written
    as its Python escape (``"a\\x1b[31mb"`` -> ``"a\\\\x1b[31mb"``): the text a terminal
    shows as it is, on one line. Printable text, other languages' included, is unchanged,
    and ``printable(printable(s)) == printable(s)``."""
    if s.isprintable():  # the common case: nothing to escape (isprintable is False for all of the above)
        return s
    return "".join(_escape(ch) if unicodedata.category(ch) in _ESCAPED_CATEGORIES else ch for ch in s)


def terminal_text(text: str, *, keep_newlines: bool = True) -> str:
    """:func:`printable` of a message of several lines: newlines stay when ``keep_newlines``
    and a tab becomes a space; everything else a terminal would act on is escaped."""
    text = text.replace("\t", " ")
    if not keep_newlines:
        return printable(text)
    return "\n".join(printable(line) for line in text.split("\n"))


def one_line(exc: object) -> str:
    """``exc`` (an exception or a message) on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__
