"""A table row pools the seeds of one setting: runs of one encoding and task that differ in
any other setting (a learning rate, a preset's steps) are rows of their own, labelled with
what sets them apart (``harness.records.frames.settings_apart``)."""

from __future__ import annotations

import copy

from harness.commands.report import leaderboard_tables, per_seed_summary
from harness.config import preset_config
from harness.evaluation.evaluate import LengthMetrics
from harness.records.frames import load, settings, settings_apart
from harness.records.store import Store


def run(seed: int, lr: float):
    return preset_config("smoke", pe="rope", task="copy", seed=seed, overrides={"train": {"lr": lr, "steps": 20}})


def finish(store: Store, cfg, exact: int) -> None:
    """A finished run of ``cfg`` whose every scale has ``exact`` of 4 right."""
    run_id = store.start(cfg, {"commit": "t", "device": "cpu:test x1 threads"})
    metrics = [("train", LengthMetrics(n, float(n), 4, exact, 4 * n, exact * n)) for n in cfg.train_lengths()]
    metrics += [("test", LengthMetrics(n, float(n), 4, exact, 4 * n, exact * n)) for n in cfg.test_lengths()]
    store.finish(run_id, metrics, final_loss=0.1, train_seconds=1.0, eval_seconds=0.0, n_params={"total": 1, "pe": 0})


def test_an_lr_sweep_is_a_row_per_learning_rate_and_a_seed_is_one_run(tmp_path):
    """Before, both rates were one row ``rope`` whose "seed 0" mixed two runs' metrics."""
    path = tmp_path / "s.sqlite"
    with Store(path) as store:
        for seed in (0, 1):
            finish(store, run(seed, 1e-4), exact=0)  # the low rate: nothing right
            finish(store, run(seed, 3e-4), exact=4)  # the high rate: everything right
    df = load(path)
    labels = df.groupby("run_id")["pe_label"].first()
    assert labels[run(0, 1e-4).run_id()] == "rope [train.lr=0.0001]"
    assert labels[run(1, 3e-4).run_id()] == "rope [train.lr=0.0003]"
    summary = per_seed_summary(df)
    assert len(summary) == 4  # two rates x two seeds, each one run
    by_label = summary.groupby("pe")["in-dist"].agg(["min", "max"])
    assert by_label.loc["rope [train.lr=0.0001]"].tolist() == [0, 0]
    assert by_label.loc["rope [train.lr=0.0003]"].tolist() == [1, 1]
    table = leaderboard_tables(df)["copy"]
    assert "| rope [train.lr=0.0003] | 2/2 " in table
    assert "rope [train.lr=0.0001] | 0/2 did not fit" in table


def test_seeds_of_one_setting_share_one_plain_row(tmp_path):
    path = tmp_path / "s.sqlite"
    with Store(path) as store:
        for seed in (0, 1, 2):
            finish(store, run(seed, 3e-4), exact=4)
    assert set(load(path)["pe_label"]) == {"rope"}


def test_a_preset_difference_names_the_preset_first():
    quick = preset_config("quick", pe="rope", task="copy", seed=0).to_dict()
    board = preset_config("board", pe="rope", task="copy", seed=0).to_dict()
    labels = settings_apart({"a": ("copy", "rope", quick), "b": ("copy", "rope", board)})
    assert labels["a"].startswith("rope [preset=quick, ")
    assert labels["b"].startswith("rope [preset=board, ")
    assert "train.steps=" in labels["b"]


def test_a_record_from_before_a_field_existed_pools_with_one_at_its_default():
    """A stored config without ``train.schedule`` or ``backbone.head`` ran at their defaults."""
    new = preset_config("smoke", pe="rope", task="copy", seed=0).to_dict()
    old = copy.deepcopy(new)
    old["train"].pop("schedule")
    old["backbone"].pop("head")
    old["eval"].pop("match")
    assert settings(old) == settings(new)
    labels = settings_apart({"old": ("copy", "rope", old), "new": ("copy", "rope", new)})
    assert labels == {"old": "rope", "new": "rope"}


def test_other_tasks_and_other_labels_are_not_compared():
    a = preset_config("smoke", pe="rope", task="copy", seed=0, overrides={"train": {"lr": 1e-4}}).to_dict()
    b = preset_config("smoke", pe="rope", task="reverse", seed=0).to_dict()
    c = preset_config("smoke", pe="nope", task="copy", seed=0).to_dict()
    labels = settings_apart({"a": ("copy", "rope", a), "b": ("reverse", "rope", b), "c": ("copy", "nope", c)})
    assert labels == {"a": "rope", "b": "rope", "c": "nope"}


def test_runs_trained_on_other_scales_are_a_table_of_their_own(tmp_path):
    """Before, one copy table: a run trained to 8 sat under the columns of N = 5 (its EM≤6 as EM≤4)."""

    def trained_to(pe: str, n: int):
        overrides = {"train": {"train_max": n, "steps": 20}, "eval": {"test_max": 12}}
        return preset_config("smoke", pe=pe, task="copy", seed=0, overrides=overrides)

    path = tmp_path / "s.sqlite"
    with Store(path) as store:
        finish(store, trained_to("rope", 4), exact=4)
        finish(store, trained_to("nope", 6), exact=4)
        finish(store, trained_to("rope", 6), exact=0)
    tables = leaderboard_tables(load(path))
    assert sorted(tables) == ["copy (trained on 1..4)", "copy (trained on 1..6)"]
    five, eight = tables["copy (trained on 1..4)"], tables["copy (trained on 1..6)"]
    assert "EM≤4" in five and "EM≤6" not in five and "nope" not in five
    assert "EM≤6" in eight and "| nope " in eight and "rope [train.train_max=6]" in eight
    assert "rope [train.train_max=4]" in five
    one = leaderboard_tables(load(path).query("train_max == 6"))
    assert list(one) == ["copy"]  # one range: keyed by the task alone, as before
