"""The terminal leaderboard: its numbers and the ranking rule it shares with the site."""

from __future__ import annotations

from fractions import Fraction

import pandas as pd

from harness.commands.report import LEGEND, leaderboard_tables, per_seed_summary
from leaderboard.rows import summary


def frame(pe: str, seed: int, em: dict[int, float], train_max: int = 2) -> list[dict]:
    return [
        {"task": "copy", "pe": pe, "encoding": pe, "seed": seed, "train_max": train_max, "length": n,
         "split": "train" if n <= train_max else "test", "exact_match": v, "token_accuracy": v, "preset": "smoke"}
        for n, v in em.items()
    ]  # fmt: skip


def test_per_seed_numbers():
    df = pd.DataFrame(frame("a", 0, {1: 1.0, 2: 0.8, 3: 0.95, 4: 0.5, 5: 0.0}))
    row = per_seed_summary(df).iloc[0]
    assert row["in-dist"] == Fraction(9, 10)  # exact: (1.0 + 0.8) / 2
    assert row["EM>N"] == Fraction(29, 60)  # (0.95 + 0.5 + 0.0) / 3, exactly
    assert row["2N"] == 0.5  # exact match at scale 2N = 4
    assert row["reach"] == 3  # counted from N+1 = 3: the slip at scale 2 does not matter
    assert not row["fits"]  # EM<=N 0.9 < 0.95


def test_terminal_and_site_rank_alike():
    # both fit; "low" is better in distribution but worse beyond it: EM>N decides.
    # "slip" extrapolates best but does not fit: listed last, unranked.
    df = pd.DataFrame(
        frame("low", 0, {1: 1.0, 2: 1.0, 3: 0.1, 4: 0.1})
        + frame("high", 0, {1: 0.95, 2: 0.95, 3: 0.6, 4: 0.2})
        + frame("slip", 0, {1: 0.5, 2: 1.0, 3: 1.0, 4: 1.0})
    )
    table = leaderboard_tables(df)["copy"]
    lines = table.splitlines()[3:]
    assert [line.split("|")[2].strip() for line in lines] == ["high", "low", "slip"]
    assert [line.split("|")[1].strip() for line in lines] == ["1", "2", "-"]
    assert "did not fit" in lines[2]
    assert [(row.label, row.rank) for row in summary(df)] == [("high", 1), ("low", 2), ("slip", None)]
    assert "EM>2" in table.splitlines()[1] and "reach" in table.splitlines()[1]
    assert "min–max" in LEGEND


def test_several_seeds_show_their_range_not_a_t_interval():
    df = pd.DataFrame(frame("a", 0, {1: 1.0, 2: 1.0, 3: 0.1}) + frame("a", 1, {1: 1.0, 2: 1.0, 3: 0.9}))
    table = leaderboard_tables(df)["copy"]
    assert "0.50 (0.10–0.90)" in table and "±" not in table


def test_the_heading_names_the_training_range_and_what_exact_match_scores():
    df = pd.DataFrame(frame("a", 0, {1: 1.0, 2: 1.0, 3: 0.5}))
    assert leaderboard_tables(df)["copy"].startswith("task copy (trained on scales 1..2; exact match of the decode")
    df["train_min"], df["match"] = 2, "answer"
    assert leaderboard_tables(df)["copy"].startswith("task copy (trained on scales 2..2; exact match of the final")


def test_runs_of_one_encoding_with_other_options_are_other_rows_named_by_their_spec():
    df = pd.DataFrame(frame("prism", 0, {1: 1.0, 2: 1.0, 3: 0.2}) + frame("prism", 0, {1: 1.0, 2: 1.0, 3: 0.9}))
    df["pe_label"] = ["prism"] * 3 + ["prism{paper}"] * 3  # as harness.records.frames.load names them
    table = leaderboard_tables(df)["copy"]
    names = [line.split("|")[2].strip() for line in table.splitlines()[3:]]
    assert names == ["prism{paper}", "prism"]
    assert list(per_seed_summary(df)["pe"]) == ["prism", "prism{paper}"]


def test_a_sweep_table_holds_back_a_row_short_of_its_planned_seeds_as_the_board_does():
    """bench --sweep planned two seeds; one of "lucky"'s is not finished (deferred by a time
    limit, failed): its one seed is not ranked against two seeds' means, on the terminal
    as on the board."""
    df = pd.DataFrame(
        frame("steady", 0, {1: 1.0, 2: 1.0, 3: 0.5})
        + frame("steady", 1, {1: 1.0, 2: 1.0, 3: 0.5})
        + frame("lucky", 0, {1: 1.0, 2: 1.0, 3: 1.0})
    )
    lines = leaderboard_tables(df, seeds_wanted={"copy": 2})["copy"].splitlines()[3:]
    assert [line.split("|")[2].strip() for line in lines] == ["steady", "lucky"]
    assert [line.split("|")[1].strip() for line in lines] == ["1", "-"]
    assert "not ranked yet (1 of 2 seeds)" in lines[1]
    assert [(row.label, row.rank) for row in summary(df, seeds_wanted=2)] == [("steady", 1), ("lucky", None)]
    # without a plan (pezoo results over a store) what is there is ranked
    assert leaderboard_tables(df)["copy"].splitlines()[3].split("|")[2].strip() == "lucky"
