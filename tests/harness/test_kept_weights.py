"""A run that trains exactly as a finished run did (only its evaluation differs: another
test range) evaluates that run's kept final weights instead of training again."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from click.testing import CliRunner

import harness.run
from harness.checkpoint import kept_trainings
from harness.cli import main
from harness.config import preset_config
from harness.estimate import steps_done
from harness.run import train_and_evaluate, weights_path, weights_source
from harness.store import Store

STEPS = 12


def _config(test_len: int = 8, **changes):
    cfg = preset_config("smoke", pe="rope", task="copy", seed=0, overrides={"train": {"steps": STEPS}})
    return replace(cfg, eval=replace(cfg.eval, test_max=test_len), **changes)


def test_the_training_id_leaves_out_the_evaluation_only():
    short, longer = _config(8), _config(12)
    assert short.run_id() != longer.run_id()
    assert short.training_id() == longer.training_id() is not None
    assert replace(short, seed=1).training_id() != short.training_id()
    assert replace(short, train=replace(short.train, lr=2e-3)).training_id() != short.training_id()
    periodic = replace(short, eval=replace(short.eval, every=4))  # evaluating during training: no sharing
    assert periodic.training_id() is None


def test_the_run_id_is_unchanged_by_the_shared_hash():
    # the published board's ids hash exactly this: a change here would orphan every stored run
    cfg = _config(8)
    d = cfg.to_dict()
    d.pop("preset")
    for section, key in (("eval", "every"), ("eval", "start_below_loss"), ("eval", "select"), ("eval", "window"),
                         ("eval", "window_jump"), ("eval", "match"), ("eval", "precision"), ("train", "schedule"),
                         ("train", "pack"), ("train", "pack_loss"), ("train", "precision")):  # fmt: skip
        d[section].pop(key)
    import hashlib

    blob = json.dumps(d, sort_keys=True, separators=(",", ":"), default=str)
    assert cfg.run_id() == hashlib.sha256(blob.encode()).hexdigest()[:16]


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    """A short-range run trained with its weights kept; the same training tested further,
    once reusing the weights and once trained from scratch in another folder."""
    folder = tmp_path_factory.mktemp("kept")
    quiet = {"notice": lambda _m: None}
    short, longer = _config(8), _config(12)
    first = train_and_evaluate(short, torch.device("cpu"), folder / f"{short.run_id()}.pt", keep_weights=True, **quiet)
    reused = train_and_evaluate(longer, torch.device("cpu"), folder / f"{longer.run_id()}.pt", **quiet)
    other = tmp_path_factory.mktemp("fresh")
    fresh = train_and_evaluate(longer, torch.device("cpu"), other / f"{longer.run_id()}.pt", **quiet)
    return folder, short, longer, first, reused, fresh


def test_a_longer_test_range_evaluates_the_kept_weights_and_trains_never(kept):
    _, short, _, first, reused, fresh = kept
    assert first.status == reused.status == fresh.status == "finished"
    assert reused.provenance["weights_from"] == short.run_id() and "weights_from" not in fresh.provenance
    assert reused.train_seconds == 0.0 and fresh.train_seconds > 0
    assert reused.final_loss == first.final_loss
    assert any("kept weights of run" in n for n in reused.notices)
    # the reused weights are the training the longer run would have done: its numbers equal a fresh training's
    assert reused.metrics == fresh.metrics
    assert [m.length for _, m in reused.metrics] == list(range(1, 13))
    shared = {m.length: m for _, m in first.metrics}
    assert all(m == shared[m.length] for _, m in reused.metrics if m.length in shared)


def test_a_shorter_test_range_evaluates_the_weights_a_longer_run_kept(kept, tmp_path):
    # the board's learned_prf_sh seeds 4-7 train to 100 first, and their runs to 40 evaluate those weights
    _, short, longer, first, *_ = kept
    quiet = {"notice": lambda _m: None}
    cpu = torch.device("cpu")
    train_and_evaluate(longer, cpu, tmp_path / f"{longer.run_id()}.pt", keep_weights=True, **quiet)
    assert weights_source(short, tmp_path) == longer.run_id()
    again = train_and_evaluate(short, cpu, tmp_path / f"{short.run_id()}.pt", **quiet)
    assert again.provenance["weights_from"] == longer.run_id() and again.train_seconds == 0.0
    assert again.metrics == first.metrics  # what training the short run itself gave


def test_only_a_run_with_the_same_training_uses_kept_weights(kept):
    folder, short, longer, *_ = kept
    assert kept_trainings(folder) == {short.training_id(): short.run_id()}
    assert weights_source(longer, folder) == short.run_id()
    assert weights_source(short, folder) is None  # its own weights: a run never "reuses" itself
    assert weights_source(replace(longer, seed=1), folder) is None
    assert weights_source(replace(longer, eval=replace(longer.eval, every=4)), folder) is None


def test_the_plan_counts_a_run_on_kept_weights_as_trained(kept):
    folder, _, longer, *_ = kept
    other = replace(longer, seed=3)
    assert steps_done(folder, [longer, other]) == {longer.run_id(): STEPS}


@pytest.mark.parametrize("content", ["garbage", "renamed"])
def test_an_unusable_weights_file_is_passed_over_and_the_run_trains(kept, tmp_path, content):
    folder, short, longer, *_ = kept
    source = weights_path(folder, short.run_id())
    if content == "garbage":
        weights_path(tmp_path, short.run_id()).write_bytes(b"not a torch file")
    else:  # another run's weights under this run's name
        weights_path(tmp_path, replace(short, seed=5).run_id()).write_bytes(source.read_bytes())
    assert kept_trainings(tmp_path) == {}
    assert weights_source(longer, tmp_path) is None


def test_bench_tests_a_finished_run_further_without_training(tmp_path):
    store = tmp_path / "runs.sqlite"
    args = ["bench", "--pe", "rope", "--task", "copy", "--preset", "smoke", "--device", "cpu", "--workers", "1",
            "--steps", str(STEPS), "--store", str(store)]  # fmt: skip
    trained = []
    real_train = harness.run.train

    def counting_train(cfg, *a, **kw):
        trained.append(cfg.run_id())
        return real_train(cfg, *a, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(harness.run, "train", counting_train)
        first = CliRunner().invoke(main, [*args, "--test-len", "8", "--keep-weights"])
        assert first.exit_code == 0, first.output
        further = CliRunner().invoke(main, [*args, "--test-len", "12"])
        assert further.exit_code == 0, further.output
    assert "0 to train, 1 to evaluate on kept weights" in further.output  # the announcement says so
    assert trained == [_config(8).run_id()]  # one training: the second run evaluated its weights
    with Store(store, readonly=True) as s:
        run = s.run(_config(12).run_id())
    assert run["status"] == "finished" and run["provenance"]["weights_from"] == _config(8).run_id()
    assert run["train_seconds"] == 0.0
