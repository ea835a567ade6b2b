"""`pezoo perf`: peak memory at the allocator (see :mod:`harness.perf`)."""

from __future__ import annotations

import gc
import json
import os
import resource
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from harness.perf.grid import ALLOC_TARGETS, PerfGrid
from harness.perf.memory import memory_backbone
from harness.perf.train import training_backends


def allocator_peak(fn: Callable[[], object], device: torch.device) -> tuple[int, str]:
    """Run ``fn`` once; (peak bytes allocated above the level at its start, how it was measured).

    CUDA: ``max_memory_allocated`` after a peak reset. CPU: the profiler's memory events
    (``profile_memory=True``), whose ``total_allocated`` is the allocator's running total
    since profiling started, so its maximum is the peak above the start.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base, "cuda max_memory_allocated"
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    peak = 0
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.tag == _EventType.Allocation and node.extra_fields.device.type == device.type:
            peak = max(peak, node.extra_fields.total_allocated)
    return peak, "profiler memory events (CPU allocator)"


def alloc_child(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """All lengths of one (encoding, backend) in *this* process (the subprocess side of :func:`measure_alloc_one`).

    Per length: a warm-up pass (flex compiles here; its compiled kernels are reused by the
    later lengths), then the measured pass: forward + backward (parameter gradients
    cleared before, so every encoding allocates them alike), or the forward pass alone
    under ``no_grad`` where the backend has no backward of its own on this device (flex
    on CPU). The first length that fails (out of memory under the cap) ends the loop.
    """
    device = torch.device(spec["device"])
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    model = memory_backbone(spec["pe"], spec["backend"], spec["dims"]).to(device)
    train = spec["backend"] in training_backends(device)
    batch = int(spec["batch"])
    rows = []
    for i, length in enumerate(spec["lengths"]):
        gen = torch.Generator().manual_seed(length)
        tokens = torch.randint(1, model.cfg.vocab_size, (batch, length), generator=gen).to(device)  # (b, s)

        def one_pass(tokens: torch.Tensor = tokens) -> None:
            model.zero_grad(set_to_none=True)
            if train:
                model(tokens).float().mean().backward()
            else:
                with torch.no_grad():
                    model(tokens)

        row: dict[str, Any] = {"length": length, "pass": "forward+backward" if train else "forward"}
        try:
            with warnings.catch_warnings(record=True) as caught:  # e.g. flex falling back to its unfused form
                warnings.simplefilter("always")
                if spec["backend"] == "flex" or device.type == "cuda" or i == 0:
                    one_pass()  # compile / warm up outside the measurement
                gc.collect()
                start = time.perf_counter()
                peak, how = allocator_peak(one_pass, device)
            row.update(ok=True, peak_mib=peak / 2**20, how=how, seconds=time.perf_counter() - start)
            row["warnings"] = sorted({str(w.message)[:300] for w in caught if issubclass(w.category, RuntimeWarning)})
        except (MemoryError, RuntimeError) as exc:  # torch reports a failed allocation as RuntimeError
            row.update(ok=False, error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        model.zero_grad(set_to_none=True)
        rows.append(row)
        if not row["ok"]:
            break
    return rows


def _alloc_child_main() -> None:
    """Entry point of the allocator subprocess: spec JSON in argv[1], result JSON on stdout."""
    spec = json.loads(sys.argv[1])
    if spec["device"] == "cpu" and spec.get("cap_bytes"):
        cap = int(spec["cap_bytes"])
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    print("PERF-RESULT " + json.dumps(alloc_child(spec)), flush=True)


def measure_alloc_one(
    pe: str,
    backend: str,
    lengths: Sequence[int],
    *,
    dims: Sequence[int],
    batch: int,
    device: torch.device,
    cap_gib: float,
    threads: int,
) -> list[dict[str, Any]]:
    """Allocator peaks of one (encoding, backend) at every length, in one fresh subprocess."""
    spec: dict[str, Any] = {
        "pe": pe,
        "backend": backend,
        "lengths": sorted(lengths),
        "dims": list(dims),
        "batch": batch,
        "device": str(device),
        "threads": threads,
        "cap_bytes": int(cap_gib * 2**30),
    }
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1"}  # compile in-process, under the same cap
    code = "from harness.perf import _alloc_child_main; _alloc_child_main()"
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("PERF-RESULT ")]
    results = json.loads(lines[-1].removeprefix("PERF-RESULT ")) if lines else []
    done = {r["length"] for r in results}
    if not lines:  # killed: every length it did not report failed with the process
        tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        results = [{"length": n, "ok": False, "error": tail[:300]} for n in spec["lengths"]]
    else:
        failed = next((r for r in results if not r["ok"]), None)
        results += [
            {"length": n, "ok": False, "error": f"not run: S={failed['length']} already failed"}
            for n in spec["lengths"]
            if n not in done and failed is not None
        ]
    for r in results:
        if not r["ok"] and device.type == "cpu" and not r["error"].startswith("not run"):
            r["error"] = f"not feasible under the {cap_gib:g} GiB cap ({r['error']})"
    return [{"pe": pe, "backend": backend, **r} for r in results]


def measure_alloc(grid: PerfGrid, device: torch.device) -> list[dict[str, Any]]:
    """Allocator rows for every (encoding, backend, length) of ``grid``, ratio to NoPE at the same backend and S."""
    rows = [
        row
        for backend in grid.alloc_backends
        for pe in grid.alloc_encodings
        for row in measure_alloc_one(
            pe,
            backend,
            grid.alloc_lengths,
            dims=grid.memory_dims,
            batch=grid.alloc_batch,
            device=device,
            cap_gib=grid.memory_cap_gib,
            threads=grid.threads,
        )
    ]
    nope = {(r["backend"], r["length"]): r["peak_mib"] for r in rows if r["pe"] == "nope" and r["ok"]}
    longest = max(grid.alloc_lengths, default=0)
    for r in rows:
        ref = nope.get((r["backend"], r["length"]))
        r["ratio_to_nope"] = r["peak_mib"] / ref if r["ok"] and ref else None
        target = ALLOC_TARGETS.get(r["pe"]) if r["backend"] == "flex" and r["length"] == longest else None
        r["target"] = target
        r["meets_target"] = None if target is None or r["ratio_to_nope"] is None else r["ratio_to_nope"] <= target
    return rows
