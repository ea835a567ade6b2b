"""The LM section's small multiples: panels by family, each row's look, curves by position."""

from __future__ import annotations

import math
import re

import pezoo
from harness.lm.config import lm_preset_config
from harness.lm.record import LmRecord
from harness.records.lm_metrics import LengthScore
from harness.records.lm_positions import PositionCurve
from leaderboard.lm_board import lm_pages, render_markdown
from leaderboard.lm_curves import curves_svg, family_panels, position_curve, positions_svg
from leaderboard.lm_rows import LmRow, lm_rows
from leaderboard.styles import styles

LENGTHS = (256, 512, 1024, 2048, 4096)
REGION_BYTES = 8192


def record(pe: str, seed: int, bits, *, positions: bool = True) -> LmRecord:
    """A record whose windows-mode loss at position p is ``bits(p)`` bits (the same at every
    length), kept by position where ``positions``; its tail scores 2 bits per byte."""
    evals = {"passkey": 0, "positions": positions}
    cfg = lm_preset_config("lm", pe=pe, task="lm_en", seed=seed, overrides={"eval": evals})
    scores = []
    for s in LENGTHS:
        windows = REGION_BYTES // s
        curve = PositionCurve.of([windows * bits(p) * math.log(2) for p in range(s)], windows)
        nats, n = curve.total()
        scores.append(LengthScore("windows", s, nats, n, curve=curve if positions else None))
    scores += [LengthScore("tail", s, 2 * 1024 * math.log(2), 1024) for s in LENGTHS]
    return LmRecord(cfg, tuple(scores), 1.5, 4000, 400.0, 30.0, {"total": 1}, {"corpus_sha256": "ab" * 32})


def flat(p: int) -> float:
    return 2.0


def breaks_at_l(p: int) -> float:
    return 2.0 if p < 256 else 2.0 + math.log2(p / 255)


def test_panels_group_rows_by_the_family_pezoo_reads_from_each_encoding():
    pes = ("alibi", "kerple_log", "rope", "rope@{scaling={rope_type=ntk,factor=16.0}}", "ape", "nope")
    rows = lm_rows([record(pe, 0, flat, positions=False) for pe in pes])["lm_en"]
    panels = family_panels(rows)
    assert [f for f, _ in panels] == [f for f in pezoo.FAMILIES if f in {pezoo.family_of(r.config.pe) for r in rows}]
    for family, members in panels:
        assert members and all(pezoo.family_of(r.config.pe) == family for r in members)
    by = {r.label: f for f, members in panels for r in members}
    assert by["rope"] == by["rope@{scaling={factor=16.0,rope_type=ntk}}"]  # a variant in its encoding's family
    assert len(set(by.values())) == 4

    svg = str(curves_svg("lm_en", rows))
    assert svg.count('<g class="panel"') == 4 and svg.count('<g class="series"') == len(pes)
    looks = styles([r.label for r in rows])
    for row in rows:  # each row in its board-wide look (colour and dash), with markers
        part = re.search(rf'<g class="series" data-encoding="{re.escape(row.label)}">(.*?)</g>', svg, re.S)
        assert part is not None and f'stroke="{looks[row.label].colour}"' in part.group(1)
        assert (f'stroke-dasharray="{looks[row.label].dash}"' in part.group(1)) == bool(looks[row.label].dash)
        assert part.group(1).count('fill="' + looks[row.label].colour) == len(LENGTHS)  # a marker per length
    assert len({looks[r.label] for r in rows}) == len(rows)


def test_curves_by_position_pool_the_seeds_counts_and_say_what_was_not_measured():
    rows = lm_rows(
        [record("alibi", s, flat) for s in range(2)]
        + [record("rope", s, breaks_at_l) for s in range(2)]
        + [record("ape", s, flat) for s in range(2)]
    )["lm_en"]
    by = {r.label: r for r in rows}
    got = position_curve(by["rope"])
    assert got is not None and got[0] == 4096  # the longest length measured
    points = got[1]
    assert [round(2**x) for x, _ in points] == [1, 2, 4, 5, 8, 11, 16, 22, 32, 45, 64, 90, 128, 181, 256, 362, 512, 724,
                                                 1024, 1448, 2048, 2896, 4096]  # fmt: skip
    assert all(abs(y - 2.0) < 1e-12 for x, y in points if round(2**x) <= 256)  # flat up to L
    expected = sum(breaks_at_l(p) for p in range(2896, 4096)) / (4096 - 2896)
    assert abs(points[-1][1] - expected) < 1e-9  # the bucket's summed nats over its summed bytes
    svg = str(positions_svg("lm_en", rows))
    assert svg.count('<g class="series"') == 3 and svg.count('<g class="panel"') == 3
    # a table holds one protocol (leaderboard.lm_results), but a row without curves would say so
    unmeasured = LmRow("lm_en", "ape", (record("ape", 0, flat, positions=False),))
    assert position_curve(unmeasured) is None
    svg = str(positions_svg("lm_en", [by["rope"], unmeasured]))
    assert svg.count('<g class="series"') == 1 and "ape: not measured" in svg
    text = render_markdown([r for row in rows for r in row.records])
    assert "![bits per byte by position within the window on lm_en, at S = 4,096, one panel per family]" in text
    assert "lm-lm_en-positions.svg" in lm_pages([r for row in rows for r in row.records])


def test_without_curves_by_position_the_figure_is_left_out():
    rows = lm_rows([record("alibi", 0, flat, positions=False)])["lm_en"]
    assert positions_svg("lm_en", rows) is None
    assert set(lm_pages(list(rows[0].records))) == {"lm.md", "lm-lm_en.svg"}
