"""Hand-drawn SVG plots: geometry, styles, determinism, well-formed XML, escaping, numbers only."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leaderboard.styles import (
    MARKERS,
    PALETTE,
    PINNED_STYLES,
    Style,
    derived_styles,
    registered_encodings,
    style_of,
    styles,
)
from leaderboard.svg import (
    VIRIDIS,
    NotANumber,
    Series,
    heat_colour,
    line_plot,
    nice_step,
    panel_plot,
    swatch,
    trajectory_plot,
)

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


OKABE_ITO = {"#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7"}


def _assert_distinct_looks(looks: dict[str, Style]) -> None:
    assert len(set(looks.values())) == len(looks)  # colour, dash and marker: no two alike
    assert len({(s.colour, s.dash) for s in looks.values()}) == len(looks)  # even without the markers
    assert all(s.marker in MARKERS and s.colour in PALETTE for s in looks.values())


def test_every_registered_encoding_has_its_own_look_without_being_listed():
    import pezoo

    names = pezoo.available()
    bases = [n for n in names if ":" not in n]
    looks = styles(names)
    _assert_distinct_looks(looks)
    for name in bases:
        assert looks[name] == style_of(name)  # the same on every board
    for name in set(bases) & set(PINNED_STYLES):
        assert looks[name] == PINNED_STYLES[name]  # the published board's looks stay
    assert set(PALETTE) <= OKABE_ITO and "#F0E442" not in PALETTE  # colour-blind safe, no pale yellow
    # randomized:<base> keeps its base's colour, on a dash-dot line with a marker no base has
    rope, wrapped = looks["rope"], looks["randomized:rope"]
    assert wrapped.colour == rope.colour and wrapped.dash not in ("", rope.dash)
    base_markers = {looks[name].marker for name in bases}
    assert all(looks[n].marker not in base_markers for n in names if n.startswith("randomized:"))


def test_a_new_encoding_gets_a_look_of_its_own_from_its_name():
    """An encoding added to the registry is drawn without an entry for it anywhere: a free
    slot its name hashes to, kept when a later name joins, distinct from every other."""
    zoo = [n for n in registered_encodings() if not n.startswith("toy_")]  # the registry as it is
    before = derived_styles(zoo)
    grown = derived_styles([*zoo, "toy_linear"])
    assert {k: v for k, v in grown.items() if k != "toy_linear"} == before  # nobody else moves
    toy = grown["toy_linear"]
    assert toy not in before.values() and toy not in PINNED_STYLES.values()
    assert derived_styles([*zoo, "toy_linear", "toy_zz_later"])["toy_linear"] == toy
    assert style_of("toy_linear", [*zoo, "toy_linear"]) == toy
    looks = styles(["toy_linear", "randomized:toy_linear", "rope"], [*zoo, "toy_linear"])
    assert looks["toy_linear"] == toy and looks["rope"] == PINNED_STYLES["rope"]
    wrapped = looks["randomized:toy_linear"]
    assert wrapped.colour == toy.colour and wrapped.dash != toy.dash and wrapped.marker == "triangle-down"
    many = [*zoo, *(f"toy_{i:02d}" for i in range(40))]  # more new names than free slots
    crowd = derived_styles(many)
    _assert_distinct_looks(crowd)
    assert derived_styles(list(reversed(many))) == crowd


def test_a_board_of_a_few_encodings_draws_them_as_the_whole_zoo_does():
    assert styles(["rope", "alibi"]) == {"rope": PINNED_STYLES["rope"], "alibi": PINNED_STYLES["alibi"]}
    assert styles(["alibi"])["alibi"] == styles(registered_encodings())["alibi"]


def test_unknown_names_get_a_deterministic_style_outside_the_table():
    labels = [f"plugin{i:02d}" for i in range(40)]
    a, b = styles(labels), styles(reversed(labels))
    assert a == b and len(set(a.values())) == 40
    assert not set(a.values()) & set(derived_styles(registered_encodings()).values())  # never an encoding's look
    assert style_of("plugin07") == style_of("plugin07") and all(s.colour in PALETTE for s in a.values())


def test_a_run_with_options_beside_the_plain_encoding_gets_another_look():
    looks = styles(["rope", 'rope {"base": 500}'])
    assert looks["rope"] == PINNED_STYLES["rope"] and looks['rope {"base": 500}'] != looks["rope"]
    alone = styles(['prism {"copy": true}'])  # without the plain one it keeps the encoding's look
    assert alone['prism {"copy": true}'] == PINNED_STYLES["prism"]


def _channel_luminance(c: int) -> float:
    c = c / 255
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def _contrast(a: str, b: str) -> float:
    lum = [
        0.2126 * _channel_luminance(int(h[1:3], 16))
        + 0.7152 * _channel_luminance(int(h[3:5], 16))
        + 0.0722 * _channel_luminance(int(h[5:7], 16))
        for h in (a, b)
    ]
    hi, lo = max(lum), min(lum)
    return (hi + 0.05) / (lo + 0.05)


def test_heat_colours_follow_viridis_and_keep_the_text_readable():
    assert heat_colour(0.0)[0] == VIRIDIS[0] and heat_colour(1.0)[0] == VIRIDIS[-1]
    assert heat_colour(0.5)[0] == VIRIDIS[5] and heat_colour(-3)[0] == VIRIDIS[0] and heat_colour(7)[0] == VIRIDIS[-1]
    # halfway between two stops: the channel means
    lo, hi = VIRIDIS[2], VIRIDIS[3]
    mid = heat_colour(0.25)[0]
    for k in (1, 3, 5):
        assert abs(int(mid[k : k + 2], 16) - (int(lo[k : k + 2], 16) + int(hi[k : k + 2], 16)) / 2) <= 0.5
    for v in [i / 20 for i in range(21)]:
        background, text = heat_colour(v)
        assert text in ("#000000", "#FFFFFF") and _contrast(background, text) >= 4.5, (v, background, text)
    assert heat_colour(0.0)[1] == "#FFFFFF" and heat_colour(1.0)[1] == "#000000"
    with pytest.raises(NotANumber):
        heat_colour(math.nan)


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
    circles = [(float(c.attrib["cx"]), float(c.attrib["cy"])) for c in groups[0].iter(f"{NS}circle")]  # markers
    assert len(circles) == 10 and all(b[0] > a[0] for a, b in pairwise(circles))
    # equal steps in n are equal steps in px
    gaps = {round(b[0] - a[0], 1) for a, b in pairwise(circles)}
    assert max(gaps) - min(gaps) <= 0.2
    # y = 1 and y = 0 land on the 1.00 and 0.00 grid lines
    grid = {
        round(float(ln.attrib["y1"]), 1) for ln in root.iter(f"{NS}line") if ln.attrib.get("y1") == ln.attrib.get("y2")
    }
    ticks = {t.text: float(t.attrib["y"]) - 4.5 for t in root.iter(f"{NS}text") if t.text in ("0", "1")}
    assert abs(circles[0][1] - ticks["1"]) <= 0.1 and abs(circles[-1][1] - ticks["0"]) <= 0.1
    assert round(circles[0][1], 1) in grid and round(circles[-1][1], 1) in grid
    # the training boundary sits halfway between n = 5 and n = 6
    [boundary] = [ln for ln in root.iter(f"{NS}line") if ln.attrib.get("class") == "train-boundary"]
    assert abs(float(boundary.attrib["x1"]) - (circles[4][0] + circles[5][0]) / 2) <= 0.1
    # the label sits above the plotting area (y above the 1.00 line): it never covers data
    [label] = [t for t in root.iter(f"{NS}text") if t.attrib.get("class") == "train-label"]
    assert label.text == "trained on n ≤ 5" and float(label.attrib["y"]) < ticks["1"]
    # one band (rope has a spread, nope none)
    assert len([p for p in root.iter(f"{NS}polygon") if p.attrib.get("class") == "band"]) == 1
    assert not [g for g in root.iter(f"{NS}g") if g.attrib.get("class") == "legend"]  # the page's HTML legend


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


HOSTILE = '"><script>window.__pwned=1</script><img src=x onerror=alert(1)>'


def test_every_text_in_a_plot_is_escaped():
    s = Series(HOSTILE, Style("#332288", "2 2"), (1.0, 2.0), (1.0, 0.5), (1.0, 0.25), (1.0, 0.75))
    svg = line_plot([s], title=HOSTILE, x_label=HOSTILE, y_label=HOSTILE, boundary=1.5, boundary_label=HOSTILE)
    root = ET.fromstring(svg)  # still one well-formed element
    tags = {el.tag.removeprefix(NS) for el in root.iter()}
    assert tags <= {"svg", "title", "rect", "text", "line", "polygon", "polyline", "circle", "g"}, tags
    assert not [a for el in root.iter() for a in el.attrib if a.startswith("on")]
    series = [g.attrib["data-encoding"] for g in root.iter(f"{NS}g") if g.attrib.get("class") == "series"]
    assert root.attrib["aria-label"] == HOSTILE and series == [HOSTILE]
    texts = [t.text for t in root.iter(f"{NS}text")]
    assert texts.count(HOSTILE) == 3  # both axis titles, the boundary label (the title is <title> and aria-label)
    assert [t.text for t in root.iter(f"{NS}title")] == [HOSTILE, HOSTILE]  # the plot's and the series'
    panel = ET.fromstring(panel_plot(s, [s], title=HOSTILE, boundary=1.5))
    assert {el.tag.removeprefix(NS) for el in panel.iter()} <= tags and panel.attrib["aria-label"] == HOSTILE
    traj = ET.fromstring(trajectory_plot([(HOSTILE, [0, 1, 2])], title=HOSTILE, x_label="i", y_label="m"))
    assert {el.tag.removeprefix(NS) for el in traj.iter()} <= tags and traj.attrib["aria-label"] == HOSTILE
    swatch_root = ET.fromstring(swatch(Style(HOSTILE, HOSTILE)))  # even a style is an attribute value, escaped
    [line] = swatch_root.iter(f"{NS}line")
    assert line.attrib["stroke"] == HOSTILE and line.attrib["stroke-dasharray"] == HOSTILE


@pytest.mark.parametrize("bad", ["3", None, True, math.nan, math.inf, -math.inf, [1.0], "1e3<script>"])
def test_a_value_that_is_not_a_finite_number_is_refused(bad):
    good = (1.0, 2.0)
    for field in range(4):
        values = [good, good, good, good]
        values[field] = (1.0, bad)
        with pytest.raises(NotANumber, match="must be a finite number"):
            line_plot([Series("a", Style("#000000", ""), *values)], title="t", x_label="x", y_label="y")
    with pytest.raises(NotANumber, match=r"line 'h0 c0'\[2\] must be a finite number"):
        trajectory_plot([("h0 c0", [0, 1, bad])], title="t", x_label="x", y_label="y")
    if bad is not None:  # None: no boundary
        with pytest.raises(NotANumber):
            line_plot([], title="t", x_label="x", y_label="y", boundary=bad)


def test_numbers_are_written_as_numbers():
    from leaderboard.text import coordinate, general, integer, whole_points

    assert whole_points([(12.5, 3.49), (-0.4, 99.6)]) == "12,3 0,100"  # round half to even
    with pytest.raises(NotANumber):
        whole_points([(1.0, math.nan)])

    assert coordinate(-0.04) == "0.0" and coordinate(12.25) == "12.2" and coordinate(3) == "3.0"
    assert general(0.5) == "0.5" and general(10.0) == "10" and integer(480) == "480"
    for bad in ("480", 480.0, True):
        with pytest.raises(NotANumber):
            integer(bad)


def test_a_run_with_options_keeps_its_encodings_colour():
    """Labels spell options in braces (``rope{base=500}``, ``prism{paper}``); reading the
    encoding as the text before a space, they were unknown names and got hashed colours,
    rope{base=500} PRISM's green. Alone on a board such a row looks like its encoding; beside
    the plain encoding (or a variant) it keeps the colour and takes another line."""
    assert style_of("prism{paper}") == PINNED_STYLES["prism"]
    assert style_of("rope{base=500}") == PINNED_STYLES["rope"]
    looks = styles(["rope", "rope{base=500}", "rope → linear×4 (same weights)", "prism{paper}"])
    assert looks["rope"] == PINNED_STYLES["rope"] and looks["prism{paper}"] == PINNED_STYLES["prism"]
    for variant in ("rope{base=500}", "rope → linear×4 (same weights)"):
        assert looks[variant].colour == PINNED_STYLES["rope"].colour
    assert len(set(looks.values())) == len(looks)
