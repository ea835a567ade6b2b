"""Hand-drawn SVG: accuracy-vs-length curves and the style (colour, dash) of each encoding.

Plain string building, no plotting library, so the same numbers give the same bytes
(coordinates are written with one decimal). Colours are Paul Tol's colour-blind-safe
"muted" scheme plus black; past ten encodings the colours repeat with a dash pattern, so
the (colour, dash) pair of an encoding is unique on a board and the same on every page.

Conventions: x is the task's own scale n (linear), y the accuracy in [0, 1]; the training
region ``n <= N`` is shaded and closed by a dashed vertical line at N + 0.5; each
encoding is its mean over seeds (line and dots) with a band from the min to the max over
seeds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape

# Paul Tol, "muted" (https://personal.sron.nl/~pault/), then black.
PALETTE = (
    "#332288",  # indigo
    "#CC6677",  # rose
    "#117733",  # green
    "#DDCC77",  # sand
    "#88CCEE",  # cyan
    "#882255",  # wine
    "#44AA99",  # teal
    "#999933",  # olive
    "#AA4499",  # purple
    "#000000",  # black
)
DASHES = ("", "6 3", "2 2", "8 3 2 3")


@dataclass(frozen=True)
class Style:
    """How one encoding is drawn everywhere: stroke colour and SVG dash pattern ('' = solid)."""

    colour: str
    dash: str


def styles(labels: Iterable[str]) -> dict[str, Style]:
    """A unique Style per label, assigned in sorted order of the labels."""
    out = {}
    for i, label in enumerate(sorted(set(labels))):
        out[label] = Style(PALETTE[i % len(PALETTE)], DASHES[(i // len(PALETTE)) % len(DASHES)])
    return out


@dataclass(frozen=True)
class Series:
    """One curve: points (x, y) with a band lo..hi per point, all sorted by x."""

    label: str
    style: Style
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    lo: tuple[float, ...]
    hi: tuple[float, ...]


def _f(v: float) -> str:
    text = f"{v:.1f}"
    return "0.0" if text == "-0.0" else text


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


def _dash(style: Style) -> str:
    return f' stroke-dasharray="{style.dash}"' if style.dash else ""


def swatch(style: Style, width: int = 24, height: int = 10) -> str:
    """A small inline SVG line in an encoding's style, for tables and legends."""
    y = height / 2
    return (
        f'<svg class="swatch" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" aria-hidden="true"><line x1="1" y1="{_f(y)}" x2="{width - 1}" '
        f'y2="{_f(y)}" stroke="{style.colour}" stroke-width="2.5"{_dash(style)}/></svg>'
    )


def line_plot(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    boundary: float | None = None,
    boundary_label: str = "",
    plot_width: int = 480,
    plot_height: int = 220,
    legend: bool = True,
) -> str:
    """An accuracy-vs-length plot as one ``<svg>`` element.

    Args:
        series: the curves (drawn in the given order, bands first).
        title: text above the plot (also the accessible name).
        x_label, y_label: axis titles.
        boundary: x of the training boundary (N + 0.5); the region left of it is shaded.
        boundary_label: text next to the boundary line.
        plot_width, plot_height: size of the plotting area in px.
        legend: draw the legend to the right of the plot.
    """
    left, top, bottom, gap = 56, 34, 46, 14
    legend_width = max(200, max((len(s.label) for s in series), default=0) * 7 + 40) if legend and series else 0
    width = left + plot_width + gap + legend_width
    legend_height = 22 + 18 * len(series) if legend else 0
    height = max(top + plot_height + bottom, top + legend_height)

    xs = [x for s in series for x in s.xs]
    x_lo, x_hi = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if boundary is not None:
        x_lo, x_hi = min(x_lo, math.floor(boundary)), max(x_hi, math.ceil(boundary))
    if x_hi <= x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1

    def px(x: float) -> float:
        return left + (x - x_lo) / (x_hi - x_lo) * plot_width

    def py(y: float) -> float:
        return top + (1.0 - y) * plot_height

    out = [
        f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{left}" y="18" font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    if boundary is not None:  # shaded training region, then the boundary line
        out.append(
            f'<rect x="{_f(px(x_lo))}" y="{_f(py(1))}" width="{_f(px(boundary) - px(x_lo))}" '
            f'height="{_f(plot_height)}" fill="#eeeeee"/>'
        )
    for y in (0.0, 0.25, 0.5, 0.75, 1.0):  # horizontal grid and y ticks
        out.append(
            f'<line x1="{left}" y1="{_f(py(y))}" x2="{left + plot_width}" y2="{_f(py(y))}" stroke="#cccccc" '
            f'stroke-width="{1 if y in (0.0, 1.0) else 0.5}"/>'
        )
        out.append(f'<text x="{left - 6}" y="{_f(py(y) + 4)}" font-size="11" text-anchor="end">{y:.2f}</text>')
    step = nice_step(x_hi - x_lo)
    tick = math.ceil(x_lo / step) * step
    while tick <= x_hi + 1e-9:
        out.append(
            f'<line x1="{_f(px(tick))}" y1="{_f(py(0))}" x2="{_f(px(tick))}" y2="{_f(py(0) + 4)}" stroke="#333333"/>'
        )
        out.append(f'<text x="{_f(px(tick))}" y="{_f(py(0) + 17)}" font-size="11" text-anchor="middle">{tick:g}</text>')
        tick += step
    out.append(
        f'<text x="{_f(left + plot_width / 2)}" y="{_f(py(0) + 36)}" font-size="12" '
        f'text-anchor="middle">{escape(x_label)}</text>'
    )
    out.append(
        f'<text x="14" y="{_f(top + plot_height / 2)}" font-size="12" text-anchor="middle" '
        f'transform="rotate(-90 14 {_f(top + plot_height / 2)})">{escape(y_label)}</text>'
    )
    if boundary is not None:
        out.append(
            f'<line class="train-boundary" x1="{_f(px(boundary))}" y1="{_f(py(1) - 4)}" x2="{_f(px(boundary))}" '
            f'y2="{_f(py(0))}" stroke="#555555" stroke-width="1.5" stroke-dasharray="5 3"/>'
        )
        # written upwards along the line from the bottom, inside the training region,
        # where curves are rarely low: it stays readable however narrow that region is
        bx, by = _f(px(boundary) - 4), _f(py(0) - 4)
        out.append(
            f'<text x="{bx}" y="{by}" font-size="11" fill="#555555" '
            f'transform="rotate(-90 {bx} {by})">{escape(boundary_label)}</text>'
        )
    if not series:
        out.append(
            f'<text x="{_f(left + plot_width / 2)}" y="{_f(top + plot_height / 2)}" font-size="13" '
            'text-anchor="middle" fill="#777777">no results</text>'
        )
    for s in series:  # bands under every line
        if any(h > lo for lo, h in zip(s.lo, s.hi, strict=True)):
            upper = [f"{_f(px(x))},{_f(py(h))}" for x, h in zip(s.xs, s.hi, strict=True)]
            lower = [f"{_f(px(x))},{_f(py(lo))}" for x, lo in reversed(list(zip(s.xs, s.lo, strict=True)))]
            out.append(
                f'<polygon class="band" points="{" ".join(upper + lower)}" fill="{s.style.colour}" '
                'fill-opacity="0.15" stroke="none"/>'
            )
    for s in series:
        points = " ".join(f"{_f(px(x))},{_f(py(y))}" for x, y in zip(s.xs, s.ys, strict=True))
        out.append(f'<g class="series" data-encoding="{escape(s.label)}"><title>{escape(s.label)}</title>')
        out.append(
            f'<polyline points="{points}" fill="none" stroke="{s.style.colour}" stroke-width="2"'
            f'{_dash(s.style)} stroke-linejoin="round"/>'
        )
        out += [
            f'<circle cx="{_f(px(x))}" cy="{_f(py(y))}" r="2.2" fill="{s.style.colour}"/>'
            for x, y in zip(s.xs, s.ys, strict=True)
        ]
        out.append("</g>")
    if legend and series:
        x0 = left + plot_width + gap
        out.append(
            f'<g class="legend"><text x="{x0}" y="{top + 4}" font-size="11" fill="#555555">'
            "mean, band: min..max over seeds</text>"
        )
        for i, s in enumerate(series):
            y = top + 22 + 18 * i
            out.append(
                f'<line x1="{x0}" y1="{y - 4}" x2="{x0 + 24}" y2="{y - 4}" stroke="{s.style.colour}" '
                f'stroke-width="2.5"{_dash(s.style)}/>'
            )
            out.append(f'<text x="{x0 + 30}" y="{y}" font-size="12">{escape(s.label)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def trajectory_plot(
    lines: Sequence[tuple[str, Sequence[float]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    plot_width: int = 420,
    plot_height: int = 200,
) -> str:
    """Lines y(x = 0, 1, 2, ...) on a free y range, one colour per line (PRISM's cursor modes).

    Args:
        lines: (label, values) per line, drawn in order; x is the index into values.
        title: text above the plot (also the accessible name).
        x_label, y_label: axis titles.
        plot_width, plot_height: size of the plotting area in px.
    """
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

    out = [
        f'<svg class="plot trajectories" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{left}" y="18" font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    y_step = nice_step(y_hi - y_lo, 6)
    tick = math.ceil(y_lo / y_step) * y_step
    while tick <= y_hi + 1e-9:
        out.append(
            f'<line x1="{left}" y1="{_f(py(tick))}" x2="{left + plot_width}" y2="{_f(py(tick))}" '
            f'stroke="{"#888888" if tick == 0 else "#cccccc"}" stroke-width="{1 if tick == 0 else 0.5}"/>'
        )
        out.append(f'<text x="{left - 6}" y="{_f(py(tick) + 4)}" font-size="11" text-anchor="end">{tick:g}</text>')
        tick += y_step
    x_step = nice_step(x_hi)
    tick = 0.0
    while tick <= x_hi + 1e-9:
        out.append(f'<text x="{_f(px(tick))}" y="{_f(top + plot_height + 17)}" font-size="11" '
                   f'text-anchor="middle">{tick:g}</text>')  # fmt: skip
        tick += x_step
    out.append(
        f'<text x="{_f(left + plot_width / 2)}" y="{_f(top + plot_height + 36)}" font-size="12" '
        f'text-anchor="middle">{escape(x_label)}</text>'
    )
    out.append(
        f'<text x="14" y="{_f(top + plot_height / 2)}" font-size="12" text-anchor="middle" '
        f'transform="rotate(-90 14 {_f(top + plot_height / 2)})">{escape(y_label)}</text>'
    )
    x0 = left + plot_width + gap
    for i, (label, ys) in enumerate(lines):
        colour = PALETTE[i % len(PALETTE)]
        points = " ".join(f"{_f(px(x))},{_f(py(y))}" for x, y in enumerate(ys))
        out.append(f'<g class="series"><title>{escape(label)}</title>')
        out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.6"/>')
        out.append("</g>")
        y = top + 22 + 18 * i
        out.append(f'<line x1="{x0}" y1="{y - 4}" x2="{x0 + 24}" y2="{y - 4}" stroke="{colour}" stroke-width="2.5"/>')
        out.append(f'<text x="{x0 + 30}" y="{y}" font-size="12">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)
