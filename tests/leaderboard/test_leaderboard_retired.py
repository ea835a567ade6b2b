"""A table superseded by a later protocol's complete table leaves the board, says so, and
keeps its runs published; a retirement that does not hold is refused before anything is written."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import main
from leaderboard.plans import plans_of, read_plans
from leaderboard.retired import RetiredFileError, parse_retirements, read_retirements
from leaderboard.schema import read_results

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "leaderboard" / "results"
QUICK = RESULTS / "quick-20261122-039bb641dbd2.jsonl"  # quick: 8 encodings on copy (seed 0), 3 on reverse
BOARD_APE = RESULTS / "board-20261123-caca685ac4e6.jsonl"  # board preset: ape on copy, seed 0
BOARD_ALIBI = RESULTS / "board-20261123-285a0298e0ff.jsonl"  # board preset: alibi on copy, seed 0

BOARD_PLAN = 'preset = "board"\ntask = ["copy"]\nseeds = [0]\npe = ["ape", "alibi"]\n'
RETIRE_COPY = (
    '[[retired]]\npreset = "quick"\ntask = "copy"\nsuperseded_by = "board"\n'
    'why = "3000 steps rank learning speed, not extrapolation"\n'
)


def _folder(tmp_path: Path, *files: Path, plan: str = BOARD_PLAN, retired: str | None = RETIRE_COPY) -> Path:
    results = tmp_path / "results"
    results.mkdir()
    for f in files:
        shutil.copy(f, results)
    (tmp_path / "board.toml").write_text(plan)
    if retired is not None:
        (tmp_path / "retired.toml").write_text(retired)
    return results


def _folder_of(*files: Path) -> Path:
    import tempfile

    results = Path(tempfile.mkdtemp()) / "results"
    results.mkdir()
    for f in files:
        shutil.copy(f, results)
    return results


def _invoke(*args: str):
    return CliRunner().invoke(main, ["leaderboard", *args])


def test_a_superseded_table_leaves_the_board_and_the_board_says_so(tmp_path):
    results = _folder(tmp_path, QUICK, BOARD_APE, BOARD_ALIBI)
    out = _invoke("build", "--results", str(results), "--out", str(tmp_path / "site"))
    assert out.exit_code == 0, out.output
    readme = (tmp_path / "README.md").read_text()
    assert "## Left the board" in readme
    assert (
        "The quick table for copy (8 runs, seed 0, 3000 training steps) has left the board: the board preset's "
        "copy table (10000 steps) is complete. Why: 3000 steps rank learning speed, not extrapolation." in readme
    )
    sections = {part.split("\n", 1)[0]: part for part in readme.split("\n## ")}
    assert "Preset **quick**" not in sections["copy"] and "Preset **board**" in sections["copy"]
    assert "Preset **quick**" in sections["reverse"]
    # the quick table still shown says it is an earlier protocol on its way out, and no claim is tested on it
    assert (
        "**An earlier protocol (3000 steps): the board preset's table for reverse (not started) replaces it when "
        "complete; not tested against the papers' claims.**" in sections["reverse"]
    )
    claims = sections["What the papers claim, and what this board shows"]
    assert "reverse, preset quick" not in claims and "copy, preset board" in claims
    # the quick banner counts only what is still on the board: the 6 reverse runs
    assert "A CPU quick-preset board:** 6 runs" in readme
    copy_page = (tmp_path / "site" / "tasks" / "copy.html").read_text()
    assert "Left the board:" in copy_page and 'data-preset="quick"' not in copy_page.split("<h1>", 1)[1]
    assert "Left the board:" not in (tmp_path / "site" / "tasks" / "reverse.html").read_text()
    index = (tmp_path / "site" / "index.html").read_text()
    assert "Left the board:" in index
    # with the quick filter on, copy says where its quick table went, not that it has none
    assert '<p class="muted" data-preset="quick">The quick table for this task has left the board' in index
    assert "No quick runs of this task" not in index
    # nothing is taken out of the results files: the runs stay published, and check says which are retired
    assert len(read_results(results)) == 16
    checked = _invoke("check", "--results", str(results))
    assert checked.exit_code == 0, checked.output
    assert "16 run(s): valid" in checked.output
    assert "retired: preset quick on copy (8 run(s), published, left off the board)" in checked.output


def test_a_retired_table_leaves_its_presets_plan(tmp_path):
    # quick.toml plans nope on copy and reverse at seeds 0 and 1; the results hold 3 of them
    quick_plan = 'preset = "quick"\ntask = ["copy", "reverse"]\nseeds = [0, 1]\npe = ["nope"]\n'
    for retired, expected in ((None, "Still being filled: 3 of the 4 runs"), (RETIRE_COPY, None)):
        folder = tmp_path / ("kept" if retired is None else "retired")
        folder.mkdir()
        results = _folder(folder, QUICK, BOARD_APE, BOARD_ALIBI, retired=retired)
        (folder / "quick.toml").write_text(quick_plan)
        out = _invoke("build", "--results", str(results), "--out", str(folder / "site"))
        assert out.exit_code == 0, out.output
        readme = (folder / "README.md").read_text()
        if expected:
            assert expected in readme
        else:  # copy's planned run (seed 1) left with the table; reverse's two are both in
            assert "Still being filled" not in readme


@pytest.mark.parametrize(
    ("files", "retired", "message"),
    [
        (
            (QUICK, BOARD_APE),  # alibi's board run is missing: the successor is not complete
            RETIRE_COPY,
            "but 'board' on 'copy' has 1 of its 2 planned runs published: retire the old table once the new one",
        ),
        ((QUICK, BOARD_APE, BOARD_ALIBI), RETIRE_COPY.replace('"copy"', '"cpy"'), "but no published run is one"),
        (
            (QUICK, BOARD_APE, BOARD_ALIBI),
            RETIRE_COPY.replace('"copy"', '"reverse"'),
            "but no sweep file plans 'board' on 'reverse'",
        ),
        ((QUICK, BOARD_APE, BOARD_ALIBI), RETIRE_COPY.replace("why", "reason"), "unknown key(s) reason; missing why"),
        ((QUICK, BOARD_APE, BOARD_ALIBI), RETIRE_COPY.replace('"board"', '"quick"'), "cannot supersede itself"),
        ((QUICK, BOARD_APE, BOARD_ALIBI), RETIRE_COPY + RETIRE_COPY, "is retired or withdrawn twice"),
        ((QUICK, BOARD_APE, BOARD_ALIBI), RETIRE_COPY.replace("task =", "task ="[:-1]), "not valid TOML"),
    ],
)
def test_a_retirement_that_does_not_hold_is_refused_before_anything_is_written(tmp_path, files, retired, message):
    results = _folder(tmp_path, *files, retired=retired)
    (tmp_path / "README.md").write_text("<!-- pezoo leaderboard build: generated from the results files -->\nold\n")
    out = _invoke("build", "--results", str(results), "--out", str(tmp_path / "site"))
    assert out.exit_code == 1 and message in out.output, out.output
    assert not (tmp_path / "site").exists() and (tmp_path / "README.md").read_text().endswith("old\n")
    checked = _invoke("check", "--results", str(results))
    assert checked.exit_code == 1 and message in checked.output, checked.output


WITHDRAW_REVERSE = (
    '[[withdrawn]]\npreset = "quick"\ntask = "reverse"\n'
    'why = "the board protocol on reverse costs more than this machine has"\n'
)


def test_a_withdrawn_table_leaves_the_board_with_nothing_replacing_it(tmp_path):
    # no sweep file plans reverse under another preset: the quick reverse table leaves alone
    results = _folder(tmp_path, QUICK, BOARD_APE, BOARD_ALIBI, retired=RETIRE_COPY + WITHDRAW_REVERSE)
    out = _invoke("build", "--results", str(results), "--out", str(tmp_path / "site"))
    assert out.exit_code == 0, out.output
    readme = (tmp_path / "README.md").read_text()
    assert (
        "The quick table for reverse (6 runs, seeds 0, 1, 3000 training steps) has left the board: no table replaces "
        "it. Why: the board protocol on reverse costs more than this machine has. Its runs stay in the results "
        "files." in readme
    )
    assert "## reverse" not in readme and "Preset **quick**" not in readme
    assert not (tmp_path / "site" / "tasks" / "reverse.html").exists()
    index = (tmp_path / "site" / "index.html").read_text()
    assert "the quick table for reverse" in index
    checked = _invoke("check", "--results", str(results))
    assert checked.exit_code == 0, checked.output
    assert "16 run(s): valid" in checked.output
    assert (
        "retired: preset quick on reverse (6 run(s), published, left off the board), withdrawn: no table replaces it"
        in checked.output
    )


def test_a_withdrawal_is_refused_while_a_sweep_file_plans_the_task(tmp_path):
    # the board plans copy: quick's copy table is superseded once that is complete, not withdrawn
    withdraw_copy = WITHDRAW_REVERSE.replace('"reverse"', '"copy"')
    results = _folder(tmp_path, QUICK, BOARD_APE, BOARD_ALIBI, retired=withdraw_copy)
    out = _invoke("build", "--results", str(results), "--out", str(tmp_path / "site"))
    message = "withdraws 'quick' on 'copy' with no table replacing it, but a sweep file plans 'board' on 'copy'"
    assert out.exit_code == 1 and message in out.output, out.output
    assert not (tmp_path / "site").exists()


def test_a_withdrawal_is_refused_while_another_presets_runs_on_the_task_are_published(tmp_path):
    # the board's copy runs exported without a plan beside them: the board would show their
    # table (unmarked, since nothing says what is planned), so "no table replaces it" is false
    withdraw_copy = WITHDRAW_REVERSE.replace('"reverse"', '"copy"')
    results = _folder(
        tmp_path,
        QUICK,
        BOARD_APE,
        BOARD_ALIBI,
        plan='preset = "quick"\ntask = ["copy"]\nseeds = [0]\npe = ["ape"]\n',
        retired=withdraw_copy,
    )
    out = _invoke("build", "--results", str(results), "--out", str(tmp_path / "site"))
    message = "withdraws 'quick' on 'copy' with no table replacing it, but 'board' has published runs on 'copy'"
    assert out.exit_code == 1 and message in out.output, out.output
    assert not (tmp_path / "site").exists()


def test_a_withdrawal_is_not_taken_for_its_presets_successor():
    # listed before the retirement, the withdrawal (no successor) must not hide that the
    # quick preset's tables are being replaced by the board's
    from leaderboard import board as bd

    records = read_results(_folder_of(QUICK, BOARD_APE, BOARD_ALIBI))
    plans = plans_of([("board", "copy", 0, r.run_id, "board.toml") for r in records if r.data["preset"] == "board"])
    withdraw, retire = parse_retirements(
        {
            "withdrawn": [{"preset": "quick", "task": "reverse", "why": "w"}],
            "retired": [{"preset": "quick", "task": "copy", "superseded_by": "board", "why": "r"}],
        }
    )[::-1]
    assert withdraw.superseded_by is None and retire.superseded_by == "board"
    assert bd.assemble(records, plans, [withdraw, retire]).successor("quick") == "board"


def test_retired_toml_is_not_read_as_a_sweep_file(tmp_path):
    (tmp_path / "retired.toml").write_text(RETIRE_COPY)
    plans = read_plans(tmp_path)
    assert plans.problems == () and plans.presets == {}
    assert read_retirements(tmp_path)[0].superseded_by == "board"
    assert read_retirements(tmp_path / "elsewhere") == ()


def test_plans_without_a_table_drop_its_runs_from_the_preset():
    plans = plans_of(
        [("q", "copy", 0, "a", "x.toml"), ("q", "copy", 1, "b", "x.toml"), ("q", "rev", 0, "c", "x.toml")]
    ).without([("q", "copy")])
    assert set(plans.tables) == {("q", "rev")}
    assert plans.presets["q"].run_ids == {"c"} and plans.presets["q"].seeds == (0,)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"retire": []}, "only [[retired]], [[retired_row]] and [[withdrawn]] tables belong here (found retire)"),
        ({"retired": {"preset": "q"}}, "must be an array of tables"),
        ({"retired": ["q"]}, "not a table"),
        ({"retired": [{"preset": "q", "task": " ", "superseded_by": "b", "why": "w"}]}, "task must be non-empty"),
        ({"retired": [{"preset": 1, "task": "t", "superseded_by": "b", "why": "w"}]}, "preset must be non-empty"),
        (
            {"withdrawn": [{"preset": "q", "task": "t", "superseded_by": "b", "why": "w"}]},
            "unknown key(s) superseded_by (the keys are preset, task, why)",
        ),
        (
            {
                "retired": [{"preset": "q", "task": "t", "superseded_by": "b", "why": "w"}],
                "withdrawn": [{"preset": "q", "task": "t", "why": "w"}],
            },
            "preset 'q' on 't' is retired or withdrawn twice",
        ),
    ],
)
def test_malformed_retirements_are_named(data, message):
    with pytest.raises(RetiredFileError, match=re.escape(message)):
        parse_retirements(data)


def test_a_hostile_reason_is_shown_as_text(tmp_path):
    import json

    from hostile_inputs import PAYLOADS, injected

    why = " ".join(PAYLOADS)
    results = _folder(
        tmp_path, QUICK, BOARD_APE, BOARD_ALIBI, retired=RETIRE_COPY.split("why")[0] + f"why = {json.dumps(why)}\n"
    )
    out = _invoke("build", "--results", str(results), "--out", str(tmp_path / "site"))
    assert out.exit_code == 0, out.output
    for page in ("index.html", "tasks/copy.html"):
        html = (tmp_path / "site" / page).read_text()
        assert "Left the board:" in html and injected(html) == [], page
    readme = (tmp_path / "README.md").read_text()
    line = next(x for x in readme.splitlines() if x.startswith("- The quick table for copy"))
    assert "<script>" not in line and "<img" not in line and "&lt;script&gt;" in line
    assert "[x](javascript:" not in line and r"\[x\](javascript:" in line  # a literal bracket, not a link


# -- a row replaced by a corrected run ---------------------------------------------------

ROPE = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.5, 5: 0.0}
DYN22 = {"scaling": {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 22}}
DYN24 = {"scaling": {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 24}}
OLD_ROW = "rope → dynamic×4 L=22 (same weights)"
NEW_ROW = "rope → dynamic×4 L=24 (same weights)"


def _variant_records(old: list[tuple[str, int]], new: list[tuple[str, int]]):
    from leaderboard_fixtures import make_record

    from leaderboard.schema import Record

    out = []
    for options, runs in ((DYN22, old), (DYN24, new)):
        for task, seed in runs:
            data = make_record("rope", task, seed, ROPE, train_max=3)
            data["config"]["eval_pe_options"] = options
            data["run_id"] = f"{len(out):016x}"
            out.append(Record(data, Path("fixture.jsonl"), len(out) + 1))
    return out


def _row(retired: str = OLD_ROW, by: str = NEW_ROW) -> dict:
    return {
        "retired_row": [
            {"preset": "smoke", "row": retired, "superseded_by": by, "why": "L = 22 is shorter than the sequences"}
        ]
    }


def test_a_replaced_row_leaves_the_board_and_says_for_what():
    from leaderboard import board as bd

    runs = [("copy", 0), ("copy", 1), ("reverse", 0)]
    board = bd.assemble(_variant_records(runs, runs), retirements=parse_retirements(_row()))
    assert {row.label for t in board.tables for row in t.rows} == {NEW_ROW}
    assert len(board.records) == 3
    (gone,) = board.retired
    assert (gone.runs, gone.tasks, gone.seeds) == (3, ("copy", "reverse"), (0, 1))
    assert gone.summary() == f"the smoke row {OLD_ROW}"
    assert gone.sentence() == (
        f"The smoke row {OLD_ROW} (3 runs on copy, reverse, seeds 0, 1) has left the board for {NEW_ROW}, "
        "published on the same tasks and seeds. Why: L = 22 is shorter than the sequences. "
        "Its runs stay in the results files."
    )
    assert board.retired_on("reverse") == [gone] and board.retired_on("addition") == []


@pytest.mark.parametrize(
    ("new", "data", "message"),
    [
        # the successor is not yet published on reverse seed 0: the old row stays until it is
        ([("copy", 0), ("copy", 1)], _row(), "which is not published on reverse seed 0: retire the old row once"),
        ([("copy", 0), ("copy", 1), ("reverse", 0)], _row(retired="rope → dynamic×4 L=2"), "(a typo?)"),
    ],
)
def test_a_row_retirement_that_does_not_hold_is_refused(new, data, message):
    from leaderboard import board as bd
    from leaderboard.records import BoardError

    records = _variant_records([("copy", 0), ("copy", 1), ("reverse", 0)], new)
    with pytest.raises(BoardError, match=re.escape(message)):
        bd.assemble(records, retirements=parse_retirements(data))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_row(by=OLD_ROW), "cannot supersede itself"),
        ({"retired_row": _row()["retired_row"] * 2}, "is retired twice"),
        ({"retired_row": [{"preset": "smoke", "task": "copy", "superseded_by": "b", "why": "w"}]}, "missing row"),
    ],
)
def test_malformed_row_retirements_are_named(data, message):
    with pytest.raises(RetiredFileError, match=re.escape(message)):
        parse_retirements(data)


def test_check_names_published_runs_that_no_plan_or_retirement_accounts_for(tmp_path):
    # board.toml plans ape only; alibi's published board run is neither planned nor retired
    results = _folder(
        tmp_path, BOARD_APE, BOARD_ALIBI, plan=BOARD_PLAN.replace('["ape", "alibi"]', '["ape"]'), retired=None
    )
    checked = _invoke("check", "--results", str(results))
    assert checked.exit_code == 0, checked.output
    assert "no sweep file plans and no retirement covers (still on the board): alibi on copy" in checked.output
    (tmp_path / "board.toml").write_text(BOARD_PLAN)
    assert "no sweep file plans" not in _invoke("check", "--results", str(results)).output
