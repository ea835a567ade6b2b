"""How each encoding is drawn, on every page and every board: a colour, a dash pattern
and a marker (``Style``).

Colours are the Okabe–Ito colour-blind-safe palette without its yellow (too pale on
white). Each line style (a dash pattern with its marker: solid + circle, dashed + square,
dotted + triangle, ...) takes each colour at most once, so two encodings never share
both colour and line.

**Derived, not listed.** A registered encoding needs no entry here. The encodings the
board showed when looks were still listed by hand keep those looks, pinned on their paper
cards (``PINNED_STYLES``), so the plots published with them did not change. Every other registered encoding takes a
free (colour, line) slot of ``BASE_LINES``: the one its name hashes to, or the next free
one, the registry's names taking theirs in sorted order (``derived_styles``). A name's
look therefore depends only on its name and on the registered names before it in sorted
order whose hashes meet it: the same on every board drawn with the same registry.

``randomized:<base>`` keeps its base's colour on a dash-dot line (one per base line
style, ``RANDOMIZED_DASHES``) with a downward triangle, so it stays told apart from its
base where their curves meet. Any other name (a plugin not installed here, or a run with
options where the plain encoding is on the board too) gets a deterministic style from a
hash of the name, in line styles no encoding uses (``FALLBACK_LINES``; :func:`styles`).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "BASE_LINES",
    "MARKERS",
    "PALETTE",
    "PINNED_STYLES",
    "Style",
    "derived_styles",
    "pinned_styles",
    "registered_encodings",
    "style_of",
    "styles",
]

# Okabe & Ito, "Color Universal Design" (2008), without the yellow #F0E442 (too pale on white).
PALETTE = (
    "#0072B2",  # blue
    "#D55E00",  # vermillion
    "#009E73",  # bluish green
    "#CC79A7",  # reddish purple
    "#E69F00",  # orange
    "#56B4E9",  # sky blue
    "#000000",  # black
)
BLUE, VERMILLION, GREEN, PURPLE, ORANGE, SKY, BLACK = PALETTE

MARKERS = ("circle", "square", "triangle", "diamond", "triangle-down")


@dataclass(frozen=True)
class Style:
    """How one encoding is drawn everywhere: stroke colour, SVG dash pattern ('' = solid)
    and the marker on its points (one of :data:`MARKERS`)."""

    colour: str
    dash: str
    marker: str = "circle"


SOLID, DASHED, DOTTED = ("", "circle"), ("7 3", "square"), ("1.5 3", "triangle")
LONG_DASHED, DOUBLE_DOTTED = ("16 4", "circle"), ("1.5 2 1.5 6", "square")
BASE_LINES = (SOLID, DASHED, DOTTED, LONG_DASHED, DOUBLE_DOTTED)
"""The (dash, marker) line styles a registered encoding is drawn in, in the order their
slots are offered: each colour of :data:`PALETTE` on each line is one slot."""
RANDOMIZED_DASHES = {
    SOLID[0]: "9 3 2 3",
    DASHED[0]: "9 3 2 3 2 3",
    DOTTED[0]: "14 3 2 3",
    LONG_DASHED[0]: "16 4 2 4",
    DOUBLE_DOTTED[0]: "1.5 2 1.5 2 9 4",
}
"""``randomized:<base>``: its base's colour on a dash-dot line, one per base line style, with
:data:`RANDOMIZED_MARKER`."""
RANDOMIZED_MARKER = "triangle-down"
"""``randomized:<base>``'s marker: no base line's (circle, square, triangle), so a randomized
curve and its base's differ in marker as well as dash (ape and randomized:ape lie on top of
each other up to N, where a dash alone did not tell them apart)."""
FALLBACK_LINES = (("5 2 1 2 1 2", "diamond"), ("12 3", "triangle-down"), ("3 3", "diamond"))
"""Line styles for names outside the registry: no registered encoding uses them."""


def _style(colour: str, line: tuple[str, str]) -> Style:
    return Style(colour, line[0], line[1])


def pinned_styles() -> dict[str, Style]:
    """The looks the registered encodings pin on their paper cards (``look``): those the
    published board's encodings were drawn with while looks were listed by hand, kept so
    their plots stay as published. Closed: a new encoding's look is derived
    (:func:`derived_styles`), never pinned."""
    import pezoo

    return {name: Style(c.look.colour, c.look.dash, c.look.marker) for name, c in pezoo.cards().items() if c.look}


PINNED_STYLES: Mapping[str, Style] = pinned_styles()
""":func:`pinned_styles` of this pezoo's registry."""


def _hash(name: str) -> int:
    """A stable hash (not Python's ``hash``, which changes between processes)."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big")


def registered_encodings() -> list[str]:
    """The registry's encodings that get a look of their own: every registered name but
    the ``randomized:<base>`` wrappings (drawn after their base), sorted."""
    import pezoo

    return sorted(n for n in pezoo.available() if ":" not in n)


def derived_styles(names: Iterable[str]) -> dict[str, Style]:
    """A distinct look for each of ``names`` (registered encodings): its pinned look
    (:data:`PINNED_STYLES`), else a free slot (a colour on one of :data:`BASE_LINES`): the
    one its name hashes to, or the next free one, the names served in sorted order. Past
    the slots, names take fallback looks (which have no randomized companion)."""
    out = {name: PINNED_STYLES[name] for name in names if name in PINNED_STYLES}
    taken = set(PINNED_STYLES.values())
    slots = [s for s in (_style(c, line) for line in BASE_LINES for c in PALETTE) if s not in taken]
    for name in sorted(set(names) - set(out)):
        start = _hash(name) % len(slots) if slots else 0
        free = (s for s in [*slots[start:], *slots[:start]] if s not in taken)
        style = next(free, None) or next(s for s in _fallbacks(name) if s not in taken)
        out[name] = style
        taken.add(style)
    return out


def _fallbacks(name: str) -> Iterator[Style]:
    """Styles for a name outside the registry: every (colour, fallback line) pair, starting
    at the name's hash, then numbered dashes without end (so a free one always exists)."""
    pairs = [(c, line) for line in FALLBACK_LINES for c in PALETTE]
    start = _hash(name) % len(pairs)
    for colour, line in pairs[start:] + pairs[:start]:
        yield _style(colour, line)
    for k in itertools.count(1):
        yield Style(PALETTE[k % len(PALETTE)], f"{k // len(PALETTE) + 1} 2 6 2", "diamond")


def _encoding_of(label: str) -> str:
    """The encoding a board label names: the registry name before its options in braces
    (``rope{base=500}``, ``prism{paper}``) or before a variant's description
    (``rope → linear×4 (same weights)``)."""
    return label.split(" ", 1)[0].split("{", 1)[0]


def style_of(label: str, registered: Sequence[str] | None = None) -> Style:
    """The style ``label`` gets when nothing else on its board claims it first (see
    :func:`styles`); ``registered``: the registry's encodings (default: this pezoo's)."""
    looks = derived_styles(registered_encodings() if registered is None else registered)
    return next(_candidates(label, looks))


def _candidates(label: str, looks: Mapping[str, Style]) -> Iterator[Style]:
    name = _encoding_of(label)
    own: Style | None = None
    if name in looks:
        own = looks[name]
    elif ":" in name and name.split(":", 1)[1] in looks:  # a wrapped encoding (randomized:<base>)
        base = looks[name.split(":", 1)[1]]
        if base.dash in RANDOMIZED_DASHES:
            own = Style(base.colour, RANDOMIZED_DASHES[base.dash], RANDOMIZED_MARKER)
    if own is not None:
        yield own
        # a run with options beside its plain encoding keeps the encoding's colour, another line
        lines = list(FALLBACK_LINES)
        start = _hash(label) % len(lines)
        for line in lines[start:] + lines[:start]:
            yield _style(own.colour, line)
    yield from _fallbacks(label)


def styles(labels: Iterable[str], registered: Sequence[str] | None = None) -> dict[str, Style]:
    """A distinct Style per board label: its encoding's look (:func:`derived_styles` over
    ``registered``, default this pezoo's registry; or its randomized / hashed style), the
    same on every board.

    Only a label that would share a style with another label of the same board (a run
    with options next to the plain encoding, or two unknown names whose hashes meet)
    moves on to its next deterministic candidate. Plain names are served first, then
    labels with options, each group in sorted order, so the plain encoding keeps its look.
    """
    looks = derived_styles(registered_encodings() if registered is None else registered)
    out: dict[str, Style] = {}
    taken: set[Style] = set()
    for label in sorted(set(labels), key=lambda lb: (_encoding_of(lb) != lb, lb)):
        style = next(s for s in _candidates(label, looks) if s not in taken)
        out[label] = style
        taken.add(style)
    return out
