"""The LM section's curves as small multiples: one panel per family of encodings.

Two figures per corpus, drawn the same way:

* :func:`curves_svg`, bits per byte against the test length S (non-overlapping windows);
* :func:`positions_svg`, bits per byte against the position within the window at the
  longest length every seed of a row measured (``harness.records.lm_positions``: the per-token loss
  curve of the FoX paper, per half-octave bucket), the picture of *where* past L a row
  breaks; rows whose records did not measure it are listed as not measured.

A panel holds one family (``pezoo.family_of``: where an encoding puts position, read from
its class's hooks or its card, never from its name here), in :data:`pezoo.FAMILIES`' order;
a variant of a trained run is in its encoding's family. Each row keeps its look from
``leaderboard.styles`` (the same colour, dash and marker on every page), with a marker at
every point; the other families' rows are thin grey lines behind, so a panel still shows
where its rows lie among all. Every panel of a figure shares both axes (x on a log2 scale,
y from the lowest to the highest value of the figure), so panels compare at a glance. A
value is a ratio of summed counts (summed nats over summed bytes · ln 2, over the row's
seeds: equal bytes per seed, so the mean of the seeds), computed where drawn.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

import pezoo
from leaderboard.lm_rows import LmRow, short_label
from leaderboard.styles import Style, styles
from leaderboard.svg import _marker
from leaderboard.text import render_template

__all__ = ["FAMILY_TITLES", "curves_svg", "family_panels", "position_curve", "positions_svg"]

FAMILY_TITLES = pezoo.FAMILIES
"""Each family's panel title, from pezoo (``pezoo.cards.FAMILIES``)."""

COLUMNS = 2
PLOT_W, PLOT_H = 300, 170
LEFT, TOP, RIGHT, BELOW = 48, 30, 18, 40
"""A panel: its plot area and the margins around it (title above; ticks and axis title below)."""
LEGEND_ROW = 15
LABEL_CHARS = 48
"""A legend label is cut at this many characters (~6.2 px each at 11 px), the whole in its tooltip."""


def family_panels(rows: Sequence[LmRow]) -> list[tuple[str, list[LmRow]]]:
    """(family, its rows in the given order) per family some row is in, in FAMILIES' order."""
    by: dict[str, list[LmRow]] = {}
    for row in rows:
        by.setdefault(pezoo.family_of(row.config.pe), []).append(row)
    order = list(pezoo.FAMILIES)
    return sorted(by.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order))


def _bpb(nats: float, n_bytes: int) -> float:
    return nats / (n_bytes * math.log(2))


def length_curve(row: LmRow) -> list[tuple[float, float]] | None:
    """(log2 S, bpb over the row's seeds) per length every seed reached in windows mode; None if none."""
    points = []
    for s in row.lengths:
        scores = [r.score("windows", s) for r in row.records]
        if any(x is None or not x.reached or x.nats is None for x in scores):
            continue
        nats = math.fsum(x.nats for x in scores if x is not None and x.nats is not None)
        points.append((math.log2(s), _bpb(nats, sum(x.n_bytes for x in scores if x is not None))))
    return points or None


def position_curve(row: LmRow) -> tuple[int, list[tuple[float, float]]] | None:
    """(S, points) of the row's curve by position at the longest length S at which every seed
    has one: per bucket [a, b), (log2 b, bpb of its summed nats and bytes over the seeds); a
    bucket is drawn at its last position's end, so [0, 1), BOS alone, is at 1. None where a
    seed has no curve at any length (not measured, or not reached)."""
    for s in reversed(row.lengths):
        curves = [r.position_curve(s) for r in row.records]
        if any(c is None for c in curves):
            continue
        got = [c for c in curves if c is not None]
        points = [
            (math.log2(got[0].edges[k + 1]), _bpb(math.fsum(c.nats[k] for c in got), sum(c.n_bytes[k] for c in got)))
            for k in range(len(got[0].nats))
        ]
        return s, points
    return None


@dataclass(frozen=True)
class _Line:
    label: str
    shown: str
    style: Style
    points: list[tuple[float, float]] | None  # data coordinates; None: not measured


def _figure(
    rows: Sequence[LmRow],
    curve: Callable[[LmRow], list[tuple[float, float]] | None],
    *,
    title: str,
    x_label: str,
    x_ticks_from: float,
    boundary: float | None,
    not_measured: str,
) -> Markup:
    """The small multiples of ``curve`` (data points per row, None where not measured)."""
    looks = styles([row.label for row in rows])  # distinct: a variant never wears its encoding's look
    panels = [
        (family, [_Line(r.label, short_label(r.config), looks[r.label], curve(r)) for r in members])
        for family, members in family_panels(rows)
    ]
    drawn = [(x, y) for _, lines in panels for line in lines for x, y in line.points or ()]
    xs, ys = [x for x, _ in drawn] or [8.0, 12.0], [y for _, y in drawn] or [0.0, 8.0]
    x_lo, x_hi = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y_lo, y_hi = math.floor(min(ys) * 2) / 2, math.ceil(max(ys) * 2) / 2
    y_hi = y_hi if y_hi > y_lo else y_lo + 0.5

    def px(x: float) -> float:
        return LEFT + (x - x_lo) / (x_hi - x_lo) * PLOT_W

    def py(y: float) -> float:
        return TOP + (y_hi - y) / (y_hi - y_lo) * PLOT_H

    y_step = next(step for step in (0.5, 1.0, 2.0, 5.0) if (y_hi - y_lo) / step <= 8)
    y_ticks = [(y_lo + k * y_step, py(y_lo + k * y_step)) for k in range(int((y_hi - y_lo) / y_step) + 1)]
    first = math.ceil(max(x_lo, x_ticks_from))
    x_step = 1 if x_hi - first <= 8 else 2
    x_ticks = [(2**x, px(x)) for x in range(first, math.floor(x_hi) + 1, x_step)]
    panel_w = LEFT + PLOT_W + RIGHT
    grid = [panels[k : k + COLUMNS] for k in range(0, len(panels), COLUMNS)] or [[]]
    heights = [TOP + PLOT_H + BELOW + LEGEND_ROW * max((len(ls) for _, ls in g), default=0) + 6 for g in grid]
    out: list[dict[str, Any]] = []
    for i, (family, lines) in enumerate(panels):
        ox, oy = (i % COLUMNS) * panel_w, sum(heights[: i // COLUMNS])  # each row of panels as tall as its legends
        others = [
            [(ox + px(x), oy + py(y)) for x, y in line.points]
            for f, other in panels
            if f != family
            for line in other
            if line.points
        ]
        series, legend = [], []
        for k, line in enumerate(lines):
            at = oy + TOP + PLOT_H + BELOW + LEGEND_ROW * k + 4
            shown = line.shown if len(line.shown) <= LABEL_CHARS else line.shown[: LABEL_CHARS - 1] + "…"
            legend.append(
                {
                    "label": line.label,
                    "shown": shown if line.points else f"{shown}: {not_measured}",
                    "style": line.style,
                    "measured": bool(line.points),
                    "x": ox + LEFT,
                    "y": at,
                    "marker": _marker(line.style, ox + LEFT + 11, at, 3.0),
                }
            )
            if line.points:
                pixels = [(ox + px(x), oy + py(y)) for x, y in line.points]
                markers = [_marker(line.style, x, y, 2.8) for x, y in pixels]
                series.append({"label": line.label, "style": line.style, "points": pixels, "markers": markers})
        out.append(
            {
                "family": family,
                "title": FAMILY_TITLES.get(family, family),
                "x": ox,
                "y": oy,
                "others": others,
                "series": series,
                "legend": legend,
                "empty": not series,
            }
        )
    return render_template(
        "lm_panels.svg.j2",
        title=title,
        x_label=x_label,
        width=panel_w * min(COLUMNS, max(1, len(panels))),
        height=sum(heights),
        left=LEFT,
        top=TOP,
        plot_width=PLOT_W,
        plot_height=PLOT_H,
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        boundary_x=None if boundary is None else px(boundary),
        panels=out,
        not_measured=not_measured,
    )


def curves_svg(task: str, rows: Sequence[LmRow]) -> Markup:
    """Bits per byte (over the seeds, non-overlapping windows) against the test length S, log2
    axis, one panel per family (module docstring); the dashed line is L."""
    return _figure(
        rows,
        length_curve,
        title=f"bits per byte against length, {task}, one panel per family of encodings",
        x_label="test length S (bytes)",
        x_ticks_from=0,
        boundary=math.log2(rows[0].length) if rows else None,
        not_measured="not reached",
    )


def positions_svg(task: str, rows: Sequence[LmRow]) -> Markup | None:
    """Bits per byte (over the seeds) against the position within the window at the longest
    length each row measured (:func:`position_curve`), log2 axis, one panel per family; the
    dashed line is L. None when no row measured it."""
    curves = {row.label: position_curve(row) for row in rows}
    if all(c is None for c in curves.values()):
        return None

    def points(row: LmRow) -> list[tuple[float, float]] | None:
        got = curves[row.label]
        return None if got is None else got[1]

    return _figure(
        rows,
        points,
        title=f"bits per byte by position within the window, {task}, one panel per family of encodings",
        x_label="position in the window (bytes; each point a bucket's end)",
        x_ticks_from=0,
        boundary=math.log2(rows[0].length) if rows else None,
        not_measured="not measured",
    )


def positions_length(rows: Sequence[LmRow]) -> list[int]:
    """The window lengths the position curves of ``rows`` are drawn at (the longest each row measured)."""
    return sorted({got[0] for row in rows if (got := position_curve(row)) is not None})
