"""A board still being filled says so: the sweep files next to the results plan its runs."""

from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner

from harness.cli import main
from leaderboard.plans import Planned, filled, plans_of, read_plans
from leaderboard.site import build

ROOT = Path(__file__).resolve().parents[2]
QUICK = ROOT / "leaderboard" / "results" / "quick-20261122-039bb641dbd2.jsonl"  # quick, copy, seed 0


def test_filled_counts_the_published_planned_runs_and_their_seeds():
    plan = Planned(frozenset({"a", "b", "c", "d"}), (0, 1, 2))
    got = filled(plan, {"a": 0, "b": 0, "x": 1})  # x is published but not planned
    assert (got.done, got.planned, got.seeds_done, got.seeds_planned, got.complete) == (2, 4, (0,), (0, 1, 2), False)
    assert filled(plan, dict.fromkeys("abcd", 0)).complete
    by_seed = Planned(frozenset({"a", "b", "c"}), (0, 1), {"a": 0, "b": 0, "c": 1})
    assert filled(by_seed, {"a": 0, "c": 1}).by_seed == ((0, 1, 2), (1, 1, 1))


def test_plans_group_by_preset_and_task():
    plans = plans_of([("p", "copy", 0, "a", "x.toml"), ("p", "copy", 1, "b", "x.toml"), ("p", "rev", 0, "c", "y.toml")])
    assert plans.sources == {"p": ("x.toml", "y.toml")}
    assert plans.presets["p"].run_ids == {"a", "b", "c"}
    assert plans.tables[("p", "copy")].seeds == (0, 1)


def _board(tmp_path: Path, sweep: str) -> str:
    (tmp_path / "results").mkdir()
    shutil.copy(QUICK, tmp_path / "results")
    (tmp_path / "board.toml").write_text(sweep)
    build(tmp_path / "results", tmp_path / "site", readme=tmp_path / "README.md")
    return (tmp_path / "README.md").read_text() + (tmp_path / "site" / "tasks" / "copy.html").read_text()


def test_a_board_with_runs_still_to_come_is_marked_provisional(tmp_path):
    text = _board(tmp_path, 'preset = "quick"\ntask = ["copy"]\nseeds = [0, 1, 2]\npe = ["alibi", "ape"]\n')
    assert "Still being filled: 2 of the 6 runs that leaderboard/board.toml plans are published" in text
    assert "seed 0: 2 of 2, seed 1: 0 of 2, seed 2: 0 of 2" in text  # per seed: what is in, what is to come
    assert "Provisional: 2 of 6 planned runs" in text  # the README's copy table
    assert "provisional: 2 of 6 planned runs" in text  # the site's copy table


def test_a_complete_plan_adds_nothing(tmp_path):
    text = _board(tmp_path, 'preset = "quick"\ntask = ["copy"]\nseeds = [0]\npe = ["alibi", "ape"]\n')
    assert "Still being filled" not in text and " of 6 planned runs" not in text and " of 2 planned runs" not in text


def test_an_unreadable_sweep_file_is_reported_and_the_board_is_still_built(tmp_path):
    (tmp_path / "results").mkdir()
    shutil.copy(QUICK, tmp_path / "results")
    (tmp_path / "board.toml").write_text('preset = "quick"\ntask = ["copy"\n')  # not TOML
    assert read_plans(tmp_path).problems[0].startswith("board.toml: ")
    out = CliRunner().invoke(
        main, ["leaderboard", "build", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "site")]
    )
    assert out.exit_code == 0, out.output
    assert "note: sweep file board.toml:" in out.output and "not valid TOML" in out.output
    assert "Still being filled" not in (tmp_path / "README.md").read_text()


def test_check_says_how_much_of_each_plan_is_published(tmp_path):
    (tmp_path / "results").mkdir()
    shutil.copy(QUICK, tmp_path / "results")
    (tmp_path / "board.toml").write_text('preset = "quick"\ntask = ["copy"]\nseeds = [0, 1]\npe = ["alibi", "ape"]\n')
    out = CliRunner().invoke(main, ["leaderboard", "check", "--results", str(tmp_path / "results")])
    assert out.exit_code == 0, out.output
    assert "plan board.toml (preset quick): 2 of 4 runs published, 2 still to run" in out.output
