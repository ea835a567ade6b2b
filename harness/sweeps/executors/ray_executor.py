"""The Ray executor: the same jobs on a cluster (or a local Ray instance): Ray tasks with one
torch thread each on CPUs; on GPUs, groups, as a local GPU sweep trains them
(``harness.sweeps.executors.grouped``): one Ray actor per GPU runs up to ``group`` jobs at
once in its threads (a threaded actor), each on a CUDA stream of its own. Ray is an
optional extra, imported only when this executor is built.
"""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from typing import Any

import torch

import harness.training.stacked as stacked
from harness.records.result import RunResult
from harness.sweeps.executors.interface import Executor, ExecutorError, first_line
from harness.sweeps.executors.jobs import Completion, Job, WorkerLost
from harness.sweeps.executors.sizing import default_cpu_workers, group_mode
from harness.sweeps.executors.worker import run_job
from harness.training.accel import Accel


def _ray_run_job(job: Job) -> RunResult:
    """The Ray task: one torch thread (as in the local pool), then the same worker code."""
    torch.set_num_threads(1)
    return run_job(job)


RAY_GROUP = 8
"""Runs at once on each GPU of a Ray cluster (one actor per GPU); a local sweep sizes its
group from the GPU's free memory (``harness.sweeps.executors.sizing``), which the driver of
a cluster cannot read. Not yet measured."""


class GroupWorker:
    """A Ray actor holding one GPU: each call trains one job in the actor's own thread (Ray
    runs up to ``max_concurrency`` calls at once), on a CUDA stream that thread keeps, as a
    local group's slot does (``Grouped``)."""

    def __init__(self) -> None:
        torch.set_num_threads(1)
        self._local = threading.local()
        self._stacks = stacked.Stacks()  # with the stack loop feature, the actor's runs of one shape share passes

    def run(self, job: Job) -> RunResult:
        if torch.device(job.device).type != "cuda":
            return run_job(job)
        stream = getattr(self._local, "stream", None)
        if stream is None:
            stream = self._local.stream = torch.cuda.Stream(torch.device(job.device))
        with torch.cuda.stream(stream), stacked.installed(self._stacks):
            return run_job(job)


class RayExecutor(Executor):
    """The same jobs as Ray tasks: ``num_cpus=1`` each, plus ``num_gpus=1`` when the
    cluster has GPUs and ``device`` allows them (``auto`` or ``cuda``).

    Connects to ``address`` (``auto``, ``host:port``, ``ray://host:10001``), else to the
    cluster in ``RAY_ADDRESS``, else starts a local instance with ``num_cpus`` CPUs
    (default: this machine's). An instance already initialised in this process (e.g. a
    test fixture) is used as it is and left running. ``capacity`` (jobs in flight) is
    ``workers`` or else the cluster's GPU (or CPU) count at connection time.
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        workers: int | None = None,
        device: str = "auto",
        num_cpus: int | None = None,
        group: int | None = None,
    ) -> None:
        try:
            import ray
        except ImportError:
            raise ExecutorError("the ray executor needs Ray: pip install 'pezoo[ray]'") from None
        if device not in ("auto", "cpu", "cuda"):
            raise ExecutorError(f"--device {device} with the ray executor: use auto, cpu or cuda (one GPU per run)")
        self._ray = ray
        self._owns_instance = False
        if not ray.is_initialized():
            try:
                if address or os.environ.get("RAY_ADDRESS"):
                    ray.init(address=address or None)
                else:
                    ray.init(num_cpus=num_cpus or default_cpu_workers(), include_dashboard=False)
                    self._owns_instance = True
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ExecutorError(
                    f"could not connect to Ray at {address or os.environ.get('RAY_ADDRESS')}: {exc}"
                ) from exc
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0)) if device != "cpu" else 0
        if device == "cuda" and not gpus:
            self.close()
            raise ExecutorError("--device cuda was asked for but the Ray cluster has no GPUs; use --device auto or cpu")
        self.device_type = "cuda" if gpus else "cpu"
        if group is None:
            group = RAY_GROUP if gpus and group_mode(device_type="cuda") == "threads" else 1
        if group < 1:
            raise ExecutorError(f"a Ray group holds at least one run, got {group}")
        self.group = group
        self.stacks_runs = bool(gpus) and group > 1 and Accel.for_device("cuda").stack
        """Whether the actors' runs stack (``harness.training.stacked``; ``PEZOO_ACCEL`` as the
        workers see it): the driver then queues runs of one shape together."""
        self.capacity = workers or max(1, gpus or int(resources.get("CPU", 1))) * group
        self._task = ray.remote(_ray_run_job)
        self._resources = {"num_cpus": 1, "num_gpus": 1 if gpus else 0, "max_retries": 0}
        self._pending: dict[Any, Job] = {}
        self._actors: list[Any] = []  # groups: one actor per GPU (or CPU slot), created as needed
        self._load: dict[int, int] = {}  # actor index -> jobs in flight
        self._on_actor: dict[Any, int] = {}
        self.actors_started = 0

    def submit(self, job: Job) -> None:
        job = replace(job, device=self.device_type)
        if self.group > 1:
            self._submit_to_group(job)
            return
        # Named after the run: Ray shows the name in ``ray list tasks``, on the dashboard and
        # as the worker's process title (``ray::pezoo run <run_id> (attempt n)``), so which
        # node trains which run can be seen (a test finds the runs a killed node held by it).
        name = task_name(job)
        self._pending[self._task.options(name=name, **self._resources).remote(job)] = job

    def _submit_to_group(self, job: Job) -> None:
        """To the actor with the fewest jobs in flight, a new one while every actor's group is full."""
        free = [i for i, a in enumerate(self._actors) if a is not None and self._load[i] < self.group]
        if free:
            index = min(free, key=lambda i: self._load[i])
        else:
            actor_class = self._ray.remote(GroupWorker).options(
                num_cpus=1, num_gpus=self._resources["num_gpus"], max_concurrency=self.group, max_restarts=0
            )
            self._actors.append(actor_class.remote())
            self.actors_started += 1
            index = len(self._actors) - 1
            self._load[index] = 0
        ref = self._actors[index].run.options(name=task_name(job)).remote(job)
        self._pending[ref] = job
        self._on_actor[ref] = index
        self._load[index] += 1

    def wait(self) -> list[Completion]:
        ray = self._ray
        ray.wait(list(self._pending), num_returns=1)
        ready, _ = ray.wait(list(self._pending), num_returns=len(self._pending), timeout=0)
        done: list[Completion] = []
        for ref in ready:
            job = self._pending.pop(ref)
            index = self._on_actor.pop(ref, None)
            if index is not None:
                self._load[index] -= 1
            try:
                done.append((job, ray.get(ref)))
            except ray.exceptions.RayError as exc:  # worker/node died, or the task could not run
                if isinstance(exc, ray.exceptions.RayActorError) and index is not None:
                    self._actors[index] = None  # its process is gone: later jobs go to a new actor
                done.append((job, WorkerLost(job.run_id, first_line(exc))))
        return done

    def close(self, *, cancel: bool = False) -> None:
        if cancel:
            for ref in self._pending:
                self._ray.cancel(ref, force=True)
            self._pending.clear()
        for actor in self._actors:
            if actor is not None:
                self._ray.kill(actor)
        self._actors = []
        if self._owns_instance:
            self._ray.shutdown()
            self._owns_instance = False


def task_name(job: Job) -> str:
    """The Ray task's name for one attempt: ``pezoo run <run_id> (attempt n)``."""
    return f"pezoo run {job.run_id} (attempt {job.attempt})"
