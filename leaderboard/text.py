"""Text shared by the site, its SVG plots and the markdown board: the one rendering path.

Every page and plot is a Jinja2 template (``leaderboard/templates/``) rendered with
**autoescape on**: a value from a results or diagnostics file is escaped by
construction, wherever a template puts it (element text or attribute). The only
``Markup`` (text a template inserts as is) is what this package built itself from
escaped parts: a rendered template (a plot inside a page), and the docstring renderer of
``leaderboard.pages``. URLs go through :func:`href`, which percent-encodes every path
segment, so no name can become a scheme (``javascript:``) or leave its attribute.
Numbers in SVG go through the filters below, which format numbers as numbers and refuse
anything else (:class:`NotANumber`).

Also here, because the pages, the markdown board and the sentences beside the tables
use them: file-name slugs, commit abbreviations, plurals and lists.
"""

from __future__ import annotations

import functools
import math
import numbers
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

GENERATOR = "pezoo leaderboard build"
"""Names the generator in every generated file (the site's ``<meta name="generator">``,
the README's first line); a file without it is never overwritten."""


def slug(name: str) -> str:
    """File-name-safe form of a registry name (``randomized:rope`` -> ``randomized-rope``)."""
    return re.sub(r"[^a-z0-9_.-]+", "-", name.lower()).strip("-") or "unnamed"


def short_commit(commit: str, dirty: str = " (with uncommitted changes)") -> str:
    """The first 12 hex digits of a commit; a ``-dirty`` suffix becomes ``dirty``."""
    return commit.removesuffix("-dirty")[:12] + (dirty if commit.endswith("-dirty") else "")


def join(values: Iterable[Any]) -> str:
    return ", ".join(str(v) for v in values)


def plural(count: Any, noun: str) -> str:
    """``1 run``, ``2 runs``."""
    return f"{count} {noun}" + ("" if count == 1 else "s")


def and_join(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def href(path: str) -> str:
    """A relative URL for a '/'-separated path: each segment percent-encoded (``:`` too,
    so a name such as ``javascript:...`` is a file name, never a scheme)."""
    return quote(path, safe="/")


# --------------------------------------------------------------------------------------
# Numbers in SVG
# --------------------------------------------------------------------------------------


class NotANumber(ValueError):
    """A value drawn in a plot is not a finite number (a string, a bool, None, NaN, inf)."""


def finite(value: Any, what: str = "value") -> float:
    """``value`` as a float if it is a finite real number (bools are not); else NotANumber."""
    if type(value) is float and math.isfinite(value):  # the common case, without the ABC checks below
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise NotANumber(f"{what} must be a finite number, got {value!r}")
    return float(value)


def coordinate(value: Any) -> str:
    """A coordinate with one decimal (``-0.0`` written ``0.0``)."""
    text = f"{finite(value, 'a coordinate'):.1f}"
    return "0.0" if text == "-0.0" else text


def integer(value: Any) -> str:
    """An integer (a size in px)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise NotANumber(f"a size must be an integer, got {value!r}")
    return str(int(value))


def general(value: Any) -> str:
    """A number in ``%g`` form (tick labels, stroke widths)."""
    return f"{finite(value):g}"


def fixed(value: Any, digits: int) -> str:
    """A number with ``digits`` decimals."""
    return f"{finite(value):.{digits}f}"


def points(pairs: Iterable[tuple[Any, Any]]) -> str:
    """``x,y x,y ...`` for an SVG ``points`` attribute, one decimal each."""
    return " ".join(f"{coordinate(x)},{coordinate(y)}" for x, y in pairs)


def whole_points(pairs: Iterable[tuple[Any, Any]]) -> str:
    """``x,y x,y ...`` rounded to whole units: the grey context lines of a small multiple,
    where a tenth of a unit is invisible and the page would only grow."""
    return " ".join(f"{round(finite(x, 'a coordinate'))},{round(finite(y, 'a coordinate'))}" for x, y in pairs)


# --------------------------------------------------------------------------------------
# Docstrings, parsed for the templates (``_doc.j2`` turns the parts into HTML)
# --------------------------------------------------------------------------------------

_LITERAL = re.compile(r"``(.+?)``")
_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")


def inline(text: str) -> list[tuple[bool, str]]:
    """Docstring prose as (is_code, piece) pieces, in order: its reST ``literals`` and
    ``:role:`target``` references are code (the target without its ``~``), the rest text.
    The template escapes every piece; nothing here is HTML."""
    out: list[tuple[bool, str]] = []
    for i, part in enumerate(_LITERAL.split(text)):
        if i % 2:  # the inside of a ``literal``
            out.append((True, part))
            continue
        for j, piece in enumerate(_ROLE.split(part)):
            if piece or j % 2:
                out.append((bool(j % 2), piece))
    return out


@dataclass(frozen=True)
class DocBlock:
    """One block of a Google-style docstring: ``kind`` ``p`` (a paragraph, ``text``),
    ``pre`` (an indented block, a formula, ``text`` dedented) or ``section`` (``Args:``
    and the like: ``text`` its title, ``entries`` (name, text) per argument; an entry
    with no name is a line of the section that names no argument)."""

    kind: str
    text: str
    entries: tuple[tuple[str, str], ...] = ()


_SECTION = re.compile(r"^(Args|Arguments|Attributes|Returns|Raises|Shapes?|Notes?):\s*$")
_ARG = re.compile(r"^(\*{0,2}[\w.]+)(\s*\([^)]*\))?:\s*(.*)$")


def doc_blocks(doc: str) -> list[DocBlock]:
    """A Google-style docstring's blocks (:class:`DocBlock`), split at blank lines. A
    section's argument takes its continuation lines (indented further); nothing is
    dropped: a line this reader does not recognise is kept as prose."""
    blocks: list[list[str]] = [[]]
    for line in doc.strip("\n").splitlines():
        if line.strip():
            blocks[-1].append(line.rstrip())
        elif blocks[-1]:
            blocks.append([])
    out = []
    for block in filter(None, blocks):
        section = _SECTION.match(block[0])
        if section:
            entries: list[tuple[str, int, list[str]]] = []  # (argument, its indent, its text lines)
            for line in block[1:]:
                indent = len(line) - len(line.lstrip())
                arg = _ARG.match(line.strip())
                if arg and (not entries or indent <= entries[-1][1]):
                    entries.append((arg.group(1) + (arg.group(2) or ""), indent, [arg.group(3)]))
                elif entries:
                    entries[-1][2].append(line.strip())
                else:
                    entries.append(("", indent, [line.strip()]))
            pairs = tuple((name, " ".join(text)) for name, _, text in entries)
            out.append(DocBlock("section", section.group(1), pairs))
        elif all(line.startswith((" ", "\t")) for line in block):
            width = min(len(line) - len(line.lstrip()) for line in block)
            out.append(DocBlock("pre", "\n".join(line[width:] for line in block)))
        else:
            out.append(DocBlock("p", " ".join(line.strip() for line in block)))
    return out


# --------------------------------------------------------------------------------------
# Templates
# --------------------------------------------------------------------------------------


@functools.cache
def environment() -> Environment:
    """The templates' environment: autoescape on for every template, undefined names are
    errors, block tags leave no blank lines."""
    env = Environment(
        loader=PackageLoader("leaderboard", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(c=coordinate, i=integer, g=general, fixed=fixed, points=points, whole_points=whole_points)
    env.globals.update(slug=slug, join=join, plural=plural, inline=inline, doc_blocks=doc_blocks)
    return env


def render_template(name: str, /, **context: Any) -> Markup:
    """Template ``name`` rendered with ``context``. The result is Markup: every value in it
    was escaped by the template, so a page may include it (a plot) as it is."""
    return Markup(environment().get_template(name).render(**context))
