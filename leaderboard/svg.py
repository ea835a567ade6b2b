"""Hand-drawn SVG: accuracy-vs-length plots, PRISM cursor trajectories, and heat-map colours.

No plotting library: the geometry is computed here and written by the templates
``leaderboard/templates/*.svg.j2`` (autoescape on, like every page: labels and titles
from results files are escaped; every number passes a filter that writes it as a number
and refuses anything that is not a finite number, ``leaderboard.text.NotANumber``). The
same numbers give the same bytes (coordinates are written with one decimal).

How each encoding is drawn (colour, dash, marker) is ``leaderboard.styles``.

**Plots.** x is the task's own scale n (linear), y the accuracy in [0, 1]; the training
region ``n <= N`` is shaded, closed by a dashed line at N + 0.5 and labelled *above* the
plotting area, so the label never covers data. :func:`line_plot` draws every encoding's
mean over seeds (line and markers) with a light min..max band; :func:`panel_plot` is one
small multiple: one encoding in its colour with its per-seed band, the others in light
grey behind it, so curves that lie on top of each other are still told apart. The
legend is HTML next to the plot (``leaderboard/templates/_html.j2``), in rank order, so
it wraps on a narrow screen. Sizes are in the viewBox: the pages scale the plots to the
screen, and the font sizes are chosen to stay legible at 400 px wide.

**Heat-map colours** (:func:`heat_colour`): viridis, a perceptually uniform sequential
scale that colour-blind readers see in the same order (van der Walt and Smith, the
matplotlib default), with black or white text, whichever contrasts more.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from leaderboard.styles import PALETTE, Style
from leaderboard.text import NotANumber, finite, render_template

__all__ = [
    "VIRIDIS",
    "NotANumber",
    "Series",
    "heat_colour",
    "line_plot",
    "nice_step",
    "panel_plot",
    "swatch",
    "trajectory_plot",
]


# --------------------------------------------------------------------------------------
# Heat-map colours
# --------------------------------------------------------------------------------------

VIRIDIS = (
    "#440154", "#482475", "#414487", "#355F8D", "#2A788E", "#21918C",
    "#22A884", "#44BF70", "#7AD151", "#BDDF26", "#FDE725",
)  # fmt: skip
"""viridis at 0, 0.1, ..., 1 (interpolated linearly in sRGB between these stops)."""


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return int(hex_colour[1:3], 16), int(hex_colour[3:5], 16), int(hex_colour[5:7], 16)


def _luminance(rgb: Sequence[float]) -> float:
    """WCAG 2 relative luminance of an sRGB colour (0..255 channels)."""

    def linear(c: float) -> float:
        c = c / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def heat_colour(value: float) -> tuple[str, str]:
    """(background, text) hex colours for a value in [0, 1] (clipped) on :data:`VIRIDIS`;
    the text is black or white, whichever has the higher WCAG contrast on the background."""
    t = min(1.0, max(0.0, finite(value, "a heat-map value"))) * (len(VIRIDIS) - 1)
    i = min(int(t), len(VIRIDIS) - 2)
    a, b = _rgb(VIRIDIS[i]), _rgb(VIRIDIS[i + 1])
    rgb = tuple(round(x + (y - x) * (t - i)) for x, y in zip(a, b, strict=True))
    lum = _luminance(rgb)
    text = "#000000" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "#FFFFFF"
    return "#{:02X}{:02X}{:02X}".format(*rgb), text


# --------------------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    """One curve: points (x, y) with a band lo..hi per point, all sorted by x."""

    label: str
    style: Style
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    lo: tuple[float, ...]
    hi: tuple[float, ...]


def nice_step(span: float, max_ticks: int = 10) -> float:
    """The smallest of 1, 2, 5 x 10^k giving at most ``max_ticks`` intervals over ``span``."""
    if span <= 0:
        return 1.0
    k = math.floor(math.log10(span / max_ticks)) if span > max_ticks else 0
    for base in (1, 2, 5, 10):
        step = base * 10.0**k
        if span / step <= max_ticks:
            return step
    return 10.0 ** (k + 1)  # unreachable: base 10 always fits


def swatch(style: Style, width: int = 26, height: int = 12) -> Markup:
    """A small inline SVG line with one marker in an encoding's style, for tables and legends."""
    return render_template(
        "swatch.svg.j2",
        style=style,
        width=width,
        height=height,
        y=height / 2,
        point=_marker(style, width / 2, height / 2, 3.2),
    )


def _marker(style: Style, x: float, y: float, r: float) -> dict[str, Any]:
    """The marker at (x, y) of radius ~r: a template tag name and its geometry."""
    if style.marker == "square":
        return {"tag": "rect", "x": x - r * 0.85, "y": y - r * 0.85, "size": r * 1.7}
    shapes = {
        "triangle": ((0, -1.2), (1.1, 0.8), (-1.1, 0.8)),
        "triangle-down": ((0, 1.2), (1.1, -0.8), (-1.1, -0.8)),
        "diamond": ((0, -1.25), (1.1, 0), (0, 1.25), (-1.1, 0)),
    }
    if style.marker in shapes:
        return {"tag": "polygon", "points": [(x + dx * r, y + dy * r) for dx, dy in shapes[style.marker]]}
    return {"tag": "circle", "x": x, "y": y, "r": r}


def _values(values: Iterable[Any], what: str) -> tuple[float, ...]:
    """``values`` as floats; NotANumber naming ``what`` and the position of the first bad one."""
    out = []
    for i, v in enumerate(values):
        # a plain finite float passes as is; anything else goes through finite(), which names it
        out.append(v if type(v) is float and math.isfinite(v) else finite(v, f"{what}[{i}]"))
    return tuple(out)


_Coordinates = tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...], tuple[float, ...]]
"""A series' checked xs, ys, lo and hi."""


def _coordinates(s: Series) -> _Coordinates:
    """The series' xs, ys, lo and hi as floats; NotANumber for a value that is not a finite number."""
    xs, ys, lo, hi = (
        _values(v, f"{s.label!r} {name}") for name, v in (("xs", s.xs), ("ys", s.ys), ("lo", s.lo), ("hi", s.hi))
    )
    return xs, ys, lo, hi


@dataclass(frozen=True)
class _Axes:
    """Pixel geometry of one plotting area: data x in [x_lo, x_hi], y in [0, 1]."""

    left: float
    top: float
    width: float
    height: float
    x_lo: float
    x_hi: float

    def px(self, x: float) -> float:
        return self.left + (x - self.x_lo) / (self.x_hi - self.x_lo) * self.width

    def py(self, y: float) -> float:
        return self.top + (1.0 - y) * self.height

    @property
    def bottom(self) -> float:
        return self.top + self.height

    @property
    def right(self) -> float:
        return self.left + self.width


def _x_range(checked: Sequence[tuple[Any, ...]], boundary: float | None) -> tuple[float, float]:
    all_xs = [x for _, xs, *_ in checked for x in xs]
    x_lo, x_hi = (min(all_xs), max(all_xs)) if all_xs else (0.0, 1.0)
    if boundary is not None:
        x_lo, x_hi = min(x_lo, math.floor(boundary)), max(x_hi, math.ceil(boundary))
    if x_hi <= x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    return x_lo, x_hi


def _drawn(
    axes: _Axes,
    s: Series,
    xs: Sequence[float],
    ys: Sequence[float],
    lo: Sequence[float],
    hi: Sequence[float],
    index: int,
    marker_r: float,
    max_markers: int,
) -> dict[str, Any]:
    """One series in pixels: its line, its band outline (None when the seeds agree
    everywhere) and its markers (every point, or every k-th with a phase per series so
    markers of curves on top of each other do not hide one another)."""
    line = [(axes.px(x), axes.py(y)) for x, y in zip(xs, ys, strict=True)]
    band = None
    if any(h > low for low, h in zip(lo, hi, strict=True)):
        upper = [(axes.px(x), axes.py(h)) for x, h in zip(xs, hi, strict=True)]
        band = upper + [(axes.px(x), axes.py(low)) for x, low in reversed(list(zip(xs, lo, strict=True)))]
    stride = max(1, math.ceil(len(line) / max_markers))
    markers = [_marker(s.style, x, y, marker_r) for i, (x, y) in enumerate(line) if (i + index) % stride == 0]
    return {"series": s, "line": line, "band": band, "markers": markers}


def line_plot(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    boundary: float | None = None,
    boundary_label: str = "",
    plot_width: int = 400,
    plot_height: int = 230,
) -> Markup:
    """An accuracy-vs-length plot of every series as one ``<svg>`` element (no legend:
    the page puts one beside it).

    Args:
        series: the curves; drawn in the given order (so the last is on top), bands first.
        title: the accessible name (``<title>``, ``aria-label``); the page shows it as the caption.
        x_label, y_label: axis titles.
        boundary: x of the training boundary (N + 0.5); the region left of it is shaded.
        boundary_label: text over the shaded region, above the plotting area.
        plot_width, plot_height: size of the plotting area in viewBox units.

    Raises:
        NotANumber: a coordinate or the boundary is not a finite number.
    """
    checked = [(s, *_coordinates(s)) for s in series]
    if boundary is not None:
        boundary = finite(boundary, "boundary")
    left, top, right, bottom = 64, 28, 14, 48
    axes = _Axes(left, top, plot_width, plot_height, *_x_range(checked, boundary))
    step = nice_step(axes.x_hi - axes.x_lo, 8)
    x_ticks = _ticks(axes.x_lo, axes.x_hi, step, axes.px)
    drawn = [_drawn(axes, s, xs, ys, lo, hi, i, 3.0, 12) for i, (s, xs, ys, lo, hi) in enumerate(checked)]
    return render_template(
        "plot.svg.j2",
        title=title,
        x_label=x_label,
        y_label=y_label,
        boundary_label=boundary_label,
        width=left + plot_width + right,
        height=top + plot_height + bottom,
        axes=axes,
        y_ticks=[(y, axes.py(y)) for y in (0.0, 0.25, 0.5, 0.75, 1.0)],
        x_ticks=x_ticks,
        boundary_x=None if boundary is None else axes.px(boundary),
        series=drawn,
    )


def panel_plot(
    highlight: Series | None,
    others: Sequence[Series],
    *,
    title: str,
    boundary: float | None = None,
    x_range: tuple[float, float] | None = None,
    plot_width: int = 190,
    plot_height: int = 110,
) -> Markup:
    """One small multiple: ``highlight`` in its style with its min..max band over seeds,
    ``others`` as thin light-grey lines behind it, on the same axes as its sibling panels.

    Args:
        highlight: the panel's encoding (None: only the others, e.g. not run here).
        others: the other encodings of the same table.
        title: the accessible name; the page shows the encoding's name above the panel.
        boundary: x of the training boundary (N + 0.5); the region left of it is shaded.
        x_range: (lowest, highest) x of every panel of the grid, so they line up.
        plot_width, plot_height: size of the plotting area in viewBox units.

    Raises:
        NotANumber: a coordinate, the boundary or the range is not a finite number.
    """
    checked_others = [(s, *_coordinates(s)) for s in others]
    checked = [(highlight, *_coordinates(highlight))] if highlight is not None else []
    if boundary is not None:
        boundary = finite(boundary, "boundary")
    if x_range is not None:
        x_lo, x_hi = finite(x_range[0], "x_range[0]"), finite(x_range[1], "x_range[1]")
    else:
        x_lo, x_hi = _x_range(checked + checked_others, boundary)
    left, top, right, bottom = 30, 8, 12, 24
    axes = _Axes(left, top, plot_width, plot_height, x_lo, x_hi if x_hi > x_lo else x_lo + 1)
    x_ticks = [(x, axes.px(x)) for x in sorted({x_lo, x_hi} | ({math.floor(boundary)} if boundary else set()))]
    return render_template(
        "panel.svg.j2",
        title=title,
        width=left + plot_width + right,
        height=top + plot_height + bottom,
        axes=axes,
        x_ticks=x_ticks,
        boundary_x=None if boundary is None else axes.px(boundary),
        others=[[(axes.px(x), axes.py(y)) for x, y in zip(xs, ys, strict=True)] for _, xs, ys, _, _ in checked_others],
        highlight=_drawn(axes, *checked[0], 0, 2.6, 10) if checked else None,
    )


def _ticks(lo: float, hi: float, step: float, at: Callable[[float], float]) -> list[tuple[float, float]]:
    """(value, pixel ``at(value)``) of each tick: the multiples of ``step`` from ``lo`` to ``hi``."""
    ticks, tick = [], math.ceil(lo / step) * step
    while tick <= hi + 1e-9:
        ticks.append((tick, at(tick)))
        tick += step
    return ticks


def trajectory_plot(
    lines: Sequence[tuple[str, Sequence[float]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    plot_width: int = 420,
    plot_height: int = 200,
) -> Markup:
    """Lines y(x = 0, 1, 2, ...) on a free y range, one colour (and dash) per line (PRISM's cursor modes).

    Args:
        lines: (label, values) per line, drawn in order; x is the index into values.
        title: text above the plot (also the accessible name).
        x_label, y_label: axis titles.
        plot_width, plot_height: size of the plotting area in px.

    Raises:
        NotANumber: a value is not a finite number.
    """
    lines = [(label, _values(ys, f"{title!r} line {label!r}")) for label, ys in lines]
    left, top, bottom, gap = 56, 34, 46, 14
    legend_width = max(120, max((len(label) for label, _ in lines), default=0) * 7 + 40) if lines else 0
    width = left + plot_width + gap + legend_width
    height = max(top + plot_height + bottom, top + 22 + 18 * len(lines))
    values = [v for _, ys in lines for v in ys] or [0.0]
    y_lo, y_hi = min(min(values), 0.0), max(max(values), 0.0)
    if y_hi <= y_lo:
        y_lo, y_hi = y_lo - 1, y_hi + 1
    x_hi = max((len(ys) - 1 for _, ys in lines), default=1) or 1

    def px(x: float) -> float:
        return left + x / x_hi * plot_width

    def py(y: float) -> float:
        return top + (y_hi - y) / (y_hi - y_lo) * plot_height

    return render_template(
        "trajectories.svg.j2",
        title=title,
        x_label=x_label,
        y_label=y_label,
        width=width,
        height=height,
        left=left,
        top=top,
        right=left + plot_width,
        plot_width=plot_width,
        plot_height=plot_height,
        y_ticks=_ticks(y_lo, y_hi, nice_step(y_hi - y_lo, 6), py),
        x_ticks=_ticks(0.0, x_hi, nice_step(x_hi), px),
        lines=_styled_lines(lines, px, py),
        legend_x=left + plot_width + gap,
    )


def _styled_lines(
    lines: Sequence[tuple[str, Sequence[float]]], px: Callable[[float], float], py: Callable[[float], float]
) -> list[tuple[str, str, str, list[tuple[float, float]]]]:
    """(label, colour, dash, points in pixels) of each trajectory: one palette colour per
    line, and past the palette the colours again, dashed."""
    return [
        (
            label,
            PALETTE[i % len(PALETTE)],
            "" if i < len(PALETTE) else "6 3",
            [(px(x), py(y)) for x, y in enumerate(ys)],
        )
        for i, (label, ys) in enumerate(lines)
    ]
