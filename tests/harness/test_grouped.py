"""Runs trained side by side in one process (harness.sweeps.executors.grouped): each gives the
record it gives alone, bit for bit on CPU, whatever trains beside it, its random draws
included (randomized positions, Abacus's offsets); the executor hands results, progress and
notices to the driver's thread; a GPU sweep takes the group by default.

The CPU stands in for the GPU here: the group's threads are the same, only the streams are
not (tested on a GPU by benchmarks/device_check.py)."""

from __future__ import annotations

import threading

import pytest
import torch

import harness.sweeps.executors.sizing as sizing
import harness.training.graphs as graphs
from harness.config import preset_config
from harness.config.global_rng import GLOBAL_RNG
from harness.execution.run import train_and_evaluate
from harness.records.store import Store
from harness.sweeps.executors import Grouped, InProcess, LocalPool, local_executor, run_sweep
from harness.sweeps.executors.jobs import Job
from harness.sweeps.executors.sizing import GROUP_CAP, group_mode, packed_per_gpu
from harness.training.train import build_model, train

GIB = 2**30

# one of each kind of drawing: none, randomized positions (per length, replayed per length
# group), Abacus's offset inside a combination, and a periodic evaluation mid-training
CONFIGS = [
    ("nope", "copy", {}),
    ("randomized:ape{max_length=64}", "copy", {"eval": {"every": 10}}),
    ("abacus+fire", "addition", {}),
    ("randomized:rope{max_length=64}", "reverse", {}),
]


def _config(pe, task, overrides, seed=0):
    merged = {"train": {"steps": 25}, "eval": {"samples": 4}}
    for key, value in overrides.items():
        merged[key] = {**merged[key], **value}
    return preset_config("smoke", pe=pe, task=task, seed=seed, overrides=merged)


def _summary(result):
    assert result.status == "finished", result.error
    return result.final_loss, [(s, m.length, m.exact, m.tokens_right) for s, m in result.metrics]


@pytest.fixture
def one_torch_thread():
    """CPU matmuls round by the thread count: a group and a lone run compare at one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_a_run_in_a_group_gives_the_record_it_gives_alone(one_torch_thread, tmp_path):
    configs = [_config(pe, task, over, seed) for seed in (0, 1) for pe, task, over in CONFIGS]
    alone = {
        cfg.run_id(): _summary(train_and_evaluate(cfg, torch.device("cpu"), tmp_path / f"a{i}.pt", notice=print))
        for i, cfg in enumerate(configs)
    }
    group = Grouped(["cpu"] * len(configs))
    jobs = [Job(i, cfg.to_dict(), cfg.run_id(), str(tmp_path / f"g{i}.pt")) for i, cfg in enumerate(configs)]
    for job in jobs:
        group.submit(job)
    together = {}
    while len(together) < len(jobs):
        together |= {job.run_id: _summary(answer) for job, answer in group.wait()}
    group.close()
    assert together == alone


def test_runs_built_at_once_draw_their_own_initialisation(one_torch_thread):
    """The global RNG seeds a run's initialisation: threads building at once must not
    interleave their draws (harness.config.global_rng), and training draws afterwards come
    from each run's own generator, so what another thread draws changes nothing."""
    cfg = _config("randomized:ape{max_length=64}", "copy", {"train": {"steps": 6}})
    from harness import tasks

    def trained():
        model = build_model(cfg)
        return train(cfg, model, tasks.create("copy")).final_loss, model.state_dict()

    reference_loss, reference_state = trained()
    stop, results = threading.Event(), []

    def noise():  # another run's thread seeding and drawing from the global RNG all along, as the lock lets it
        while not stop.is_set():
            with GLOBAL_RNG:
                torch.manual_seed(123)
                torch.rand(1000)

    drawer = threading.Thread(target=noise)
    drawer.start()
    try:
        threads = [threading.Thread(target=lambda: results.append(trained())) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        stop.set()
        drawer.join()
    for loss, state in results:
        assert loss == reference_loss
        assert all(torch.equal(state[k], reference_state[k]) for k in reference_state)


@pytest.mark.slow
def test_a_grouped_sweep_stores_what_the_in_process_one_stores(one_torch_thread, tmp_path):
    configs = [_config(pe, task, over) for pe, task, over in CONFIGS[:3]]
    stored = {}
    for name, executor in (("alone", InProcess(torch.device("cpu"))), ("group", Grouped(["cpu"] * 3))):
        with Store(tmp_path / f"{name}.sqlite") as store:
            outcomes = run_sweep(executor, configs, store, checkpoint_dir=tmp_path / name)
            assert [o.status for o in outcomes] == ["finished"] * 3
            stored[name] = {r["run_id"]: (r["final_loss"], r["provenance"]["executor"]) for r in store.runs()}
        executor.close()
    assert {k: v[0] for k, v in stored["group"].items()} == {k: v[0] for k, v in stored["alone"].items()}
    assert {v[1] for v in stored["group"].values()} == {"grouped"}


def test_progress_and_notices_reach_the_driver_thread(tmp_path):
    cfg = _config("nope", "copy", {"train": {"steps": 3}})
    heard = []
    driver = threading.current_thread()

    def progress_for(job):
        return lambda phase, done, total, note: heard.append((threading.current_thread() is driver, phase))

    group = Grouped(
        ["cpu"], progress_for, notice=lambda job, msg: heard.append((threading.current_thread() is driver, msg))
    )
    group.submit(Job(1, cfg.to_dict(), cfg.run_id(), str(tmp_path / "r.pt")))
    [(job, answer)] = group.wait()
    group.close()
    assert answer.status == "finished" and job.device == "cpu"
    assert heard and all(on_driver for on_driver, _ in heard)
    assert {"train", "eval"} <= {what for _, what in heard}


def test_a_thread_that_fails_outside_its_run_loses_only_that_run(tmp_path, monkeypatch):
    import harness.sweeps.executors.grouped as grouped

    def broken(job, progress, notice):
        raise MemoryError("no memory for the thread")

    monkeypatch.setattr(grouped, "run_job", broken)
    group = Grouped(["cpu"])
    cfg = _config("nope", "copy", {})
    group.submit(Job(1, cfg.to_dict(), cfg.run_id(), str(tmp_path / "r.pt")))
    [(_, answer)] = group.wait()
    assert answer.reason.startswith("the group's thread for it failed: MemoryError")
    group.submit(Job(2, cfg.to_dict(), cfg.run_id(), str(tmp_path / "r.pt")))  # the slot serves on
    [(_, again)] = group.wait()
    group.close()
    assert again.run_id == cfg.run_id()


def test_a_gpu_sweep_takes_a_group_sized_by_memory(monkeypatch):
    monkeypatch.delenv(sizing.GROUP_ENV, raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index=0: (40 * GIB, 80 * GIB))
    monkeypatch.setattr(sizing, "default_cpu_workers", lambda: 4)
    monkeypatch.setattr(sizing, "run_footprint", lambda cfg, device: GIB)
    configs = [preset_config("smoke", pe="nope", task="copy", seed=s) for s in range(40)]
    cuda = torch.device("cuda")
    # threads share one CUDA context and are not held to one CPU core each
    assert packed_per_gpu(configs, cuda, grouped=True) == GROUP_CAP
    assert packed_per_gpu(configs, cuda) == 4
    executor = local_executor(cuda, None, 40, configs=configs)
    assert isinstance(executor, Grouped) and executor.capacity == GROUP_CAP
    assert isinstance(local_executor(cuda, None, 40, configs=configs, isolate=True), LocalPool)  # a plugin's code
    assert isinstance(local_executor(cuda, None, 40, configs=configs, hang_seconds=60), LocalPool)
    monkeypatch.setenv(sizing.GROUP_ENV, "processes")
    assert isinstance(local_executor(cuda, None, 40, configs=configs), LocalPool)
    monkeypatch.delenv(sizing.GROUP_ENV)
    assert isinstance(local_executor(torch.device("cpu"), 2, 40, configs=configs), LocalPool)  # CPUs keep the pool
    monkeypatch.setenv(sizing.GROUP_ENV, "threads")  # unless asked
    assert isinstance(local_executor(torch.device("cpu"), 2, 40, configs=configs), Grouped)


def test_the_group_setting_is_checked():
    assert group_mode("") == "threads" and group_mode("", "cpu") == "processes"  # unset: by device
    assert group_mode("processes") == "processes" and group_mode("threads", "cpu") == "threads"
    with pytest.raises(ValueError, match="PEZOO_GROUP: 'streams' is not threads or processes"):
        group_mode("streams")


def test_a_group_is_on_one_kind_of_device():
    with pytest.raises(Exception, match="one kind of device"):
        Grouped(["cpu", "cuda:0"])


def test_graphs_are_captured_in_thread_local_mode_one_at_a_time(monkeypatch):
    """While one run captures its CUDA graph, another run's step (an allocation, a copy)
    must neither fail nor spoil the capture: make_graphed_callables is made to capture in
    ``thread_local`` error mode, and captures take turns."""
    seen = []

    def fake_make_graphed_callables(module, samples, **kwargs):
        graph = torch.cuda.graph.__new__(torch.cuda.graph)
        init_kwargs = {}
        real_init = torch.cuda.graphs.graph.__init__

        def record(self, cuda_graph, *args, **kw):
            init_kwargs.update(kw)

        monkeypatch.setattr(torch.cuda.graphs.graph, "__init__", record)
        try:
            type(graph).__init__(graph, object())
        finally:
            monkeypatch.setattr(torch.cuda.graphs.graph, "__init__", real_init)
        seen.append((init_kwargs.get("capture_error_mode"), graphs._CAPTURING.locked()))
        return module

    monkeypatch.setattr(torch.cuda, "make_graphed_callables", fake_make_graphed_callables)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device=None: torch.get_rng_state())
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device=None: None)
    original = torch.cuda.graph
    module = torch.nn.Linear(2, 2)
    assert graphs.capture(module, (torch.zeros(1, 2),)) is module
    assert seen == [("thread_local", True)]
    assert torch.cuda.graph is original  # restored after the capture


def test_each_slot_trains_only_the_jobs_placed_on_it(monkeypatch, tmp_path):
    """A job is placed on a slot (its device, its stream, its place in the bookkeeping), so
    that slot's thread must be the one to train it."""
    import time

    import harness.sweeps.executors.grouped as grouped

    seen: list[tuple[str, str]] = []

    def record(job, progress, notice):
        seen.append((threading.current_thread().name, job.device))
        time.sleep(0.002 * (job.index % 3))
        return train_and_evaluate  # any answer: the driver is not here

    monkeypatch.setattr(grouped, "run_job", record)
    group = Grouped(["cpu", "cpu:0"])  # two slots told apart by their device string
    cfg = _config("nope", "copy", {})
    submitted = 0
    for _ in range(40):
        while submitted < 40 and group._free:
            group.submit(Job(submitted, cfg.to_dict(), cfg.run_id(), str(tmp_path / "r.pt")))
            submitted += 1
        if group._in_flight:
            group.wait()
    while group._in_flight:
        group.wait()
    group.close()
    assert len(seen) == 40
    assert {device for thread, device in seen if thread == "pezoo-group-0"} <= {"cpu"}
    assert {device for thread, device in seen if thread == "pezoo-group-1"} <= {"cpu:0"}
