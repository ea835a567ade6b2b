"""Progress of runs and sweeps (harness/sweeps/progress.py) and the pool's progress messages
(harness/sweeps/executors/local_pool.py), with a fake clock. Nothing here trains a model."""

from __future__ import annotations

import multiprocessing
import re
from types import SimpleNamespace

import pytest

from harness.config import RunConfig
from harness.execution.run import RunOutcome, RunResult
from harness.sweeps.executors import Job, LocalPool, NoticeReport, ProgressReport, throttled_progress
from harness.sweeps.executors.local_pool import _Slot
from harness.sweeps.progress import RunProgress, SweepReport


def clock_at(t0: float = 0.0):
    now = [t0]
    return now, lambda: now[0]


def test_a_run_line_labels_step_loss_speed_and_eta():
    now, clock = clock_at()
    run = RunProgress(clock)
    assert run.update("train", 1, 100, "loss 4.1000")  # a new phase
    now[0] = 10.0
    assert not run.update("train", 51, 100, "loss 0.5000")
    # 50 steps in 10 s = 5 steps/s; 49 steps left = 9.8 s
    assert run.rate() == pytest.approx(5.0) and run.eta() == pytest.approx(9.8)
    assert run.line() == "train 51/100 steps (51%), loss 0.5000, 5 steps/s, ETA 10s"
    # a resumed run counts only this attempt's steps: from step 2000 of 3000, 100 steps in 20 s
    resumed = RunProgress(clock)
    resumed.update("train", 2000, 3000, "loss 0.1")
    now[0] = 30.0
    resumed.update("train", 2100, 3000, "loss 0.1")
    assert resumed.rate() == pytest.approx(5.0) and resumed.eta() == pytest.approx(180.0)


def sweep(n=1, every=30.0, tty=False):
    now, clock = clock_at()
    configs = [RunConfig(pe="nope", task="copy", seed=s) for s in range(n)]
    report = SweepReport(configs, tty=tty, every=every, clock=clock)
    return report, now


def test_off_a_terminal_a_run_prints_a_line_every_30_seconds_and_at_each_phase_end(capsys):
    report, now = sweep()
    job = SimpleNamespace(index=1, attempt=1)
    report.started(job)
    progress = report.progress_for(job)
    for step in range(1, 101):  # 100 steps, one per second
        now[0] = float(step)
        progress("train", step, 100, f"loss {1 / step:.4f}")
    for length in range(0, 9):  # the evaluation starts (0 of 8), then 8 lengths, 10 s each
        now[0] = 100.0 + 10 * length
        progress("eval", length, 8, f"length {length}: EM 0.50" if length else "")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "[1/1] nope on copy seed 0: started"
    train = [ln for ln in lines if ": train " in ln]
    # at 31 s, 61 s, 91 s (30 s after the phase's first report at 1 s) and the last step
    assert [re.search(r"train (\d+)/", ln).group(1) for ln in train] == ["31", "61", "91", "100"]
    assert train[0] == "[1/1] nope on copy seed 0: train 31/100 steps (31%), loss 0.0323, 1 steps/s, ETA 69s"
    assert train[-1].endswith("train 100/100 steps (100%), loss 0.0100, 1 steps/s")  # done: no ETA
    evals = [ln for ln in lines if ": eval " in ln]
    # every 30 s from the start of the evaluation (at 3 and 6 of 8 lengths), then its end; no training loss
    assert [re.search(r"eval (\d)/", ln).group(1) for ln in evals] == ["3", "6", "8"]
    assert evals[0] == "[1/1] nope on copy seed 0: eval 3/8 lengths (38%), length 3: EM 0.50, 0.1 lengths/s, ETA 50s"
    assert not any("loss" in ln for ln in evals)


def test_on_a_terminal_bars_carry_labelled_fields_and_the_eval_bar_no_training_loss(capsys, monkeypatch):
    # a terminal wide enough for every field: tqdm's rate is real time, and a rate of six
    # digits (a fast, idle worker) pushed the loss past 80 columns
    monkeypatch.setenv("COLUMNS", "200")
    report, now = sweep(tty=True)
    job = SimpleNamespace(index=1, attempt=1)
    report.started(job)
    progress = report.progress_for(job)
    for step in range(1, 21):
        now[0] = step / 10
        progress("train", step, 20, "loss 0.2500")
    progress("eval", 0, 8, "")
    progress("eval", 8, 8, "length 8: EM 0.75")
    result = SimpleNamespace(train_seconds=2.0, eval_seconds=1.0)
    report.finished(job, RunOutcome("a", "finished"), result)
    report.close_bars()
    out = capsys.readouterr().out
    screens = [s for s in re.split(r"[\r\n]", out) if s.strip()]
    train = [s for s in screens if "seed 0 train:" in s]
    evals = [s for s in screens if "seed 0 eval:" in s]
    assert train and "20/20" in train[-1] and "loss 0.2500" in train[-1] and "step/s" in train[-1]
    assert evals and "8/8" in evals[-1] and "length 8: EM 0.75" in evals[-1]
    assert not any("loss" in s for s in evals)
    assert "[1/1] nope on copy seed 0: finished in 3.0s (done 1/1, running 0, failed 0)" in screens


def test_pool_workers_progress_is_throttled_and_reaches_the_driver_before_the_result():
    now, clock = clock_at()
    sent = []
    progress = throttled_progress(sent.append, interval=0.5, clock=clock)
    for step in range(1, 11):  # 10 steps, 0.1 s apart: the first, every 0.5 s, and the last
        now[0] = step / 10
        progress("train", step, 10, f"loss {step}")
    progress("eval", 0, 3, "")  # a new phase always goes
    assert [(r.phase, r.done) for r in sent] == [("train", 1), ("train", 6), ("train", 10), ("eval", 0)]

    # the driver's side: what a worker sent, read in order, progress and notices handed on
    job = Job(1, {}, "run1", "/nonexistent/run1.pt")
    seen = []
    pool = LocalPool(
        ["cpu"],
        progress_for=lambda j: lambda *args: seen.append((j.run_id, "progress", *args)),
        notice=lambda j, msg: seen.append((j.run_id, "notice", msg)),
    )
    parent, child = multiprocessing.Pipe()
    slot = _Slot("cpu", conn=parent, job=job)
    child.send(NoticeReport("run run1: resuming from step 10"))
    child.send(ProgressReport("train", 20, 30, "loss 0.5"))
    assert pool._read(slot) is None  # no result yet
    result = RunResult("run1", "finished", {}, 0.0)
    child.send(ProgressReport("eval", 8, 8, "length 8: EM 1.00"))
    child.send(result)
    assert pool._read(slot) == result
    assert seen == [
        ("run1", "notice", "run run1: resuming from step 10"),
        ("run1", "progress", "train", 20, 30, "loss 0.5"),
        ("run1", "progress", "eval", 8, 8, "length 8: EM 1.00"),
    ]
    assert pool.live_notices  # so the driver does not print the result's notices again


@pytest.mark.slow
def test_bench_off_a_terminal_shows_each_pool_workers_progress(tmp_path):
    from click.testing import CliRunner

    from harness.cli import main

    args = ["bench", "--pe", "nope,rope", "--task", "copy", "--preset", "smoke", "--device", "cpu", "--workers", "2"]
    result = CliRunner().invoke(main, [*args, "--store", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 0, result.output
    for label in ("[1/2] nope on copy seed 0", "[2/2] rope on copy seed 0"):
        lines = [ln for ln in result.output.splitlines() if ln.startswith(label)]
        assert lines[0] == f"{label}: started"
        assert re.fullmatch(rf"{re.escape(label)}: train 20/20 steps \(100%\), loss \d\.\d{{4}}, \S+ steps/s", lines[1])
        assert re.fullmatch(
            rf"{re.escape(label)}: eval 8/8 lengths \(100%\), length 8: EM \d\.\d\d, \S+ lengths/s", lines[2]
        )
        assert lines[3].startswith(f"{label}: finished in ")
