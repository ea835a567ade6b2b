"""Hand-drawn SVG plots: geometry, styles, determinism, well-formed XML."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from leaderboard.svg import PALETTE, Series, Style, line_plot, nice_step, styles, swatch

NS = "{http://www.w3.org/2000/svg}"


@given(st.floats(min_value=0.5, max_value=1e6, allow_nan=False))
def test_nice_step_is_the_smallest_1_2_5_step_with_at_most_ten_intervals(span):
    step = nice_step(span)
    k = math.floor(math.log10(step) + 1e-9)
    assert round(step / 10**k, 6) in (1, 2, 5)
    assert span / step <= 10 + 1e-9
    candidates = sorted(b * 10.0**e for e in range(-1, 8) for b in (1, 2, 5))
    smaller = [c for c in candidates if c < step * (1 - 1e-9) and c >= 1]
    assert all(span / c > 10 for c in smaller)


def test_styles_are_unique_and_independent_of_order():
    labels = [f"enc{i:02d}" for i in range(35)]
    a, b = styles(labels), styles(reversed(labels))
    assert a == b
    assert len(set(a.values())) == 35
    assert all(s.colour in PALETTE for s in a.values())
    assert a["enc00"] == Style(PALETTE[0], "") and a[f"enc{len(PALETTE):02d}"].dash != ""


def _series(label, colour, points, band=0.0):
    xs = tuple(float(x) for x, _ in points)
    ys = tuple(y for _, y in points)
    lo, hi = tuple(max(0, y - band) for y in ys), tuple(min(1, y + band) for y in ys)
    return Series(label, Style(colour, ""), xs, ys, lo, hi)


def test_plot_geometry():
    pts = [(n, 1.0 if n <= 5 else 0.0) for n in range(1, 11)]
    svg = line_plot(
        [_series("rope <&>", "#332288", pts, band=0.1), _series("nope", "#CC6677", pts)],
        title="copy",
        x_label="n",
        y_label="acc",
        boundary=5.5,
        boundary_label="trained on n ≤ 5",
    )
    root = ET.fromstring(svg)  # well-formed XML, label escaped
    assert root.tag == f"{NS}svg" and root.attrib["aria-label"] == "copy"
    groups = [g for g in root.iter(f"{NS}g") if g.attrib.get("class") == "series"]
    assert [g.attrib["data-encoding"] for g in groups] == ["rope <&>", "nope"]
    circles = [(float(c.attrib["cx"]), float(c.attrib["cy"])) for c in groups[0].iter(f"{NS}circle")]
    assert len(circles) == 10 and all(b[0] > a[0] for a, b in pairwise(circles))
    # equal steps in n are equal steps in px
    gaps = {round(b[0] - a[0], 1) for a, b in pairwise(circles)}
    assert max(gaps) - min(gaps) <= 0.2
    # y = 1 and y = 0 land on the 1.00 and 0.00 grid lines
    ticks = {t.text: float(t.attrib["y"]) - 4 for t in root.iter(f"{NS}text") if t.text in ("0.00", "1.00")}
    assert abs(circles[0][1] - ticks["1.00"]) <= 0.1 and abs(circles[-1][1] - ticks["0.00"]) <= 0.1
    # the training boundary sits halfway between n = 5 and n = 6
    [boundary] = [ln for ln in root.iter(f"{NS}line") if ln.attrib.get("class") == "train-boundary"]
    assert abs(float(boundary.attrib["x1"]) - (circles[4][0] + circles[5][0]) / 2) <= 0.1
    assert "trained on n ≤ 5" in svg
    # one band (rope has a spread, nope none)
    assert len([p for p in root.iter(f"{NS}polygon") if p.attrib.get("class") == "band"]) == 1
    legend = [t.text for g in root.iter(f"{NS}g") if g.attrib.get("class") == "legend" for t in g.iter(f"{NS}text")]
    assert legend[1:] == ["rope <&>", "nope"]


def test_plot_is_deterministic_and_handles_no_data():
    args = {"title": "t", "x_label": "n", "y_label": "acc", "boundary": 3.5}
    s = [_series("a", "#000000", [(1, 0.5), (4, 0.25)])]
    assert line_plot(s, **args) == line_plot(list(s), **args)
    empty = line_plot([], **args)
    ET.fromstring(empty)
    assert "no results" in empty


def test_swatch_is_svg_in_the_style():
    root = ET.fromstring(swatch(Style("#117733", "6 3")))
    [line] = root.iter(f"{NS}line")
    assert line.attrib["stroke"] == "#117733" and line.attrib["stroke-dasharray"] == "6 3"
