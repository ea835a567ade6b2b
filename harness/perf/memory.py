"""`pezoo perf`: peak memory, one subprocess per measurement (see :mod:`harness.perf`)."""

from __future__ import annotations

import gc
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch

import pezoo
from harness.config.backbone import BackboneConfig
from harness.perf.grid import PerfGrid
from harness.training.backbone import Backbone


def _proc_status_kib(field_name: str) -> int | None:
    """A ``VmRSS``/``VmHWM``-style field of /proc/self/status in KiB, or None off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    """Reset this process's peak resident set (Linux: ``5`` to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def memory_backbone(pe: str, backend: str, dims: Sequence[int]) -> Backbone:
    """The memory table's model: a causal decoder of ``dims`` = (d_model, n_layers, n_heads)."""
    d, n_layers, n_heads = dims
    cfg = BackboneConfig(d_model=d, n_layers=n_layers, n_heads=n_heads, backend=backend, causal=True)
    torch.manual_seed(0)
    return Backbone(cfg, pezoo.create(pe, dims=pezoo.ModelDims(d, n_heads, n_layers)))


def memory_child(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Run one memory measurement in *this* process (the subprocess side of :func:`measure_memory_one`).

    Builds the model, runs a warm-up forward pass (at the full length for ``flex``, whose
    kernel is compiled per shape; 128 tokens otherwise), then measures one forward pass
    at batch 1 and ``spec["length"]`` tokens. Returns peak and baseline in MiB.
    """
    device = torch.device(spec["device"])
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    model = memory_backbone(spec["pe"], spec["backend"], spec["dims"]).to(device).eval()
    length = int(spec["length"])
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(1, model.cfg.vocab_size, (1, length), generator=gen).to(device)  # (b, s)
    warm = tokens if spec["backend"] == "flex" else tokens[:, : min(length, 128)]
    with torch.no_grad():
        model(warm)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
        else:
            reset = _reset_peak_rss()
            base = (_proc_status_kib("VmRSS") or 0) * 1024
        start = time.perf_counter()
        model(tokens)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            peak, how = torch.cuda.max_memory_allocated(device), "cuda max_memory_allocated"
        elif reset and _proc_status_kib("VmHWM") is not None:
            peak, how = (_proc_status_kib("VmHWM") or 0) * 1024, "VmHWM (peak RSS) after reset"
        else:  # no resettable peak: the process's lifetime peak (includes the warm-up)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            how = "ru_maxrss (lifetime peak)"
    return {
        "peak_mib": (peak - base) / 2**20,
        "baseline_mib": base / 2**20,
        "seconds": time.perf_counter() - start,
        "how": how,
    }


def _memory_child_main() -> None:
    """Entry point of the measurement subprocess: spec JSON in argv[1], result JSON on stdout."""
    spec = json.loads(sys.argv[1])
    if spec["device"] == "cpu" and spec.get("cap_bytes"):
        cap = int(spec["cap_bytes"])
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    try:
        result = {"ok": True, **memory_child(spec)}
    except (MemoryError, RuntimeError) as exc:  # torch reports a failed allocation as RuntimeError
        result = {"ok": False, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    print("PERF-RESULT " + json.dumps(result), flush=True)


def measure_memory_one(
    pe: str, backend: str, length: int, *, dims: Sequence[int], device: torch.device, cap_gib: float, threads: int
) -> dict[str, Any]:
    """Peak memory of one forward pass, measured in a fresh subprocess."""
    spec = {
        "pe": pe,
        "backend": backend,
        "length": length,
        "dims": list(dims),
        "device": str(device),
        "threads": threads,
        "cap_bytes": int(cap_gib * 2**30),
    }
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1"}  # compile in-process, under the same cap
    code = "from harness.perf import _memory_child_main; _memory_child_main()"
    row: dict[str, Any] = {"pe": pe, "backend": backend, "length": length}
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("PERF-RESULT ")]
    if not lines:
        tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return {**row, "ok": False, "error": tail[:300]}
    result = json.loads(lines[-1].removeprefix("PERF-RESULT "))
    if not result["ok"] and device.type == "cpu":
        result["error"] = f"not feasible under the {cap_gib:g} GiB cap ({result['error']})"
    return {**row, **result}


def measure_memory(grid: PerfGrid, device: torch.device) -> list[dict[str, Any]]:
    """Memory rows for every (encoding, backend, length) of ``grid``, with the ratio to NoPE on the same backend."""
    rows = [
        measure_memory_one(
            pe,
            backend,
            length,
            dims=grid.memory_dims,
            device=device,
            cap_gib=grid.memory_cap_gib,
            threads=grid.threads,
        )
        for length in grid.memory_lengths
        for backend in grid.memory_backends
        for pe in grid.memory_encodings
    ]
    nope = {(r["backend"], r["length"]): r.get("peak_mib") for r in rows if r["pe"] == "nope" and r["ok"]}
    for r in rows:
        ref = nope.get((r["backend"], r["length"]))
        r["ratio_to_nope"] = r["peak_mib"] / ref if r["ok"] and ref else None
    return rows
