"""A run that trains exactly as a finished run did (only its evaluation differs: another
test range) evaluates that run's kept final weights instead of training again."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import replace

import pytest
import torch
from click.testing import CliRunner

import harness.execution.run
from harness.cli import main
from harness.config import preset_config
from harness.execution.kept_weights import (
    WEIGHTS_DIGEST,
    recorded_weights,
    trusted_weights,
    weights_path,
    weights_source,
)
from harness.execution.run import train_and_evaluate
from harness.records.store import Store
from harness.sweeps.estimate import steps_done
from harness.training.checkpoint import save_weights
from harness.training.train import build_model

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
                         ("train", "pack"), ("train", "pack_loss"), ("train", "precision"),
                         ("backbone", "head")):  # fmt: skip
        d[section].pop(key)
    import hashlib

    blob = json.dumps(d, sort_keys=True, separators=(",", ":"), default=str)
    assert cfg.run_id() == hashlib.sha256(blob.encode()).hexdigest()[:16]
    # a field added later counts only where it is not its default: an untied model is another run
    untied = replace(cfg, backbone=replace(cfg.backbone, head="untied"))
    assert untied.run_id() != cfg.run_id()


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    """A short-range run trained with its weights kept; the same training tested further,
    once reusing the weights (as the record's digest vouches for them) and once trained
    from scratch in another folder."""
    folder = tmp_path_factory.mktemp("kept")
    quiet = {"notice": lambda _m: None}
    short, longer = _config(8), _config(12)
    first = train_and_evaluate(short, torch.device("cpu"), folder / f"{short.run_id()}.pt", keep_weights=True, **quiet)
    trusted = {short.run_id(): first.provenance[WEIGHTS_DIGEST]}
    reused = train_and_evaluate(
        longer, torch.device("cpu"), folder / f"{longer.run_id()}.pt", kept_weights=trusted, **quiet
    )
    other = tmp_path_factory.mktemp("fresh")
    fresh = train_and_evaluate(longer, torch.device("cpu"), other / f"{longer.run_id()}.pt", **quiet)
    return folder, short, longer, first, reused, fresh


def _row(cfg, result, status="finished"):
    """A store row (as ``Store.run`` gives it) of ``cfg``'s run that ended as ``result``."""
    return {"run_id": cfg.run_id(), "status": status, "config": cfg.to_dict(), "provenance": result.provenance}


def test_the_record_keeps_the_sha256_of_the_weights_file_its_run_wrote(kept):
    folder, short, _, first, *_ = kept
    digest = hashlib.sha256(weights_path(folder, short.run_id()).read_bytes()).hexdigest()
    assert first.provenance[WEIGHTS_DIGEST] == digest


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
    trained = train_and_evaluate(longer, cpu, tmp_path / f"{longer.run_id()}.pt", keep_weights=True, **quiet)
    trusted = trusted_weights(short, recorded_weights([_row(longer, trained)]))
    assert weights_source(short, tmp_path, trusted) == longer.run_id()
    again = train_and_evaluate(short, cpu, tmp_path / f"{short.run_id()}.pt", kept_weights=trusted, **quiet)
    assert again.provenance["weights_from"] == longer.run_id() and again.train_seconds == 0.0
    assert again.metrics == first.metrics  # what training the short run itself gave


def test_only_a_run_with_the_same_training_uses_kept_weights(kept):
    folder, short, longer, first, *_ = kept
    recorded = recorded_weights([_row(short, first)])
    assert recorded == {short.run_id(): (short.training_id(), first.provenance[WEIGHTS_DIGEST])}
    assert weights_source(longer, folder, trusted_weights(longer, recorded)) == short.run_id()
    assert trusted_weights(short, recorded) == {}  # its own weights: a run never "reuses" itself
    assert trusted_weights(replace(longer, seed=1), recorded) == {}
    assert trusted_weights(replace(longer, eval=replace(longer.eval, every=4)), recorded) == {}
    # only a finished run's record vouches for weights, and only with a digest
    assert recorded_weights([_row(short, first, status="failed")]) == {}
    no_digest = replace(first, provenance={k: v for k, v in first.provenance.items() if k != WEIGHTS_DIGEST})
    assert recorded_weights([_row(short, no_digest)]) == {}


def test_the_plan_counts_a_run_on_kept_weights_as_trained(kept):
    folder, short, longer, first, *_ = kept
    other = replace(longer, seed=3)
    assert steps_done(folder, [longer, other], [_row(short, first)]) == {longer.run_id(): STEPS}
    assert steps_done(folder, [longer, other], []) == {}  # weights no record vouches for: the run trains


@pytest.mark.parametrize("content", ["garbage", "renamed"])
def test_an_unusable_weights_file_is_set_aside_and_the_run_trains(kept, tmp_path, content):
    folder, short, longer, first, *_ = kept
    source = weights_path(folder, short.run_id())
    target = weights_path(tmp_path, short.run_id())
    if content == "garbage":
        target.write_bytes(b"not a torch file")
    else:  # another run's weights under this run's name
        other = replace(short, seed=5)
        model = build_model(other)
        save_weights(target, other, model, 1.0)
    trusted = {short.run_id(): first.provenance[WEIGHTS_DIGEST]}
    assert source.read_bytes() != target.read_bytes()
    notices = []
    result = train_and_evaluate(
        longer, torch.device("cpu"), tmp_path / f"{longer.run_id()}.pt", kept_weights=trusted, notice=notices.append
    )
    assert result.status == "finished" and "weights_from" not in result.provenance and result.train_seconds > 0
    assert any("passed over" in n and "SHA-256" in n for n in notices), notices
    assert not target.exists() and target.with_name(target.name + ".unreadable").exists()


def test_bench_tests_a_finished_run_further_without_training(tmp_path):
    store = tmp_path / "runs.sqlite"
    args = ["bench", "--pe", "rope", "--task", "copy", "--preset", "smoke", "--device", "cpu", "--workers", "1",
            "--steps", str(STEPS), "--store", str(store)]  # fmt: skip
    trained = []
    real_train = harness.execution.run.train

    def counting_train(cfg, *a, **kw):
        trained.append(cfg.run_id())
        return real_train(cfg, *a, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(harness.execution.run, "train", counting_train)
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


# -- the third hostile probe: kept weights are trusted by their run's record, not their header --

ARGS = ["bench", "--pe", "rope", "--task", "copy", "--preset", "smoke", "--device", "cpu", "--workers", "1",
        "--steps", str(STEPS)]  # fmt: skip


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory):
    """A store with seeds 0 and 1 trained to 8, each keeping its final weights."""
    folder = tmp_path_factory.mktemp("two_seeds")
    done = CliRunner().invoke(main, [*ARGS, "--seeds", "2", "--test-len", "8", "--keep-weights",
                                     "--store", str(folder / "s.sqlite")])  # fmt: skip
    assert done.exit_code == 0, done.output
    return folder


def _copy(two_seeds, tmp_path):
    shutil.copytree(two_seeds, tmp_path / "runs")
    return tmp_path / "runs" / "s.sqlite", tmp_path / "runs" / "checkpoints"


def _further(store):
    """Seed 0 tested to 12: the run that would evaluate seed 0's kept weights. Its row and the output."""
    out = CliRunner().invoke(main, [*ARGS, "--test-len", "12", "--store", str(store)])
    with Store(store, readonly=True) as s:
        return s.run(_config(12).run_id()), out


def test_weights_with_the_right_header_and_another_seeds_tensors_are_passed_over(two_seeds, tmp_path):
    store, folder = _copy(two_seeds, tmp_path)
    mine, theirs = weights_path(folder, _config(8).run_id()), weights_path(folder, _config(8, seed=1).run_id())
    forged = torch.load(mine, weights_only=True)
    forged["model"] = torch.load(theirs, weights_only=True)["model"]  # seed 0's header and loss, seed 1's model
    torch.save(forged, mine)
    run, out = _further(store)
    assert out.exit_code == 0, out.output
    assert run["status"] == "finished" and "weights_from" not in run["provenance"] and run["train_seconds"] > 0
    assert "passed over" in out.output and "SHA-256" in out.output
    assert not mine.exists() and mine.with_name(mine.name + ".unreadable").exists()


def test_a_weights_file_missing_a_tensor_is_set_aside_and_the_run_trains(two_seeds, tmp_path):
    store, folder = _copy(two_seeds, tmp_path)
    path = weights_path(folder, _config(8).run_id())
    payload = torch.load(path, weights_only=True)
    payload["model"].pop(sorted(payload["model"])[0])
    torch.save(payload, path)
    run, out = _further(store)
    assert out.exit_code == 0, out.output  # it trained; once failed "do not fit the variant's model" every bench
    assert run["status"] == "finished" and "weights_from" not in run["provenance"]
    assert "passed over" in out.output and path.with_name(path.name + ".unreadable").exists()


def test_a_truncated_weights_file_is_passed_over_with_a_notice(two_seeds, tmp_path):
    store, folder = _copy(two_seeds, tmp_path)
    path = weights_path(folder, _config(8).run_id())
    path.write_bytes(path.read_bytes()[:1000])
    run, out = _further(store)
    assert out.exit_code == 0, out.output
    assert run["status"] == "finished" and "weights_from" not in run["provenance"]
    assert f"the weights run {_config(8).run_id()} kept are passed over" in out.output


def test_weights_whose_record_holds_no_digest_are_not_evaluated(two_seeds, tmp_path):
    # kept before the record held a digest, or by a run this store does not hold finished
    store, _ = _copy(two_seeds, tmp_path)
    with Store(store) as s:
        run_id = _config(8).run_id()
        prov = s.run(run_id)["provenance"]
        prov.pop(WEIGHTS_DIGEST)
        s._conn.execute("UPDATE runs SET provenance=? WHERE run_id=?", (json.dumps(prov), run_id))
    run, out = _further(store)
    assert out.exit_code == 0, out.output
    assert "1 to train" in out.output and run["status"] == "finished" and "weights_from" not in run["provenance"]


def test_a_weights_file_with_a_deeply_nested_config_stops_neither_plan_nor_bench(two_seeds, tmp_path):
    store, folder = _copy(two_seeds, tmp_path)
    hostile = {"format": "pezoo-weights", "version": 1, "run_id": "0123456789abcdef", "final_loss": 0.5,
               "config": "[" * 200_000 + "]" * 200_000, "model": {}}  # fmt: skip
    torch.save(hostile, weights_path(folder, "0123456789abcdef"))
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'preset = "smoke"\npe = "rope"\ntask = "copy"\nsteps = {STEPS}\ntest_len = 12\n')
    plan = CliRunner().invoke(main, ["sweep", "plan", str(sweep), "--store", str(store)])
    assert plan.exit_code == 0 and "RecursionError" not in plan.output, plan.output
    run, out = _further(store)
    assert out.exit_code == 0 and "RecursionError" not in out.output, out.output
    assert run["provenance"]["weights_from"] == _config(8).run_id()  # the genuine file is still used


def test_a_run_on_kept_weights_is_exported_only_with_the_run_that_kept_them(two_seeds, tmp_path):
    from leaderboard.export import ExportError, export

    store, _ = _copy(two_seeds, tmp_path)
    run, out = _further(store)
    assert run["provenance"]["weights_from"] == _config(8).run_id(), out.output
    with Store(store) as s:  # the run that kept them is no longer finished here, and was never published
        s._conn.execute("UPDATE runs SET status='failed' WHERE run_id=?", (_config(8).run_id(),))
    with pytest.raises(ExportError, match=f"kept weights of run '{_config(8).run_id()}'.*which is not published"):
        export(store, tmp_path / "results")
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").iterdir())
