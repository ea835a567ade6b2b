"""`pezoo leaderboard export`: append-only files, idempotent, a faithful copy of the store."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from click.testing import CliRunner
from leaderboard_fixtures import (
    RUNS,
    TINIER,
    make_record,
    run_tiny_bench,
    sha256_of_canonical,
    unfinish,
    write_jsonl,
)

from harness.cli import main
from harness.records.store import Store
from leaderboard.export import ExportError, export, import_results
from leaderboard.schema import ResultsError

pytestmark = pytest.mark.slow  # uses the real tiny bench (a few seconds, once per session)


def _lines(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.jsonl"))}


def test_one_file_per_preset_holding_every_finished_run(smoke_results):
    files = sorted(smoke_results.glob("*.jsonl"))
    presets = []
    for path in files:
        records = [json.loads(line) for line in path.read_text().splitlines()]
        [preset] = {r["preset"] for r in records}  # one preset per file
        assert re.fullmatch(rf"{preset}-\d{{8}}-[0-9a-f]{{12}}\.jsonl", path.name)
        presets.append(preset)
    assert sorted(presets) == ["smoke", "smoke-2step"]
    records = [json.loads(line) for p in files for line in p.read_text().splitlines()]
    assert len(records) == len(RUNS)
    assert {(r["preset"], r["pe"], r["task"], r["seed"]) for r in records} == {(a, b, c, d) for a, b, c, d, _ in RUNS}


def test_records_copy_the_store_faithfully(smoke_store, smoke_results):
    records = {
        json.loads(line)["run_id"]: json.loads(line)
        for p in smoke_results.glob("*.jsonl")
        for line in p.read_text().splitlines()
    }
    with Store(smoke_store) as store:
        for run in store.runs():
            rec = records[run["run_id"]]
            assert rec["config"] == json.loads(json.dumps(run["config"]))
            assert rec["provenance"] == run["provenance"]
            assert rec["params"] == {"total": run["n_params"], "pe": run["pe_params"]}
            assert rec["final_loss"] == run["final_loss"] and rec["timings"]["finished_at"] == run["finished_at"]
            rows = store.metrics(run["run_id"])
            keys = ("length", "split", "exact", "tokens", "tokens_right", "n")
            assert [tuple(m[k] for k in keys) for m in rec["metrics"]] == [tuple(m[k] for k in keys) for m in rows]
            assert rec["checksum"] == sha256_of_canonical(rec)
            assert rec["schema_version"] == 2 and rec["provenance"]["torch"] and rec["provenance"]["commit"]


def test_exporting_again_adds_nothing_and_touches_nothing(smoke_store, smoke_results, tmp_path):
    out = tmp_path / "results"
    shutil.copytree(smoke_results, out)
    before = _lines(out)
    result = CliRunner().invoke(main, ["leaderboard", "export", "--store", str(smoke_store), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "nothing new to export" in result.output
    assert f"{len(RUNS)} finished run(s) were already published" in result.output
    assert _lines(out) == before


def test_export_to_a_device_says_it_is_no_folder(smoke_store):
    # /dev/null passed click's folder check, and mkdir answered "/dev/null: File exists"
    result = CliRunner().invoke(main, ["leaderboard", "export", "--store", str(smoke_store), "--out", "/dev/null"])
    assert result.exit_code == 1 and "--out /dev/null is a character device, not a folder" in result.output


def test_new_runs_go_to_a_new_file_old_files_unchanged(smoke_store, smoke_results, tmp_path):
    out = tmp_path / "results"
    shutil.copytree(smoke_results, out)
    before = _lines(out)
    store = tmp_path / "store.sqlite"
    shutil.copy(smoke_store, store)
    [new_id] = run_tiny_bench(store, [("smoke-2step", "nope", "copy", 1, TINIER)])
    summary = export(store, out)
    [(path, count)] = summary.written
    assert count == 1 and summary.already_published == len(RUNS) and path.name not in before
    assert json.loads(path.read_text())["run_id"] == new_id
    after = _lines(out)
    assert {k: v for k, v in after.items() if k in before} == before and len(after) == len(before) + 1


def test_unfinished_runs_are_not_exported(smoke_store, tmp_path):
    store = tmp_path / "store.sqlite"
    shutil.copy(smoke_store, store)
    with Store(store) as s:
        run_id = s.runs()[0]["run_id"]
    unfinish(store, run_id)
    summary = export(store, tmp_path / "out")
    assert summary.not_finished == 1
    exported = [json.loads(line)["run_id"] for p in (tmp_path / "out").glob("*.jsonl") for line in p.open()]
    assert run_id not in exported and len(exported) == len(RUNS) - 1


def test_a_malformed_published_file_blocks_the_export(smoke_store, smoke_results, tmp_path):
    out = tmp_path / "results"
    shutil.copytree(smoke_results, out)
    victim = sorted(out.glob("*.jsonl"))[0]
    victim.write_text(re.sub(r'"exact":(\d+)', lambda m: f'"exact":{int(m[1]) ^ 1}', victim.read_text(), count=1))
    before = _lines(out)
    with pytest.raises(ResultsError, match=f"{victim}:1: checksum mismatch"):
        export(smoke_store, out)
    result = CliRunner().invoke(main, ["leaderboard", "export", "--store", str(smoke_store), "--out", str(out)])
    assert result.exit_code == 1 and f"{victim}:1: checksum mismatch" in result.output
    assert _lines(out) == before


def test_missing_store(tmp_path):
    result = CliRunner().invoke(main, ["leaderboard", "export", "--store", str(tmp_path / "no.sqlite"), "--out",
                                       str(tmp_path / "out")])  # fmt: skip
    assert result.exit_code == 1 and "no results store at" in result.output
    assert not (tmp_path / "no.sqlite").exists() and not (tmp_path / "out").exists()


def test_two_exports_at_once_write_each_run_once(smoke_store, tmp_path, monkeypatch):
    """Both used to read the published runs before either wrote, then both wrote the same
    records (the second failed on the file the first had written, or, had a run finished
    between them, left a duplicate that leaderboard check rejects)."""
    import threading
    import time

    import leaderboard.export as export_module

    out = tmp_path / "results"
    real_read = export_module.read_results

    def slow_read(folder):
        found = real_read(folder)
        time.sleep(0.3)  # both exports read before either writes, unless they are serialised
        return found

    monkeypatch.setattr(export_module, "read_results", slow_read)
    summaries, errors = [], []

    def one() -> None:
        try:
            summaries.append(export(smoke_store, out))
        except Exception as exc:  # the test reports whatever the second export hit
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    first, second = sorted(summaries, key=lambda s: -len(s.written))
    assert sum(n for _, n in first.written) == len(RUNS) and second.written == []
    assert second.already_published == len(RUNS)
    assert sorted(out.glob("*.jsonl")) == sorted(path for path, _ in first.written)


def test_runs_of_another_protocol_are_refused_before_anything_is_written(tmp_path):
    """A contributor's `--steps 10` runs under a preset whose table was published at 20
    steps: export wrote a file that `check` called valid and `build` refused. Export now
    refuses before writing, and check refuses such a folder too."""
    em = {1: 1.0, 2: 1.0, 3: 0.5, 4: 0.0, 5: 0.0, 6: 0.0}
    published = tmp_path / "board" / "results"
    name = "smoke-20261124-000000000000.jsonl"
    write_jsonl(published / name, [make_record("nope", "copy", 0, em, train_max=3, steps=20)])
    other = tmp_path / "other"
    write_jsonl(other / name, [make_record("rope", "copy", 0, em, train_max=3, steps=10)])
    store = tmp_path / "s.sqlite"
    import_results(other, store)
    before = _lines(published)
    with pytest.raises(ExportError, match=r"(?s)nothing written.*different protocols \(train\.steps\)"):
        export(store, published)
    assert _lines(published) == before
    # into a folder of its own it goes, and check then refuses the two side by side
    export(store, tmp_path / "mine" / "results")
    for path in (tmp_path / "mine" / "results").glob("*.jsonl"):
        shutil.copy(path, published / path.name)
    checked = CliRunner().invoke(main, ["leaderboard", "check", "--results", str(published)])
    assert checked.exit_code == 1 and "different protocols (train.steps)" in checked.output


@pytest.mark.parametrize("existing", [False, True])
def test_export_never_makes_a_folder_that_shadows_the_package(tmp_path, monkeypatch, existing):
    # outside a checkout, the default --out leaderboard/results used to create ./leaderboard/, which
    # `python -m harness.cli` there imports instead of the installed leaderboard package
    store = tmp_path / "store.sqlite"
    store.write_bytes(b"")
    work = tmp_path / "work"
    work.mkdir()
    if existing:  # a previous export's folder: no package, still shadowing
        (work / "leaderboard" / "results").mkdir(parents=True)
    monkeypatch.chdir(work)
    result = CliRunner().invoke(main, ["leaderboard", "export", "--store", str(store)])
    assert result.exit_code == 1 and "--out" in result.output
    assert (work / "leaderboard").exists() == existing
    if existing:
        assert not any((work / "leaderboard" / "results").iterdir())


def test_shadowing_check_allows_the_checkout_and_other_names(tmp_path):
    from pathlib import Path

    from leaderboard.export import shadowing_problem

    (tmp_path / "leaderboard").mkdir()
    (tmp_path / "leaderboard" / "__init__.py").write_text("")
    assert shadowing_problem(Path("leaderboard/results"), cwd=tmp_path) is None
    assert shadowing_problem(Path("results"), cwd=tmp_path / "x") is None
    assert shadowing_problem(tmp_path / "harness" / "results", cwd=tmp_path) is not None
    assert shadowing_problem(tmp_path / "deep" / "leaderboard" / "results", cwd=tmp_path) is None
