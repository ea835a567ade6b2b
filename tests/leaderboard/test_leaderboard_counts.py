"""Exact at every boundary (issue 51): metrics are counts, and the board's fractions,
thresholds, means and roundings are computed from them with one rule (half up).

The first tests are arithmetic on hand-made numbers; the rest pin the cells of the
committed board that the float32 means got wrong, and check that the prose about the
board (README.md, docs/leaderboard.md) states the numbers the results give.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.records import counts, ranking
from harness.records.recount import recount
from leaderboard import overview as ov
from leaderboard.board import Board, Table, assemble
from leaderboard.plans import filled, published_cells, read_plans, seeds_by_run
from leaderboard.reach import past_n_sentence, reaches, times_n, unplanned_splits
from leaderboard.retired import read_retirements
from leaderboard.rows import cell_text
from leaderboard.schema import Record, checksum, migrate_line, read_results, to_line, validate_record

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "leaderboard" / "results"
FLOAT32_NINE_TENTHS = 0.8999999761581421
"""What a float32 mean of 90 ones and 10 zeros reads: the value schema 1 stored."""


# -- the arithmetic -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "digits", "text"),
    [
        (Fraction(37, 200), 2, "0.19"),  # half up; binary rounding of 0.185 gives 0.18
        (Fraction(9, 10), 2, "0.90"),
        (Fraction(949, 1000), 2, "0.95"),
        (Fraction(1, 8), 2, "0.13"),  # round-half-even would give 0.12
        (Fraction(203, 10), 0, "20"),
        (Fraction(585, 2), 0, "293"),
        (Fraction(292, 3), 1, "97.3"),
    ],
)
def test_fixed_rounds_half_up_on_the_exact_value(value, digits, text):
    assert counts.fixed(value, digits) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(Fraction(94, 10), "9.4"), (Fraction(25, 20), "1.3"), (Fraction(4), "4"), (Fraction(1, 20), "0.05")],
)
def test_significant_rounds_half_up(value, text):
    assert counts.significant(value) == text  # format(1.25, ".2g") is "1.2"


def test_a_float32_mean_is_recovered_as_its_count_and_a_non_count_is_refused():
    assert counts.recover(FLOAT32_NINE_TENTHS, 100) == 90
    with pytest.raises(ValueError, match="not a count"):
        counts.recover(0.905, 100)


def test_reach_and_fit_compare_exactly_at_the_threshold():
    per_length = pd.Series({11: Fraction(90, 100), 12: Fraction(89, 100)})
    assert ranking.reach_beyond(per_length, 10) == 11  # 90 of 100 is 0.9: exact match ≥ 0.9 holds
    assert ranking.fits(Fraction(95, 100)) and not ranking.fits(Fraction(949, 1000))


def test_a_numpy_float_is_read_by_its_value_as_a_python_float_is():
    """A pandas mean is NumPy's float64, whose repr under NumPy 2 is ``np.float64(0.9)``
    (benchmarks/protocol_study.py passes one to ``fits``)."""
    assert counts.exact(np.float64(0.9)) == counts.exact(0.9) == Fraction(9, 10)
    assert ranking.fits(pd.Series([0.95, 0.95]).mean())


def test_shown_and_the_rank_order_use_half_up():
    assert ranking.shown(Fraction(37, 200)) == Fraction(19, 100)
    per_seed = pd.DataFrame(
        {
            "pe": ["a", "b"],
            "in-dist": [Fraction(1), Fraction(1)],
            "EM>N": [Fraction(37, 200), Fraction(19, 100)],
            "reach": [11, 12],
            "tok-acc>N": [Fraction(1, 2), Fraction(1, 2)],
        }
    )
    # as shown both read 0.19, so reach decides: b above a (with float rounding a read 0.18)
    assert [(s.label, s.rank) for s in ranking.standings(per_seed)] == [("b", 1), ("a", 2)]


def test_a_schema_1_line_migrates_to_counts_keeping_its_run_id():
    line = next(p for p in sorted(RESULTS.glob("board-*.jsonl"))).read_text().splitlines()[0]
    new = json.loads(line)
    old = {**new, "schema_version": 1}
    old["metrics"] = [
        {k: v for k, v in m.items() if k not in ("exact", "tokens", "tokens_right")}
        | {"exact_match": m["exact"] / m["n"], "token_accuracy": m["tokens_right"] / m["tokens"]}
        for m in new["metrics"]
    ]
    old["metrics"][0]["exact_match"] = FLOAT32_NINE_TENTHS  # 90 of 100, as float32 stored it
    old["checksum"] = checksum(old)
    assert validate_record(old) and "migrate" in validate_record(old)[0]  # refused, naming the command
    migrated = json.loads(migrate_line(to_line(old)))
    assert migrated["run_id"] == new["run_id"] and migrated["schema_version"] == 2
    assert migrated["metrics"][0]["exact"] == 90 and migrated["metrics"][1:] == new["metrics"][1:]
    assert validate_record(migrated) == []
    edited = {**old, "final_loss": 0.5}  # checksum no longer matches: never migrated into a valid line
    with pytest.raises(ValueError, match="edited"):
        migrate_line(to_line(edited))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested more than"),  # was a RecursionError traceback
        ('{"schema_version": 1, "x": NaN}', "NaN is not allowed"),  # was json's "Out of range float values"
        ('{"schema_version": 1, "x": 1e999}', "1e999 is out of range"),
    ],
)
def test_migrate_reads_a_line_as_check_does(line, message):
    with pytest.raises(ValueError, match=message):
        migrate_line(line)


def test_recount_refuses_a_value_that_is_no_count():
    config = {"task": "copy", "seed": 0, "eval": {"samples": 100}}
    metric = {"split": "test", "length": 11, "token_length": 26.0, "n": 100}
    assert recount({**metric, "exact_match": FLOAT32_NINE_TENTHS, "token_accuracy": 0.5}, config)["exact"] == 90
    with pytest.raises(ValueError, match="not a count"):
        recount({**metric, "exact_match": 0.12345, "token_accuracy": 0.5}, config)


# -- the committed board's boundary cells -----------------------------------------------


@pytest.fixture(scope="module")
def records() -> list[Record]:
    """The committed board preset's records (the quick tables have left the board)."""
    return [r for r in read_results(RESULTS) if r.data["preset"] == "board"]


@pytest.fixture(scope="module")
def board(records) -> Board:
    retired = [r for r in read_retirements(RESULTS.parent) if r.preset == "board"]
    return assemble(records, read_plans(RESULTS.parent), retired)


def _table(board: Board, task: str, tested_to: int = 40) -> Table:
    return next(t for t in board.tables if (t.preset, t.task, t.tested_to) == ("board", task, tested_to))


def _row(table: Table, label: str):
    return next(r for r in table.rows if r.label == label)


def _milestones(table: Table, label: str) -> dict[float, int]:
    reach = next(r for r in reaches(table) if r.row.label == label)
    return dict(reach.counts)


def test_copy_to_100_prism_reaches_98_and_its_weakest_seed_9_4x(board):
    table = _table(board, "copy", 100)
    prism = _row(table, "prism{paper}")
    assert cell_text(prism, "reach") == "98 (94–100)"  # was 97.3 (92–100): 90 of 100 read below 0.9
    assert times_n(min(prism.per_seed["reach"]), table) == "9.4×"
    assert "prism{paper} 9.4× N (94)" in (past_n_sentence(table) or "")


def test_hard_alibi_on_copy(board):
    to_40, to_100 = _table(board, "copy", 40), _table(board, "copy", 100)
    assert cell_text(_row(to_40, "hard_alibi"), "reach").startswith("21.9 ")  # was 20.8
    assert _milestones(to_40, "hard_alibi")[2] == 6  # was 4 of 8: seed 4 reaches 22, not 18
    assert (_milestones(to_100, "hard_alibi")[2], _milestones(to_100, "hard_alibi")[3]) == (6, 1)  # was 4 and 0


def test_reverse_learned_prf_ranks_above_hard_alibi(board):
    table = _table(board, "reverse")
    learned_prf, hard_alibi = _row(table, "learned_prf"), _row(table, "hard_alibi")
    assert cell_text(learned_prf, "reach").startswith("11.7 ")  # was 11.3
    above, below = learned_prf.rank_text(), hard_alibi.rank_text()  # ≈9 and ≈10 before the frontier's rows
    # were ≈10 and ≈9; the frontier's reverse rows, as they land, may move both down together
    assert above.startswith("≈") and below.startswith("≈") and int(above[1:]) < int(below[1:])
    assert _milestones(table, "learned_prf_sh")[1.5] == 5  # was 4 of 8


def test_stack_manipulation_nope_and_learned_prf_sh(board):
    table = _table(board, "stack_manipulation")
    nope, sh = _row(table, "nope"), _row(table, "learned_prf_sh")
    assert min(nope.per_seed["reach"]) == 13 and times_n(13, table) == "1.3×"  # was 1.2× (seeds 1.2–1.3×)
    assert (past_n_sentence(table) or "").startswith(
        "How far past N = 10 exact match stays ≥ 0.9 on every seed: nope 1.3× N (13);"
    )
    assert sum(sh.per_seed["em_beyond"]) / len(sh.seeds) == Fraction(37, 200)
    assert cell_text(sh, "em_beyond").startswith("0.19") and sh.rank == 3  # 0.185 read 0.18 and ranked 5th


def test_the_grid_never_puts_0_95_beside_did_not_fit(board):
    table = _table(board, "odds_first")
    abacus = _row(table, "abacus")
    assert not abacus.fitted and min(abacus.per_seed["em_within"]) < Fraction(95, 100)
    title = ov.cell(table, "odds_first", abacus).title
    assert "did not fit" in title and "0.949" in title and "0.95–" not in title


def test_the_pages_say_what_the_rank_mark_means():
    pages = [p.read_text() for p in (RESULTS.parent / "site").rglob("*.html")]
    assert pages and not any("range over seeds meets" in p for p in pages)
    assert any('title="the exact permutation test over seeds does not put it below' in p for p in pages)


# -- the prose about the board ---------------------------------------------------------


def test_every_row_whose_seeds_split_has_the_rules_seeds_planned(board):
    # the rule every page quotes (8 seeds for a row whose EM>N range exceeds 0.3), kept by the
    # committed sweep files: a row that splits when its third seed is published gets seeds 3-7
    # planned in the same commit
    assert unplanned_splits(board) == []


def test_readme_and_docs_state_the_boards_numbers(records, board, tmp_path):
    # the numbers are board.toml's, the board's first plan, complete; the frontier's rows
    # (board-frontier.toml) are being filled beside it, and the board's pages count those
    shutil.copy(RESULTS.parent / "board.toml", tmp_path / "board.toml")
    plan = read_plans(tmp_path).presets["board"]
    f = filled(plan, seeds_by_run(records), published_cells(records))
    assert f.complete
    done = max(r.data["timings"]["finished_at"] for r in records if r.run_id in plan.run_ids)
    day = dt.datetime.fromtimestamp(done, dt.timezone.utc).strftime("%-d %B %Y")
    assert plan.row_of is not None
    labels = {label for label, _ in plan.row_of.values()}
    # board.toml's own tables: a later plan's table being filled (a new task's first seeds)
    # has rows of the same labels with fewer seeds, which these sentences do not count
    tasks = {r.data["task"] for r in records if r.run_id in plan.run_ids}
    per_row: dict[tuple[str, int, str], int] = {}
    for table in board.tables:
        if table.preset == "board" and table.task in tasks:
            for row in table.rows:
                if row.label in labels:
                    per_row[(table.task, table.tested_to, row.label)] = len(row.seeds)
    few, most = min(v for v in per_row.values() if v > 1), max(per_row.values())
    readme = (REPO / "README.md").read_text()
    said = re.search(r"all (\d+) runs of `leaderboard/board.toml`, (\d+) seeds of every\s+encoding", readme)
    assert said and (int(said[1]), int(said[2])) == (f.planned, few)
    assert re.search(rf"and {most} on the rows whose seeds\s+split, complete since {day}", readme)
    docs = (REPO / "docs" / "leaderboard.md").read_text()
    assert f"is the board, complete since {day}" in docs
    assert re.search(rf"\): {f.planned} runs\s", docs)
    assert re.search(rf"{most} seeds on the rows whose seeds split", docs)
