"""The Ray path across nodes: a two-node Ray cluster on this machine, a sweep through
``pezoo bench --executor ray``, and the second node killed while it trains a run.

Both nodes are started with ``ray start ... --block`` (the head, then a second node
joining it with ``--address``), each in a session of its own with its own temp dir and
ports, one CPU each. Killing every process of the second node's session (its raylet,
agents and task workers) is a node going away: Ray reports the task lost
(``NodeDiedError``), the driver retries it on the head, and the retry resumes from the
checkpoint the dead node left in the shared ``--checkpoint-dir``. The cluster, and the
driver, are killed in the fixture's teardown whatever the test did.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from harness.config import RunConfig, preset_config
from harness.execution.run import checkpoint_path, train_and_evaluate
from harness.records.store import Store
from harness.training.checkpoint import CheckpointError, load_checkpoint

pytest.importorskip("ray", reason="the Ray executor's cluster test needs Ray: pip install 'pezoo[ray]'")
RAY = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(RAY is None, reason="the `ray` command is not installed beside Ray"),
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds a node's processes by session in /proc"),
]

PES, STEPS, EVERY = ("nope", "rope", "alibi"), 200, 10
KILL_AT = STEPS // 3  # the second node is killed once a run it trains has checkpointed this far
STARTED = "Ray runtime started"
TASK_TITLE = re.compile(r"ray::pezoo run ([0-9a-f]+) \(attempt (\d+)\)")  # harness.sweeps.executors.task_name


def sweep_configs() -> list[RunConfig]:
    """The runs of the bench command below, built as the harness builds them."""
    return [preset_config("smoke", pe=pe, task="copy", seed=0, overrides={"train": {"steps": STEPS}}) for pe in PES]


# -- processes by session ----------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, session id) of a process, None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp session
    return fields[0], int(fields[3])


def session_processes(sid: int) -> list[int]:
    """Live (not zombie) processes of session ``sid``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None and st[1] == sid and st[0] != "Z":
            pids.append(int(entry.name))
    return pids


def kill_session(process: subprocess.Popen, timeout: float = 30) -> None:
    """SIGKILL every process of the session ``process`` leads (Ray's workers have process
    groups of their own, so a process-group kill would miss them) and wait for them."""
    deadline = time.monotonic() + timeout
    while pids := session_processes(process.pid):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.poll()  # reap the leader, our child
        assert time.monotonic() < deadline, f"session {process.pid} outlived SIGKILL: {pids}"
        time.sleep(0.05)
    process.wait()


def task_workers(sid: int) -> dict[str, int]:
    """``{run_id: attempt}`` of the pezoo Ray tasks whose workers are in session ``sid``
    (read from their process titles)."""
    held = {}
    for pid in session_processes(sid):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if match := TASK_TITLE.fullmatch(title):
            held[match.group(1)] = int(match.group(2))
    return held


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# -- the cluster -------------------------------------------------------------------------


@dataclass
class Cluster:
    root: Path
    env: dict[str, str]
    address: str = ""
    sessions: list[subprocess.Popen] = field(default_factory=list)

    def spawn(self, cmd: list[str], log: Path) -> subprocess.Popen:
        """Start ``cmd`` in a session of its own (torn down with the cluster)."""
        with open(log, "wb") as out:
            process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        self.sessions.append(process)
        return process

    def start_node(self, name: str, *args: str) -> subprocess.Popen:
        """``ray start ... --block`` for one node, its temp dir and ports its own; returns
        once Ray says the node is up."""
        ports = free_ports(6)
        log = self.root / f"{name}.log"
        node = self.spawn(
            [
                str(RAY),
                "start",
                *args,
                "--block",
                "--node-ip-address=127.0.0.1",
                "--num-cpus=1",
                "--num-gpus=0",
                f"--temp-dir={self.root / name}",
                "--object-store-memory=80000000",
                "--disable-usage-stats",
                f"--node-manager-port={ports[0]}",
                f"--object-manager-port={ports[1]}",
                f"--dashboard-agent-listen-port={ports[2]}",
                f"--dashboard-agent-grpc-port={ports[3]}",
                f"--runtime-env-agent-port={ports[4]}",
                f"--metrics-export-port={ports[5]}",
            ],
            log,
        )
        deadline = time.monotonic() + 120
        while STARTED not in log.read_text(errors="replace"):
            assert node.poll() is None, f"ray start {name} exited:\n{log.read_text(errors='replace')[-3000:]}"
            assert time.monotonic() < deadline, f"ray start {name} took over 120 s:\n{log.read_text()[-3000:]}"
            time.sleep(0.1)
        return node


@pytest.fixture
def two_nodes(one_ray_at_a_time) -> Iterator[tuple[Cluster, subprocess.Popen]]:
    """A head and a second node on this machine, one CPU each; yields the cluster and the
    second node's ``ray start`` (its session leader). Every session started (nodes, and
    the driver the test adds) is killed at teardown, pass or fail."""
    # Unix socket paths are limited to 107 bytes: a short root, not pytest's tmp_path
    root = Path(tempfile.mkdtemp(prefix="pezoo-ray-", dir="/tmp" if Path("/tmp").is_dir() else None))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_USAGE_STATS_ENABLED="0", OMP_NUM_THREADS="1")
    # Token auth, with a token of the cluster's own for both nodes and the driver. Left to
    # itself, Ray (2.60) turns auth on in `ray start --head` once ~/.ray/auth_token exists
    # (any local ray.init() writes one, as the Ray tests in test_executors.py do), but not
    # in `ray start --address`: the second node could then not join.
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    env["RAY_memory_monitor_refresh_ms"] = "0"  # Ray's OOM killer reads the whole (shared) machine: off
    cluster = Cluster(root, env)
    try:
        gcs, dashboard = free_ports(2)
        cluster.start_node(
            "head",
            "--head",
            f"--port={gcs}",
            "--include-dashboard=false",
            f"--dashboard-port={dashboard}",
        )
        cluster.address = f"127.0.0.1:{gcs}"
        second = cluster.start_node("node2", f"--address={cluster.address}")
        yield cluster, second
    finally:
        survivors = []
        for process in reversed(cluster.sessions):  # the driver, the second node, the head
            try:
                kill_session(process)
            except AssertionError as exc:  # still try the others
                survivors.append(str(exc))
        shutil.rmtree(root, ignore_errors=True)
        assert not survivors, survivors


# -- the test ------------------------------------------------------------------------------


def reference_run(cfg: RunConfig, folder: Path) -> tuple[float | None, list[tuple]]:
    """The run trained here, uninterrupted, with one torch thread as Ray tasks train."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = train_and_evaluate(cfg, torch.device("cpu"), folder / f"{cfg.run_id()}.pt", notice=lambda m: None)
    finally:
        torch.set_num_threads(threads)
    assert result.status == "finished", result.error
    rows = [(s, m.length, m.token_length, m.n, m.exact, m.tokens, m.tokens_right) for s, m in result.metrics]
    return result.final_loss, sorted(rows, key=lambda r: r[1])


def checkpointed(folder: Path, run_id: str) -> int:
    """The step of a run's checkpoint in ``folder`` (written atomically), -1 without one."""
    try:
        return load_checkpoint(checkpoint_path(folder, run_id), run_id, mmap=True)["step"]
    except CheckpointError:  # none yet, or removed as the run was recorded
        return -1


def stored(store: Store, run_id: str) -> list[tuple]:
    keys = ("split", "length", "token_length", "n", "exact", "tokens", "tokens_right")
    return [tuple(m[k] for k in keys) for m in store.metrics(run_id)]


def test_a_killed_node_s_runs_are_retried_on_the_other_and_resume_from_the_shared_checkpoints(two_nodes, tmp_path):
    cluster, second = two_nodes
    configs = sweep_configs()
    ids = [cfg.run_id() for cfg in configs]
    store_path, ckpt = tmp_path / "s.sqlite", tmp_path / "shared-checkpoints"
    out = tmp_path / "bench.out"
    cmd = [sys.executable, "-m", "harness.cli", "bench", "--pe", ",".join(PES), "--task", "copy", "--preset", "smoke"]
    cmd += ["--steps", str(STEPS), "--device", "cpu", "--checkpoint-every", str(EVERY), "--workers", "2"]
    cmd += ["--executor", "ray", "--ray-address", cluster.address, "--store", str(store_path)]
    cmd += ["--checkpoint-dir", str(ckpt)]
    bench = cluster.spawn(cmd, out)

    # wait until the second node is a third into a run, checkpointed, then kill the node
    deadline = time.monotonic() + 180
    while True:
        held = task_workers(second.pid)
        if held and all(checkpointed(ckpt, run_id) >= KILL_AT for run_id in held):
            break
        assert bench.poll() is None, f"the sweep ended before the second node was killed:\n{out.read_text()}"
        assert time.monotonic() < deadline, f"the second node trained no run within 180 s:\n{out.read_text()}"
        time.sleep(0.05)
    kill_session(second)
    assert set(held) <= set(ids) and set(held.values()) == {1}
    # what the dead node left: its runs' last checkpoints (nothing writes them until a retry resumes)
    left_at = {run_id: checkpointed(ckpt, run_id) for run_id in held}
    assert all(KILL_AT <= step < STEPS for step in left_at.values()), left_at

    # the same runs uninterrupted, here, while the cluster's head finishes the sweep
    reference = {cfg.run_id(): reference_run(cfg, tmp_path / "reference") for cfg in configs}

    try:
        bench.wait(timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the sweep did not end within 300 s of the node's death:\n{out.read_text()[-5000:]}")
    output = out.read_text()
    assert bench.returncode == 0, output[-5000:]

    # the dead node's runs were retried (attempt 2) and resumed from the step it had reached
    resumed = {m.group(1): int(m.group(2)) for m in re.finditer(r"run ([0-9a-f]+): resuming from step (\d+)", output)}
    assert resumed == left_at, output[-5000:]
    with Store(store_path) as store:
        runs = {r["run_id"]: r for r in store.runs()}
        # nothing lost or duplicated: each run finished once, each scale measured once ...
        assert sorted(runs) == sorted(ids)
        assert {r["status"] for r in runs.values()} == {"finished"}
        assert {r["provenance"]["executor"] for r in runs.values()} == {"ray"}
        assert {i: runs[i]["provenance"]["attempts"] for i in ids} == {i: "2" if i in held else "1" for i in ids}
        # ... with exactly the numbers of an uninterrupted run, bit for bit (CPU, one thread)
        for run_id in ids:
            final_loss, metrics = reference[run_id]
            assert stored(store, run_id) == metrics and runs[run_id]["final_loss"] == final_loss, run_id
    assert len(re.findall(r": finished in ", output)) == len(ids)
    assert not any(checkpoint_path(ckpt, run_id).exists() for run_id in ids)  # removed once recorded
