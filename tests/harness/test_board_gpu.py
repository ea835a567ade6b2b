"""benchmarks/board_gpu.py, a board sweep on a lent GPU for a fixed time: its dry run trains a
two-run sweep on CPU, exports what finished and says how many; a second call resumes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmark_scripts import load


def _module():
    return load("board_gpu")


@pytest.mark.slow
def test_dry_run_trains_exports_and_counts(tmp_path):
    bg = _module()
    out, work, published = tmp_path / "out", tmp_path / "work", tmp_path / "published"
    published.mkdir()
    common = ["--dry-run", "--budget", "300", "--published", str(published)]
    assert bg.main([*common, "--out", str(out), "--work", str(work)]) == 0
    summary = json.loads((out / "board-gpu-summary.json").read_text())
    assert summary["code"] == 0 and not summary["stopped"]
    assert summary["finished_in_this_call"] == 2 and summary["finished_now"] == 2
    assert summary["stacked_in_this_call"] == 0  # a CPU pool: no stacks
    assert summary["export"]["code"] == 0 and summary["export"]["files"]
    # a second call on the same machine finds them done
    assert bg.main([*common, "--out", str(tmp_path / "again"), "--work", str(work)]) == 0
    again = json.loads((tmp_path / "again" / "board-gpu-summary.json").read_text())
    assert again["finished_before"] == 2 and again["finished_in_this_call"] == 0

    # what came back is committed (published); a fresh machine's call imports it and trains nothing
    # again, and brings back no copy of it
    for path in (out / "results").rglob("*.jsonl"):
        (published / path.relative_to(out / "results")).parent.mkdir(parents=True, exist_ok=True)
        path.replace(published / path.relative_to(out / "results"))
    fresh = tmp_path / "fresh"
    assert bg.main([*common, "--out", str(fresh), "--work", str(tmp_path / "work2")]) == 0
    later = json.loads((fresh / "board-gpu-summary.json").read_text())
    assert later["imported"]["code"] == 0 and later["finished_before"] == 2, later
    assert later["finished_in_this_call"] == 0 and later["export"]["files"] == [], later
    assert sorted(p.name for p in published.rglob("*.jsonl")) == summary["export"]["files"]  # left as it was


def test_a_sweep_past_its_budget_is_interrupted_and_loses_nothing_finished(tmp_path):
    bg = _module()
    store = tmp_path / "s.sqlite"
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(bg.DRY_SWEEP.replace('"smoke"', '"quick"'))  # far longer than the budget
    run = bg.sweep_for(8.0, sweep, store, "cpu", [])
    assert run["stopped"] and run["wall_s"] < 70
    assert bg.finished(store)["runs"] == 0


@pytest.mark.slow
def test_an_lm_sweep_dry_runs_from_a_corpus_snapshot_and_comes_back_under_lm(tmp_path, monkeypatch):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent / "lm"))
    from lm_fixtures import tiny_corpus

    from harness.tasks.lm import corpora

    corpora.save_snapshot(tiny_corpus("en"), tmp_path / "snapshots")
    monkeypatch.setenv(corpora.SNAPSHOT_ENV, str(tmp_path / "snapshots"))  # the subprocess reads it
    sweep = tmp_path / "lm.toml"
    sweep.write_text(
        'preset = "lm_smoke"\ntask = ["lm_en"]\npe = ["alibi", "rope@{scaling={rope_type=linear,factor=2.0}}"]\n'
        'seeds = [0]\nsteps = 4\n'
    )
    bg = _module()
    out = tmp_path / "out"
    assert bg.main(["--dry-run", "--sweep", str(sweep), "--budget", "300", "--out", str(out),
                    "--work", str(tmp_path / "work"), "--fresh"]) == 0  # fmt: skip
    summary = json.loads((out / "board-gpu-summary.json").read_text())
    assert summary["code"] == 0 and summary["finished_in_this_call"] == 3, summary  # alibi, rope and its variant
    assert summary["export"]["code"] == 0 and all(f.startswith("lm/") for f in summary["export"]["files"])



def test_a_published_folder_that_does_not_read_back_costs_no_result(tmp_path):
    """The published runs are read twice (imported first, deduplicated at export): a folder
    that fails to read (a damaged file) must not cost the device's runs. Nothing is imported,
    and every finished run is brought back instead of none."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "leaderboard"))
    from leaderboard_fixtures import make_record, write_jsonl

    from leaderboard.export import import_results

    bg = _module()
    published = tmp_path / "published"
    published.mkdir()
    (published / "smoke-20261127-000000000000.jsonl").write_text("{not json\n")
    store = tmp_path / "s.sqlite"
    assert bg.import_published(store, published)["code"] not in (0, None)
    finished = tmp_path / "finished"  # a run this call finished, into the store
    em = {n: 1.0 if n <= 5 else 0.5 for n in range(1, 7)}
    write_jsonl(finished / "smoke-20261127-000000000000.jsonl", [make_record("nope", "copy", 0, em)])
    import_results(finished, store)
    got = bg.export(store, tmp_path / "out", published, tmp_path / "scratch")
    assert got["code"] == 0 and len(got["files"]) == 1, got
