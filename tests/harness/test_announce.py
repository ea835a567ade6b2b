"""What `pezoo bench` says before it trains (harness/sweeps/announce.py). Nothing here trains."""

from __future__ import annotations

from harness.commands.sweep import published_line
from harness.config import preset_config
from harness.records.store import Store
from harness.sweeps.announce import bench_announcement, describe_preset, gpu_hint, wall_line
from harness.sweeps.plan import make_plan
from harness.sweeps.sweep import Grid, SweepSpec
from tests.harness.test_sweep import finish


def configs(preset="smoke", pe=("nope", "rope"), task=("copy",), **axes):
    return SweepSpec((Grid(preset=preset, pe=pe, task=task, **axes),)).configs()


def announce(runs, plan, **kw):
    args = {"store_path": "s.sqlite", "where": "cpu", "runner": "one run at a time, in this process", "workers": 1}
    return bench_announcement(runs, plan, **{**args, "device_type": "cpu", **kw})


def test_a_cold_two_run_smoke_sweep_says_runs_preset_device_and_a_rough_wall_time():
    runs = configs()
    text = announce(runs, make_plan(runs, [], device_type="cpu"))
    lines = text.splitlines()
    assert lines[0] == "pezoo bench: 2 runs (nope, rope on copy, seed 0): 0 already in the store (s.sqlite), 2 to train"
    assert lines[1].startswith("preset smoke: seconds per run")
    assert lines[2] == "  model: decoder, d_model 32, 1 layer, 2 heads, sdpa attention"
    assert lines[3] == "  training: 20 steps of batch 16 (lr 0.001, fp32) on lengths 1..5"
    assert lines[4] == "  testing: lengths 6..8, 8 examples each (fp32)"
    assert lines[5] == "device cpu: one run at a time, in this process"
    # 20 steps at the recorded 314 steps/s + 8 x 8 units at 0.31 ms, twice: under a second
    assert lines[6].startswith("estimated wall time: under 1s on 1 worker (device time <1s; 2 from the recorded")
    assert "rough" in lines[6] and "gpu" not in text


def test_finished_runs_and_varying_axes_are_named_and_sweep_plan_names_published_runs(tmp_path):
    runs = configs(lr=(1e-3, 3e-4))
    with Store(tmp_path / "s.sqlite") as store:
        finish(store, runs[0], train_seconds=2.0, eval_seconds=0.0)  # 20 steps in 2 s
        rows = store.runs()
    plan = make_plan(runs, rows, device_type="cpu")
    text = announce(runs, plan, workers=2)
    assert "4 runs (nope, rope on copy, seed 0, varying lr): 1 already in the store (s.sqlite), 3 to train" in text
    assert "published" not in text  # bench reads nothing published on its way to training
    line = published_line(plan, {runs[3].run_id()}, "s.sqlite")  # `pezoo sweep plan` still says so
    assert line is not None and line.startswith("1 of the runs to train are published under leaderboard/results")
    assert "(lr 0.001, 0.0003, fp32)" in text
    # nope lr 3e-4: 2 s (same encoding, task and model: lr does not set the cost of a step);
    # both rope runs 2 s too (same task and model): 3 runs of 2 s on 2 workers
    assert "about 4s on 2 workers (device time 6s; 1 from same encoding, task and model; 2 from same task" in text
    assert wall_line(make_plan(runs[:1], rows), 1) == "estimated wall time: none, every run is finished in the store"
    # another process on the store shares the three runs: 2 s each on three workers
    shared = announce(runs, plan, workers=2, others=1)
    assert "about 2s on 2 workers and 1 other process on this store (device time 6s;" in shared


def test_on_cuda_a_cpu_preset_points_at_the_gpu_preset_and_an_unrecorded_speed_is_unknown():
    runs = configs(preset="quick")
    hint = gpu_hint(runs, "cuda")
    assert hint.startswith("note: preset quick is sized for a CPU; on a GPU you likely want --preset gpu")
    assert gpu_hint(runs, "cpu") is None and gpu_hint(configs(preset="gpu"), "cuda") is None
    text = announce(runs, make_plan(runs, [], device_type="cuda"), where="cuda:0", device_type="cuda")
    assert hint in text and "rough" in text  # quick's speed recorded on an H200
    smoke = configs(preset="smoke")
    text = announce(smoke, make_plan(smoke, [], device_type="cuda"), where="cuda:0", device_type="cuda")
    assert "estimated wall time: unknown (2 of 2 runs to train have no finished run of the same encoding, " in text


def test_a_strided_gpu_preset_is_described_as_run():
    cfg = preset_config("gpu", pe="rope", task="copy", seed=0)
    lines = describe_preset("gpu", [cfg])
    assert lines[1] == "  model: decoder, d_model 512, 5 layers, 8 heads, sdpa attention"
    assert lines[2] == "  training: 20000 steps of batch 100 (lr 0.0003, bf16 autocast) on lengths 1..40"
    assert lines[3] == "  testing: lengths 41, 51, ..., 150, 1000 examples each (bf16 autocast)"
    assert "bf16 autocast" in lines[0]  # the preset's description says how it trains


def test_the_banner_shows_each_precision_a_sweep_trains_and_evaluates_in():
    runs = configs(precision=("fp32", "fp16"), eval_precision=("bf16",))
    lines = describe_preset("smoke", runs)
    assert "(lr 0.001, fp32, fp16 autocast, loss scaling)" in lines[2]
    assert lines[3].endswith("8 examples each (bf16 autocast)")


def test_testing_in_fp16_is_not_said_to_scale_a_loss():
    # the third probe: "testing: ... (fp16 autocast, loss scaling)"; evaluation has no loss to scale
    lines = describe_preset("smoke", configs(precision=("fp16",)))
    assert lines[2].endswith("(lr 0.001, fp16 autocast, loss scaling) on lengths 1..5")
    assert lines[3].endswith("8 examples each (fp16 autocast)")


def test_a_context_extension_shorter_than_the_training_sequences_is_noted():
    """A copy sequence at scale 10 is 24 tokens (<bos>, 10 digits, =, 10 digits, ., <eos>):
    dynamic NTK with L = 22 would rescale the lengths the weights were trained on."""
    import dataclasses

    from harness.sweeps.announce import extension_notes

    base = preset_config("quick", pe="rope", task="copy", seed=0)

    def variant(original):
        options = {"scaling": {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": original}}
        return dataclasses.replace(base, eval_pe_options=options)

    (note,) = extension_notes([base, variant(22), variant(22)])  # one note per row and task
    assert note.startswith("note: rope → dynamic×4 L=22 (same weights) on copy: original_max_position_embeddings = 22")
    assert "up to 24 tokens at scale 10" in note
    assert extension_notes([variant(24), variant(96)]) == []
    linear = dataclasses.replace(base, eval_pe_options={"scaling": {"rope_type": "linear", "factor": 4.0}})
    assert extension_notes([linear]) == []  # no original length to check


def test_a_run_another_process_trains_is_not_announced_as_resumed(tmp_path):
    """A second bench on a board's store said '(1 running: resumed from a checkpoint where
    there is one)' of a run another live process holds, which it then (rightly) skipped."""
    runs = configs(pe=("nope", "rope", "alibi"))
    with Store(tmp_path / "s.sqlite") as store:
        store.start(runs[0], {"commit": "t"})  # claimed by this (live) process: running
        store.start(runs[1], {"commit": "t"})
        store.mark(runs[1].run_id(), "interrupted", "stopped")
        rows = store.runs()
    first = announce(runs, make_plan(runs, rows, device_type="cpu")).splitlines()[0]
    assert first.endswith(
        "3 to train (1 interrupted: resumed from a checkpoint where there is one; 1 running in another process: "
        "left to it)"
    ), first


def test_a_task_with_no_instances_at_the_largest_asked_scales_says_where_it_stops():
    """--test-len 150 on scan_cot announced 'lengths 6..150' and evaluated up to 48."""
    runs = configs(preset="quick", pe=("nope",), task=("scan_cot", "copy"), test_len=(150,))
    testing = next(line for line in describe_preset("quick", runs) if line.startswith("  testing:"))
    assert testing.startswith("  testing: lengths 11..150 (scan_cot only up to 48, the largest it has instances of)")
    assert "copy only" not in testing
