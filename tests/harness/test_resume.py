"""A run killed mid-training (SIGKILL) resumes from its checkpoint and ends with exactly
the metrics of an uninterrupted run; a corrupt checkpoint restarts the run, loudly."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
import torch

from harness.config import preset_config
from harness.records.frames import load
from harness.records.store import Store
from harness.training.checkpoint import FORMAT, VERSION
from harness.training.train import restore, save_checkpoint

STEPS = ["--steps", "100", "--checkpoint-every", "10"]
BENCH = [sys.executable, "-m", "harness.cli", "bench", "--pe", "rope", "--task", "copy", "--preset", "smoke"]


def bench(store, *extra, **kw):
    return subprocess.Popen([*BENCH, *STEPS, "--device", "cpu", "--store", str(store), *extra], **kw)


def metrics(store):
    df = load(store).sort_values("length")
    return df[["length", "exact", "tokens", "tokens_right"]].to_dict("records")


@pytest.mark.slow
def test_killed_run_resumes_with_identical_results(tmp_path):
    reference = tmp_path / "ref" / "store.sqlite"
    assert bench(reference, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).wait(timeout=600) == 0

    store = tmp_path / "killed" / "store.sqlite"
    proc = bench(store, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoints = store.parent / "checkpoints"
    deadline = time.time() + 300
    while not (checkpoints.exists() and any(checkpoints.glob("*.pt"))):
        assert proc.poll() is None, "the run finished before it could be killed"
        assert time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with Store(store) as s:
        assert [r["status"] for r in s.runs()] == ["running"]  # killed: nothing claims to be finished

    resumed = bench(store, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out
    assert "resuming from step" in out
    assert metrics(store) == metrics(reference)
    with Store(reference) as a, Store(store) as b:
        assert a.runs()[0]["final_loss"] == b.runs()[0]["final_loss"]
    assert not any(checkpoints.glob("*.pt"))  # removed once the results are stored


def test_corrupt_checkpoint_is_reported_and_the_run_restarts(tmp_path):
    cfg = preset_config("smoke", pe="rope", task="copy", seed=0)
    path = tmp_path / "ck.pt"
    path.write_bytes(b"\x00garbage" * 50)
    model, resume, problem = restore(cfg, path, "cpu")
    assert resume is None and "unreadable" in problem and "starts over" in problem
    assert not path.exists() and (tmp_path / "ck.pt.unreadable").read_bytes() == b"\x00garbage" * 50  # kept aside
    fresh = restore(cfg, path, "cpu")[0]
    for a, b in zip(model.state_dict().values(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b)  # a clean restart: the seed's initialisation


def test_checkpoint_of_another_run_is_rejected(tmp_path):
    cfg = preset_config("smoke", pe="rope", task="copy", seed=0)
    other = preset_config("smoke", pe="rope", task="copy", seed=1)
    path = tmp_path / "ck.pt"
    save_checkpoint(path, {"format": FORMAT, "version": VERSION, "run_id": other.run_id(), "step": 10, "model": {}})
    _, resume, problem = restore(cfg, path, "cpu")
    assert resume is None and "does not belong" in problem


@pytest.mark.parametrize("saved_fused", [True, False])
def test_a_checkpoint_resumes_whichever_optimiser_kernel_wrote_it(tmp_path, saved_fused):
    """How AdamW computed its update (fused on a GPU, the per-tensor loop on a CPU) is the
    loop's, not the run's: a GPU run's checkpoint resumed on a CPU is taken (it was set aside
    and the run started over), steps with the CPU's own optimiser, and ends where the
    uninterrupted CPU run ends; a CPU checkpoint into a fused optimiser keeps it fused."""
    import harness.tasks as tasks
    from harness.training.checkpoint import load_optimizer_state
    from harness.training.train import Checkpointing, build_model, make_optimizer, train

    cfg = preset_config("smoke", pe="rope", task="copy", seed=0, overrides={"train": {"steps": 4}})
    reference = build_model(cfg)
    train(cfg, reference, tasks.create(cfg.task))
    path = tmp_path / "ck.pt"
    train(cfg, build_model(cfg), tasks.create(cfg.task), checkpointing=Checkpointing(path, every=2))
    state = torch.load(path, weights_only=True)
    for group in state["optimizer"]["param_groups"]:
        group["fused"] = saved_fused or None  # what a GPU run's (fused) or a CPU run's optimiser saves
    save_checkpoint(path, state)

    model, resume, problem = restore(cfg, path, "cpu")
    assert problem is None and resume is not None and resume["step"] == 2
    train(cfg, model, tasks.create(cfg.task), resume=resume)
    for a, b in zip(model.state_dict().values(), reference.state_dict().values(), strict=True):
        assert torch.equal(a, b)  # the CPU's own optimiser: bit for bit the uninterrupted run

    fused = make_optimizer(model, cfg, fused=True)
    load_optimizer_state(fused, resume["optimizer"])
    assert all(g["fused"] for g in fused.param_groups)  # the loading optimiser's kernel, not the file's
