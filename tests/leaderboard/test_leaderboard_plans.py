"""A board still being filled says so: the sweep files next to the results plan its runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from harness.cli import main
from leaderboard.plans import Planned, cell, filled, plans_of, read_plans
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


def test_plans_name_the_sweep_files_with_runs_left():
    plans = plans_of([("p", "copy", 0, "a", "x.toml"), ("p", "copy", 1, "b", "y.toml"), ("p", "rev", 0, "c", "y.toml"),
                      ("p", "rev", 1, "d", "x.toml"), ("p", "rev", 1, "d", "y.toml")])  # fmt: skip
    assert plans.files_of["d"] == ("x.toml", "y.toml")
    assert plans.unfinished("p", ["a", "b", "c", "d"]) == ()
    assert plans.unfinished("p", ["a", "d"]) == ("y.toml",)  # x.toml's runs are all in
    assert plans.unfinished("p", ["b"]) == ("x.toml", "y.toml")
    assert plans.unfinished("other", []) == ()


def test_a_board_still_being_filled_names_each_sweep_file_with_runs_left(tmp_path):
    (tmp_path / "more.toml").write_text('preset = "quick"\ntask = ["copy"]\nseeds = [1]\npe = ["alibi"]\n')
    text = _board(tmp_path, 'preset = "quick"\ntask = ["copy"]\nseeds = [0]\npe = ["alibi", "ape"]\n')
    # board.toml is complete: the sentence sends the reader to the file whose runs are still to come
    assert "that leaderboard/board.toml, leaderboard/more.toml plans are published" in text
    assert "pezoo sweep plan leaderboard/more.toml lists the rest" in text and "board.toml lists" not in text
    (tmp_path / "later.toml").write_text('preset = "quick"\ntask = ["copy"]\nseeds = [2]\npe = ["ape"]\n')
    shutil.rmtree(tmp_path / "results")
    text = _board(tmp_path, 'preset = "quick"\ntask = ["copy"]\nseeds = [0]\npe = ["alibi", "ape"]\n')
    assert "pezoo sweep plan leaderboard/later.toml and pezoo sweep plan leaderboard/more.toml list the rest" in text


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
    # build says it too, as its --help promises (it printed only the pages it wrote)
    built = CliRunner().invoke(
        main, ["leaderboard", "build", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "site")]
    )
    assert built.exit_code == 0 and "plan board.toml (preset quick): 2 of 4 runs published" in built.output


def _config(pe: str = "randomized", task: str = "copy", seed: int = 0, preset: str = "smoke", **changes) -> dict:
    from dataclasses import replace

    from harness.config import preset_config

    return replace(preset_config(preset, pe=pe, task=task, seed=seed), **changes).to_dict()


def test_a_planned_rerun_of_a_published_cell_is_counted_apart():
    """A planned run that a published run matches in all but the encoding's options (its
    cell), such as randomized PE stored before ``draw`` existed, is a re-run still to come:
    the table is covered, not complete. Another preset, task, seed, training or
    evaluation is another cell."""
    new = _config()
    stored = {**new, "pe_options": {"randomize_eval": True}}
    assert cell(stored) == cell(new)
    plan = Planned(frozenset({"a", "b"}), (0,), {"a": 0, "b": 0}, {"a": cell(new), "b": cell(_config("rope"))})
    got = filled(plan, {"b": 0, "old": 0}, frozenset({cell(stored), cell(_config("rope"))}))
    assert (got.done, got.rerunning, got.complete, got.covered) == (1, 1, False, True)
    for other in (
        _config(preset="quick"),
        _config(task="reverse"),
        _config(seed=1),
        {**new, "train": {**new["train"], "steps": new["train"]["steps"] + 1}},
        {**new, "eval_pe_options": {"randomize_eval": False}},
    ):
        assert cell(other) != cell(new)
        assert not filled(plan, {"b": 0}, frozenset({cell({**other, "pe_options": {}})})).covered


def test_a_published_run_awaiting_its_corrected_rerun_stays_and_the_board_says_so(tmp_path):
    """quick, reverse, seed 0: randomized was stored before ``draw`` existed (one draw per
    padded batch); planning plain ``randomized{randomize_eval=false}`` now asks for a re-run
    with a draw per row length, while the stored run stands in, its departure shown."""
    (tmp_path / "results").mkdir()
    shutil.copy(ROOT / "leaderboard" / "results" / "quick-20261122-6e6bc7a73d24.jsonl", tmp_path / "results")
    sweep = 'preset = "quick"\ntask = ["reverse"]\nseeds = [0]\npe = ["randomized{randomize_eval=false}"]\n'
    (tmp_path / "board.toml").write_text(sweep)
    build(tmp_path / "results", tmp_path / "site", readme=tmp_path / "README.md")
    readme = (tmp_path / "README.md").read_text()
    assert "Still being filled: 0 of the 1 run that leaderboard/board.toml plans are published" in readme
    assert "1 re-run of published runs under corrected options to come" in readme
    assert "randomized:ape{draw=per_batch,randomize_eval=false}" in readme
    assert "trained on one position draw per batch, for its longest row" in readme
    checked = CliRunner().invoke(main, ["leaderboard", "check", "--results", str(tmp_path / "results")])
    assert checked.exit_code == 0, checked.output
    assert "1 still to run (1 of them re-runs of published runs under corrected options)" in checked.output
    assert "no sweep file plans" in checked.output  # the file's other encodings are strays, not it
    assert "randomized" not in checked.output.split("no sweep file plans")[1].split("\n")[0]


def test_check_and_build_name_a_row_whose_seeds_split_beyond_what_its_plan_gives(tmp_path):
    # hard_alibi's copy runs split (its EM>N over seeds ranges 0.20-0.94); a plan giving it 3 seeds
    # breaks the board's 8-seed rule, and both commands say which seeds to add
    # only the published files holding a hard_alibi copy run: the whole board's build takes a minute
    (tmp_path / "results").mkdir()
    for path in (ROOT / "leaderboard" / "results").glob("*.jsonl"):
        configs = [json.loads(line)["config"] for line in path.read_text().splitlines() if line.strip()]
        if any(c["pe"] == "hard_alibi" and c["task"] == "copy" for c in configs):
            shutil.copy(path, tmp_path / "results" / path.name)
    (tmp_path / "board.toml").write_text('preset = "board"\ntask = ["copy"]\nseeds = [0, 1, 2]\npe = ["hard_alibi"]\n')
    for command in (["check"], ["build", "--out", str(tmp_path / "site")]):
        out = CliRunner().invoke(main, ["leaderboard", *command, "--results", str(tmp_path / "results")])
        assert out.exit_code == 0, out.output
        assert "note: copy (preset board, tested to 40): hard_alibi's seeds split" in out.output
        assert "its plan gives it 3; the rule gives it 8: plan seeds 3-7" in out.output
