"""Plan estimates that follow the encoding's options, scale across tasks, and probe here.

Before these, ``prism{paper}`` on odds_first (two PRISM layers) borrowed prism{paper} on
copy's speed (one layer), or, once odds_first had runs, the other encodings' (about 14x
too fast), and ``pezoo sweep plan`` put the rest of the board at 156 device-hours.
"""

from __future__ import annotations

import math
import textwrap

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.config import preset_config
from harness.evaluation.evaluate import LengthMetrics
from harness.records.store import Store
from harness.sweeps.estimate import probe_key, unmeasured
from harness.sweeps.plan import estimate_bases, make_plan
from harness.sweeps.sweep import load_sweep
from harness.training.probe import probe_speed
from tests.harness.test_sweep import finish

SCALED = "same encoding on other tasks, scaled by the tasks' speed ratio"


def write(tmp_path, text, name="sweep.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def configs_of(tmp_path, pe, task):
    sweep = f"""
    preset = "smoke"
    pe = {pe}
    task = {task}
    seeds = 1
    steps = 300
    """
    configs = load_sweep(write(tmp_path, sweep)).configs()
    return {(c.pe, dict(c.pe_options).get("n_cursors"), c.task): c for c in configs}


def test_the_same_encoding_with_other_options_is_not_the_same_encoding(tmp_path):
    cfgs = configs_of(tmp_path, '["prism{n_cursors=1}", "prism{n_cursors=2}", "nope"]', '"copy"')
    with Store(tmp_path / "s.sqlite") as store:
        finish(store, cfgs["prism", 1, "copy"], train_seconds=10.0)  # 30 steps/s
        finish(store, cfgs["nope", None, "copy"], train_seconds=1.0)  # 300 steps/s
        plan = make_plan([cfgs["prism", 2, "copy"]], store.runs())
    (run,) = plan.runs
    # not "same encoding, task and model": the options differ; but PRISM with other
    # options on this task says more than NoPE does (the old basis, "same task and model",
    # took the median of both: 165 steps/s)
    assert run.estimate.basis == "same encoding name, task and model, other options"
    assert run.estimate.seconds == pytest.approx(10.0)


def test_another_setup_of_the_encoding_on_another_task_beats_the_other_encodings_on_this_one(tmp_path):
    """prism{paper} is one PRISM layer on copy and one with a copy branch on reverse: with
    only copy's runs of it, reverse's estimate took the other encodings' median on reverse,
    and `pezoo sweep plan` put a 75-minute run at 21 minutes."""
    cfgs = configs_of(tmp_path, '["prism{n_cursors=1}", "prism{n_cursors=2}", "nope", "rope"]', '["copy", "reverse"]')
    with Store(tmp_path / "s.sqlite") as store:
        finish(store, cfgs["prism", 1, "copy"], train_seconds=30.0)  # 10 steps/s
        finish(store, cfgs["nope", None, "copy"], train_seconds=2.0)  # 150
        finish(store, cfgs["nope", None, "reverse"], train_seconds=2.5)  # 120: reverse 0.8x copy
        finish(store, cfgs["rope", None, "copy"], train_seconds=3.0)  # 100
        finish(store, cfgs["rope", None, "reverse"], train_seconds=4.0)  # 75: 0.75x
        plan = make_plan([cfgs["prism", 2, "reverse"]], store.runs())
    (run,) = plan.runs
    assert run.estimate.basis == (
        "same encoding name with other options on other tasks, scaled by the tasks' speed ratio"
    )
    assert run.estimate.steps_per_second == pytest.approx(10 * 0.775)
    # the other encodings on reverse (97.5 steps/s) would make it 12x too fast
    assert run.estimate.seconds > 10 * 300 / 97.5


def test_falls_back_to_the_encoding_name_with_other_options(tmp_path):
    cfgs = configs_of(tmp_path, '["prism{n_cursors=1}", "prism{n_cursors=2}"]', '["copy", "reverse"]')
    with Store(tmp_path / "s.sqlite") as store:
        finish(store, cfgs["prism", 1, "copy"], train_seconds=10.0)
        plan = make_plan([cfgs["prism", 2, "reverse"]], store.runs())
    (run,) = plan.runs
    assert run.estimate.basis == "same encoding name and model, other options"
    assert run.estimate.seconds == pytest.approx(10.0)


def test_the_same_encoding_on_another_task_is_scaled_by_the_tasks_ratio(tmp_path):
    cfgs = configs_of(tmp_path, '["nope", "rope", "alibi"]', '["copy", "addition"]')
    with Store(tmp_path / "s.sqlite") as store:
        finish(store, cfgs["rope", None, "copy"], train_seconds=10.0)  # 30 steps/s
        finish(store, cfgs["rope", None, "addition"], train_seconds=40.0)  # 7.5: addition 4x slower
        finish(store, cfgs["nope", None, "copy"], train_seconds=3.0)  # 100
        finish(store, cfgs["nope", None, "addition"], train_seconds=15.0)  # 20: 5x slower
        finish(store, cfgs["alibi", None, "copy"], train_seconds=60.0)  # 5 steps/s: a slow encoding
        plan = make_plan([cfgs["alibi", None, "addition"]], store.runs())
    (run,) = plan.runs
    assert run.estimate.basis == SCALED
    # alibi on copy (5 steps/s) x the median ratio of the others (1/4, 1/5 -> 0.225): 1.125 steps/s
    assert run.estimate.steps_per_second == pytest.approx(5 * 0.225)
    assert run.estimate.seconds == pytest.approx(300 / (5 * 0.225))
    # the old estimate, addition's median over other encodings (13.75 steps/s), is 12x too fast
    assert run.estimate.seconds > 10 * 300 / 13.75


def test_a_probe_comes_after_a_measured_run_and_before_borrowed_speeds(tmp_path):
    cfgs = configs_of(tmp_path, '["nope", "rope"]', '"copy"')
    nope, rope = cfgs["nope", None, "copy"], cfgs["rope", None, "copy"]
    with Store(tmp_path / "s.sqlite") as store:
        finish(store, nope, train_seconds=10.0)
        rows = store.runs()
    assert unmeasured([nope, rope], rows) == [rope]  # nope is measured: not probed
    probes = {probe_key(nope): (1.0, 5), probe_key(rope): (3.0, 5)}
    plan = make_plan([nope, rope], rows, probes=probes)
    by_pe = {r.config.pe: r for r in plan.runs}
    assert by_pe["nope"].estimate is None  # finished
    assert by_pe["rope"].estimate.basis == "a probe here (5 steps of a fresh model)"
    assert by_pe["rope"].estimate.seconds == pytest.approx(300 / 3.0)
    # a measured run of the group wins over a probe
    plan = make_plan([nope.__class__.from_dict({**nope.to_dict(), "seed": 1})], rows, probes=probes)
    assert plan.runs[0].estimate.basis == "same encoding, task and model"


def test_unmeasured_is_one_config_per_group_and_skips_other_devices(tmp_path):
    sweep = """
    preset = "smoke"
    pe = ["nope", "rope"]
    task = ["copy", "reverse"]
    seeds = 3
    steps = 300
    """
    configs = load_sweep(write(tmp_path, sweep)).configs()
    assert len(unmeasured(configs, [])) == 4
    with Store(tmp_path / "s.sqlite") as store:
        finish(store, configs[0], train_seconds=10.0, device="cuda:NVIDIA H100")
        rows = store.runs()
    assert len(unmeasured(configs, rows, "cpu")) == 4  # a GPU speed says nothing about this CPU
    assert len(unmeasured(configs, rows, "cuda")) == 3


def test_probe_speed_trains_a_fresh_model_briefly():
    cfg = preset_config("smoke", pe="rope", task="copy", seed=0)
    rate = probe_speed(cfg, steps=3, warmup=1)
    assert math.isfinite(rate) and rate > 0
    with pytest.raises(ValueError, match="steps >= 1"):
        probe_speed(cfg, steps=0)


def test_plan_probe_on_the_command_line(tmp_path):
    path = write(tmp_path, 'preset = "smoke"\npe = ["nope", "alibi"]\ntask = "copy"\nseeds = 2\nsteps = 300\n')
    result = CliRunner().invoke(main, ["sweep", "plan", str(path), "--store", str(tmp_path / "s.sqlite"), "--probe"])
    assert result.exit_code == 0, result.output
    assert "probe: timing 2 encoding x task group(s) the store has not measured" in result.output
    assert "probe 1/2: nope on copy:" in result.output and "probe 2/2: alibi on copy:" in result.output
    assert "4 from a probe here (5 steps of a fresh model)" in result.output


def test_a_variant_with_nothing_measured_is_unknown_not_a_crash(tmp_path):
    """A variant shares its trained run's probe key but trains nothing: the probe does not
    apply to it (it used to index an empty list of measured groups)."""
    path = write(
        tmp_path,
        'preset = "smoke"\npe = ["rope", "rope@{scaling={rope_type=linear,factor=2.0}}"]\n'
        'task = "copy"\nseeds = 1\nsteps = 300\n',
    )
    configs = load_sweep(path).configs()
    assert [c.is_variant for c in configs] == [False, True]
    probes = {probe_key(configs[0]): (10.0, 5)}
    plan = make_plan(configs, [], probes=probes)
    trained, variant = plan.runs
    assert trained.estimate.seconds == pytest.approx(300 / 10.0)
    assert variant.estimate is None


def test_a_failing_probe_is_reported_and_left_out(tmp_path, monkeypatch):
    import harness.training.probe as probe_module

    def diverging(cfg, *args, **kwargs):
        if cfg.pe == "alibi":
            raise RuntimeError("loss became nan at step 2")
        return 5.0

    monkeypatch.setattr(probe_module, "probe_speed", diverging)
    path = write(tmp_path, 'preset = "smoke"\npe = ["nope", "alibi"]\ntask = "copy"\nseeds = 1\nsteps = 300\n')
    result = CliRunner().invoke(main, ["sweep", "plan", str(path), "--store", str(tmp_path / "s.sqlite"), "--probe"])
    assert result.exit_code == 0, result.output
    assert "probe 2/2: alibi on copy: failed (RuntimeError: loss became nan at step 2)" in result.output
    assert "1 from a probe here" in result.output and "1 from the recorded speed of preset smoke" in result.output


def test_a_board_filled_task_by_task_takes_the_tasks_ratio_from_another_preset_of_its_shape(tmp_path):
    # the board preset is the quick model trained longer: the same cost per step on each task
    grid = 'pe = ["nope", "alibi"]\ntask = ["copy", "addition"]\nseeds = 1\n'
    quick, board = (
        {(c.pe, c.task): c for c in load_sweep(write(tmp_path, f'preset = "{p}"\n' + grid, f"{p}.toml")).configs()}
        for p in ("quick", "board")
    )
    with Store(tmp_path / "board.sqlite") as store:
        finish(store, board["alibi", "copy"], train_seconds=1000.0)  # 10 steps/s
        board_rows = store.runs()
    with Store(tmp_path / "quick.sqlite") as store:
        finish(store, quick["nope", "copy"], train_seconds=300.0)  # 10 steps/s
        finish(store, quick["nope", "addition"], train_seconds=1200.0)  # 2.5 steps/s: addition 4x slower
        quick_rows = store.runs()
    missing = [board["alibi", "addition"]]
    # without another preset's runs: copy's speed, 4x too fast
    (alone,) = make_plan(missing, board_rows).runs
    assert alone.estimate.basis == "same encoding and model" and alone.estimate.steps_per_second == pytest.approx(10)
    # with them, in the same store or published: alibi's copy speed x quick's addition/copy ratio
    for rows, published in ((board_rows + quick_rows, ()), (board_rows, quick_rows)):
        (run,) = make_plan(missing, rows, published=published).runs
        assert run.estimate.basis == SCALED + " (of another preset's runs of this model shape)"
        assert run.estimate.steps_per_second == pytest.approx(2.5)
        assert run.estimate.seconds == pytest.approx(10_000 / 2.5)
    # a preset of another shape says nothing about this one's ratio
    other = load_sweep(write(tmp_path, 'preset = "smoke"\n' + grid, "smoke.toml")).configs()
    with Store(tmp_path / "smoke.sqlite") as store:
        for cfg in other:
            if cfg.pe == "nope":
                finish(store, cfg, train_seconds=1.0 if cfg.task == "copy" else 100.0)
        smoke_rows = store.runs()
    (run,) = make_plan(missing, board_rows + smoke_rows).runs
    assert run.estimate.basis == "same encoding and model"


def test_the_plan_calls_a_running_run_whose_process_is_gone_interrupted(tmp_path):
    """After a reboot or a kill the store still says ``running``; the plan used to print that,
    and `pezoo bench` to announce "2 running" for runs no process was training."""
    from dataclasses import replace

    from harness.records.store import Owner
    from tests.harness.test_store import dead_pid

    sweep = write(tmp_path, 'preset = "smoke"\npe = ["nope", "rope"]\ntask = "copy"\nseeds = 1\nsteps = 300\n')
    nope, rope = load_sweep(sweep).configs()
    store_path = tmp_path / "s.sqlite"
    with Store(store_path) as store:
        assert store.claim(nope, {"commit": "t"}, replace(Owner.this_process(), pid=dead_pid(), start=None)).taken
        assert store.claim(rope, {"commit": "t"}).taken  # this process: alive
        result = CliRunner().invoke(main, ["sweep", "plan", str(sweep), "--store", str(store_path)])
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines()]
    status = {row[1]: row[4] for row in rows if len(row) > 4 and row[0].isdigit() and row[2] == "copy"}
    assert status == {"nope": "interrupted", "rope": "running"}
    assert "(1 interrupted, 1 running)" in result.output


OLD, HERE = "Old CPU (torch CPU kernels: AVX2)", "New CPU (torch CPU kernels: AVX512)"


def finish_on(store, cfg, train_seconds, cpu):
    """``finish`` with the CPU recorded, as runs do since provenance records it."""
    run_id = store.start(cfg, {"commit": "t", "device": "cpu:x86_64 x1 threads", "cpu": cpu})
    metrics = [("test", LengthMetrics(n, float(n), 4, 2, 4, 2)) for n in cfg.test_lengths()]
    params = {"total": 1, "pe": 0}
    store.finish(run_id, metrics, final_loss=0.1, train_seconds=train_seconds, eval_seconds=0.0, n_params=params)


def test_speeds_from_another_cpu_are_scaled_per_encoding_to_this_one(tmp_path):
    """A board moved to a faster VM: its store's runs from the old one doubled the estimates
    there (prism{paper} on odds_first: 2.7 h planned, 1.5 h taken), so a time limit
    deferred runs that fitted it. Each encoding's runs from the other CPU are scaled by how
    much faster this CPU ran that encoding; an encoding not yet run here keeps the old speed
    (encodings gain unequally: borrowing NoPE's 3x would promise PRISM's run too soon)."""
    sweep = 'preset = "smoke"\npe = ["nope", "rope", "prism"]\ntask = "copy"\nseeds = 3\nsteps = 300\n'
    cfgs = {(c.pe, c.seed): c for c in load_sweep(write(tmp_path, sweep)).configs()}
    with Store(tmp_path / "s.sqlite") as store:
        finish_on(store, cfgs["nope", 0], 30.0, OLD)  # 10 steps/s
        finish_on(store, cfgs["nope", 1], 10.0, HERE)  # 30: this CPU runs nope 3x faster
        finish_on(store, cfgs["rope", 0], 10.0, OLD)  # 30 steps/s, never run here
        finish_on(store, cfgs["prism", 0], 100.0, OLD)  # 3 steps/s
        finish_on(store, cfgs["prism", 1], 50.0, HERE)  # 6: 2x faster here
        missing = [cfgs["nope", 2], cfgs["rope", 1], cfgs["prism", 2]]
        rows = store.runs()
    plan = make_plan(missing, rows, machine=HERE)
    nope, rope, prism = (r.estimate for r in plan.runs)
    assert nope.steps_per_second == pytest.approx(30.0)  # both nope runs, the old one scaled x3
    assert rope.steps_per_second == pytest.approx(30.0)  # no rope run here: not borrowed from nope
    assert prism.steps_per_second == pytest.approx(6.0)  # the old run scaled x2, not x3
    assert "prism on Old CPU (torch CPU kernels: AVX2) scaled ×2.00 to this CPU (from 1 measured on both)" in (
        estimate_bases(plan)
    )
    # without the machine, the old way: the median of both CPUs' speeds
    unscaled = make_plan(missing, rows).runs[2].estimate
    assert unscaled.steps_per_second == pytest.approx(4.5)
    # and the other way round: planned on the old CPU, the new one's runs are scaled down
    assert make_plan(missing, rows, machine=OLD).runs[2].estimate.steps_per_second == pytest.approx(3.0)


def test_a_stores_unrecorded_cpu_is_not_scaled_by_pairs_from_published_runs(tmp_path):
    """Runs that did not record their CPU are one machine within a store, not across a store
    and the published board: a CI machine whose CPU published runs share scaled a test
    store's runs by the board's factor (10 minutes planned as 7)."""
    sweep = 'preset = "smoke"\npe = ["nope"]\ntask = "copy"\nseeds = 3\nsteps = 300\n'
    cfgs = {c.seed: c for c in load_sweep(write(tmp_path, sweep)).configs()}
    with Store(tmp_path / "pub.sqlite") as store:
        finish_on(store, cfgs[0], 30.0, None)  # the published board: old CPU unrecorded ...
        finish_on(store, cfgs[1], 10.0, HERE)  # ... and this CPU, 3x faster
        published = store.runs()
    with Store(tmp_path / "s.sqlite") as store:
        finish_on(store, cfgs[0], 60.0, None)  # a store of this user's own, CPU unrecorded
        rows = store.runs()
    plan = make_plan([cfgs[2]], rows, published=published, machine=HERE)
    assert plan.runs[0].estimate.steps_per_second == pytest.approx(5.0)  # 300 steps / 60 s, unscaled


def test_the_plan_says_what_each_task_has_left(tmp_path):
    """A board filled column by column: which task costs what decides which to fill first
    or leave out (addition cost as much as the other four together), so the plan says it."""
    from harness.sweeps.plan import task_lines

    sweep = 'preset = "smoke"\npe = ["nope"]\ntask = ["copy", "reverse"]\nseeds = 3\nsteps = 300\n'
    cfgs = {(c.task, c.seed): c for c in load_sweep(write(tmp_path, sweep)).configs()}
    with Store(tmp_path / "s.sqlite") as store:
        finish_on(store, cfgs["copy", 0], 3600.0, HERE)  # an hour per copy run
        finish_on(store, cfgs["reverse", 0], 7200.0, HERE)  # two per reverse run
        rows = store.runs()
    plan = make_plan(list(cfgs.values()), rows, machine=HERE)
    assert task_lines(plan) == "left by task (device time): copy 2 runs, 2.0 h; reverse 2 runs, 4.0 h"
    assert task_lines(make_plan([cfgs["copy", 1]], rows, machine=HERE)) is None  # one task: nothing to compare
