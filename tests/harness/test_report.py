"""The terminal leaderboard: its numbers and the ranking rule it shares with the site."""

from __future__ import annotations

import pandas as pd

from harness.report import leaderboard_tables, per_seed_summary
from leaderboard.board import summary


def frame(pe: str, seed: int, em: dict[int, float], train_max: int = 2) -> list[dict]:
    return [
        {"task": "copy", "pe": pe, "encoding": pe, "seed": seed, "train_max": train_max, "length": n,
         "split": "train" if n <= train_max else "test", "exact_match": v, "token_accuracy": v, "preset": "smoke"}
        for n, v in em.items()
    ]  # fmt: skip


def test_per_seed_numbers():
    df = pd.DataFrame(frame("a", 0, {1: 1.0, 2: 0.8, 3: 0.95, 4: 0.5, 5: 0.0}))
    row = per_seed_summary(df).iloc[0]
    assert row["in-dist"] == 0.9
    assert row["EM>N"] == (0.95 + 0.5 + 0.0) / 3
    assert row["2N"] == 0.5  # exact match at scale 2N = 4
    assert row["solved<="] == 1  # scale 2 is below 0.9


def test_terminal_and_site_rank_alike():
    # equal solved<= (2); "low" is better in distribution but worse beyond it: EM>N decides
    df = pd.DataFrame(
        frame("low", 0, {1: 1.0, 2: 1.0, 3: 0.1, 4: 0.1}) + frame("high", 0, {1: 0.95, 2: 0.95, 3: 0.6, 4: 0.2})
    )
    table = leaderboard_tables(df)["copy"]
    lines = [line for line in table.splitlines() if line.startswith("| high") or line.startswith("| low")]
    assert [line.split("|")[1].strip() for line in lines] == ["high", "low"]
    assert [row.label for row in summary(df)] == ["high", "low"]
    assert "EM>N" in table.splitlines()[1]


def test_the_heading_names_the_training_range_and_what_exact_match_scores():
    df = pd.DataFrame(frame("a", 0, {1: 1.0, 2: 1.0, 3: 0.5}))
    assert leaderboard_tables(df)["copy"].startswith("task copy (trained on scales 1..2; exact match of the decode")
    df["train_min"], df["match"] = 2, "answer"
    assert leaderboard_tables(df)["copy"].startswith("task copy (trained on scales 2..2; exact match of the final")
