"""Checkpoints are read without running code; an unusable one is set aside and its run
starts over; writers never share a temporary file; a full disk costs a checkpoint, never
a finished result."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pickle
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest
import torch
from click.testing import CliRunner

import harness.tasks as tasks
from harness.cli import main
from harness.config import preset_config
from harness.evaluation.evaluate import LengthMetrics
from harness.execution.recording import recover_kept
from harness.execution.run import RunResult, checkpoint_path, execute, train_and_evaluate
from harness.records import kept_results
from harness.records.identity import evaluated_scales
from harness.records.store import NotAStoreError, Store
from harness.sweeps.estimate import checkpointed_steps
from harness.training.checkpoint import FORMAT, VERSION, CheckpointError, load_checkpoint, save_checkpoint
from harness.training.train import Checkpointing, build_model, restore, train


def smoke(steps=4, seed=0, **train_options):
    return preset_config(
        "smoke", pe="rope", task="copy", seed=seed, overrides={"train": {"steps": steps, **train_options}}
    )


def same_weights(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def real_checkpoint(path, cfg):
    """Train ``cfg`` (4 steps) with a checkpoint every 2: the file holds step 2."""
    train(cfg, build_model(cfg), tasks.create(cfg.task), checkpointing=Checkpointing(path, every=2))
    return torch.load(path, weights_only=True)


# -- 1. no code from a checkpoint ------------------------------------------------------


class Planted:
    """A pickle whose unpickling runs a shell command (it creates ``marker``)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def plant(path, marker, kind):
    """A hostile checkpoint: torch's zip format, or a bare pickle (torch's legacy format)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"run_id": "anything", "step": 7, "x": Planted(marker)}
    if kind == "zip":
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload))
    # the payload really runs code once unpickled: the test means something
    pickle.loads(pickle.dumps(Planted(marker.with_name("probe"))))
    assert marker.with_name("probe").exists()


KINDS = ["zip", "pickle"]
pytestmark = pytest.mark.filterwarnings("ignore:Detected pickle protocol")  # torch, on a bare pickle


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_pickle_does_not_run_when_a_run_resumes(tmp_path, kind):
    cfg = smoke()
    path, marker = tmp_path / "ck.pt", tmp_path / "pwned"
    plant(path, marker, kind)
    model, resume, problem = restore(cfg, path, "cpu")
    assert not marker.exists()
    assert resume is None
    assert "is not a pezoo checkpoint readable without running code" in problem
    assert "set aside as ck.pt.unreadable" in problem and "the run starts over" in problem
    assert not path.exists() and (tmp_path / "ck.pt.unreadable").exists()
    assert same_weights(model, build_model(cfg))  # the seed's initialisation


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_pickle_does_not_run_when_planning_a_sweep(tmp_path, kind):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('preset = "smoke"\npe = "rope"\ntask = "copy"\nsteps = 4\n')
    cfg = smoke()
    store_path = tmp_path / "s.sqlite"
    with Store(store_path) as store:
        store.start(cfg, {"commit": "t"})  # plan reads checkpoints of a store that has runs
    path, marker = checkpoint_path(tmp_path / "checkpoints", cfg.run_id()), tmp_path / "pwned"
    plant(path, marker, kind)
    assert checkpointed_steps(path.parent, [cfg.run_id()]) == {}
    result = CliRunner().invoke(main, ["sweep", "plan", str(sweep), "--store", str(store_path)])
    assert result.exit_code == 0, result.output
    assert not marker.exists()
    assert path.exists()  # plan only reads: the run sets it aside when it starts


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_pickle_does_not_run_at_bench_and_the_run_starts_over(tmp_path, kind):
    cfg = smoke()
    store_path = tmp_path / "s.sqlite"
    path, marker = checkpoint_path(tmp_path / "checkpoints", cfg.run_id()), tmp_path / "pwned"
    plant(path, marker, kind)
    args = ["bench", "--pe", "rope", "--task", "copy", "--preset", "smoke", "--steps", "4", "--device", "cpu"]
    result = CliRunner().invoke(main, [*args, "--store", str(store_path)])
    assert not marker.exists()
    assert result.exit_code == 0, result.output
    assert "readable without running code" in result.output and "the run starts over" in result.output
    with Store(store_path) as store:
        assert store.status(cfg.run_id()) == "finished"
    assert path.with_name(path.name + ".unreadable").exists()


def test_a_checkpoint_holds_only_tensors_and_plain_values(tmp_path):
    payload = real_checkpoint(tmp_path / "ck.pt", smoke())  # weights_only=True: no safe globals needed

    def leaves(value):
        if isinstance(value, dict):
            assert all(isinstance(k, str | int) for k in value)
            return [x for v in value.values() for x in leaves(v)]
        if isinstance(value, list | tuple):
            return [x for v in value for x in leaves(v)]
        return [value]

    assert {type(v) for v in leaves(payload)} <= {torch.Tensor, str, int, float, bool, type(None)}
    assert (payload["format"], payload["version"], payload["step"]) == (FORMAT, VERSION, 2)


# -- 8. an unusable checkpoint is set aside and the run starts over ---------------------


def _wrong_shape(payload):
    name = next(iter(payload["model"]))
    payload["model"][name] = torch.zeros(3, 1)


def _wrong_optimizer_state(payload):
    state = next(iter(payload["optimizer"]["state"].values()))
    state["exp_avg"] = torch.zeros(2, 2, 2)


def _other_config(payload):
    payload["config"] = json.dumps(smoke(seed=1).to_dict())


def _optimizer_settings(payload):
    group = payload["optimizer"]["param_groups"][0]
    group.update(base_lr=50.0, weight_decay=0.9, betas=(0.0, 0.0))


def _nan_weight(payload):
    name = next(iter(payload["model"]))
    payload["model"][name][0] = float("nan")


def _inf_optimizer_state(payload):
    state = next(iter(payload["optimizer"]["state"].values()))
    state["exp_avg_sq"].view(-1)[-1] = float("inf")


def _stride_zero_weight(payload):  # the right shape, but one float's bytes behind it
    name, weight = next(iter(payload["model"].items()))
    payload["model"][name] = torch.zeros(1).expand(weight.shape)


def _evaluation(**change):
    row = {"length": 1, "n": 4, "token_length": 3.0, "exact": 2, "tokens": 4, "tokens_right": 2}
    return lambda p: p.update(evaluations=[[1, [["train", {**row, "trace_exact": None, **change}]]]])


DAMAGE = {
    "data_rng": (lambda p: p.pop("data_rng"), "lacks field data_rng"),
    "torch_rng": (lambda p: p.update(torch_rng=[1, 2, 3]), "torch_rng"),
    "short torch_rng": (lambda p: p.update(torch_rng=torch.zeros(8, dtype=torch.uint8)), "torch_rng"),
    "rng state": (lambda p: p.update(data_rng=(3, (1, 2), None)), "data_rng"),
    "weights": (_wrong_shape, "weights do not fit"),
    "optimizer": (_wrong_optimizer_state, "optimiser state exp_avg"),
    "config": (_other_config, "its config is run"),
    "step": (lambda p: p.update(step="2"), "step"),
    "past the end": (lambda p: p.update(step=99), "past the run's 4 steps"),
    "loss": (lambda p: p.update(loss=None), "loss"),
    "evaluations": (lambda p: p.update(evaluations=[[1, [["test", {"length": "x"}]]]]), "evaluation"),
    "version 1": (lambda p: p.pop("format"), "not a pezoo checkpoint"),
    "run id": (lambda p: p.update(run_id="0123456789abcdef"), "does not belong to run"),
    "code": (lambda p: p.update(code=[[1, "abc"]]), "field code"),
    "code past the step": (lambda p: p.update(code=[[0, "abc"], [3, "def"]]), "field code"),
    "code not text": (lambda p: p.update(code=[[0, 7]]), "field code"),
    "machine": (lambda p: p.update(machine=[[1, "cpu"]]), "field machine"),
    "machine not text": (lambda p: p.update(machine=[[0, None]]), "field machine"),
    # the rest of the run would train at lr 50 under a record that says the config's 1e-3
    "optimizer settings": (_optimizer_settings, "optimiser group 0 has"),
    "no base_lr": (lambda p: p["optimizer"]["param_groups"][1].pop("base_lr"), "optimiser group 1 lacks base_lr"),
    "exact match above 1": (_evaluation(exact=7), "exact is not in 0..n"),
    "a scale not evaluated": (_evaluation(length=999), "scales the run does not evaluate"),
    "an int beyond floats": (_evaluation(token_length=10**400), "not a finite number"),
    # resuming NaN weights trains nothing: every later loss is NaN, the run diverges again
    "NaN weights": (_nan_weight, "NaN or inf"),
    "inf optimiser state": (_inf_optimizer_state, "NaN or inf"),
    "a stride-0 weight": (_stride_zero_weight, "stride-0"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_an_unusable_checkpoint_is_set_aside_and_the_run_starts_over(tmp_path, damage):
    cfg = smoke()
    path = tmp_path / "ck.pt"
    payload = real_checkpoint(path, cfg)
    change, says = DAMAGE[damage]
    change(payload)
    save_checkpoint(path, payload)
    model, resume, problem = restore(cfg, path, "cpu")
    assert resume is None and says in problem, problem
    assert "set aside as ck.pt.unreadable; the run starts over" in problem
    assert not path.exists() and (tmp_path / "ck.pt.unreadable").exists()
    assert same_weights(model, build_model(cfg))


def test_a_second_unusable_checkpoint_does_not_overwrite_the_first_one_set_aside(tmp_path):
    cfg = smoke()
    path = tmp_path / "ck.pt"
    for content in (b"first", b"second"):
        path.write_bytes(content)
        assert restore(cfg, path, "cpu")[1] is None
    assert (tmp_path / "ck.pt.unreadable").read_bytes() == b"first"
    assert (tmp_path / "ck.pt.unreadable-2").read_bytes() == b"second"


def test_a_checkpoint_without_data_rng_does_not_fail_every_attempt(tmp_path):
    # it loads, but it lacks a field: before, every attempt failed with KeyError('data_rng')
    cfg = smoke()
    path = tmp_path / "ck.pt"
    payload = real_checkpoint(path, cfg)
    del payload["data_rng"]
    save_checkpoint(path, payload)
    notices = []
    result = train_and_evaluate(cfg, torch.device("cpu"), path, checkpoint_every=2, notice=notices.append)
    assert result.status == "finished", result.traceback
    assert any("lacks field data_rng" in n and "starts over" in n for n in notices)


def test_a_resumed_run_matches_an_uninterrupted_one_in_the_new_format(tmp_path):
    cfg = smoke(steps=8)
    task = tasks.create(cfg.task)
    reference = build_model(cfg)
    want = train(cfg, reference, task)

    class Killed(Exception):
        pass

    def kill(step, loss):
        if step == 5:
            raise Killed

    ckpt = Checkpointing(tmp_path / "ck.pt", every=3)
    with pytest.raises(Killed):
        train(cfg, build_model(cfg), task, on_step=kill, checkpointing=ckpt)
    model, resume, problem = restore(cfg, ckpt.path, "cpu")
    assert problem is None and resume["step"] == 3
    got = train(cfg, model, task, checkpointing=ckpt, resume=resume)
    assert got.final_loss == want.final_loss
    assert same_weights(model, reference)


# -- 3 (part). writers never share a temporary file ------------------------------------


def test_two_writers_of_one_checkpoint_do_not_collide(tmp_path, monkeypatch):
    # writer A is half-way through its file when writer B writes and renames its own:
    # with one shared "<name>.tmp", B would take A's file and A's rename would fail
    import harness.training.checkpoint.writing as checkpoint

    path = tmp_path / "ck.pt"
    real_save = torch.save
    temps = []

    def interleaved(obj, f):
        real_save(obj, f)
        temps.extend(t.name for t in tmp_path.glob("*.tmp"))
        if obj["who"] == "A":
            monkeypatch.setattr(checkpoint.torch, "save", real_save)
            save_checkpoint(path, {"who": "B"})

    monkeypatch.setattr(checkpoint.torch, "save", interleaved)
    save_checkpoint(path, {"who": "A"})
    assert torch.load(path, weights_only=True) == {"who": "A"}  # the last rename wins, whole
    assert len(temps) == 1 and temps[0].startswith(f"ck.pt.{os.getpid()}.") and temps[0].endswith(".tmp")
    assert not list(tmp_path.glob("*.tmp"))


WRITER = textwrap.dedent(
    """
    import sys, torch
    from harness.training.checkpoint import save_checkpoint
    path, who = sys.argv[1], sys.argv[2]
    for i in range(25):
        save_checkpoint(path, {"who": who, "i": i, "w": torch.full((20000,), float(i))})
    """
)


def test_two_processes_writing_one_checkpoint_both_succeed(tmp_path):
    path = tmp_path / "ck.pt"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), who], env=env, stderr=subprocess.PIPE, text=True)
        for who in "AB"
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    last = torch.load(path, weights_only=True)
    assert last["who"] in "AB" and last["i"] == 24 and torch.equal(last["w"], torch.full((20000,), 24.0))
    assert not list(tmp_path.glob("*.tmp"))


def test_stale_temporary_files_are_ignored_and_cleaned_after_a_day(tmp_path):
    cfg = smoke()
    path = tmp_path / "ck.pt"
    stale, fresh, old_style = (tmp_path / n for n in ("ck.pt.123.ab12cd34.tmp", "ck.pt.456.ef56ab78.tmp", "ck.pt.tmp"))
    for f in (stale, fresh, old_style):
        f.write_bytes(b"half a checkpoint")
    day_ago = time.time() - 25 * 3600
    os.utime(stale, (day_ago, day_ago))
    os.utime(old_style, (day_ago, day_ago))
    _, resume, problem = restore(cfg, path, "cpu")
    assert resume is None and problem is None  # no checkpoint: temporary files are not read
    assert not stale.exists() and not old_style.exists() and fresh.exists()


# -- 9. a full disk ----------------------------------------------------------------------


def failing_save(error, *, after=0):
    """A torch.save that writes ``after`` times, then writes part of the file and raises ``error``."""
    real_save, calls = torch.save, []

    def save(obj, f):
        calls.append(1)
        if len(calls) <= after:
            return real_save(obj, f)
        f.write(b"\x00" * 4096)
        raise error

    return save


ENOSPC = OSError(errno.ENOSPC, "No space left on device")
UNEXPECTED_POS = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")


@pytest.mark.parametrize("error", [ENOSPC, UNEXPECTED_POS], ids=["ENOSPC", "unexpected-pos"])
def test_a_full_disk_costs_a_checkpoint_not_the_training(tmp_path, monkeypatch, error):
    import harness.records.files as files
    import harness.training.checkpoint.writing as checkpoint

    cfg = smoke(steps=6)
    task = tasks.create(cfg.task)
    want = train(cfg, build_model(cfg), task)
    path = tmp_path / "ck.pt"
    monkeypatch.setattr(checkpoint.torch, "save", failing_save(error, after=1))  # step 2 saved, 4 fails
    if isinstance(error, RuntimeError):  # torch's message carries no errno: the free space tells
        monkeypatch.setattr(files.shutil, "disk_usage", lambda _: Usage)
    told = []
    got = train(cfg, build_model(cfg), task, checkpointing=Checkpointing(path, every=2, on_error=told.append))
    assert got.final_loss == want.final_loss
    assert len(told) == 1 and "no checkpoint at step 4" in told[0] and "disk full" in told[0], told
    assert torch.load(path, weights_only=True)["step"] == 2  # the previous checkpoint is intact
    assert not list(tmp_path.glob("*.tmp"))


class Usage:  # shutil.disk_usage's answer on a full disk
    total, used, free = 1 << 30, 1 << 30, 0


def test_a_torch_write_error_with_space_left_is_not_called_a_full_disk(tmp_path, monkeypatch):
    import harness.training.checkpoint.writing as checkpoint

    monkeypatch.setattr(checkpoint.torch, "save", failing_save(UNEXPECTED_POS))
    cfg = smoke()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(cfg, build_model(cfg), tasks.create(cfg.task), checkpointing=Checkpointing(tmp_path / "ck.pt", every=2))
    messages = [str(w.message) for w in caught if "no checkpoint" in str(w.message)]
    assert messages and "RuntimeError" in messages[0] and "disk full" not in messages[0]
    assert not list(tmp_path.iterdir())


# -- 9. a finished result the store cannot take is kept, then recorded without training --


def store_full(monkeypatch, error=None):
    def finish(self, *args, **kwargs):
        raise error or sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(Store, "finish", finish)


def no_training(*args, **kwargs):
    raise AssertionError("a kept result is recorded without training")


def rows(metrics):
    return [(m["split"], m["length"], m["n"], m["exact"], m["tokens_right"]) for m in metrics]


@pytest.mark.parametrize(
    "error", [sqlite3.OperationalError("database or disk is full"), sqlite3.OperationalError("disk I/O error")]
)
def test_a_finished_result_the_store_cannot_take_is_kept_and_recorded_next_time(tmp_path, monkeypatch, error):
    cfg = smoke()
    reference = train_and_evaluate(cfg, torch.device("cpu"), tmp_path / "ref.pt", notice=lambda _: None)
    store_path, ckpt_dir = tmp_path / "s.sqlite", tmp_path / "checkpoints"
    with Store(store_path) as store:
        with monkeypatch.context() as m:
            store_full(m, error)
            outcome = execute(cfg, store, torch.device("cpu"), checkpoint_every=2, notice=lambda _: None)
        assert outcome.status == "unrecorded", outcome
        assert ("disk full" in outcome.error) == ("disk is full" in str(error))
        assert "kept in" in outcome.error and "records it without training" in outcome.error
        assert store.status(cfg.run_id()) == "running"
    kept = ckpt_dir / f"{cfg.run_id()}.result.json"
    assert kept.exists() and not checkpoint_path(ckpt_dir, cfg.run_id()).exists()  # the space is freed
    assert not list(ckpt_dir.glob("*.tmp"))

    monkeypatch.setattr("harness.execution.run.train_and_evaluate", no_training)
    notices = []
    with Store(store_path) as store:
        outcome = execute(cfg, store, torch.device("cpu"), notice=notices.append)
        assert outcome.status == "finished", outcome
        assert rows(store.metrics(cfg.run_id())) == rows(
            {"split": s, **vars(m)} for s, m in reference.metrics
        )  # what the run measured, to the last bit
        assert store.run(cfg.run_id())["final_loss"] == reference.final_loss
    assert any("recording the finished result kept in" in n for n in notices)
    assert not kept.exists()


def test_bench_keeps_a_result_the_store_cannot_take_and_records_it_next_time(tmp_path, monkeypatch):
    store_path = tmp_path / "s.sqlite"
    args = ["bench", "--pe", "rope", "--task", "copy", "--preset", "smoke", "--steps", "4", "--device", "cpu",
            "--checkpoint-every", "2", "--store", str(store_path)]  # fmt: skip
    with monkeypatch.context() as m:
        store_full(m)
        first = CliRunner().invoke(main, args)
    assert first.exit_code == 1, first.output
    assert "unrecorded" in first.output and "disk full" in first.output and "kept in" in first.output
    monkeypatch.setattr("harness.sweeps.executors.worker.train_and_evaluate", no_training)
    second = CliRunner().invoke(main, args)
    assert second.exit_code == 0, second.output
    assert "without training" in second.output
    with Store(store_path) as store:
        run_id = smoke().run_id()
        assert store.status(run_id) == "finished" and store.run(run_id)["provenance"]["executor"] == "in-process"
        assert len(store.metrics(run_id)) == len(evaluated_scales(smoke()))
    assert not list((tmp_path / "checkpoints").iterdir())


KEY = bytes(range(32))
"""The seal key of the store these kept results are kept beside (``Store.seal_key``)."""


def a_kept_result(tmp_path, cfg, key=KEY, **changes):
    """A kept result file of ``cfg`` (plausible numbers), with ``changes`` made to its JSON
    and sealed again with ``key``, so that the checks behind the seal are what refuses it."""
    samples = cfg.eval.samples
    metrics = tuple(
        (s, LengthMetrics(n, 2.0 * n, samples, samples // 2, 4 * samples, 3 * samples))
        for s, n in evaluated_scales(cfg)
    )
    numbers = {"final_loss": 0.25, "train_seconds": 3.0, "eval_seconds": 1.0, "n_params": {"total": 10, "pe": 0}}
    provenance = {"commit": "abc", "device": "cpu", "torch": "2", "pezoo": "0"}
    result = RunResult(cfg.run_id(), "finished", provenance, 1.0e9, metrics=metrics, **numbers)
    path = kept_results.path_for(tmp_path / f"{cfg.run_id()}.pt")
    kept_results.keep(path, result.record(cfg), key)
    body = json.loads(path.read_text())
    for name, value in changes.items():
        body[name] = value(body) if callable(value) else value
    if changes:
        body["seal"] = kept_results.seal({k: v for k, v in body.items() if k != "seal"}, key)
    path.write_text(json.dumps(body))
    return path, result


def test_a_kept_result_reads_back_as_it_was_kept(tmp_path):
    cfg = smoke()
    _, result = a_kept_result(tmp_path, cfg)
    got = recover_kept(cfg, tmp_path / f"{cfg.run_id()}.pt", KEY, notice=lambda _: None)
    assert got == result


def _metric(key, value):
    def change(body):
        body["metrics"][-1][key] = value
        return body["metrics"]

    return change


DIAGNOSTICS = {"version": 1, "scale": 0, "train_max": 0, "tokens": ["<img src=x onerror=alert(1)>"], "layers": []}

TAMPERED = {
    "exact match above n": ({"metrics": _metric("exact", 10**6)}, "exact must be"),
    "a string for a number": ({"metrics": _metric("tokens_right", "5")}, "tokens_right must be"),
    "another run": ({"run_id": "0123456789abcdef"}, "is run '0123456789abcdef''s"),
    "another config": ({"config": lambda b: {**b["config"], "seed": 1}}, "config that is not run"),
    "an extra field": ({"extra": 1}, "has fields"),
    "other scales": ({"metrics": lambda b: b["metrics"][:-1]}, "metrics missing at scale"),
    "negative time": ({"train_seconds": -1.0}, "train_seconds"),
    "an int beyond floats": ({"train_seconds": 10**400}, "train_seconds"),  # OverflowError stopped every bench
    "markup in diagnostics": ({"diagnostics": DIAGNOSTICS}, "diagnostics"),
    "another format": ({"format": "pezoo-results"}, "is not a pezoo-kept-result file"),
}


@pytest.mark.parametrize("case", TAMPERED)
def test_a_tampered_kept_result_is_set_aside_and_the_run_trains(tmp_path, case):
    cfg = smoke()
    changes, says = TAMPERED[case]
    path, _ = a_kept_result(tmp_path, cfg, **changes)
    notices = []
    assert recover_kept(cfg, tmp_path / f"{cfg.run_id()}.pt", KEY, notice=notices.append) is None
    assert len(notices) == 1 and says in notices[0] and "the run trains" in notices[0], notices
    assert not path.exists() and path.with_name(path.name + ".unreadable").exists()


def _all_ones(body):
    return [{**m, "exact": m["n"], "tokens_right": m["tokens"]} for m in body["metrics"]]  # every example right


def _forged(body):
    return {**body["provenance"], "commit": "forged"}


def test_a_kept_result_of_the_right_shape_but_not_sealed_by_the_store_is_refused(tmp_path):
    """The third probe: every metric set to 1.0 and the commit to "forged", in a file of the
    right shape, was recorded "without training"; so would be one copied from beside
    another store. Only the store's own key seals a file it takes back."""
    cfg = smoke()
    for key, edit in ((b"a forger's key", {}), (KEY, {"seal": None})):  # sealed by another key; edited after
        path, _ = a_kept_result(tmp_path, cfg, key=key, metrics=_all_ones, provenance=_forged)
        if edit:
            body = json.loads(path.read_text())
            body["metrics"][0]["exact"] = body["metrics"][0]["n"] // 2  # any change after sealing
            path.write_text(json.dumps(body))
        notices = []
        assert recover_kept(cfg, tmp_path / f"{cfg.run_id()}.pt", KEY, notice=notices.append) is None
        assert len(notices) == 1 and "not sealed by this store" in notices[0] and "the run trains" in notices[0]
        path.with_name(path.name + ".unreadable").unlink()
    path, _ = a_kept_result(tmp_path, cfg, key=KEY)  # a genuine one is taken, by its store only
    with pytest.raises(kept_results.KeptResultError, match="not sealed by this store"):
        kept_results.read(path, cfg, None)
    assert kept_results.read(path, cfg, KEY).metrics


def test_bench_trains_a_run_whose_kept_result_was_forged(tmp_path):
    cfg = smoke()
    store_path = tmp_path / "s.sqlite"
    Store(store_path).close()
    a_kept_result(tmp_path / "checkpoints", cfg, key=b"not the store's", metrics=_all_ones, provenance=_forged)
    args = ["bench", "--pe", "rope", "--task", "copy", "--preset", "smoke", "--steps", "4", "--device", "cpu",
            "--store", str(store_path)]  # fmt: skip
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    assert "not sealed by this store" in out.output and "without training" not in out.output
    with Store(store_path, readonly=True) as store:
        run = store.run(cfg.run_id())
        assert run["provenance"]["commit"] != "forged" and run["train_seconds"] > 0
        assert any(m["exact"] < m["n"] for m in store.metrics(cfg.run_id()))


@pytest.mark.parametrize(
    "text",
    [
        b'{"format": NaN}',
        b'{"format": "pezoo-kept-result", "format": "pezoo-kept-result"}',
        b"[" * 100_000 + b"]" * 100_000,
        pickle.dumps({"format": "pezoo-kept-result"}),
        b"",
    ],
    ids=["NaN", "duplicate key", "deep nesting", "a pickle", "empty"],
)
def test_a_kept_result_that_is_not_strict_json_is_refused(tmp_path, text):
    cfg = smoke()
    path = kept_results.path_for(tmp_path / f"{cfg.run_id()}.pt")
    path.write_bytes(text)
    with pytest.raises(kept_results.KeptResultError, match="is not strict JSON"):
        kept_results.read(path, cfg, KEY)


# -- 9, for real: a tmpfs that fills up ---------------------------------------------------


@pytest.fixture
def tiny_disk(tmp_path):
    """A 4 MiB tmpfs (Linux, as root; skipped elsewhere)."""
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs Linux and root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(folder):
    """Write ``folder``'s file system full; returns the filler file."""
    filler = folder / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def test_a_disk_that_fills_up_during_a_run_loses_nothing_finished(tiny_disk, monkeypatch):
    cfg = smoke()
    ckpt_dir = tiny_disk / "checkpoints"
    filled = []

    def progress(phase, done, total, note):
        if phase == "eval" and not filled:  # training is over, its checkpoint at step 2 exists
            assert checkpoint_path(ckpt_dir, cfg.run_id()).exists()
            filled.append(fill(tiny_disk))

    with Store(tiny_disk / "s.sqlite") as store:
        outcome = execute(cfg, store, torch.device("cpu"), progress, checkpoint_every=2, notice=lambda _: None)
        assert outcome.status == "unrecorded", outcome
        assert "disk full" in outcome.error and "kept in" in outcome.error
    assert not list(ckpt_dir.glob("*.tmp"))
    filled[0].unlink()
    monkeypatch.setattr("harness.execution.run.train_and_evaluate", no_training)
    with Store(tiny_disk / "s.sqlite") as store:
        assert execute(cfg, store, torch.device("cpu"), notice=lambda _: None).status == "finished"
        assert store.status(cfg.run_id()) == "finished"


# -- 9. tensors are checked before anything is allocated from them ---------------------


def _stride_zero_optimizer_state(path, cfg, elements):
    """A real checkpoint whose first exp_avg is one float64 declared as ``elements``: a
    file of a few hundred KB; the optimiser's dtype conversion used to allocate it in
    full (8 bytes x elements) before its shape was checked."""
    payload = real_checkpoint(path, cfg)
    state = next(iter(payload["optimizer"]["state"].values()))
    state["exp_avg"] = torch.zeros(1, dtype=torch.float64).expand(elements)
    save_checkpoint(path, payload)
    return payload


def test_a_stride_0_tensor_is_refused_when_read_before_any_use(tmp_path):
    cfg = smoke()
    path = tmp_path / "ck.pt"
    _stride_zero_optimizer_state(path, cfg, 10_000_000)  # 80 MB if materialised
    assert path.stat().st_size < 1_000_000
    for mmap in (False, True):  # a run's start, and sweep plan (which maps the file)
        with pytest.raises(CheckpointError, match="stride-0"):
            load_checkpoint(path, cfg.run_id(), mmap=mmap)
    _model, resume, problem = restore(cfg, path, "cpu")
    assert resume is None and "stride-0" in problem and (tmp_path / "ck.pt.unreadable").exists()


@pytest.mark.parametrize(
    "tensor, fits",
    [
        (torch.zeros(4, 3), True),
        (torch.zeros(3, 4).t(), True),  # transposed: strides (1, 4), every element its own
        (torch.zeros(10)[2:5], True),  # a view inside a larger storage
        (torch.zeros(()), True),
        (torch.zeros(0, 5), True),
        (torch.zeros(1).expand(6), False),
        (torch.zeros(5).as_strided((3, 3), (1, 1)), False),  # rows overlap
        (torch.zeros(4, 1).expand(4, 5), False),
    ],
)
def test_layout_problem_tells_tensors_that_share_bytes(tensor, fits):
    from harness.training.checkpoint import layout_problem

    assert (layout_problem(tensor) is None) == fits


def diverging_at(step):
    """A ``training_loss`` whose loss is NaN from training step ``step`` on (counted from 0)."""
    from harness.training.loss import training_loss

    calls = []

    def loss(model, batch, *args, **kwargs):
        calls.append(1)
        total, task_loss = training_loss(model, batch, *args, **kwargs)
        if len(calls) > step:
            return total * float("nan"), task_loss * float("nan")
        return total, task_loss

    return loss


def test_a_diverged_run_sets_its_checkpoint_aside_and_is_never_resumed(tmp_path, monkeypatch):
    cfg = smoke()
    path = tmp_path / "ck.pt"
    monkeypatch.setattr("harness.training.loss.training_loss", diverging_at(3))  # after the checkpoint at step 2
    notices = []
    result = train_and_evaluate(cfg, torch.device("cpu"), path, checkpoint_every=2, notice=notices.append)
    assert result.status == "diverged"
    assert not path.exists() and (tmp_path / "ck.pt.diverged").exists()
    assert any("ck.pt.diverged" in n for n in notices)
    monkeypatch.undo()
    notices.clear()
    again = train_and_evaluate(cfg, torch.device("cpu"), path, checkpoint_every=2, notice=notices.append)
    assert again.status == "finished"
    assert not any("resuming" in n for n in notices), notices


def unblocked(call, fifos, timeout=20.0):
    """``call()``'s result, or AssertionError when it blocks past ``timeout``: then the
    writing end of each FIFO is opened, so a reader stuck on one returns and the test
    ends (a daemon thread holds the call)."""
    box = {}

    def target():
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        for fifo in fifos:
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5)
        raise AssertionError(f"blocked for {timeout:.0f} s on a FIFO")
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_a_fifo_at_a_checkpoint_path_is_set_aside_not_read(tmp_path):
    cfg = smoke()
    path = tmp_path / "ck.pt"
    os.mkfifo(path)
    _model, resume, problem = unblocked(lambda: restore(cfg, path, "cpu"), [path])
    assert resume is None and "FIFO" in problem and "starts over" in problem
    assert not path.exists() and (tmp_path / "ck.pt.unreadable").exists()
    os.mkfifo(path)  # sweep plan reads only the step, and changes nothing
    assert unblocked(lambda: checkpointed_steps(tmp_path, [cfg.run_id()]), [path]) == {}
    with pytest.raises(CheckpointError, match="FIFO"):
        unblocked(lambda: load_checkpoint(path, cfg.run_id(), mmap=True), [path])


def test_a_fifo_as_a_kept_result_is_set_aside_and_the_run_trains(tmp_path):
    cfg = smoke()
    path = tmp_path / "ck.pt"
    os.mkfifo(kept_results.path_for(path))
    notices = []
    assert unblocked(lambda: recover_kept(cfg, path, KEY, notices.append), [kept_results.path_for(path)]) is None
    assert any("FIFO" in n for n in notices)


def test_a_fifo_at_the_store_path_is_refused_at_bench(tmp_path):
    fifo = tmp_path / "s.sqlite"
    os.mkfifo(fifo)
    args = ["bench", "--pe", "rope", "--task", "copy", "--preset", "smoke", "--steps", "2", "--device", "cpu"]
    result = unblocked(lambda: CliRunner().invoke(main, [*args, "--store", str(fifo)]), [fifo], timeout=60)
    assert result.exit_code == 1, result.output
    assert "FIFO" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    for readonly in (False, True):
        with pytest.raises(NotAStoreError, match="FIFO"):
            unblocked(lambda readonly=readonly: Store(fifo, readonly=readonly), [fifo])
