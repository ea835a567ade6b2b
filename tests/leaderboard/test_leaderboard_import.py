"""`pezoo leaderboard import`: published runs back into a store, so a sweep skips them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from leaderboard_fixtures import RUNS, TINY, run_config, run_tiny_bench, unfinish

from harness.cli import main
from harness.execution.run import execute
from harness.records.store import Store
from harness.sweeps.sweep import load_sweep
from leaderboard.export import export, import_results
from leaderboard.schema import ResultsError, read_results, to_published

pytestmark = pytest.mark.slow  # uses the real tiny bench (a few seconds, once per session)

REPO = Path(__file__).resolve().parents[2]


def _import(results: Path, store: Path) -> str:
    result = CliRunner().invoke(main, ["leaderboard", "import", "--results", str(results), "--store", str(store)])
    assert result.exit_code == 0, result.output
    return result.output


def test_import_then_export_gives_back_the_same_files(smoke_results, tmp_path):
    store = tmp_path / "new.sqlite"
    assert f"imported {len(RUNS)} run(s)" in _import(smoke_results, store)
    out = tmp_path / "again"
    export(store, out)
    before = {p.name: p.read_bytes() for p in smoke_results.glob("*.jsonl")}
    assert {p.name: p.read_bytes() for p in out.glob("*.jsonl")} == before


def test_imported_runs_are_finished_so_bench_does_not_train_them(smoke_results, tmp_path):
    store = tmp_path / "new.sqlite"
    _import(smoke_results, store)
    cfg = run_config(*RUNS[0])
    with Store(store) as s:
        assert s.status(cfg.run_id()) == "finished"
        before = s.run(cfg.run_id())
        # the real bench path: execute() reports the run as cached and trains nothing
        outcome = execute(cfg, s, torch.device("cpu"))
        assert outcome.status == "cached" and outcome.run_id == cfg.run_id()
        assert s.run(cfg.run_id()) == before and len(s.runs()) == len(RUNS)


def test_a_second_import_adds_nothing_and_finished_runs_are_kept(smoke_store, smoke_results, tmp_path):
    store = tmp_path / "store.sqlite"
    shutil.copy(smoke_store, store)
    with Store(store) as s:
        kept = {r["run_id"]: (r["finished_at"], s.metrics(r["run_id"])) for r in s.runs()}
    output = _import(smoke_results, store)
    assert "imported 0 run(s)" in output and f"{len(RUNS)} run(s) were already in the store" in output
    with Store(store) as s:
        assert {r["run_id"]: (r["finished_at"], s.metrics(r["run_id"])) for r in s.runs()} == kept


def test_import_names_the_runs_whose_record_in_the_store_differs(smoke_store, smoke_results, tmp_path):
    # the third probe: "left as they are", with no word that the store's record is not the published one
    store = tmp_path / "store.sqlite"
    shutil.copy(smoke_store, store)
    with Store(store) as s:
        changed = s.runs()[0]["run_id"]
        s._conn.execute("UPDATE runs SET final_loss = final_loss + 1 WHERE run_id=?", (changed,))
    output = _import(smoke_results, store)
    assert f"{len(RUNS)} run(s) were already in the store: left as they are" in output
    assert "the store's record of 1 of them is not the published one" in output and changed in output
    assert "not the published one" not in _import(smoke_results, tmp_path / "fresh.sqlite")


def test_an_unfinished_attempt_is_replaced_by_the_published_run(smoke_store, smoke_results, tmp_path):
    store = tmp_path / "store.sqlite"
    shutil.copy(smoke_store, store)
    with Store(store) as s:
        victim = s.runs()[0]["run_id"]
    unfinish(store, victim)
    summary = import_results(smoke_results, store)
    assert (summary.imported, summary.already_in_store) == (1, len(RUNS) - 1)
    published = {r.run_id: r.data for r in read_results(smoke_results)}
    with Store(store) as s:
        run = s.run(victim)
        assert run["status"] == "finished" and run["error"] is None
        assert to_published(s.record(victim)) == published[victim]


def test_diagnostics_come_along(tmp_path):
    store = tmp_path / "store.sqlite"
    [prism_id] = run_tiny_bench(store, [("smoke", "prism", "copy", 0, TINY)])
    results = tmp_path / "results"
    assert export(store, results).diagnostics == 1
    new = tmp_path / "new.sqlite"
    assert "(1 with diagnostics)" in _import(results, new)
    with Store(store) as a, Store(new) as b:
        assert b.diagnostics(prism_id) == a.diagnostics(prism_id) is not None


def test_a_malformed_results_file_imports_nothing(smoke_results, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(smoke_results, results)
    victim = sorted(results.glob("*.jsonl"))[-1]
    victim.write_text(victim.read_text() + "{not json\n")
    store = tmp_path / "store.sqlite"
    with pytest.raises(ResultsError, match=str(victim)):
        import_results(results, store)
    result = CliRunner().invoke(main, ["leaderboard", "import", "--results", str(results), "--store", str(store)])
    assert result.exit_code == 1 and str(victim) in result.output
    with Store(store) as s:
        assert s.runs() == []


@pytest.mark.parametrize(
    ("sweep", "preset"), [("leaderboard/board-quick.toml", "quick"), ("leaderboard/board.toml", "board")]
)
def test_the_committed_board_round_trips_and_its_sweep_sees_the_published_runs(tmp_path, monkeypatch, sweep, preset):
    results = REPO / "leaderboard" / "results"
    published = list(read_results(results)) if any(results.glob("*.jsonl")) else []
    published = [r for r in published if r.data["preset"] == preset]
    if not published:
        pytest.skip(f"no committed {preset} results yet")
    monkeypatch.chdir(REPO)
    # a published run the sweep no longer plans is one whose row was retired for a
    # corrected run (leaderboard/retired.toml): it is imported, but is not the sweep's
    planned_ids = {cfg.run_id() for cfg in load_sweep(REPO / sweep).configs()}
    planned = [r for r in published if r.run_id in planned_ids]
    assert planned
    store = tmp_path / "board.sqlite"
    plan_args = ["sweep", "plan", sweep, "--store", str(store)]
    before = CliRunner().invoke(main, plan_args)
    assert before.exit_code == 0, before.output
    assert f"{len(planned)} of the runs to train are published under leaderboard/results" in before.output
    import_results(results, store)
    with Store(store) as s:
        for rec in published:  # every published record is rebuilt exactly, checksum included
            assert to_published(s.record(rec.run_id)) == json.loads(json.dumps(rec.data))
    after = CliRunner().invoke(main, plan_args)
    assert after.exit_code == 0, after.output
    assert f" {len(planned)} done" in after.output and "are published" not in after.output
