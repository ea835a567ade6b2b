"""How busy the GPU was: nvidia-smi's utilisation sampled every 500 ms while a sweep runs,
shared by benchmarks/device_check.py and benchmarks/board_gpu.py."""

from __future__ import annotations

import re
import subprocess


def sample_utilisation() -> subprocess.Popen | None:
    """nvidia-smi sampling GPU utilisation every 500 ms into a pipe (None without it)."""
    try:
        return subprocess.Popen(
            ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-lms", "500"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
    except OSError:
        return None


def read_utilisation(proc: subprocess.Popen | None) -> dict[str, float | None] | None:
    """The samples' mean (% of each 500 ms a kernel ran) over the sweep's active window (first
    to last non-zero sample: workers starting are not the sweep's steady state) and over every
    sample; None without a sampler or samples."""
    if proc is None:
        return None
    proc.terminate()
    out, _ = proc.communicate(timeout=10)
    values = [float(v) for v in re.findall(r"^\s*(\d+(?:\.\d+)?)\s*$", out, flags=re.M)]
    if not values:
        return None
    busy = [i for i, v in enumerate(values) if v > 0]
    window = values[busy[0] : busy[-1] + 1] if busy else values
    return {"active_pct": round(sum(window) / len(window), 1), "all_pct": round(sum(values) / len(values), 1),
            "samples": len(values)}  # fmt: skip
