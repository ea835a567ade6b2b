"""End to end: `pezoo bench` trains, stores, prints the table, and reuses finished runs."""

from __future__ import annotations

import sqlite3

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.config import RunConfig
from harness.records.frames import load
from harness.records.store import NotAStoreError, Store, StoreError


def load_config(store_path):
    """A run config of the store's first run (to start an unfinished run elsewhere)."""
    with Store(store_path, readonly=True) as store:
        return RunConfig.from_dict(store.runs()[0]["config"])


ARGS = ["bench", "--pe", "nope,rope", "--task", "copy", "--preset", "smoke", "--device", "cpu"]


@pytest.fixture(scope="module")
def bench_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "store.sqlite"
    result = CliRunner().invoke(main, [*ARGS, "--store", str(path)])
    assert result.exit_code == 0, result.output
    return path, result.output


def test_bench_writes_store_and_prints_table(bench_store):
    path, output = bench_store
    assert "task copy" in output and "| nope" in output and "| rope" in output
    # before training it says what it will do: runs, preset, device, estimated wall time
    assert output.startswith(f"pezoo bench: 2 runs (nope, rope on copy, seed 0): 0 already in the store ({path}), 2 to")
    assert "preset smoke: " in output and "  model: decoder, d_model 32, 1 layer, 2 heads" in output
    assert "\ndevice cpu: " in output  # one run at a time in this process, or a pool: one per CPU core
    assert "estimated wall time: under 1s on " in output and "rough" in output  # smoke: 20 steps
    df = load(path)
    assert set(df["pe"]) == {"nope", "rope"}
    # every training scale 1..5 and every test scale 6..8 was evaluated, for both runs
    assert sorted(df.loc[df["pe"] == "rope", "length"]) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert set(df["split"]) == {"train", "test"}
    assert df["exact_match"].between(0, 1).all() and df["token_accuracy"].between(0, 1).all()
    with Store(path) as store:
        run = store.runs()[0]
    assert run["status"] == "finished" and run["provenance"]["torch"] and run["config"]["preset"] == "smoke"
    assert run["n_params"] > 0 and run["train_seconds"] > 0


def test_running_again_reuses_finished_runs(bench_store):
    path, _ = bench_store
    result = CliRunner().invoke(main, [*ARGS, "--store", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output.count("already in the store, skipped") == 2
    assert "2 already in the store" in result.output and "estimated wall time: none" in result.output
    assert len(Store(path).runs()) == 2


def test_results_command_formats(bench_store):
    path, _ = bench_store
    csv = CliRunner().invoke(main, ["results", "--store", str(path), "--format", "csv", "--pe", "rope"])
    assert csv.exit_code == 0 and csv.output.startswith("run_id,pe,task")
    assert "nope" not in csv.output


def test_results_says_when_nothing_matches(bench_store, tmp_path):
    """An encoding with no runs printed nothing at all (exit 0), as if the store were empty."""
    path, _ = bench_store
    none = CliRunner().invoke(main, ["results", "--store", str(path), "--pe", "xpos"])
    assert none.exit_code == 0 and "no finished runs match in" in none.output
    # a store holding only unfinished runs says what it holds
    store_path = tmp_path / "s.sqlite"
    with Store(store_path) as store:
        store.start(load_config(path), {"commit": "t"})
    empty = CliRunner().invoke(main, ["results", "--store", str(store_path), "--format", "csv"])
    assert "no finished runs in" in empty.output and "(1 running; results lists finished runs)" in empty.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pe", "ropee", "--task", "copy"], "Did you mean 'rope'"),
        (["--pe", "rope", "--task", "cpy"], "Valid tasks:"),
        (["--pe", "rope", "--task", "copy", "--train-len", "10", "--test-len", "10"], "must exceed"),
        (["--pe", "rope", "--task", "copy", "--backend", "fast"], "Valid attention backends"),
    ],
)
def test_bad_input_fails_fast_with_a_message(tmp_path, args, message):
    result = CliRunner().invoke(main, ["bench", *args, "--preset", "smoke", "--store", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 2
    assert message in result.output
    assert not (tmp_path / "s.sqlite").exists()  # nothing touched


def test_corrupt_store_is_reported(tmp_path):
    path = tmp_path / "broken.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(NotAStoreError, match="is not a SQLite database"):
        Store(path)
    result = CliRunner().invoke(main, ["bench", "--pe", "nope", "--task", "copy", "--preset", "smoke",
                                       "--store", str(path)])  # fmt: skip
    assert result.exit_code == 1 and "is not a SQLite database" in result.output
    assert "move it aside" not in result.output
    assert path.read_bytes().startswith(b"this is not")  # left as it was


@pytest.mark.parametrize(
    "command",
    [["results"], ["sweep", "plan", "leaderboard/board-quick.toml"], ["bench", "--pe", "nope", "--task", "copy"]],
    ids=["results", "sweep plan", "bench"],
)
def test_a_truncated_store_is_refused_and_its_folder_left_as_it_was(tmp_path, command):
    """Round four: `results` and `sweep plan` said "nothing was written to it" and left a
    32 KiB -shm and an empty -wal beside it."""
    path = tmp_path / "s.sqlite"
    Store(path).close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    result = CliRunner().invoke(main, [*command, "--store", str(path)])
    assert result.exit_code == 1 and "is corrupt" in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.sqlite"]
    assert path.read_bytes() == data[: len(data) // 2]


def test_store_schema_mismatch_is_reported(tmp_path):
    path = tmp_path / "old.sqlite"
    Store(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    with pytest.raises(StoreError, match="schema 999"):
        Store(path)


def test_list_shows_encodings_and_tasks():
    out = CliRunner().invoke(main, ["list"]).output
    assert "rope" in out and "copy" in out and "quick" in out


def test_an_in_process_bench_says_how_many_torch_threads_it_trains_with(tmp_path, monkeypatch):
    # pool workers train with one thread; one run in this process keeps the process's count,
    # which on a busy CPU decides its speed several times over: the banner says it
    import torch

    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)
    monkeypatch.setattr("os.getloadavg", lambda: (0.0, 0.0, 0.0))  # an idle machine: nothing to warn of
    result = CliRunner().invoke(
        main, ["bench", "--pe", "nope", "--task", "copy", "--preset", "smoke", "--device", "cpu", "--workers", "1",
               "--store", str(tmp_path / "s.sqlite")]
    )
    assert result.exit_code == 0, result.output
    assert "\ndevice cpu: one run at a time, in this process (3 torch threads)\n" in result.output


@pytest.mark.parametrize(
    ("threads", "load", "warned"), [(2, 1.9, True), (1, 1.9, False), (2, 0.1, False), (2, 3.0, True)]
)
def test_an_in_process_bench_on_a_busy_cpu_says_its_threads_will_share_the_cores(
    tmp_path, monkeypatch, threads, load, warned
):
    # two in-process sweeps of two threads each on two cores trained 6-10x slower than with
    # one thread each, and the banner's thread count alone did not say why
    import torch

    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    monkeypatch.setattr("os.getloadavg", lambda: (load, load, load))
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})  # two cores
    result = CliRunner().invoke(
        main, ["bench", "--pe", "nope", "--task", "copy", "--preset", "smoke", "--device", "cpu", "--workers", "1",
               "--store", str(tmp_path / "s.sqlite")]
    )
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("device cpu:"))
    assert ("busy already" in line and f"load {load:.1f} on 2 cores" in line and "OMP_NUM_THREADS=1" in line) == warned
