"""A run resumed under another commit, or on another machine, records which commit and
which machine trained which steps."""

from __future__ import annotations

import pytest
import torch

import harness.tasks as tasks
import harness.training.train as train_module
from harness.config import preset_config
from harness.execution.attempt import by_step
from harness.execution.run import train_and_evaluate
from harness.training.checkpoint import UNKNOWN_CODE, UNKNOWN_MACHINE, code_history, machine_history, save_checkpoint
from harness.training.train import Checkpointing, build_model, train


def smoke():
    return preset_config("smoke", pe="rope", task="copy", seed=0, overrides={"train": {"steps": 4}})


def test_code_history_of_fresh_resumed_and_old_checkpoints():
    assert code_history(None, "a") == [(0, "a")]
    assert code_history({"step": 6, "code": [[0, "a"]]}, "a") == [(0, "a")]  # same code: one segment
    assert code_history({"step": 6, "code": [[0, "a"]]}, "b") == [(0, "a"), (6, "b")]
    assert code_history({"step": 6}, "b") == [(0, UNKNOWN_CODE), (6, "b")]  # written before it was recorded


def test_by_step_names_each_commits_steps():
    assert by_step([(0, "a"), (6750, "b")], 10000) == "steps 0-6749: a; steps 6750-9999: b"


def test_machine_history_of_fresh_resumed_and_old_checkpoints():
    assert machine_history(None, "cpu x1") == [(0, "cpu x1")]
    assert machine_history({"step": 6, "machine": [[0, "cpu x1"]]}, "cpu x1") == [(0, "cpu x1")]
    assert machine_history({"step": 6, "machine": [[0, "cpu x1"]]}, "cpu x2") == [(0, "cpu x1"), (6, "cpu x2")]
    assert machine_history({"step": 6, "code": [[0, "a"]]}, "cpu x2") == [(0, UNKNOWN_MACHINE), (6, "cpu x2")]


def _interrupted(path, monkeypatch, commit, machine="cpu:x86_64 x1 threads on Some CPU (torch CPU kernels: AVX2)"):
    """A 4-step run checkpointed at step 2 by ``commit`` on ``machine``."""
    monkeypatch.setattr(train_module, "git_commit", lambda: commit)
    monkeypatch.setattr(train_module, "machine_name", lambda device: machine)
    cfg = smoke()
    train(cfg, build_model(cfg), tasks.create(cfg.task), checkpointing=Checkpointing(path, every=2))
    return cfg


@pytest.mark.parametrize("legacy", [False, True], ids=["recorded", "old checkpoint"])
def test_a_run_resumed_under_another_commit_says_so(tmp_path, monkeypatch, legacy):
    path = tmp_path / "ck.pt"
    cfg = _interrupted(path, monkeypatch, "aaa")
    payload = torch.load(path, weights_only=True)
    assert payload["code"] == [[0, "aaa"]]
    if legacy:
        del payload["code"]
        save_checkpoint(path, payload)
    monkeypatch.setattr(train_module, "git_commit", lambda: "bbb")
    notices = []
    result = train_and_evaluate(cfg, torch.device("cpu"), path, checkpoint_every=2, notice=notices.append)
    assert result.status == "finished", result.traceback
    first = UNKNOWN_CODE if legacy else "aaa"
    assert result.provenance["code_by_step"] == f"steps 0-1: {first}; steps 2-3: bbb"
    assert any("trained by more than one commit" in n for n in notices)


def test_a_run_resumed_under_the_same_commit_records_just_the_commit(tmp_path, monkeypatch):
    path = tmp_path / "ck.pt"
    cfg = _interrupted(path, monkeypatch, "aaa")
    result = train_and_evaluate(cfg, torch.device("cpu"), path, checkpoint_every=2)
    assert result.status == "finished" and "code_by_step" not in result.provenance


@pytest.mark.parametrize("legacy", [False, True], ids=["recorded", "old checkpoint"])
def test_a_run_resumed_on_another_machine_says_so(tmp_path, monkeypatch, legacy):
    # the same commit on another CPU or thread count: the record used to name the last one only
    path = tmp_path / "ck.pt"
    cfg = _interrupted(path, monkeypatch, "aaa", machine="cpu:x86_64 x1 threads on CPU A")
    payload = torch.load(path, weights_only=True)
    assert payload["machine"] == [[0, "cpu:x86_64 x1 threads on CPU A"]]
    if legacy:
        del payload["machine"]
        save_checkpoint(path, payload)
    monkeypatch.setattr(train_module, "machine_name", lambda device: "cpu:x86_64 x4 threads on CPU B")
    notices = []
    result = train_and_evaluate(cfg, torch.device("cpu"), path, checkpoint_every=2, notice=notices.append)
    assert result.status == "finished", result.traceback
    first = UNKNOWN_MACHINE if legacy else "cpu:x86_64 x1 threads on CPU A"
    assert result.provenance["machine_by_step"] == f"steps 0-1: {first}; steps 2-3: cpu:x86_64 x4 threads on CPU B"
    assert "code_by_step" not in result.provenance
    assert any("trained on more than one machine" in n for n in notices)


def test_a_run_resumed_on_the_same_machine_records_no_history(tmp_path, monkeypatch):
    path = tmp_path / "ck.pt"
    cfg = _interrupted(path, monkeypatch, "aaa")
    result = train_and_evaluate(cfg, torch.device("cpu"), path, checkpoint_every=2)
    assert result.status == "finished" and "machine_by_step" not in result.provenance
