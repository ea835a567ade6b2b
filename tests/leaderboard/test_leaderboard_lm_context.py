"""Effective context length on the LM section: by bits per byte and by passkey retrieval, from
constructed counts; the passkey table, and "not measured" for records without the grid."""

from __future__ import annotations

import json
import math

from click.testing import CliRunner

from harness.lm.config import lm_preset_config
from harness.lm.record import LmRecord
from harness.records.lm_metrics import LengthScore, PasskeyCell
from harness.records.ranking import RULE
from harness.tasks.lm.passkey import DEPTHS
from leaderboard.lm_board import EFFECTIVE_CONTEXT_RULE, NOT_MEASURED, passkey_rows, render_markdown
from leaderboard.lm_rows import lm_rows, passkey_holds, passkey_reach, reach, weakest_passkey

LENGTHS = (256, 512, 1024, 2048, 4096)
FLAT = (2.0, 2.0, 2.0, 2.0, 2.0)


def record(pe: str, seed: int, right=None, *, bpbs=FLAT, samples: int = 10, unreached=()) -> LmRecord:
    """A record of the lm preset with bpb ``bpbs`` and, where ``right`` is given, passkey cells
    with ``right[length][depth index]`` samples right of ``samples`` (a length in ``unreached``
    not reached); without ``right``, a record before the grid (eval.passkey 0)."""
    evals = {"passkey": samples if right else 0, "positions": False}  # no curves by position: not what is tested
    cfg = lm_preset_config("lm", pe=pe, task="lm_en", seed=seed, overrides={"eval": evals})
    scores = [
        LengthScore(m, s, b * 8192 * math.log(2), 8192)
        for m in ("windows", "tail")
        for s, b in zip(LENGTHS, bpbs, strict=True)
    ]
    cells = None
    if right:
        cells = tuple(
            PasskeyCell(s, d, 0, 0, False, "positions 0..1023 only")
            if s in unreached
            else PasskeyCell(s, d, right[s][i], samples)
            for s in LENGTHS
            for i, d in enumerate(DEPTHS)
        )
    return LmRecord(cfg, tuple(scores), 1.5, 4000, 400.0, 30.0, {"total": 1}, {"corpus_sha256": "ab" * 32}, cells)


def grid(*per_length) -> dict[int, tuple[int, ...]]:
    """Samples right per depth at each length, in LENGTHS' order."""
    return dict(zip(LENGTHS, per_length, strict=True))


ALL = (10,) * 5


def test_a_length_holds_when_every_depth_has_at_least_nine_tenths_right_on_the_counts():
    assert passkey_holds([PasskeyCell(256, d, 9, 10) for d in DEPTHS])  # exactly 0.9
    assert passkey_holds([PasskeyCell(256, 0, 90, 100), PasskeyCell(256, 50, 100, 100)])
    assert not passkey_holds([PasskeyCell(256, 0, 17, 19), PasskeyCell(256, 50, 19, 19)])  # 0.894...
    assert not passkey_holds([PasskeyCell(256, 0, 899, 1000)])
    assert not passkey_holds([PasskeyCell(256, 0, 0, 0, False, "memory")])
    assert not passkey_holds([])


def test_the_passkey_effective_context_is_the_longest_length_held_there_and_below():
    assert passkey_reach(record("alibi", 0, grid(ALL, ALL, ALL, ALL, ALL))) == 4096
    # one depth at 8 of 10 at 1024 ends it at 512, whatever holds after
    assert passkey_reach(record("alibi", 0, grid(ALL, (9,) * 5, (10, 10, 8, 10, 10), ALL, ALL))) == 512
    assert passkey_reach(record("alibi", 0, grid((10, 10, 10, 10, 8), ALL, ALL, ALL, ALL))) == 0  # not even at L
    assert passkey_reach(record("alibi", 0, grid(ALL, ALL, ALL, ALL, ALL), unreached=(2048, 4096))) == 1024
    assert passkey_reach(record("alibi", 0)) is None  # not measured: a record before the grid
    # the bits-per-byte rule, beside it, is the board's 5 % reach
    assert reach(record("alibi", 0, bpbs=(2.0, 2.1, 2.11, 2.0, 2.0))) == 512


def test_a_row_reads_its_weakest_seed_and_a_seed_without_the_grid_leaves_it_unmeasured():
    seeds = [record("alibi", 0, grid(ALL, ALL, ALL, ALL, ALL)), record("alibi", 1, grid(ALL, ALL, (0,) * 5, ALL, ALL))]
    (row,) = lm_rows(seeds)["lm_en"]
    assert row.passkey_reaches() == [4096, 512] and weakest_passkey(row) == 2
    assert row.passkey_counts(1024, 0) == (10, 20) and row.passkey_counts(256, 100) == (20, 20)
    (old,) = lm_rows([record("alibi", s) for s in range(2)])["lm_en"]
    assert old.passkey_reaches() is None and weakest_passkey(old) is None
    assert passkey_rows([old]) == [(old.shown, old.label, None, [])]


def test_the_section_shows_both_effective_contexts_and_the_grid_as_counts():
    seeds = [record("alibi", s, grid(ALL, ALL, (9, 10, 10, 10, 10), (3,) * 5, (0,) * 5)) for s in range(2)]
    text = render_markdown(seeds)
    lines = text.splitlines()
    assert EFFECTIVE_CONTEXT_RULE in lines
    head = next(i for i, line in enumerate(lines) if line.startswith("| encoding | seeds |"))
    assert lines[head].split(" | ")[2:5] == ["bpb within 5 % to (× L)", "tail mode (× L)", "passkey to (× L)"]
    assert lines[head + 2].startswith("| alibi | 2 | 16 | 16 | 4 | 2.000 |")
    depth = lines.index("| encoding | depth | " + " | ".join(f"S = {s}" for s in LENGTHS) + " |")
    assert lines[depth + 2 : depth + 4] == [
        "| alibi | 0 % | 20/20 | 20/20 | 18/20 | 6/20 | 0/20 |",
        "| alibi | 25 % | 20/20 | 20/20 | 20/20 | 6/20 | 0/20 |",
    ]


def test_records_without_the_grid_say_not_measured():
    text = render_markdown([record("alibi", s) for s in range(3)])
    row = next(line for line in text.splitlines() if line.startswith("| alibi | 3 |"))
    assert row.split(" | ")[4] == NOT_MEASURED
    assert f"Passkey retrieval: {NOT_MEASURED}" in text and "| encoding | depth |" not in text


def test_the_site_page_shows_the_grid_and_the_rule(tmp_path):
    from leaderboard_fixtures import make_record, write_jsonl

    from harness.cli import main

    results, site = tmp_path / "results", tmp_path / "site"
    write_jsonl(results / "a.jsonl", [make_record("rope", "copy", 0, {1: 1.0, 2: 1.0, 3: 0.5}, train_max=2)])
    seeds = [record("alibi", s, grid(ALL, ALL, (9, 10, 10, 10, 10), (3,) * 5, (0,) * 5)) for s in range(2)]
    (results / "lm").mkdir()
    (results / "lm" / "lm-x.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in seeds))
    done = CliRunner().invoke(main, ["leaderboard", "build", "--results", str(results), "--out", str(site)])
    assert done.exit_code == 0, done.output
    page = (site / "lm.html").read_text()
    assert "<h3>Passkey retrieval</h3>" in page and "<td>0 %</td><td>20/20</td><td>20/20</td><td>18/20</td>" in page
    assert "effective context length" in page.lower() and '<th data-type="num">passkey to (× L)</th>' in page
    assert "<td>16</td><td>16</td><td>4</td>" in page  # bpb, tail mode, passkey: × L on the weakest seed


def test_the_algorithmic_board_names_its_reach_the_effective_context_length():
    assert "reach, the row's effective context length (the largest scale L with exact match at least 0.9" in RULE
