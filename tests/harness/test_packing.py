"""Packing several runs on one GPU (harness.sweeps.executors.sizing), sized from fake device facts.
That a run's result does not depend on what trains beside it is
tests/harness/test_executors.py::test_runs_side_by_side_store_what_each_stores_alone."""

from __future__ import annotations

import pytest
import torch

import harness.sweeps.executors.sizing as sizing
from harness.config import preset_config
from harness.sweeps.executors import InProcess, LocalPool, local_devices, local_executor
from harness.sweeps.executors.sizing import CONTEXT_BYTES, PACK_CAP, packed_per_gpu, runs_per_gpu

GIB = 2**30


def test_runs_per_gpu_is_bounded_by_memory_cores_and_the_cap():
    assert runs_per_gpu(80 * GIB, GIB // 4, 16) == PACK_CAP  # an H100 and a quick-preset run: the cap
    assert runs_per_gpu(80 * GIB, GIB // 4, 3) == 3  # one CPU core per worker
    # memory: 10 GiB free less 10 %, each run 1 GiB + its context
    assert runs_per_gpu(10 * GIB, GIB, 16) == int(9 * GIB // (GIB + CONTEXT_BYTES))
    assert runs_per_gpu(GIB, 8 * GIB, 16) == 1  # never below one: the run then fails or fits as ever
    assert runs_per_gpu(0, 0, 0) == 1
    with pytest.raises(ValueError, match=">= 0"):
        runs_per_gpu(-1, GIB, 4)


def test_packed_pool_on_fake_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index=0: (40 * GIB, 80 * GIB))
    monkeypatch.setattr(sizing, "default_cpu_workers", lambda: 12)
    measured = []
    monkeypatch.setattr(sizing, "run_footprint", lambda cfg, device: measured.append(cfg.pe) or 2 * GIB)
    configs = [preset_config("smoke", pe=pe, task="copy", seed=s) for pe in ("nope", "rope") for s in (0, 1)]
    cuda = torch.device("cuda")
    per_gpu = packed_per_gpu(configs, cuda)
    assert sorted(measured) == ["nope", "rope"]  # one footprint per distinct model, not per seed
    assert per_gpu == 6  # 12 cores over 2 GPUs; memory would hold 13
    assert packed_per_gpu(configs, torch.device("cpu")) == 1 and packed_per_gpu([], cuda) == 1
    devices = local_devices(cuda, None, todo=20, per_gpu=per_gpu)
    assert len(devices) == 12 and devices.count("cuda:0") == devices.count("cuda:1") == 6
    assert local_devices(cuda, None, todo=5, per_gpu=per_gpu) == ["cuda:0", "cuda:1"] * 2 + ["cuda:0"]
    monkeypatch.setenv("PEZOO_GROUP", "processes")  # worker processes, as before runs grouped in threads
    executor = local_executor(cuda, None, 4, configs=configs)
    assert isinstance(executor, LocalPool) and executor.capacity == 4  # never more workers than runs
    assert isinstance(local_executor(cuda, 1, 4, configs=configs), InProcess)  # --workers says otherwise
