"""Executors and the sweep driver: retries, failures, interrupts, the local process pool,
a killed driver, and Ray (a real local instance, 2 CPUs) against the local pool."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import deque
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from harness.cli import main
from harness.config import preset_config
from harness.evaluation.evaluate import LengthMetrics
from harness.execution.run import RunResult, train_and_evaluate
from harness.records.store import Owner, Store, StoreFullError
from harness.sweeps.executors import (
    FAULT_ENV,
    Executor,
    ExecutorError,
    InProcess,
    Job,
    LocalPool,
    SweepEvents,
    SweepStopped,
    WorkerLost,
    injected_faults,
    local_devices,
    local_executor,
    run_sweep,
)

# -- the driver loop, against a scripted executor (no training) -------------------------


def finished(job: Job) -> RunResult:
    Path(job.checkpoint).parent.mkdir(parents=True, exist_ok=True)
    Path(job.checkpoint).write_bytes(b"checkpoint")  # the driver removes it once recorded
    metrics = ((("test", LengthMetrics(6, 9.0, 8, 2, 8, 4))),)
    return RunResult(
        job.run_id,
        "finished",
        {"commit": "c", "device": "worker-gpu", "torch": "t", "pezoo": "p"},
        started_at=1000.0 + job.index,
        metrics=metrics,
        final_loss=0.5,
        train_seconds=2.0,
        eval_seconds=1.0,
        n_params={"total": 10, "pe": 2},
        notices=(f"hello from attempt {job.attempt}",),
    )


def failed(job: Job) -> RunResult:
    tb = f"Traceback (most recent call last):\nValueError: bad luck on attempt {job.attempt}"
    return RunResult(job.run_id, "failed", {"commit": "c", "device": "d"}, 0.0, error="ValueError: bad", traceback=tb)


def diverged(job: Job) -> RunResult:
    return RunResult(job.run_id, "diverged", {"commit": "c", "device": "d"}, 0.0, error="loss became nan at step 3")


def lost(job: Job) -> WorkerLost:
    return WorkerLost(job.run_id, "worker process 4242 was killed by SIGKILL")


def interrupt(job: Job):
    raise KeyboardInterrupt


class Scripted(Executor):
    """Answers attempt k of a run with ``script[run_id][k-1](job)``, one job per wait()."""

    name = "scripted"
    device_type = "cpu"

    def __init__(self, script, capacity=2):
        self.script, self.capacity = script, capacity
        self.pending: deque[Job] = deque()
        self.submitted: list[Job] = []
        self.max_in_flight = 0
        self.closed_with = None

    def submit(self, job):
        self.submitted.append(job)
        self.pending.append(job)
        self.max_in_flight = max(self.max_in_flight, len(self.pending))

    def wait(self):
        job = self.pending.popleft()
        return [(job, self.script[job.run_id][job.attempt - 1](job))]

    def close(self, *, cancel=False):
        self.closed_with = cancel


class Recorder(SweepEvents):
    def __init__(self):
        self.log = []

    def skipped(self, index, cfg):
        self.log.append(("skipped", index))

    def claimed(self, index, cfg, holder):
        self.log.append(("claimed", index))

    def notice(self, job, message):
        self.log.append(("notice", job.index, message))

    def retrying(self, job, reason, attempts):
        self.log.append(("retrying", job.index, job.attempt, attempts, reason))

    def finished(self, job, outcome, result):
        self.log.append(("finished", job.index, outcome.status))


def smoke(pe, seed=0, **train):
    return preset_config("smoke", pe=pe, task="copy", seed=seed, overrides={"train": train})


def test_driver_retries_lost_and_failed_attempts_and_records_the_last(tmp_path):
    a, b, c, d, e = (smoke(pe) for pe in ("nope", "rope", "alibi", "t5", "ape"))
    script = {
        a.run_id(): [lost, finished],
        b.run_id(): [failed, failed, failed],
        c.run_id(): [finished],
        d.run_id(): [lost, lost, lost],
        e.run_id(): [diverged],
    }
    events, executor = Recorder(), Scripted(script)
    with Store(tmp_path / "s.sqlite") as store:
        outcomes = run_sweep(executor, [a, b, c, d, e], store, retries=2, events=events)
        runs = {r["pe"]: r for r in store.runs()}
        assert store.metrics(a.run_id())[0]["exact"] == 2
    assert {o.run_id: o.status for o in outcomes} == {
        a.run_id(): "finished",
        b.run_id(): "failed",
        c.run_id(): "finished",
        d.run_id(): "failed",
        e.run_id(): "diverged",
    }
    assert executor.max_in_flight <= 2 and executor.closed_with is False
    # a: lost once, then finished; the stored provenance is the worker's, with the attempts
    assert runs["nope"]["status"] == "finished" and runs["nope"]["started_at"] == 1001.0
    assert runs["nope"]["provenance"] == {
        "commit": "c",
        "device": "worker-gpu",
        "torch": "t",
        "pezoo": "p",
        "executor": "scripted",
        "attempts": "2",
    }
    assert ("retrying", 1, 1, 3, "worker process 4242 was killed by SIGKILL") in events.log
    assert ("notice", 1, "hello from attempt 2") in events.log
    assert not any(Path(tmp_path / "checkpoints").glob("*.pt"))  # removed once recorded
    # b raised on every attempt: failed, with the last traceback
    assert runs["rope"]["status"] == "failed"
    assert "bad luck on attempt 3" in runs["rope"]["error"] and "failed on all 3 attempts" in runs["rope"]["error"]
    # d's worker died every time: failed, saying so
    assert runs["t5"]["status"] == "failed" and "lost on all 3 attempts" in runs["t5"]["error"]
    assert "SIGKILL" in runs["t5"]["error"]
    # e diverged: deterministic, not retried
    assert runs["ape"]["status"] == "diverged" and runs["ape"]["error"] == "loss became nan at step 3"
    attempts = [(j.index, j.attempt) for j in executor.submitted]
    assert sorted(attempts) == [(1, 1), (1, 2), (2, 1), (2, 2), (2, 3), (3, 1), (4, 1), (4, 2), (4, 3), (5, 1)]


def test_no_retries_means_one_attempt(tmp_path):
    cfg = smoke("rope")
    executor = Scripted({cfg.run_id(): [failed]})
    with Store(tmp_path / "s.sqlite") as store:
        (outcome,) = run_sweep(executor, [cfg], store, retries=0)
        assert outcome.status == "failed" and "failed on all" not in store.run(cfg.run_id())["error"]
    assert len(executor.submitted) == 1


def test_finished_runs_are_never_run_again(tmp_path):
    a, b = smoke("nope"), smoke("rope")
    events = Recorder()
    with Store(tmp_path / "s.sqlite") as store:
        run_sweep(Scripted({a.run_id(): [finished]}), [a], store)
        executor = Scripted({b.run_id(): [finished]})
        run_sweep(executor, [a, b, b], store, events=events)  # b twice: planned once
        assert {r["status"] for r in store.runs()} == {"finished"}
    assert [j.run_id for j in executor.submitted] == [b.run_id()]
    assert ("skipped", 1) in events.log


@pytest.fixture
def other_process():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def test_runs_another_process_holds_are_skipped_not_failed(tmp_path, other_process):
    a, b = smoke("nope"), smoke("rope")
    events = Recorder()
    them = replace(Owner.this_process(), pid=other_process.pid, start=None)
    executor = Scripted({b.run_id(): [finished]})
    with Store(tmp_path / "s.sqlite") as store:
        assert store.claim(a, {"commit": "them"}, them).taken
        before = store.run(a.run_id())
        outcomes = run_sweep(executor, [a, b], store, events=events)
        assert store.run(a.run_id()) == before  # not reset, not trained
        assert store.status(b.run_id()) == "finished"
    assert [j.run_id for j in executor.submitted] == [b.run_id()]
    claimed = {o.run_id: o for o in outcomes}[a.run_id()]
    assert claimed.status == "claimed" and f":{other_process.pid} since" in claimed.error
    assert ("claimed", 1) in events.log


def test_a_run_finished_elsewhere_while_this_driver_trained_it_is_kept(tmp_path, other_process):
    """Our claim lapsed (say, a remote lease) and another process trained and finished the
    run meanwhile: our late result must not replace theirs."""
    cfg = smoke("nope")
    them = replace(Owner.this_process(), pid=other_process.pid, start=None)

    def finished_by_them_meanwhile(job):
        with Store(tmp_path / "s.sqlite") as other:
            with sqlite3.connect(tmp_path / "s.sqlite") as db:  # the claim passes to them
                db.execute("UPDATE runs SET owner=? WHERE run_id=?", (them.to_json(), job.run_id))
            theirs = [("test", LengthMetrics(6, 9.0, 8, 8, 8, 8))]
            other.finish(job.run_id, theirs, final_loss=0.0, train_seconds=1.0, eval_seconds=1.0,
                         n_params={"total": 1, "pe": 0}, owner=them)  # fmt: skip
        return finished(job)

    with Store(tmp_path / "s.sqlite") as store:
        (outcome,) = run_sweep(Scripted({cfg.run_id(): [finished_by_them_meanwhile]}), [cfg], store)
        assert outcome.status == "cached"
        assert store.metrics(cfg.run_id())[0]["exact"] == 8  # theirs, not ours (2 of 8)
        assert store.run(cfg.run_id())["final_loss"] == 0.0
    # the checkpoint our attempt wrote is of no use: the run is finished (it once stayed behind)
    assert not list((tmp_path / "checkpoints").iterdir())


def test_interrupted_driver_marks_runs_in_flight_and_starts_nothing_more(tmp_path):
    a, b, c = smoke("nope"), smoke("rope"), smoke("alibi")
    executor = Scripted({a.run_id(): [interrupt], b.run_id(): [finished], c.run_id(): [finished]}, capacity=2)
    with Store(tmp_path / "s.sqlite") as store:
        with pytest.raises(KeyboardInterrupt):
            run_sweep(executor, [a, b, c], store)
        status = {r["pe"]: r["status"] for r in store.runs()}
    assert status == {"nope": "interrupted", "rope": "interrupted"}  # alibi was never dispatched
    assert executor.closed_with is True


def test_injected_faults_parse():
    assert injected_faults("kill:abc, raise:def") == {"abc": "kill", "def": "raise"}
    assert injected_faults("") == {}
    with pytest.raises(ExecutorError, match="not kill:<run_id> or raise:<run_id>"):
        injected_faults("explode:abc")


def test_local_pool_sizing(monkeypatch):
    monkeypatch.setattr("harness.sweeps.executors.sizing.default_cpu_workers", lambda: 8)
    cpu = torch.device("cpu")
    assert local_devices(cpu, None, todo=20) == ["cpu"] * 8  # one per core
    assert local_devices(cpu, None, todo=3) == ["cpu"] * 3  # never more than runs to do
    assert local_devices(cpu, 2, todo=20) == ["cpu"] * 2
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    assert local_devices(torch.device("cuda"), None, todo=20) == ["cuda:0", "cuda:1", "cuda:2"]  # one per GPU
    assert local_devices(torch.device("cuda"), 5, todo=20) == ["cuda:0", "cuda:1", "cuda:2", "cuda:0", "cuda:1"]
    assert local_devices(torch.device("cuda:1"), None, todo=20) == ["cuda:1"]
    assert isinstance(local_executor(cpu, None, todo=1), InProcess)
    assert isinstance(local_executor(cpu, 2, todo=5), LocalPool)
    assert isinstance(local_executor(cpu, 1, todo=5), InProcess)


# -- real worker processes --------------------------------------------------------------


def metric_rows(store, run_id):
    return [(m["split"], m["length"], m["exact"], m["tokens_right"]) for m in store.metrics(run_id)]


def single_threaded_reference(cfg, tmp_path):
    """The run trained here with one torch thread, as pool workers and Ray tasks train."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = train_and_evaluate(cfg, torch.device("cpu"), tmp_path / "ref.pt", notice=lambda m: None)
    finally:
        torch.set_num_threads(threads)
    assert result.status == "finished"
    return [(s, m.length, m.exact, m.tokens_right) for s, m in result.metrics], result.final_loss


@pytest.mark.slow
def test_pool_retries_a_killed_worker_from_its_checkpoint_and_fails_a_run_that_always_raises(tmp_path, monkeypatch):
    killed, raising, fine = smoke("rope", steps=40), smoke("nope", steps=40), smoke("alibi", steps=40)
    monkeypatch.setenv(FAULT_ENV, f"kill:{killed.run_id()},raise:{raising.run_id()}")
    events = Recorder()
    with Store(tmp_path / "s.sqlite") as store:
        run_sweep(LocalPool(["cpu", "cpu"]), [killed, raising, fine], store, checkpoint_every=10, events=events)
        runs = {r["pe"]: r for r in store.runs()}
        killed_metrics = metric_rows(store, killed.run_id())
    retried = [e for e in events.log if e[0] == "retrying" and e[1] == 1]
    assert len(retried) == 1 and "killed by SIGKILL" in retried[0][4]
    assert ("notice", 1, f"run {killed.run_id()}: resuming from step 10") in events.log
    assert runs["rope"]["status"] == "finished" and runs["rope"]["provenance"]["attempts"] == "2"
    assert runs["rope"]["provenance"]["executor"] == "local"
    assert runs["nope"]["status"] == "failed"
    assert "Traceback" in runs["nope"]["error"] and "injected fault" in runs["nope"]["error"]
    assert "failed on all 3 attempts" in runs["nope"]["error"]
    assert runs["alibi"]["status"] == "finished" and runs["alibi"]["provenance"]["attempts"] == "1"
    # killed after step 10 and resumed: exactly the metrics of an uninterrupted run
    monkeypatch.delenv(FAULT_ENV)
    reference, final_loss = single_threaded_reference(killed, tmp_path)
    assert killed_metrics == reference and runs["rope"]["final_loss"] == final_loss


def _session_processes(sid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
            if int(fields[3]) == sid:  # state ppid pgrp session
                pids.append(int(entry.name))
    return pids


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads worker processes from /proc")
def test_killed_driver_leaves_no_workers_and_a_restart_runs_only_what_is_missing(tmp_path):
    store = tmp_path / "s.sqlite"
    cmd = [sys.executable, "-m", "harness.cli", "bench", "--pe", "nope,rope,alibi", "--task", "copy"]
    cmd += ["--preset", "smoke", "--steps", "100", "--device", "cpu", "--workers", "2", "--store", str(store)]
    driver = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    done_before: dict[str, float] = {}
    while not done_before:
        assert driver.poll() is None, "the sweep ended before it could be interrupted"
        assert time.time() < deadline
        time.sleep(0.05)
        if store.exists():
            with Store(store) as s:
                done_before = {r["run_id"]: r["finished_at"] for r in s.runs() if r["status"] == "finished"}
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    # the pool's workers notice their driver is gone and exit
    deadline = time.time() + 60
    while _session_processes(driver.pid):
        assert time.time() < deadline, f"orphaned workers: {_session_processes(driver.pid)}"
        time.sleep(0.2)
    with Store(store) as s:
        unfinished = [r["run_id"] for r in s.runs() if r["status"] != "finished"]
    assert unfinished, "everything finished before the kill: nothing was interrupted"

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already in the store, skipped") == len(done_before)
    with Store(store) as s:
        runs = {r["run_id"]: r for r in s.runs()}
    assert {r["status"] for r in runs.values()} == {"finished"} and len(runs) == 3
    assert all(runs[i]["finished_at"] == t for i, t in done_before.items())  # not run again


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads worker processes from /proc")
@pytest.mark.parametrize(
    ("workers", "group"), [(1, None), (2, None), (2, "threads")], ids=["in-process", "pool", "group"]
)
def test_sigterm_marks_the_runs_in_flight_interrupted_and_stops_the_workers(tmp_path, monkeypatch, workers, group):
    """A scheduler's time limit or ``kill`` sends SIGTERM: the driver stops its workers,
    records the runs in flight as ``interrupted`` (not ``running``) and exits 143."""
    if group is not None:
        monkeypatch.setenv("PEZOO_GROUP", group)
    store = tmp_path / "s.sqlite"
    cmd = [sys.executable, "-m", "harness.cli", "bench", "--pe", "nope,rope", "--task", "copy"]
    cmd += ["--preset", "smoke", "--steps", "100000", "--device", "cpu", "--workers", str(workers)]
    cmd += ["--store", str(store)]
    driver = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 300
    running: list[str] = []
    while len(running) < workers:
        assert driver.poll() is None, driver.communicate()
        assert time.time() < deadline
        time.sleep(0.1)
        if store.exists():
            with Store(store) as s:
                running = [r["run_id"] for r in s.runs() if r["status"] == "running"]
    time.sleep(2)  # the workers are training
    os.kill(driver.pid, signal.SIGTERM)  # the driver alone, as a scheduler would
    _, err = driver.communicate(timeout=120)
    assert driver.returncode == 143, err
    assert "nope on copy seed 0: interrupted; run the same command again to resume." in err
    with Store(store) as s:
        assert {r["status"] for r in s.runs()} == {"interrupted"}
    deadline = time.time() + 60
    while _session_processes(driver.pid):
        assert time.time() < deadline, f"workers left running: {_session_processes(driver.pid)}"
        time.sleep(0.2)


# -- Ray ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_instance(one_ray_at_a_time):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


BENCH = ["bench", "--pe", "nope,rope", "--task", "copy", "--seeds", "1", "--preset", "smoke", "--steps", "30"]
BENCH += ["--device", "cpu", "--checkpoint-every", "10"]


@pytest.fixture(scope="module")
def pool_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("pool") / "s.sqlite"
    result = CliRunner().invoke(main, [*BENCH, "--workers", "2", "--store", str(path)])
    assert result.exit_code == 0, result.output
    return path


def results_by_run(path):
    with Store(path) as store:
        return {r["run_id"]: (r["final_loss"], metric_rows(store, r["run_id"])) for r in store.runs()}


@pytest.mark.slow
def test_runs_side_by_side_store_what_each_stores_alone(pool_store, tmp_path):
    """The two runs the pool of two workers trained at once (as a packed GPU trains them)
    stored exactly what each gives trained alone here: nothing leaks between workers."""
    stored = results_by_run(pool_store)
    assert len(stored) == 2
    for pe in ("nope", "rope"):
        cfg = preset_config("smoke", pe=pe, task="copy", seed=0, overrides={"train": {"steps": 30}})
        metrics, final_loss = single_threaded_reference(cfg, tmp_path / pe)
        assert stored[cfg.run_id()] == (final_loss, metrics)


@pytest.mark.slow
def test_ray_executor_stores_exactly_what_the_local_pool_does(ray_instance, pool_store, tmp_path):
    path = tmp_path / "s.sqlite"
    result = CliRunner().invoke(main, [*BENCH, "--executor", "ray", "--store", str(path)])
    assert result.exit_code == 0, result.output
    assert "on a Ray cluster (cpu)" in result.output and "| rope" in result.output
    ray_results, pool_results = results_by_run(path), results_by_run(pool_store)
    assert len(ray_results) == 2 and ray_results == pool_results
    with Store(path) as store:
        assert {r["provenance"]["executor"] for r in store.runs()} == {"ray"}
        assert all(r["provenance"]["device"].endswith(" x1 threads") for r in store.runs())  # one torch thread


@pytest.mark.slow
def test_ray_groups_store_exactly_what_the_local_pool_does(ray_instance, pool_store, tmp_path):
    """On a GPU cluster each GPU's runs go to one actor that trains them side by side in its
    threads (as a local group does); here the actor holds CPU slots, one torch thread."""
    from harness.sweeps.executors import RayExecutor

    configs = [smoke(pe, steps=30) for pe in ("nope", "rope")]
    executor = RayExecutor(group=2, device="cpu")
    assert executor.capacity == 4  # two CPUs, a group of two on each
    with Store(tmp_path / "s.sqlite") as store:
        outcomes = run_sweep(executor, configs, store, checkpoint_dir=tmp_path / "ck", checkpoint_every=10)
    executor.close()
    assert [o.status for o in outcomes] == ["finished", "finished"]
    assert executor.actors_started == 1  # both runs went to one actor's group
    assert results_by_run(tmp_path / "s.sqlite") == results_by_run(pool_store)


@pytest.mark.slow
def test_ray_task_whose_worker_dies_is_retried_from_its_checkpoint(ray_instance, pool_store, tmp_path, monkeypatch):
    cfg = smoke("rope", steps=30)
    monkeypatch.setenv(FAULT_ENV, f"kill:{cfg.run_id()}")
    path = tmp_path / "s.sqlite"
    result = CliRunner().invoke(main, [*BENCH[:2], "rope", *BENCH[3:], "--executor", "ray", "--store", str(path)])
    assert result.exit_code == 0, result.output
    assert "attempt 1 of 3 failed" in result.output and "resuming from step 10" in result.output
    with Store(path) as store:
        assert store.run(cfg.run_id())["provenance"]["attempts"] == "2"
    assert results_by_run(path)[cfg.run_id()] == results_by_run(pool_store)[cfg.run_id()]


def test_a_worker_that_cannot_start_leaves_the_pool_closable_and_its_error_standing(monkeypatch):
    pool = LocalPool(["cpu", "cpu"])
    real = pool._ctx.Process

    def unstartable(*args, **kwargs):
        process = real(*args, **kwargs)
        process.start = lambda: (_ for _ in ()).throw(OSError("cannot spawn: no memory"))
        return process

    monkeypatch.setattr(pool._ctx, "Process", unstartable)
    job = Job(1, smoke("nope").to_dict(), smoke("nope").run_id(), "unused.pt", 10)
    with pytest.raises(OSError, match="cannot spawn"):
        pool.submit(job)
    pool.close(cancel=True)  # before: terminate() of a process that never started raised instead
    assert all(slot.process is None and slot.conn is None for slot in pool._slots)


# -- the store refuses a claim -----------------------------------------------------------


def refusing_claims(monkeypatch, pe, times):
    """``Store.claim`` raises StoreFullError for the runs of encoding ``pe``, ``times`` times
    (None: always)."""
    real, refused = Store.claim, []

    def claim(self, cfg, *args, **kwargs):
        if cfg.pe == pe and (times is None or len(refused) < times):
            refused.append(cfg.run_id())
            raise StoreFullError(f"results store {self.path}: the disk is full (0.0 MiB free) while claiming")
        return real(self, cfg, *args, **kwargs)

    monkeypatch.setattr(Store, "claim", claim)
    monkeypatch.setattr("harness.sweeps.executors.driver.CLAIM_RETRY_DELAYS", (0.0, 0.0, 0.0))
    return refused


def test_a_claim_the_store_refuses_for_a_while_is_tried_again(tmp_path, monkeypatch):
    a, b = smoke("nope"), smoke("rope")
    refused = refusing_claims(monkeypatch, "rope", times=2)
    events = Recorder()
    with Store(tmp_path / "s.sqlite") as store:
        outcomes = run_sweep(Scripted({a.run_id(): [finished], b.run_id(): [finished]}), [a, b], store, events=events)
        assert {r["status"] for r in store.runs()} == {"finished"}
    assert [o.status for o in outcomes] == ["finished", "finished"] and len(refused) == 2
    assert sum(1 for e in events.log if e[0] == "notice" and "trying again" in e[2]) == 2


def test_a_claim_the_store_keeps_refusing_stops_the_sweep_after_the_runs_in_flight(tmp_path, monkeypatch):
    a, b, c = smoke("nope"), smoke("rope"), smoke("alibi")
    refused = refusing_claims(monkeypatch, "rope", times=None)
    executor = Scripted({a.run_id(): [finished], b.run_id(): [finished], c.run_id(): [finished]}, capacity=1)
    with Store(tmp_path / "s.sqlite") as store:
        with pytest.raises(SweepStopped) as stopped:
            run_sweep(executor, [a, b, c], store)
        assert {r["pe"]: r["status"] for r in store.runs()} == {"nope": "finished"}
    assert len(refused) == 4  # the first try and one per delay
    assert [o.status for o in stopped.value.outcomes] == ["finished"] and stopped.value.not_started == 2
    assert b.run_id() in str(stopped.value) and "4 tries" in str(stopped.value)
    assert [j.run_id for j in executor.submitted] == [a.run_id()] and executor.closed_with is False


def test_bench_shows_the_table_of_what_finished_when_the_store_refuses_a_claim(tmp_path, monkeypatch):
    refusing_claims(monkeypatch, "rope", times=None)
    store = tmp_path / "s.sqlite"
    args = ["bench", "--pe", "nope,rope", "--task", "copy", "--preset", "smoke", "--steps", "2", "--device", "cpu"]
    result = CliRunner().invoke(main, [*args, "--workers", "1", "--store", str(store)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    assert "| nope" in result.output and "| rope" not in result.output  # the table of what finished
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "disk is full" in errors[0] and "could not claim run" in errors[0]


# -- a run whose process died -------------------------------------------------------------


def died_holding(store, cfg, times):
    """``cfg`` left ``running`` by ``times`` processes in a row that died holding it (a
    segfault, SIGKILL), its checkpoint never moving on."""
    for _ in range(times):
        proc = subprocess.Popen([sys.executable, "-c", "pass"])
        proc.wait()  # exited and reaped: its pid names no process
        assert store.claim(cfg, {"commit": "gone"}, replace(Owner.this_process(), pid=proc.pid, start=None)).taken


@pytest.mark.parametrize(("times", "last"), [(1, False), (2, True)])
def test_a_run_that_processes_keep_dying_on_goes_last(tmp_path, times, last):
    """Once (a sweep killed with its session: the run 65% trained) it resumes in its place; it
    went after 70 other runs. Twice in a row, it may be what kills them: after the others."""
    a, b = smoke("nope"), smoke("rope")
    executor = Scripted({a.run_id(): [finished], b.run_id(): [finished]}, capacity=1)
    with Store(tmp_path / "s.sqlite") as store:
        died_holding(store, a, times)
        assert store.lapsed() == {a.run_id()} and store.suspects() == ({a.run_id()} if last else set())
        outcomes = run_sweep(executor, [a, b], store)
    order = [b.run_id(), a.run_id()] if last else [a.run_id(), b.run_id()]
    assert [j.run_id for j in executor.submitted] == order
    assert {o.status for o in outcomes} == {"finished"}


@pytest.mark.parametrize("order", ["listed", "seeds-first"])
def test_sweep_plan_lists_the_suspects_last_as_bench_runs_them(tmp_path, order):
    """`sweep plan --order` lists the runs in the order bench will run them: a run processes
    kept dying on after the others (it was listed in its place, so its wall time was another's)."""
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('preset = "smoke"\npe = ["nope", "rope"]\ntask = "copy"\n')
    a, b = smoke("nope"), smoke("rope")
    with Store(tmp_path / "s.sqlite") as store:
        died_holding(store, a, 2)
        assert store.suspects() == {a.run_id()}
    args = ["sweep", "plan", str(sweep), "--store", str(tmp_path / "s.sqlite"), "--order", order]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert result.output.index(b.run_id()) < result.output.index(a.run_id()), result.output


def test_a_run_whose_process_keeps_dying_fails_after_the_retry_budget(tmp_path):
    a, b = smoke("nope"), smoke("rope")
    executor = Scripted({a.run_id(): [finished], b.run_id(): [finished]}, capacity=1)
    events = Recorder()
    with Store(tmp_path / "s.sqlite") as store:
        died_holding(store, a, 3)  # the first, then two takeovers that died too: 2 deaths counted
        assert "2 in a row" in store.run(a.run_id())["error"]
        outcomes = run_sweep(executor, [a, b], store, retries=2, events=events)
        run = store.run(a.run_id())
    assert [j.run_id for j in executor.submitted] == [b.run_id()]  # not run a fourth time
    assert {o.run_id: o.status for o in outcomes} == {a.run_id(): "failed", b.run_id(): "finished"}
    assert run["status"] == "failed" and "died 3 times" in run["error"] and run["owner"] is None
    assert ("finished", 1, "failed") in events.log


def test_deaths_count_again_from_1_once_the_checkpoint_moved_on(tmp_path):
    cfg = smoke("nope")
    with Store(tmp_path / "s.sqlite") as store:
        died_holding(store, cfg, 1)
        gone = [replace(Owner.this_process(), pid=pid, start=None) for pid in (2**22 + 1, 2**22 + 2)]
        assert store.claim(cfg, {}, gone[0], step=0).deaths == 1
        assert store.claim(cfg, {}, gone[1], step=0).deaths == 2  # no progress: a crash loop
        assert store.claim(cfg, {}, step=50).deaths == 1  # it trained on between: killed, not crashing
        assert store.claim(cfg, {}, step=50).deaths == 0  # our own claim: nobody died
        assert store.finish(
            cfg.run_id(),
            [("test", LengthMetrics(6, 9.0, 8, 2, 8, 4))],
            final_loss=0.5,
            train_seconds=1.0,
            eval_seconds=1.0,
            n_params={"total": 1, "pe": 0},
        )
        assert store.run(cfg.run_id())["error"] is None  # a finished run keeps no note


def test_a_run_in_flight_when_the_store_stopped_the_sweep_still_gets_its_retries(tmp_path, monkeypatch):
    a, b = smoke("nope"), smoke("rope")
    refusing_claims(monkeypatch, "rope", times=None)
    executor = Scripted({a.run_id(): [failed, finished], b.run_id(): [finished]}, capacity=2)
    with Store(tmp_path / "s.sqlite") as store:
        with pytest.raises(SweepStopped) as stopped:
            run_sweep(executor, [a, b], store, retries=2)
        assert store.status(a.run_id()) == "finished"  # its claim is held: its retry runs, not left "running"
    assert [(j.run_id, j.attempt) for j in executor.submitted] == [(a.run_id(), 1), (a.run_id(), 2)]
    assert stopped.value.not_started == 1
