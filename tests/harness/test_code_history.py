"""A run resumed under another commit records which commit trained which steps."""

from __future__ import annotations

import pytest
import torch

import harness.tasks as tasks
import harness.train as train_module
from harness.checkpoint import UNKNOWN_CODE, code_history, save_checkpoint
from harness.config import preset_config
from harness.run import code_by_step, train_and_evaluate
from harness.train import Checkpointing, build_model, train


def smoke():
    return preset_config("smoke", pe="rope", task="copy", seed=0, overrides={"train": {"steps": 4}})


def test_code_history_of_fresh_resumed_and_old_checkpoints():
    assert code_history(None, "a") == [(0, "a")]
    assert code_history({"step": 6, "code": [[0, "a"]]}, "a") == [(0, "a")]  # same code: one segment
    assert code_history({"step": 6, "code": [[0, "a"]]}, "b") == [(0, "a"), (6, "b")]
    assert code_history({"step": 6}, "b") == [(0, UNKNOWN_CODE), (6, "b")]  # written before it was recorded


def test_code_by_step_names_each_commits_steps():
    assert code_by_step([(0, "a"), (6750, "b")], 10000) == "steps 0-6749: a; steps 6750-9999: b"


def _interrupted(path, monkeypatch, commit):
    """A 4-step run checkpointed at step 2 by ``commit``."""
    monkeypatch.setattr(train_module, "git_commit", lambda: commit)
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
