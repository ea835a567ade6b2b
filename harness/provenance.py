"""Where a result came from: commit, device, library versions."""

from __future__ import annotations

import platform
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import torch

import pezoo


@cache
def git_commit() -> str:
    """The checkout's HEAD commit (suffixed ``-dirty`` with uncommitted changes), or ``unknown``."""
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{sha}-dirty" if dirty else sha


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return f"cpu:{platform.processor() or platform.machine()} x{torch.get_num_threads()} threads"


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; ``cuda`` without a GPU is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for but no CUDA GPU is available; use --device cpu or auto")
    if name not in ("cpu",) and not name.startswith("cuda"):
        raise ValueError(f"unknown device {name!r}; use auto, cpu or cuda[:N]")
    return torch.device(name)


def provenance(device: torch.device) -> dict[str, Any]:
    return {
        "commit": git_commit(),
        "device": device_name(device),
        "torch": torch.__version__,
        "pezoo": pezoo.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
