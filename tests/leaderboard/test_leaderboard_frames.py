"""``leaderboard.read_results``: the results files as a DataFrame, ranked and fit-checked as on the board."""

from __future__ import annotations

import statistics

import pandas as pd
import pytest
from leaderboard_fixtures import make_record, write_jsonl

import leaderboard

FIT = 0.95  # the fit threshold, as the board states it

# task copy, trained on 1..3, tested 4..7 (the board tests' fixtures, hand-computed below)
ROPE0 = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.95, 5: 0.5, 6: 0.0, 7: 0.0}  # fits; reach 4
ROPE1 = {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 0.9, 6: 0.2, 7: 0.0}  # fits; reach 5
NOPE = {1: 1.0, 2: 1.0, 3: 0.8, 4: 0.0, 5: 0.0, 6: 0.0, 7: 0.0}  # EM<=N 0.933: does not fit
ALIBI = {n: 1.0 for n in range(1, 8)}  # fits; reach 7
FIRST_FAILS = {1: 0.5, 2: 1.0, 3: 1.0, 4: 1.0, 5: 1.0, 6: 1.0, 7: 1.0}  # best beyond N, but EM<=N 0.833
RUNS = [("rope", 0, ROPE0), ("rope", 1, ROPE1), ("nope", 0, NOPE), ("nope", 1, NOPE), ("alibi", 0, ALIBI),
        ("ape", 0, FIRST_FAILS)]  # fmt: skip


@pytest.fixture
def results(tmp_path):
    folder = tmp_path / "results"
    records = [make_record(pe, "copy", seed, em, train_max=3) for pe, seed, em in RUNS]
    write_jsonl(folder / "smoke-20261124-000000000000.jsonl", records)
    return folder


def test_one_row_per_board_row_in_rank_order_with_fit_applied(results):
    df = leaderboard.read_results(results)
    # ranked first by EM>N; the unfit follow, ordered by EM<=N (harness.records.ranking.RULE)
    assert list(df["label"]) == ["alibi", "rope", "nope", "ape"]
    assert df["rank"].tolist()[:2] == [1, 2] and df["rank"].iloc[2:].isna().all()
    assert list(df["status"]) == ["ranked", "ranked", "did not fit", "did not fit"]
    rope = df.set_index("label").loc["rope"]
    beyond = [statistics.mean(v for n, v in em.items() if n > 3) for em in (ROPE0, ROPE1)]
    assert rope["em_beyond"] == pytest.approx(statistics.mean(beyond))
    assert (rope["em_beyond_min"], rope["em_beyond_max"]) == pytest.approx((min(beyond), max(beyond)))
    assert (rope["reach"], rope["reach_min"], rope["reach_max"]) == (4.5, 4, 5)
    assert (rope["seeds"], rope["seeds_fit"]) == (2, 2)
    assert set(leaderboard.frames.ROW_COLUMNS) == set(df.columns)


def test_per_seed_fit_is_the_board_threshold_on_the_in_distribution_exact_match(results):
    df = leaderboard.read_results(results, per="seed")
    assert len(df) == len(RUNS)
    for pe, seed, em in RUNS:
        row = df[(df["pe"] == pe) & (df["seed"] == seed)].iloc[0]
        within = statistics.mean(v for n, v in em.items() if n <= 3)
        assert row["em_within"] == pytest.approx(within)
        assert bool(row["fits"]) == (within >= FIT)
    assert df.loc[df["pe"] == "ape", "rank"].isna().all()  # the best beyond N does not rank unfit
    assert (df.loc[df["pe"] == "alibi", "rank"] == 1).all()


def test_per_length_rows_carry_the_metrics_and_their_row_rank(results):
    df = leaderboard.read_results(results, per="length")
    assert len(df) == sum(len(em) for _, _, em in RUNS)
    alibi = df[df["pe"] == "alibi"]
    assert alibi["exact_match"].tolist() == [1.0] * 7 and (alibi["rank"] == 1).all() and alibi["fits"].all()
    assert set(df.loc[df["length"] > 3, "split"]) == {"test"}


def test_bad_arguments_are_value_errors(results, tmp_path):
    with pytest.raises(ValueError, match="per"):
        leaderboard.read_results(results, per="cell")
    with pytest.raises(ValueError, match="does not exist"):
        leaderboard.read_results(tmp_path / "typo")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no results files"):
        leaderboard.read_results(tmp_path / "empty")


def test_importing_the_package_does_not_load_pandas_for_it():
    import subprocess
    import sys

    code = "import leaderboard, sys; print('leaderboard.frames' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    assert isinstance(leaderboard.read_results.__doc__, str)
    assert pd is not None


def test_a_plan_next_to_the_results_leaves_rows_short_of_their_seeds_unranked(tmp_path):
    import shutil
    from pathlib import Path

    quick = Path(__file__).resolve().parents[2] / "leaderboard" / "results" / "quick-20261122-039bb641dbd2.jsonl"
    (tmp_path / "results").mkdir()
    shutil.copy(quick, tmp_path / "results")  # quick, copy, seed 0
    (tmp_path / "board.toml").write_text(
        'preset = "quick"\ntask = ["copy"]\nseeds = [0, 1, 2]\npe = ["alibi", "ape"]\n'
    )
    planned = leaderboard.read_results(tmp_path / "results").query("task == 'copy'").reset_index(drop=True)
    unplanned = leaderboard.read_results(tmp_path / "results", plans=False).query("task == 'copy'")
    unplanned = unplanned.reset_index(drop=True)
    assert list(planned["label"]) != [] and set(planned["label"]) == set(unplanned["label"])
    assert (planned["seeds_wanted"] == 3).all() and planned["rank"].isna().all()  # the table plans 3 seeds
    fit = unplanned["seeds_fit"] == unplanned["seeds"]
    assert fit.any() and (planned.set_index("label").loc[unplanned.loc[fit, "label"], "status"] == "pending").all()
    assert (unplanned.loc[fit, "status"] == "ranked").all() and unplanned.loc[fit, "rank"].notna().all()


def test_a_task_with_two_tables_ranks_each_seed_and_length_in_its_own_table(tmp_path):
    """copy tested to 7 and copy tested to 9 are two tables (as the board's copy to 40 and to
    100): per="seed" and per="length" raised pandas' MergeError ("merge keys are not unique")
    on the published board, merging ranks on (preset, task, pe) alone."""
    longer = {**ALIBI, 8: 0.0, 9: 0.0}  # alibi fails past 7 in the longer table: ranked below rope there
    rope_longer = {**ROPE1, 8: 1.0, 9: 1.0}
    folder = tmp_path / "results"
    records = [make_record(pe, "copy", seed, em, train_max=3) for pe, seed, em in RUNS]
    records += [
        make_record("alibi", "copy", 0, longer, train_max=3),
        make_record("rope", "copy", 0, rope_longer, train_max=3),
    ]
    write_jsonl(folder / "smoke-20261124-000000000000.jsonl", records)
    rows = leaderboard.read_results(folder, plans=False)
    assert sorted(rows["test_range"].unique()) == [7, 9]
    for per in ("seed", "length"):
        df = leaderboard.read_results(folder, per=per, plans=False)
        ranks = df.groupby(["test_range", "pe"])["rank"].first()
        assert (ranks.loc[(7, "alibi")], ranks.loc[(7, "rope")]) == (1, 2), per
        assert (ranks.loc[(9, "rope")], ranks.loc[(9, "alibi")]) == (1, 2), per
    assert len(leaderboard.read_results(folder, per="seed", plans=False)) == len(records)
