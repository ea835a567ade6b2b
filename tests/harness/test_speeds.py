"""The recorded speeds (harness/sweeps/speeds.py) agree with what they say they were measured from."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from harness.config import PRESETS
from harness.sweeps.speeds import RECORDED_SPEEDS, recorded_speed

RESULTS = Path(__file__).resolve().parents[2] / "leaderboard" / "results"


def _assert_recorded_are_medians(preset: str, records: list[dict], other_task: str) -> None:
    """``preset``'s recorded CPU speeds are, per task and over all tasks (``other_task``, one
    not recorded), the medians of ``records``' steps/s and evaluation seconds per unit."""
    rates, evals = defaultdict(list), defaultdict(list)
    for r in records:
        cfg, t = r["config"], r["timings"]
        units = cfg["eval"]["samples"] * cfg["eval"]["test_max"]  # stride 1: every scale 1..test_max
        rates[r["task"]].append(cfg["train"]["steps"] / t["train_seconds"])
        evals[r["task"]].append(t["eval_seconds"] / units)
    assert rates, f"no {preset} CPU runs published"
    for task in rates:
        speed = recorded_speed(preset, "cpu", task)
        assert speed.task == task
        assert speed.steps_per_second == pytest.approx(statistics.median(rates[task]), abs=0.01)
        assert speed.eval_seconds_per_unit == pytest.approx(statistics.median(evals[task]), rel=0.01)
    every = recorded_speed(preset, "cpu", other_task)
    assert every.task is None
    assert every.steps_per_second == pytest.approx(statistics.median([x for v in rates.values() for x in v]), abs=0.01)


def test_quick_cpu_speeds_are_the_medians_of_the_committed_board():
    from leaderboard.schema import read_results

    records = [rec.data for rec in read_results(RESULTS)]
    quick = [r for r in records if r["preset"] == "quick" and r["provenance"]["device"].startswith("cpu")]
    _assert_recorded_are_medians("quick", quick, "a task never measured")


def test_board_cpu_speeds_are_the_medians_of_board_toml_s_runs(tmp_path):
    # the runs of board.toml alone: rows published later (board-frontier.toml) do not move them
    import shutil

    from leaderboard.plans import read_plans
    from leaderboard.schema import read_results

    shutil.copy(RESULTS.parent / "board.toml", tmp_path / "board.toml")
    planned = read_plans(tmp_path).presets["board"].run_ids
    # train_seconds 0: a variant or a kept run tested further, no training
    records = [rec.data for rec in read_results(RESULTS) if rec.run_id in planned]
    trained = [r for r in records if r["timings"]["train_seconds"]]
    assert len(trained) == 240 and all(r["provenance"]["device"].startswith("cpu") for r in trained)
    _assert_recorded_are_medians("board", trained, "mqar")


def test_recorded_speeds_name_real_presets_and_an_unmeasured_pair_has_none():
    assert {r.preset for r in RECORDED_SPEEDS} <= set(PRESETS)
    assert all(r.device_type in ("cpu", "cuda") and r.source for r in RECORDED_SPEEDS)
    assert recorded_speed("smoke", "cuda", "copy") is None and recorded_speed("quick", None, "copy") is None
    assert recorded_speed("ruoss", "cuda", "copy") is None and recorded_speed("gpu", "cpu", "copy") is None
    # measured on an H100 (benchmarks/results/cuda-gpu-nvidia-h100-80gb-hbm3-2.md): per run, 16 in a group
    assert recorded_speed("board", "cuda", "copy").steps_per_second == 19.3
