"""``pezoo leaderboard compare``: one task table from two results sets, row by row, with the
board's own ranks, ≈ marks, reach and verdicts (``leaderboard.comparison``). Two small
synthetic sets, a CPU table and a "GPU retrain" of its configs (same run ids, other device),
where one row's reach differs and two rows swap ranks."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
from click.testing import CliRunner
from leaderboard_fixtures import COUNT_SAMPLES, make_record, write_jsonl

from leaderboard import claims
from leaderboard import comparison as cmp
from leaderboard.board import assemble
from leaderboard.cli import leaderboard
from leaderboard.making import READ_OFF
from leaderboard.schema import read_results

# copy, trained on 1..3, tested 4..7
HOLDS = {n: 1.0 for n in range(1, 8)}  # reach 7
SHORT = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.95, 5: 0.5, 6: 0.0, 7: 0.0}  # reach 4 (1.3× N)
LONGER = {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 0.9, 6: 0.2, 7: 0.0}  # reach 5 (1.7× N)
HIGHER = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.5, 5: 0.3, 6: 0.0, 7: 0.0}  # EM>N 0.2, reach 3 (none)
LOWER = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.4, 5: 0.2, 6: 0.0, 7: 0.0}  # EM>N 0.15, reach 3 (none)
SEEDS = (0, 1, 2)
GPU = {"exact_match_by": READ_OFF, "tf32": "on", "loop": "prefetch,readback,fused,graphs,forced,spawn"}

CPU_TABLE = {"alibi": HOLDS, "rope": SHORT, "fire": HIGHER, "t5": LOWER}
GPU_TABLE = {"alibi": HOLDS, "rope": LONGER, "fire": LOWER, "t5": HIGHER, "nope": LOWER}  # nope: only retrained


def _folder(root: Path, table: dict[str, dict[int, float]], gpu: bool) -> Path:
    how = {"device": "cuda:NVIDIA H200", "provenance": GPU} if gpu else {}
    records = [make_record(pe, "copy", s, em, train_max=3, **how) for pe, em in table.items() for s in SEEDS]
    write_jsonl(root / "results" / "smoke-20261127-000000000000.jsonl", records)
    return root / "results"


@pytest.fixture
def folders(tmp_path) -> tuple[Path, Path]:
    return _folder(tmp_path / "cpu", CPU_TABLE, gpu=False), _folder(tmp_path / "gpu", GPU_TABLE, gpu=True)


def test_each_row_is_compared_with_the_boards_own_ranks_marks_reach_and_verdicts(folders):
    a, b = (cmp.load_side(f, "copy") for f in folders)
    c = cmp.compare(a, b)
    boards = [assemble(read_results(f)) for f in folders]  # each table as the site builds it
    for side, board in zip(("a", "b"), boards, strict=True):
        [table] = board.tables
        by_label = {r.label: r for r in table.rows}
        for row in c.rows:
            mine = getattr(row, side)
            if mine is None:
                assert row.label not in by_label
                continue
            theirs = by_label[row.label]
            assert (mine.rank, mine.overlaps_above, mine.rank_text()) == (
                theirs.rank,
                theirs.overlaps_above,
                theirs.rank_text(),
            )
            assert mine.per_seed["reach"] == theirs.per_seed["reach"]
        expected = [v.shown for _, v in claims.table_verdicts(board, table)]
        assert [getattr(v, side).shown for v in c.verdicts if getattr(v, side) is not None] == expected

    ranks = {r.label: (r.a.rank if r.a else None, r.b.rank if r.b else None) for r in c.rows}
    assert ranks == {"alibi": (1, 1), "rope": (2, 2), "fire": (3, 4), "t5": (4, 3), "nope": (None, 4)}
    assert c.swaps() == [("fire", "t5")]
    reach = {r.label: (cmp._weakest(r.reach_a), cmp._weakest(r.reach_b)) for r in c.both}
    assert reach == {"alibi": (7, 7), "rope": (4, 5), "fire": (3, 3), "t5": (3, 3)}
    s = c.summary()
    assert (s["rows_in_both"], s["only_in_a"], s["only_in_b"]) == (4, [], ["nope"])
    assert (s["ranks_agree"], sorted(s["ranks_differ"])) == (2, ["fire", "t5"])
    assert (s["reach_agrees"], s["reach_differs"]) == (3, ["rope"])
    assert s["swapped"] == [["fire", "t5"]]
    assert s["verdicts_agree"] == sum(v.agrees for v in c.verdicts) and s["verdicts"] == len(c.verdicts) > 0


def test_per_length_counts_side_by_side_and_each_run_pair_has_its_absolute_difference(folders):
    c = cmp.compare(*(cmp.load_side(f, "copy") for f in folders))
    rope = next(r for r in c.rows if r.label == "rope")
    total = len(SEEDS) * COUNT_SAMPLES
    side_by_side = {n: (ca.exact, cb.exact) for n, ca, cb in rope.lengths}
    assert side_by_side[4] == (round(0.95 * total), total) and side_by_side[5] == (total // 2, round(0.9 * total))
    assert all(ca.n == cb.n == total for _, ca, cb in rope.lengths)
    nope = next(r for r in c.rows if r.label == "nope")
    assert all(ca is None and cb is not None for _, ca, cb in nope.lengths)

    # the same config and seed is the same run id on both devices: one pair per run of the CPU table
    assert len(c.pairs) == len(CPU_TABLE) * len(SEEDS) and not c.unpaired
    assert {(p.label, p.seed) for p in c.pairs} == {(pe, s) for pe in CPU_TABLE for s in SEEDS}
    for p in c.pairs:
        assert READ_OFF in p.made_b and "NVIDIA H200" in p.made_b and READ_OFF not in p.made_a
        cpu, gpu = CPU_TABLE[p.label], GPU_TABLE[p.label]
        expected = {n: abs(Fraction(str(cpu[n])) - Fraction(str(gpu[n]))) for n in range(1, 8)}
        assert dict(p.differences) == expected
        assert p.identical == (p.label == "alibi")
    assert c.summary()["run_pairs_identical"] == len(SEEDS)
    largest = c.summary()["largest_difference"]
    assert (largest["label"], largest["length"], Fraction(*largest["difference"])) == ("rope", 5, Fraction(2, 5))


def test_a_row_and_seed_under_another_config_is_named_not_paired(tmp_path):
    a = _folder(tmp_path / "cpu", {"rope": SHORT}, gpu=False)
    records = [make_record("rope", "copy", s, SHORT, train_max=3, steps=40) for s in SEEDS]  # other steps
    write_jsonl(tmp_path / "other" / "results" / "smoke-20261127-000000000000.jsonl", records)
    c = cmp.compare(cmp.load_side(a, "copy"), cmp.load_side(tmp_path / "other" / "results", "copy"))
    assert not c.pairs
    assert [(u.label, u.seed, u.keys) for u in c.unpaired] == [("rope", s, ("train.steps",)) for s in SEEDS]


def _invoke(*args: str):
    return CliRunner().invoke(leaderboard, ["compare", *args])


def test_the_command_writes_the_comparison_as_markdown_and_as_json(folders, tmp_path):
    a, b = map(str, folders)
    result = _invoke(a, b, "--task", "copy")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("# copy")
    head = next(i for i, line in enumerate(lines) if line.startswith("| encoding ") and "rank A" in line)
    columns = [c.strip() for c in lines[head].strip("|").split("|")]
    table = [[c.strip() for c in line.strip("|").split("|")] for line in lines[head + 2 : head + 7]]
    rows = {r[0]: dict(zip(columns, r, strict=True)) for r in table}
    assert (rows["fire"]["rank A"], rows["fire"]["rank B"], rows["t5"]["rank A"], rows["t5"]["rank B"]) == (
        "3",
        "4",
        "4",
        "3",
    )
    assert (rows["rope"]["weakest A"], rows["rope"]["weakest B"]) == ("1.3×", "1.7×")
    assert (rows["rope"]["made A"], rows["rope"]["made B"]) == ("CPU", "GPU")
    assert rows["nope"]["rank A"] == "absent"
    assert any(line.startswith("## Run pairs") for line in lines)

    out = tmp_path / "comparison.json"
    result = _invoke(a, b, "--task", "copy", "--format", "json", "--out", str(out))
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["summary"]["swapped"] == [["fire", "t5"]] and data["summary"]["reach_differs"] == ["rope"]
    rope = next(r for r in data["rows"] if r["label"] == "rope")
    assert (rope["a"]["weakest"], rope["b"]["weakest"], rope["reach_agrees"]) == (4, 5, False)
    assert len(data["run_pairs"]) == 12 and (data["a"]["runs"], data["b"]["runs"]) == (12, 15)
    [made] = data["b"]["made"]  # one way for all of B's runs, named with its card and exact match's method
    assert "NVIDIA H200" in made and READ_OFF in made


def test_the_command_names_a_missing_table_and_a_missing_folder(folders, tmp_path):
    a, b = map(str, folders)
    result = _invoke(a, b, "--task", "reverse")
    assert result.exit_code == 1 and "reverse" in result.output
    result = _invoke(a, b, "--task", "copy", "--preset", "board")
    assert result.exit_code == 1 and "smoke" in result.output  # the tables it has are named
    result = _invoke(a, str(tmp_path / "typo"), "--task", "copy")
    assert result.exit_code == 1 and "typo" in result.output


def test_the_report_never_goes_inside_a_folder_compared_nor_into_a_fifo(folders, tmp_path):
    # --out once overwrote a published results file of the very folder compared (then `check`:
    # "not valid JSON"), and a FIFO there blocked the write forever
    import os

    a, b = folders
    published = next(a.glob("*.jsonl"))
    before = published.read_bytes()
    for out in (published, a / "report.md", b / "sub" / "report.md"):
        result = _invoke(str(a), str(b), "--task", "copy", "--out", str(out))
        assert result.exit_code == 1 and "inside the results folder" in result.output, result.output
    assert published.read_bytes() == before and not (a / "report.md").exists() and not (b / "sub").exists()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    result = _invoke(str(a), str(b), "--task", "copy", "--out", str(fifo))
    assert result.exit_code == 1 and "FIFO" in result.output, result.output
    report = tmp_path / "report.md"  # beside the folders: written, and written again
    for _ in range(2):
        assert _invoke(str(a), str(b), "--task", "copy", "--out", str(report)).exit_code == 0
    assert report.read_text().startswith("# copy")
