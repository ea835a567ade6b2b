"""``pezoo bench --time-limit``: runs that would not end before the limit are deferred, not
started, and a shorter run after them goes instead; nothing is recorded for them."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.config import preset_config
from harness.records.store import Store
from harness.sweeps.deadline import MARGIN, TimeLimit, parse_duration, probing
from harness.sweeps.executors import run_sweep
from tests.harness.test_executors import Recorder, Scripted, finished


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("2h30m", 9000), ("90m", 5400), ("1.5h", 5400), ("45s", 45), ("600", 600), ("1h0m30s", 3630), (" 2H ", 7200)],
)
def test_durations_parse(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "2x", "-5m", "1m2h", "0", "0m", "two hours", "5 m"])
def test_bad_durations_are_refused_saying_how_to_write_one(text):
    with pytest.raises(ValueError, match=r"duration|longer than 0"):
        parse_duration(text)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_run_is_admitted_only_if_it_is_expected_to_end_before_the_limit():
    clock = Clock()
    expected = {1: 600.0, 2: 3000.0, 3: None}
    limit = TimeLimit(3600, expected.get, clock)
    assert limit.admit(1) is None and limit.admit(2) is None
    clock.now += 3600 - 3000 * MARGIN  # just enough left for run 2, margin included
    assert limit.admit(2) is None
    clock.now += 1
    reason = limit.admit(2)
    assert reason is not None and "expected to take 50m" in reason and "of the time limit (60m)" in reason
    assert limit.admit(1) is None  # a shorter run still fits
    assert limit.admit(3) is None  # no estimate: started while time is left
    clock.now += 3600
    assert limit.left() < 0 and "has passed" in (limit.admit(3) or "") and "has passed" in (limit.admit(1) or "")


def smoke(pe):
    return preset_config("smoke", pe=pe, task="copy", seed=0)


class Deferring(Recorder):
    def waiting(self, index, cfg, reason):
        self.log.append(("waiting", index, reason))

    def deferred(self, index, cfg, reason):
        self.log.append(("deferred", index, reason))


def test_the_driver_defers_what_admit_refuses_and_starts_the_shorter_runs_after_it(tmp_path):
    long, short, after = smoke("nope"), smoke("rope"), smoke("alibi")
    asked = []

    def admit(index, cfg):
        asked.append(index)
        return "too long" if cfg.pe == "nope" else None

    events = Deferring()
    executor = Scripted({short.run_id(): [finished], after.run_id(): [finished]}, capacity=1)
    with Store(tmp_path / "s.sqlite") as store:
        outcomes = run_sweep(executor, [long, short, after], store, events=events, admit=admit)
        assert store.run(long.run_id()) is None  # not claimed, nothing recorded: a later sweep runs it
        assert store.status(short.run_id()) == store.status(after.run_id()) == "finished"
    last = outcomes[-1]  # deferred once nothing was left to run: it waited, asked again each time
    assert (last.run_id, last.status, last.error) == (long.run_id(), "deferred", "too long")
    assert [j.run_id for j in executor.submitted] == [short.run_id(), after.run_id()]
    assert [e for e in events.log if e[0] in ("waiting", "deferred")] == [("waiting", 1, "too long"),
                                                                          ("deferred", 1, "too long")]  # fmt: skip
    assert asked == [1, 1, 2, 1, 3, 1]


def test_a_waiting_run_starts_before_the_runs_after_it_once_it_fits(tmp_path):
    """A probe on a loaded machine can overestimate a run by half: once a run of its kind ends
    the estimate is better, and the run that waited goes before the runs listed after it."""
    long, short, after = smoke("nope"), smoke("rope"), smoke("alibi")
    events = Deferring()
    executor = Scripted({r.run_id(): [finished] for r in (long, short, after)}, capacity=1)

    def admit(index, cfg):  # run 1 fits once run 2 has ended (what a better estimate would say)
        ended = any(e[0] == "finished" and e[1] == 2 for e in events.log)
        return None if cfg.pe != "nope" or ended else "expected to take 50m and 40m is left"

    with Store(tmp_path / "s.sqlite") as store:
        outcomes = run_sweep(executor, [long, short, after], store, events=events, admit=admit)
    assert [j.run_id for j in executor.submitted] == [short.run_id(), long.run_id(), after.run_id()]
    assert [o.status for o in outcomes] == ["finished"] * 3
    assert ("waiting", 1, "expected to take 50m and 40m is left") in events.log
    assert not any(e[0] == "deferred" for e in events.log)


def test_a_variant_waits_with_its_trained_run(tmp_path):
    trained = smoke("rope")
    variant = smoke("rope@{scaling={rope_type=linear,factor=4.0}}")
    other = smoke("alibi")
    events = Deferring()
    executor = Scripted({r.run_id(): [finished] for r in (trained, variant, other)}, capacity=1)

    def admit(index, cfg):  # the trained run fits once alibi has ended
        ended = any(e[0] == "finished" and e[1] == 3 for e in events.log)
        return None if cfg.pe != "rope" or ended else "long"

    with Store(tmp_path / "s.sqlite") as store:
        outcomes = run_sweep(executor, [trained, variant, other], store, events=events, admit=admit)
    assert [j.run_id for j in executor.submitted] == [other.run_id(), trained.run_id(), variant.run_id()]
    assert [o.status for o in outcomes] == ["finished"] * 3


def test_a_retry_is_not_asked_again(tmp_path):
    from tests.harness.test_executors import lost

    cfg = smoke("rope")
    answers = iter([None, "would not be asked"])
    executor = Scripted({cfg.run_id(): [lost, finished]})
    with Store(tmp_path / "s.sqlite") as store:
        (outcome,) = run_sweep(executor, [cfg], store, admit=lambda i, c: next(answers))
    assert outcome.status == "finished" and len(executor.submitted) == 2


def test_the_variants_of_a_deferred_run_are_deferred_with_it(tmp_path):
    trained = smoke("rope")
    variant = smoke("rope@{scaling={rope_type=linear,factor=4.0}}")
    assert variant.is_variant and variant.trained_config().run_id() == trained.run_id()
    events = Deferring()
    executor = Scripted({})
    with Store(tmp_path / "s.sqlite") as store:
        outcomes = run_sweep(
            executor, [trained, variant], store, events=events, admit=lambda i, c: None if c.is_variant else "long"
        )
    assert [o.status for o in outcomes] == ["deferred", "deferred"] and not executor.submitted
    assert outcomes[1].error == f"its trained run {trained.run_id()} was deferred"


def test_bench_defers_every_run_that_cannot_end_in_time_and_says_so(tmp_path):
    store = tmp_path / "s.sqlite"
    args = ["bench", "--pe", "nope,rope", "--task", "copy", "--preset", "smoke", "--device", "cpu", "--workers", "1"]
    # the smoke preset's recorded speed puts a run at about 0.1 s: 1 ms fits none
    result = CliRunner().invoke(main, [*args, "--store", str(store), "--time-limit", "0.001s"])
    assert result.exit_code == 0, result.output
    assert "time limit <1s: a run is started only if it is expected to end within it" in result.output
    assert result.output.count(": deferred, ") == 2  # expected to take longer, or the limit has passed
    assert "2 runs deferred by --time-limit, not started: run the same command again to continue." in result.output
    with Store(store) as s:
        assert s.runs() == []


def test_a_bad_time_limit_is_refused_before_the_store_is_made(tmp_path):
    store = tmp_path / "s.sqlite"
    args = ["bench", "--pe", "nope", "--task", "copy", "--preset", "smoke", "--store", str(store)]
    result = CliRunner().invoke(main, [*args, "--time-limit", "2 hours"])
    assert result.exit_code == 2 and "Invalid value for '--time-limit'" in result.output
    assert "is not a duration" in result.output and not store.exists()


def test_a_waiting_run_leaves_the_count_and_comes_back_if_it_starts(capsys):
    from types import SimpleNamespace

    from harness.sweeps.progress import SweepReport

    configs = [smoke("nope"), smoke("rope")]
    report = SweepReport(configs, tty=False)
    report.waiting(1, configs[0], "too long")
    assert report.todo == 1 and report.queue == [2]
    assert "[1/2] nope on copy seed 0: waits, too long; asked again as runs end" in capsys.readouterr().out
    report.started(SimpleNamespace(index=1, attempt=1))
    assert report.todo == 2 and report.running == {1}
    report.waiting(2, configs[1], "too long")
    report.deferred(2, configs[1], "too long")  # it never fitted
    assert report.todo == 1 and report.deferred_runs == ["[2/2] rope on copy seed 0: too long"]


def test_a_run_is_expected_to_take_what_its_own_kind_took_in_this_sweep():
    """A probe taken while the workers were busy put hybrid at 24 minutes a run on flip_flop;
    the first took 15: the next of its kind is expected to take 15, whatever its estimate."""
    from types import SimpleNamespace

    from harness.records.result import RunOutcome
    from harness.sweeps.progress import SweepReport

    configs = [smoke("nope"), smoke("rope"), preset_config("smoke", pe="nope", task="copy", seed=1)]
    now = [0.0]
    report = SweepReport(configs, tty=False, clock=lambda: now[0])
    report.estimates = {1: 1440.0, 2: 600.0, 3: 1440.0}
    report.started(SimpleNamespace(index=1, attempt=1))
    now[0] = 900.0
    done = SimpleNamespace(train_seconds=1.0, eval_seconds=0.0)
    report.finished(SimpleNamespace(index=1, attempt=1), RunOutcome(configs[0].run_id(), "finished"), done)
    assert report.expected_seconds(3) == pytest.approx(900.0)  # nope seed 1: what nope seed 0 took
    assert report.expected_seconds(2) == pytest.approx(600.0 * 900.0 / 1440.0)  # rope: its estimate, rescaled
    report._part_left[3] = 0.25  # had it a checkpoint at three quarters of its steps: the quarter left
    assert report.expected_seconds(3) == pytest.approx(225.0)


def test_the_report_knows_the_part_a_checkpoint_leaves_from_the_plan(tmp_path):
    from harness.sweeps.plan import make_plan
    from harness.sweeps.progress import SweepReport

    configs = [smoke("nope"), preset_config("smoke", pe="nope", task="copy", seed=1)]
    steps = configs[1].train.steps
    plan = make_plan(configs, [], {configs[1].run_id(): steps // 4}, device_type="cpu")
    report = SweepReport(configs, plan, tty=False)
    assert plan.runs[1].estimate is not None and plan.runs[1].estimate.from_step == steps // 4 == 5
    assert report._part_left == {2: 0.75}


def test_deferred_runs_leave_the_eta_and_are_listed_for_the_last_words(capsys):
    from harness.sweeps.progress import SweepReport

    configs = [smoke("nope"), smoke("rope")]
    report = SweepReport(configs, tty=False)
    report.deferred(1, configs[0], "too long")
    assert report.todo == 1 and report.queue == [2]
    assert len(report.deferred_runs) == 1 and report.deferred_runs[0] == "[1/2] nope on copy seed 0: too long"
    assert "[1/2] nope on copy seed 0: deferred, too long; not started" in capsys.readouterr().out


def test_a_run_no_finished_run_measured_is_probed_once_before_it_is_judged():
    estimates = {1: 60.0, 2: 60.0}
    probes = []

    def probe(index):
        probes.append(index)
        estimates[index] = 7200.0  # what the probe found: far slower than borrowed speeds said

    expect = probing(estimates.get, measured=lambda i: i == 1, probe=probe)
    limit = TimeLimit(3600, expect, Clock())
    assert limit.admit(1) is None and probes == []  # measured: its estimate stands
    assert "expected to take 2.0h" in (limit.admit(2) or "") and probes == [2]
    limit.admit(2)
    assert probes == [2]  # once per run


def test_bench_probes_the_runs_it_cannot_estimate_from_their_own_kind_and_trains_what_fits(tmp_path):
    store = tmp_path / "s.sqlite"
    args = ["bench", "--task", "copy", "--preset", "smoke", "--device", "cpu", "--workers", "1", "--store", str(store)]
    first = CliRunner().invoke(main, [*args, "--pe", "nope"])
    assert first.exit_code == 0, first.output
    result = CliRunner().invoke(main, [*args, "--pe", "nope,rope", "--seeds", "2", "--time-limit", "1h"])
    assert result.exit_code == 0, result.output
    # nope seed 1 is estimated from nope seed 0's finished run; rope has none: timed once, for both seeds
    assert "nope on copy seed 1: timing" not in result.output
    assert result.output.count("timing a few training steps here: no finished run of it to estimate from") == 1
    assert "rope on copy seed 0: timing a few training steps here" in result.output
    assert result.output.count("steps/s here, about") == 2 and ": deferred," not in result.output
    with Store(store) as s:
        assert sorted((r["pe"], r["seed"], r["status"]) for r in s.runs()) == [
            ("nope", 0, "finished"),
            ("nope", 1, "finished"),
            ("rope", 0, "finished"),
            ("rope", 1, "finished"),
        ]
