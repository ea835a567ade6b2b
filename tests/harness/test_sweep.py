"""Sweep specifications (command-line lists, TOML files) and sweep plans (done/missing,
device-hour estimates from measured steps/s). Nothing here trains a model."""

from __future__ import annotations

import dataclasses
import itertools
import textwrap

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.cli import main
from harness.config import preset_config
from harness.evaluation.evaluate import LengthMetrics
from harness.records.store import Store
from harness.sweeps.estimate import checkpointed_steps, eval_units
from harness.sweeps.labels import run_label, varying_axes
from harness.sweeps.plan import format_plan, longest_first, make_plan, makespan, seeds_first
from harness.sweeps.sweep import Grid, SweepSpec, load_sweep, parse_list


def write(tmp_path, text, name="sweep.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def key(cfg):
    return (cfg.task, cfg.pe, cfg.seed, cfg.train.lr, cfg.train.steps, cfg.preset)


# -- sweep files ----------------------------------------------------------------------


def test_sweep_file_is_the_cross_product_in_task_pe_axis_seed_order(tmp_path):
    path = write(
        tmp_path,
        """
        preset = "smoke"
        pe = ["nope", "rope"]
        task = "copy, reverse"
        seeds = 2
        seed = 5
        lr = [1e-3, 3e-4]
        steps = 7
        """,
    )
    configs = load_sweep(path).configs()
    expected = [
        (task, pe, seed, lr, 7, "smoke")
        for task in ("copy", "reverse")
        for pe in ("nope", "rope")
        for lr in (1e-3, 3e-4)
        for seed in (5, 6)
    ]
    assert [key(c) for c in configs] == expected
    assert len({c.run_id() for c in configs}) == 16
    assert configs[0] == preset_config(
        "smoke", pe="nope", task="copy", seed=5, overrides={"train": {"lr": 1e-3, "steps": 7}}
    )


def test_grid_tables_union_over_top_level_defaults_without_duplicates(tmp_path):
    path = write(
        tmp_path,
        """
        preset = "smoke"
        task = ["copy"]
        seeds = [0, 3]

        [[grid]]
        pe = ["nope", "rope"]

        [[grid]]
        pe = ["rope"]            # rope on copy again: planned once
        task = ["copy", "reverse"]
        seeds = [3]
        """,
    )
    configs = load_sweep(path).configs()
    assert [key(c)[:3] for c in configs] == [
        ("copy", "nope", 0),
        ("copy", "nope", 3),
        ("copy", "rope", 0),
        ("copy", "rope", 3),
        ("reverse", "rope", 3),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('pe = "rope"\ntask = "copy"\nlearning_rate = 1e-3\n', "unknown key(s) learning_rate; valid keys: preset, pe"),
        ('pe = "rope"\ntask = "copy"\nsteps = 1.5\n', "steps must be a int"),
        ('pe = "rope"\ntask = "copy"\nlr = "fast"\n', "lr must be a float"),
        ('pe = "rope"\ntask = "copy"\nseeds = 0\n', "seeds must be a count >= 1"),
        ('pe = "rope"\ntask = "copy"\nseeds = [1, 2]\nseed = 4\n', "either seeds = [list] or seed"),
        ('pe = "rope"\ntask = "copy"\npreset = "huge"\n', "unknown preset 'huge'"),
        ('task = "copy"\n', "at least one encoding"),
        ('pe = "rope"\ntask = "copy"\ngrid = 3\n', "[[grid]] tables"),
        ('pe = ["rope"\n', "not valid TOML"),
    ],
)
def test_bad_sweep_files_say_what_is_wrong(tmp_path, text, message):
    with pytest.raises(ValueError) as err:
        load_sweep(write(tmp_path, text)).configs()
    assert message in str(err.value)


def test_command_line_values_replace_the_files(tmp_path):
    spec = load_sweep(write(tmp_path, 'preset = "smoke"\npe = ["nope", "rope"]\ntask = "copy"\nlr = [1e-3, 3e-4]\n'))
    configs = spec.override(pe=("alibi",), lr=(5e-4,), seeds=(1, 2), preset=None).configs()
    assert [key(c)[:4] for c in configs] == [("copy", "alibi", 1, 5e-4), ("copy", "alibi", 2, 5e-4)]
    assert {c.preset for c in configs} == {"smoke"}  # None keeps the file's value


def test_a_grid_sets_the_output_layer_and_a_wrong_one_is_refused(tmp_path):
    text = 'preset = "smoke"\ntask = "copy"\n[[grid]]\npe = "nope"\n[[grid]]\npe = "rope"\nhead = "untied"\n'
    configs = load_sweep(write(tmp_path, text)).configs()
    assert [(c.pe, c.backbone.head) for c in configs] == [("nope", "tied"), ("rope", "untied")]
    with pytest.raises(ValueError, match=r"unknown backbone\.head 'own'"):
        load_sweep(write(tmp_path, 'preset = "smoke"\ntask = "copy"\npe = "nope"\nhead = "own"\n')).configs()


def test_parse_list():
    assert parse_list("1e-4, 3e-4,5e-4", float) == (1e-4, 3e-4, 5e-4)
    assert parse_list("100", int) == (100,)
    with pytest.raises(ValueError, match="'1,x' is not a comma-separated list of int"):
        parse_list("1,x", int)


@settings(max_examples=15, deadline=None)
@given(
    n_pe=st.integers(1, 3),
    n_task=st.integers(1, 2),
    seeds=st.lists(st.integers(0, 50), min_size=1, max_size=3, unique=True),
    lrs=st.lists(st.sampled_from([1e-4, 3e-4, 1e-3]), max_size=3, unique=True),
    steps=st.lists(st.integers(1, 9), max_size=2, unique=True),
)
def test_grid_size_is_the_product_of_its_axes(n_pe, n_task, seeds, lrs, steps):
    grid = Grid(
        preset="smoke",
        pe=("nope", "rope", "alibi")[:n_pe],
        task=("copy", "reverse")[:n_task],
        seeds=tuple(seeds),
        lr=tuple(lrs),
        steps=tuple(steps),
    )
    configs = SweepSpec((grid,)).configs()
    assert len(configs) == n_pe * n_task * len(seeds) * max(1, len(lrs)) * max(1, len(steps))
    names = [p.name for p in grid.pe]
    assert {(c.pe, c.task, c.seed) for c in configs} == set(itertools.product(names, grid.task, seeds))
    assert len({c.run_id() for c in configs}) == len(configs)


def test_labels_name_only_what_varies():
    configs = SweepSpec((Grid(preset="smoke", pe=("rope",), task=("copy",), lr=(1e-3, 3e-4)),)).configs()
    assert varying_axes(configs) == ["lr"]
    assert run_label(configs[1], varying_axes(configs)) == "rope on copy seed 0 lr 0.0003"
    assert varying_axes(configs[:1]) == []


# -- plans ----------------------------------------------------------------------------


def finish(store, cfg, train_seconds, eval_seconds=0.0, device="cpu:test x1 threads"):
    """Record a finished run of ``cfg`` in ``store`` with the given timings (also used by other sweep tests)."""
    run_id = store.start(cfg, {"commit": "t", "device": device})
    metrics = [("test", LengthMetrics(n, float(n), 4, 2, 4, 2)) for n in cfg.test_lengths()]
    store.finish(
        run_id,
        metrics,
        final_loss=0.1,
        train_seconds=train_seconds,
        eval_seconds=eval_seconds,
        n_params={"total": 1, "pe": 0},
    )


SWEEP = """
preset = "smoke"
pe = ["nope", "rope", "alibi"]
task = "copy"
seeds = 2
steps = 300
"""


def test_plan_counts_done_and_estimates_missing_runs_from_measured_speed(tmp_path):
    configs = load_sweep(write(tmp_path, SWEEP)).configs()  # nope0 nope1 rope0 rope1 alibi0 alibi1
    store_path = tmp_path / "s.sqlite"
    with Store(store_path) as store:
        # nope seed 0: 300 steps in 10 s = 30 steps/s; rope seed 0: 300 steps in 30 s = 10 steps/s
        finish(store, configs[0], train_seconds=10.0, eval_seconds=2.0)
        finish(store, configs[2], train_seconds=30.0, eval_seconds=4.0)
        store.start(configs[3], {"commit": "t"})
        store.mark(configs[3].run_id(), "failed", "boom")
        plan = make_plan(configs, store.runs())
    assert (plan.done, plan.missing) == (2, 4)
    assert plan.counts() == {"finished": 2, "not started": 3, "failed": 1}
    units = eval_units(configs[0])  # samples x evaluated scales, the same for every run here
    assert units == 8 * (5 + 3)
    by_index = {r.index: r for r in plan.runs}
    # nope seed 1 takes nope's speed; rope seed 1 rope's (same encoding, task and model)
    assert by_index[2].estimate.seconds == pytest.approx(300 / 30 + units * (2.0 / units))
    assert by_index[4].estimate.seconds == pytest.approx(300 / 10 + units * (4.0 / units))
    assert by_index[4].estimate.basis == "same encoding, task and model"
    # alibi was never measured: the median over runs of the same task and model (20 steps/s, 3 s eval)
    assert by_index[5].estimate.basis == "same task and model"
    assert by_index[5].estimate.seconds == pytest.approx(300 / 20 + 3.0)
    assert by_index[1].estimate is None  # finished: nothing to estimate
    hours = (10 + 2 + 30 + 4 + 2 * (15 + 3)) / 3600
    assert plan.device_hours == pytest.approx(hours)
    text = format_plan(plan)
    assert "6 runs: 2 done, 4 missing (1 failed, 3 not started)" in text
    assert f"{hours:.2f} device-hours for 4 missing runs" in text and "cpu:test x1 threads" in text


def test_plan_estimates_from_the_same_task_before_the_same_encoding(tmp_path):
    sweep = SWEEP.replace('task = "copy"', 'task = ["copy", "addition"]').replace("seeds = 2", "seeds = 1")
    configs = {(c.pe, c.task): c for c in load_sweep(write(tmp_path, sweep)).configs()}
    with Store(tmp_path / "s.sqlite") as store:
        # copy is fast (rope 10 s); addition is slow (nope 30 s = 10 steps/s, rope 60 s = 5 steps/s)
        finish(store, configs["rope", "copy"], train_seconds=10.0, eval_seconds=0.0)
        finish(store, configs["nope", "addition"], train_seconds=30.0, eval_seconds=0.0)
        finish(store, configs["rope", "addition"], train_seconds=60.0, eval_seconds=0.0)
        plan = make_plan(list(configs.values()), store.runs())
    by_key = {(r.config.pe, r.config.task): r.estimate for r in plan.runs}
    # alibi on addition: addition's median speed (7.5 steps/s: 40 s), not rope on copy's 10 s
    assert by_key["alibi", "addition"].basis == "same task and model"
    assert by_key["alibi", "addition"].seconds == pytest.approx(300 / 7.5)
    # nope on copy: nope on addition (10 steps/s) scaled by rope's copy/addition ratio
    # (30 / 5 steps/s): 60 steps/s, 5 s; not copy's only run (rope, 10 s), nor nope on addition's 30 s
    assert by_key["nope", "copy"].basis == "same encoding on other tasks, scaled by the tasks' speed ratio"
    assert by_key["nope", "copy"].seconds == pytest.approx(300 / 60)


def test_plan_falls_back_to_the_same_encoding_on_another_task(tmp_path):
    sweep = SWEEP.replace('task = "copy"', 'task = ["copy", "addition"]').replace("seeds = 2", "seeds = 1")
    configs = {(c.pe, c.task): c for c in load_sweep(write(tmp_path, sweep)).configs()}
    with Store(tmp_path / "s.sqlite") as store:
        finish(store, configs["rope", "copy"], train_seconds=10.0, eval_seconds=0.0)
        plan = make_plan([configs["rope", "addition"]], store.runs())
    (run,) = plan.runs
    assert run.estimate.basis == "same encoding and model" and run.estimate.seconds == pytest.approx(10.0)


def test_longest_first_puts_the_long_missing_runs_first(tmp_path):
    configs = load_sweep(write(tmp_path, SWEEP)).configs()  # nope0 nope1 rope0 rope1 alibi0 alibi1
    assert longest_first(configs, []) == configs  # nothing measured: the listed order
    with Store(tmp_path / "s.sqlite") as store:
        finish(store, configs[0], train_seconds=10.0, eval_seconds=0.0)  # nope: 10 s
        finish(store, configs[2], train_seconds=30.0, eval_seconds=0.0)  # rope: 30 s
        finish(store, configs[4], train_seconds=20.0, eval_seconds=0.0)  # alibi: 20 s
        ordered = longest_first(configs, store.runs())
    assert [(c.pe, c.seed) for c in ordered] == [
        ("nope", 0), ("rope", 0), ("alibi", 0),  # finished (skipped) first, in listed order
        ("rope", 1), ("alibi", 1), ("nope", 1),  # then 30 s, 20 s, 10 s
    ]  # fmt: skip


def test_bench_order_longest_first_starts_the_longest_run_first(tmp_path):
    path = write(tmp_path, SWEEP.replace('pe = ["nope", "rope", "alibi"]', 'pe = ["nope", "rope"]').replace("300", "2"))
    configs = load_sweep(path).configs()  # nope0 nope1 rope0 rope1

    def bench(order):
        store_path = tmp_path / f"{order}.sqlite"
        with Store(store_path) as store:  # nope measured at 0.1 s, rope at 100 s
            finish(store, configs[0], train_seconds=0.1, eval_seconds=0.0)
            finish(store, configs[2], train_seconds=100.0, eval_seconds=0.0)
        args = ["--sweep", str(path), "--order", order, "--device", "cpu", "--workers", "1", "--store", str(store_path)]
        result = CliRunner().invoke(main, ["bench", *args])
        assert result.exit_code == 0, result.output
        return result.output

    listed = bench("listed")  # one worker in this process: the runs start in the order run
    assert listed.index("[2/4] nope on copy seed 1: started") < listed.index("[4/4] rope on copy seed 1: started")
    longest = bench("longest-first")
    assert longest.index("[3/4] rope on copy seed 1: started") < longest.index("[4/4] nope on copy seed 1: started")


def test_seeds_first_gives_every_row_its_first_seed_before_any_its_second(tmp_path):
    configs = load_sweep(write(tmp_path, SWEEP.replace("seeds = 2", "seeds = 3"))).configs()
    extra = [dataclasses.replace(c, seed=c.seed + 3) for c in configs if c.pe == "rope"]  # rope split: seeds 3-5
    lr = [dataclasses.replace(c, train=dataclasses.replace(c.train, lr=1e-4)) for c in configs if c.pe == "nope"]
    ordered = seeds_first(configs + extra + lr)
    assert [(c.pe, c.seed, c.train.lr == 1e-4) for c in ordered] == [
        ("nope", 0, False), ("rope", 0, False), ("alibi", 0, False), ("nope", 0, True),  # listed order
        ("nope", 1, False), ("rope", 1, False), ("alibi", 1, False), ("nope", 1, True),
        ("nope", 2, False), ("rope", 2, False), ("alibi", 2, False), ("nope", 2, True),
        ("rope", 3, False), ("rope", 4, False), ("rope", 5, False),  # a row's extra seeds last
    ]  # fmt: skip
    assert sorted(c.run_id() for c in ordered) == sorted(c.run_id() for c in configs + extra + lr)


def test_bench_order_seeds_first_trains_every_row_s_seed_0_first(tmp_path):
    path = write(tmp_path, SWEEP.replace('pe = ["nope", "rope", "alibi"]', 'pe = ["nope", "rope"]').replace("300", "2"))
    args = ["--sweep", str(path), "--order", "seeds-first", "--device", "cpu", "--workers", "1"]
    result = CliRunner().invoke(main, ["bench", *args, "--store", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 0, result.output
    started = [line.split(": ")[0].split("] ")[1] for line in result.output.splitlines() if line.endswith(": started")]
    assert started == ["nope on copy seed 0", "rope on copy seed 0", "nope on copy seed 1", "rope on copy seed 1"]


def test_a_checkpointed_run_counts_only_the_steps_it_has_left(tmp_path):
    from harness.execution.run import checkpoint_path
    from harness.training.checkpoint import FORMAT, VERSION, save_checkpoint

    def header(run_id, step):  # what plan reads of a checkpoint
        return {"format": FORMAT, "version": VERSION, "run_id": run_id, "step": step}

    configs = load_sweep(write(tmp_path, SWEEP)).configs()  # 300 steps each
    store_path = tmp_path / "s.sqlite"
    with Store(store_path) as store:
        finish(store, configs[0], train_seconds=30.0, eval_seconds=0.0)  # nope: 10 steps/s
    ckpt = tmp_path / "checkpoints"
    save_checkpoint(checkpoint_path(ckpt, configs[1].run_id()), header(configs[1].run_id(), 200))
    checkpoint_path(ckpt, configs[3].run_id()).write_bytes(b"not a checkpoint")  # unreadable: starts over
    save_checkpoint(checkpoint_path(ckpt, configs[5].run_id()), header("another run", 200))
    save_checkpoint(checkpoint_path(ckpt, configs[4].run_id()), {"run_id": configs[4].run_id(), "step": 200})  # v1
    steps = checkpointed_steps(ckpt, [c.run_id() for c in configs])
    assert steps == {configs[1].run_id(): 200}
    with Store(store_path) as store:
        plan = make_plan(configs, store.runs(), steps)
    nope1 = plan.runs[1].estimate
    assert (nope1.from_step, nope1.seconds) == (200, pytest.approx(100 / 10))
    assert plan.runs[3].estimate.from_step == 0
    # the command reads the checkpoints next to the store and shows where a run resumes
    result = CliRunner().invoke(main, ["sweep", "plan", str(tmp_path / "sweep.toml"), "--store", str(store_path)])
    assert result.exit_code == 0, result.output
    assert "10s (from step 200)" in result.output
    assert f"{(10 + 4 * 30) / 3600:.2f} device-hours for 5 missing runs" in result.output


def test_makespan_is_list_scheduling():
    assert makespan([], 2) == 0.0
    assert makespan([5.0, 5.0, 5.0], 1) == 15.0
    # in order, each to the first free worker: 3 | 3 -> 3+3 | 3 -> 6 | 3+6 -> 9
    assert makespan([3.0, 3.0, 3.0, 6.0], 2) == 9.0
    assert makespan([6.0, 3.0, 3.0, 3.0], 2) == 9.0  # longest first: 6 | 3+3+3 -> 9
    assert makespan([1.0, 1.0, 8.0], 2) == 9.0 and makespan([8.0, 1.0, 1.0], 2) == 8.0
    # a worker busy for 4 s takes the second run only once the idle one is busy too
    assert makespan([2.0, 2.0], 2, busy=[4.0]) == 4.0
    assert makespan([2.0, 2.0, 1.0], 2, busy=[4.0]) == 5.0


def test_plan_gives_the_wall_time_in_either_order(tmp_path):
    configs = load_sweep(write(tmp_path, SWEEP)).configs()  # nope0 nope1 rope0 rope1 alibi0 alibi1
    store_path = tmp_path / "s.sqlite"
    with Store(store_path) as store:
        finish(store, configs[0], train_seconds=60.0, eval_seconds=0.0)  # nope: 1 min
        finish(store, configs[2], train_seconds=60.0, eval_seconds=0.0)  # rope: 1 min
        finish(store, configs[4], train_seconds=480.0, eval_seconds=0.0)  # alibi: 8 min
        plan = make_plan(configs, store.runs())
    # missing in order: nope1 1, rope1 1, alibi1 8 (minutes): on two workers alibi1 starts
    # after a 1-minute run when listed (9), at once when longest first (8)
    text = format_plan(plan, workers=2)
    assert "wall time on 2 worker(s): about 9m in the listed order, 8m with --order longest-first" in text
    assert "wall time" not in format_plan(plan)
    grouped = format_plan(plan, workers=2, grouped=True)  # a GPU's group: one process, runs side by side
    assert "wall time on 2 runs side by side in one process: about 9m in the listed order" in grouped
    assert "the least it can take" in grouped
    result = CliRunner().invoke(
        main, ["sweep", "plan", str(tmp_path / "sweep.toml"), "--store", str(store_path), "--workers", "1"]
    )
    assert "wall time on 1 worker(s): about 10m in the listed order, 10m with" in result.output


def test_sweep_plan_lists_and_times_the_runs_in_the_order_bench_is_given(tmp_path):
    """`pezoo sweep plan --order X` shows the order `pezoo bench --order X` runs, and the
    wall time in that order (one function orders both)."""
    configs = load_sweep(write(tmp_path, SWEEP)).configs()  # nope0 nope1 rope0 rope1 alibi0 alibi1
    store_path = tmp_path / "s.sqlite"
    with Store(store_path) as store:
        finish(store, configs[0], train_seconds=60.0, eval_seconds=0.0)  # nope: 1 min
        finish(store, configs[2], train_seconds=60.0, eval_seconds=0.0)  # rope: 1 min
        finish(store, configs[4], train_seconds=480.0, eval_seconds=0.0)  # alibi: 8 min

    def plan(*order):
        args = ["sweep", "plan", str(tmp_path / "sweep.toml"), "--store", str(store_path), "--workers", "2"]
        result = CliRunner().invoke(main, [*args, *order])
        assert result.exit_code == 0, result.output
        ids = [line.split()[-1] for line in result.output.splitlines() if line[:3].strip().isdigit()]
        return result.output, [next(c for c in configs if c.run_id() == i) for i in ids]

    text, listed = plan()
    assert listed == configs and "about 9m in the listed order, 8m with --order longest-first" in text
    text, ordered = plan("--order", "seeds-first")
    assert [(c.pe, c.seed) for c in ordered] == [(pe, s) for s in (0, 1) for pe in ("nope", "rope", "alibi")]
    assert "about 9m with --order seeds-first, 8m with --order longest-first" in text
    text, ordered = plan("--order", "longest-first")  # finished first, then alibi1 (8 min) before the 1-minute runs
    assert [(c.pe, c.seed) for c in ordered[3:]] == [("alibi", 1), ("nope", 1), ("rope", 1)]
    assert "about 8m with --order longest-first\n" in text
    wrong = CliRunner().invoke(main, ["sweep", "plan", str(tmp_path / "sweep.toml"), "--order", "random"])
    assert wrong.exit_code == 2 and "'random' is not one of 'listed', 'longest-first', 'seeds-first'" in wrong.output


def test_plan_without_measurements_says_so(tmp_path):
    configs = load_sweep(write(tmp_path, SWEEP)).configs()
    plan = make_plan(configs, [])
    assert plan.device_hours == 0 and plan.unestimated == 6
    assert "6 missing runs have no estimate" in format_plan(plan)


def test_sweep_plan_command(tmp_path):
    path = write(tmp_path, SWEEP)
    store_path = tmp_path / "s.sqlite"
    with Store(store_path) as store:
        finish(store, load_sweep(path).configs()[0], train_seconds=3600.0, eval_seconds=0.0)
    result = CliRunner().invoke(main, ["sweep", "plan", str(path), "--store", str(store_path)])
    assert result.exit_code == 0, result.output
    assert "6 runs: 1 done, 5 missing (5 not started)" in result.output
    assert "5.00 device-hours for 5 missing runs" in result.output  # 300 steps at 300 steps/hour each
    assert result.output.count(" finished ") == 1
    # a store that does not exist yet is not created by planning
    fresh = CliRunner().invoke(main, ["sweep", "plan", str(path), "--store", str(tmp_path / "none.sqlite")])
    assert fresh.exit_code == 0 and "6 runs: 0 done, 6 missing" in fresh.output
    assert not (tmp_path / "none.sqlite").exists()


@pytest.mark.parametrize(("line", "message"), [("seeds = [-1]", "seed must be"), ("steps = 0", "train.steps must be")])
def test_sweep_plan_names_the_file_of_a_value_out_of_range(tmp_path, line, message):
    # docs/sweeps.md says such errors name the file; plan said only "seed must be an integer >= 0"
    path = tmp_path / "values.toml"
    path.write_text(f'pe = "nope"\ntask = "copy"\n{line}\n')
    result = CliRunner().invoke(main, ["sweep", "plan", str(path), "--store", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 2 and f"{path}: {message}" in result.output, result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pe", "ropee"], "Did you mean 'rope'"),
        (["--lr", "1e-3,fast"], "not a comma-separated list of float"),
        (["--executor", "spark"], "'spark' is not one of 'local', 'ray'"),
        (["--workers", "0"], "0 is not in the range x>=1"),
    ],
)
def test_bench_sweep_options_fail_fast(tmp_path, args, message):
    path = write(tmp_path, SWEEP)
    store = tmp_path / "s.sqlite"
    result = CliRunner().invoke(main, ["bench", "--sweep", str(path), *args, "--store", str(store)])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not store.exists()


def test_bench_needs_pe_and_task_or_a_sweep_file(tmp_path):
    result = CliRunner().invoke(main, ["bench", "--task", "copy", "--store", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 2 and "Missing option '--pe'" in result.output
    bad = write(tmp_path, 'pe = "rope"\ntask = "cpy"\n')
    result = CliRunner().invoke(main, ["bench", "--sweep", str(bad), "--store", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 2 and "Valid tasks:" in result.output


def _report(configs, plan=None, slots=2):
    from harness.sweeps.progress import SweepReport

    now = [0.0]
    report = SweepReport(configs, plan, tty=False, clock=lambda: now[0])
    report.in_process, report.slots = False, slots
    return report, now


def test_sweep_eta_counts_the_runs_in_flight_on_other_workers():
    """Two workers, runs of 20 min each, no plan: when the first finishes, the second has
    1 s left and the last two go side by side, so the ETA is 20 min. A mean over the runs
    left (20 min × 3 / 2) says 30 min; elapsed/completed × remaining says 1 h."""
    from types import SimpleNamespace

    from harness.config import RunConfig
    from harness.execution.run import RunOutcome

    configs = [RunConfig(pe="nope", task="copy", seed=s) for s in range(4)]
    report, now = _report(configs)
    assert report.todo == 4 and report.eta() is None  # nothing measured, no plan: no ETA yet
    job = [SimpleNamespace(index=i + 1, attempt=1) for i in range(4)]
    result = SimpleNamespace(train_seconds=90.0, eval_seconds=10.0)

    report.started(job[0])
    now[0] = 1.0
    report.started(job[1])
    now[0] = 1200.0
    report.finished(job[0], RunOutcome("a", "finished"), result)
    assert report._status() == "done 1/4, running 1, failed 0, ETA 20m"
    assert report.eta() == pytest.approx(1201.0)
    # a failed run's short attempt does not shorten the estimate
    report.started(job[2])
    now[0] = 1201.0
    report.finished(job[1], RunOutcome("b", "failed", "boom"), result)
    assert report.eta() == pytest.approx(1200.0)  # run 3: 1199 s left; run 4 alongside it


def test_sweep_eta_tracks_retries_and_leaves_out_an_overdue_run():
    from types import SimpleNamespace

    from harness.config import RunConfig

    configs = [RunConfig(pe="nope", task="copy", seed=s) for s in range(3)]
    report, now = _report(configs)
    report.estimates = {1: 100.0, 2: 100.0, 3: 100.0}
    job = [SimpleNamespace(index=i + 1, attempt=1) for i in range(3)]
    report.started(job[0])
    report.started(job[1])
    assert report.queue == [3] and report.eta() == pytest.approx(200.0)
    now[0] = 10.0
    report.retrying(job[0], "worker lost", 3)  # the driver puts a retry at the front
    assert report.queue == [1, 3] and report.running == {2}
    report.started(SimpleNamespace(index=1, attempt=2))
    assert report.queue == [3]
    # run 2: 90 s left; run 1 again 100 s; run 3 after run 2
    assert report.eta() == pytest.approx(190.0)
    now[0] = 150.0  # run 2 has outlived its 100 s: how long it still takes is unknown
    assert report.eta() is None and "ETA" not in report._status()


def test_sweep_eta_counts_other_processes_training_the_same_sweep():
    """Two `pezoo bench` processes on one store share a sweep's runs: each counts the other
    as a worker busy with the run it holds, so each sees the sweep's end, not twice it."""
    from harness.config import RunConfig

    configs = [RunConfig(pe="nope", task="copy", seed=s) for s in range(4)]
    report, now = _report(configs, slots=1)
    report.estimates = {i: 100.0 for i in range(1, 5)}
    assert report.eta() == pytest.approx(400.0)  # no store to ask: this process alone
    asked = []
    held = {configs[1].run_id(): "hostB:42", "another-sweeps-run": "hostC:7"}
    report.held_elsewhere = lambda: asked.append(now[0]) or dict(held)
    # run 2 busy on the other process (100 s); runs 1, 3, 4 on two workers: 200 s
    assert report.eta() == pytest.approx(200.0)
    assert report._status() == "done 0/4, running 0, failed 0, ETA 3m (with 1 other process on this store)"
    # the store is asked at most once a minute
    held[configs[2].run_id()] = "hostD:9"
    now[0] = 30.0
    assert report.eta() == pytest.approx(200.0) and asked == [0.0]
    now[0] = 61.0
    # runs 2 and 3 busy on two other processes (100 s each); run 1 here, then run 4 on the
    # first worker free: 200 s (this process alone would say 400)
    assert report.eta() == pytest.approx(200.0) and asked == [0.0, 61.0]
    assert "(with 2 other processes on this store)" in report._status()

    def broken():
        raise RuntimeError("database is locked")

    report.held_elsewhere, report._sharing = broken, None  # asking fails: this process alone
    assert report.eta() == pytest.approx(400.0) and "other process" not in report._status()


def test_sweep_eta_compares_a_resumed_run_with_the_part_it_trained():
    """After a restart the first runs to finish resumed from their checkpoints. Halfway
    through its 1000 steps, a run that then takes 50 s went at its estimate's speed (100 s
    for the whole run): the runs left still take their estimates, not half of them. A run
    in flight that resumed has only its untrained part left. One that resumed after its
    last step (evaluation only) is not timed."""
    from types import SimpleNamespace

    from harness.config import RunConfig
    from harness.execution.run import RunOutcome

    configs = [RunConfig(pe="nope", task="copy", seed=s) for s in range(4)]
    report, now = _report(configs, slots=1)
    report.estimates = {i: 100.0 for i in range(1, 5)}
    done = SimpleNamespace(train_seconds=1.0, eval_seconds=0.0)
    report.started(SimpleNamespace(index=1, attempt=1))
    report.run_progress(1, "train", 501, 1000, "loss 0.1")  # resumed from step 500
    assert report.eta() == pytest.approx(50.0 + 300.0)  # its half left, then three whole runs
    now[0] = 50.0
    report.finished(SimpleNamespace(index=1, attempt=1), RunOutcome("a", "finished"), done)
    assert report.eta() == pytest.approx(300.0)  # the old code scaled by 50/100: 150
    report.started(SimpleNamespace(index=2, attempt=1))
    report.run_progress(2, "test", 1, 30, "")  # resumed after its last step: evaluation only
    now[0] = 55.0
    report.finished(SimpleNamespace(index=2, attempt=1), RunOutcome("b", "finished"), done)
    assert report.eta() == pytest.approx(200.0)  # 5 s of evaluation is not a run's length
    report.started(SimpleNamespace(index=3, attempt=1))
    report.run_progress(3, "train", 1, 1000, "loss 2.0")  # afresh
    report.run_progress(3, "eval", 1, 10, "")  # a periodic evaluation, then training goes on:
    report.run_progress(3, "train", 501, 1000, "loss 1.0")  # still the whole run's attempt
    now[0] = 255.0  # twice its estimate
    report.finished(SimpleNamespace(index=3, attempt=1), RunOutcome("c", "finished"), done)
    # measured 50 + 200 s against 50 + 100 s planned: the last run takes 100 × 250/150
    assert report.eta() == pytest.approx(100.0 * 250.0 / 150.0)


def test_sweep_eta_follows_the_plan_and_how_fast_runs_really_go(tmp_path):
    """With the plan's estimates the ETA is there from the start, counts which runs are
    left, and is rescaled by how the finished runs' wall times compared with theirs."""
    from types import SimpleNamespace

    from harness.execution.run import RunOutcome

    configs = load_sweep(write(tmp_path, SWEEP)).configs()  # nope0 nope1 rope0 rope1 alibi0 alibi1
    with Store(tmp_path / "s.sqlite") as store:
        finish(store, configs[0], train_seconds=600.0, eval_seconds=0.0)  # nope: 600 s
        finish(store, configs[2], train_seconds=2400.0, eval_seconds=0.0)  # rope: 2400 s
        plan = make_plan(configs, store.runs())
    report, now = _report(configs, plan)
    assert (report.todo, report.queue) == (4, [2, 4, 5, 6])  # the finished runs are not to do
    assert report.estimates[4] == pytest.approx(2400.0) and report.estimates[2] == pytest.approx(600.0)
    # alibi was never measured: the median speed of the task's runs, 0.3125 steps/s = 960 s
    assert report.estimates[5] == pytest.approx(960.0)
    # before any run starts: nope1 (600 s) and rope1 (2400 s) side by side; alibi0 follows
    # nope1 until 1560, and alibi1 follows alibi0 (that worker is free first) until 2520
    assert report.eta() == pytest.approx(2520.0)
    job = {i: SimpleNamespace(index=i, attempt=1) for i in (2, 4, 5, 6)}
    report.started(job[2])
    report.started(job[4])
    now[0] = 1200.0  # nope1 took twice its estimate: the rest will too
    report.finished(job[2], RunOutcome("n", "finished"), SimpleNamespace(train_seconds=1.0, eval_seconds=0.0))
    report.started(job[5])
    # rope1: 4800 - 1200 = 3600 s left; alibi0 1920 s then alibi1 1920 s on the other worker
    assert report.eta() == pytest.approx(1920.0 + 1920.0)


# -- estimates never borrow another preset's model size (issue: smoke runs put quick at 61 s) --


QUICK = """
preset = "quick"
pe = ["nope", "rope"]
task = "copy"
"""


def test_a_store_of_smoke_runs_does_not_estimate_the_quick_preset(tmp_path):
    smoke_runs = load_sweep(write(tmp_path, SWEEP)).configs()
    quick_runs = load_sweep(write(tmp_path, QUICK, "quick.toml")).configs()
    with Store(tmp_path / "s.sqlite") as store:
        for cfg in smoke_runs:  # 300 smoke steps in 1 s: a quick run is nothing like it
            finish(store, cfg, train_seconds=1.0, eval_seconds=0.1)
        rows = store.runs()
    plan = make_plan(quick_runs, rows)  # no device kind given: no recorded speed to fall back on
    assert [r.estimate for r in plan.runs] == [None, None]
    assert "2 missing runs have no estimate (unknown)" in format_plan(plan)
    # on a CPU: the quick preset's recorded CPU speed for copy, marked rough
    cpu = make_plan(quick_runs, rows, device_type="cpu")
    est = cpu.runs[0].estimate
    units = 100 * 40  # samples x (10 training + 30 test scales)
    assert est.rough and "recorded speed of preset quick on cpu" in est.basis
    assert est.seconds == pytest.approx(3000 / 6.13 + units * 3.95e-3)  # minutes, not 61 s
    assert "rough" in format_plan(cpu, workers=1)
    # on a GPU: the speed recorded on an H100 (16 in a group), rough too; nothing recorded for smoke: unknown
    gpu = make_plan(quick_runs, rows, device_type="cuda").runs[0].estimate
    assert gpu.rough and gpu.seconds == pytest.approx(3000 / 19.3 + units * 0.128e-3)
    smoke_gpu = make_plan(smoke_runs, [], device_type="cuda")
    assert smoke_gpu.unestimated == len(smoke_runs) and "model on cuda in the store" in format_plan(smoke_gpu)


def test_estimates_come_from_runs_on_the_same_kind_of_device(tmp_path):
    configs = load_sweep(write(tmp_path, SWEEP)).configs()  # nope0 nope1 ...
    with Store(tmp_path / "s.sqlite") as store:
        finish(store, configs[0], train_seconds=30.0, eval_seconds=0.0, device="cuda:NVIDIA H100 80GB HBM3")
        rows = store.runs()
    on_gpu = make_plan(configs[1:2], rows, device_type="cuda").runs[0].estimate
    assert on_gpu.seconds == pytest.approx(30.0) and not on_gpu.rough
    # the same store planned for a CPU: the GPU run says nothing; the smoke preset's recorded CPU speed does
    on_cpu = make_plan(configs[1:2], rows, device_type="cpu").runs[0].estimate
    assert on_cpu.rough and "recorded speed of preset smoke on cpu" in on_cpu.basis
    assert on_cpu.seconds == pytest.approx(300 / 314.0 + eval_units(configs[1]) * 0.31e-3)


def test_published_runs_are_a_rough_fallback_and_a_changed_model_has_no_recorded_speed(tmp_path):
    configs = load_sweep(write(tmp_path, SWEEP)).configs()
    with Store(tmp_path / "s.sqlite") as store:
        finish(store, configs[0], train_seconds=60.0, eval_seconds=0.0)
        published = store.runs()
    est = make_plan(configs[1:2], [], device_type="cpu", published=published).runs[0].estimate
    assert est.rough and est.basis.startswith("published runs of the same encoding, task and model")
    assert est.seconds == pytest.approx(60.0)
    # --batch-size 64 is not the smoke preset's model: its recorded speed does not apply
    bigger = load_sweep(write(tmp_path, SWEEP + "batch_size = 64\n", "big.toml")).configs()
    assert make_plan(bigger, [], device_type="cpu").unestimated == len(bigger)
