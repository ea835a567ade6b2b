"""Where a result came from: commit, device, library versions."""

from __future__ import annotations

import os
import platform
import subprocess
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

import pezoo
from harness.tasks import TASKS
from pezoo import ENCODINGS, WRAPPERS

if TYPE_CHECKING:
    from harness.config import RunConfig


@cache
def git_commit() -> str:
    """The checkout's HEAD commit, or ``unknown``; suffixed ``-dirty`` when the checkout
    runs code the commit does not hold: a tracked file changed, or an untracked Python
    file (not ignored) anywhere in it, which a package or the repository root on
    ``sys.path`` can import (a module beside the code, or one shadowing a library)."""
    found = commit_of(Path(__file__).resolve().parents[2])
    stated = os.environ.get(COMMIT_ENV, "").strip()
    if found == "unknown" and stated:
        return f"{stated} (stated by ${COMMIT_ENV}: this copy of the code has no git history)"
    return found


COMMIT_ENV = "PEZOO_COMMIT"
"""Environment variable naming the commit a copy of the code without git history was taken
from (a working tree sent to a lent GPU machine): :func:`git_commit` records it, marked as stated."""


def commit_of(root: Path) -> str:
    """:func:`git_commit` of the checkout at ``root``."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()

    try:
        sha = git("rev-parse", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
        untracked_modules = git("ls-files", "--others", "--exclude-standard", "--", "*.py")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{sha}-dirty" if changed or untracked_modules else sha


@cache
def cpu_name() -> str:
    """The CPU model and the instruction set torch's CPU kernels use on it, e.g. ``AMD
    EPYC 7B13 (torch CPU kernels: AVX2)``: two machines with one ``device_name`` can
    round differently when their kernels differ."""
    return f"{_cpu_model()} (torch CPU kernels: {torch.backends.cpu.get_cpu_capability()})"


def _cpu_model() -> str:
    try:  # Linux: platform.processor() is empty there
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    if platform.system() == "Darwin":
        try:
            brand = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            brand = ""
        if brand:
            return brand
    return platform.processor() or platform.machine() or "unknown CPU"


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return f"cpu:{platform.processor() or platform.machine()} x{torch.get_num_threads()} threads"


def machine_name(device: torch.device) -> str:
    """The device (with its thread count on a CPU) and the host's CPU, in one string:
    what :func:`harness.training.checkpoint.machine_history` records per training segment."""
    return f"{device_name(device)} on {cpu_name()}"


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; ``cuda`` without a GPU is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for but no CUDA GPU is available; use --device cpu or auto")
    if name not in ("cpu",) and not name.startswith("cuda"):
        raise ValueError(f"unknown device {name!r}; use auto, cpu or cuda[:N]")
    return torch.device(name)


BUILT_IN = ("pezoo", "harness")
"""Top-level packages of this distribution: their code is identified by ``commit``."""


def code_origins(pe: str, task: str) -> str | None:
    """Where a run's encoding and task code comes from when it is not pezoo's own (a
    plugin, or a class registered by the user's code), which ``commit`` does not
    identify: ``"encoding my_pe: my-plugin 1.2.0 (module my_plugin.pe)"``, one part per
    such encoding, wrapper or task; ``None`` when all of it is built in.

    Raises:
        KeyError: ``pe`` or ``task`` names nothing registered.
    """
    prefix, _, base = pe.rpartition(":")
    used: list[tuple[str, str, Any]] = [("encoding", name, ENCODINGS[name]) for name in base.split("+")]
    if prefix:
        used.append(("wrapper", prefix, WRAPPERS[prefix]))
    used.append(("task", task, TASKS[task]))
    parts = []
    for kind, name, factory in used:
        module = str(getattr(factory, "__module__", None) or "an unknown module")
        if module.split(".")[0] not in BUILT_IN:
            parts.append(f"{kind} {name}: {_distribution_of(module)} (module {module})")
    return "; ".join(parts) or None


def uses_plugins(configs: Any) -> bool:
    """Whether a run of ``configs`` (``RunConfig`` s) uses an encoding or task not from pezoo
    (:func:`code_origins`): ``pezoo bench`` then trains in worker processes."""
    for cfg in configs:
        try:
            if code_origins(cfg.pe, cfg.task):
                return True
        except (KeyError, ImportError):  # checked before: cannot happen, but never stop bench here
            return True
    return False


def _distribution_of(module: str) -> str:
    """``name version`` of the installed distribution that provides ``module``'s top-level package."""
    names = metadata.packages_distributions().get(module.split(".")[0], [])
    found = []
    for name in sorted(set(names)):
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return ", ".join(found) or "not from an installed distribution, so no version identifies its code"


def provenance(device: torch.device) -> dict[str, Any]:
    return {
        "commit": git_commit(),
        "device": device_name(device),
        "cpu": cpu_name(),
        "torch": torch.__version__,
        "pezoo": pezoo.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def run_provenance(cfg: RunConfig, device: torch.device) -> dict[str, Any]:
    """:func:`provenance` of a run of ``cfg`` on ``device``, with ``pe_options_resolved``
    (:func:`resolved_pe_options`) and ``plugins`` (:func:`code_origins`) when its encoding
    or task is not pezoo's own."""
    prov = provenance(device)
    try:
        prov["pe_options_resolved"] = resolved_pe_options(cfg)
    except (KeyError, TypeError, ValueError):  # an unknown name or option: the run itself fails, saying so
        pass
    try:
        origins = code_origins(cfg.pe, cfg.task)
    except (KeyError, ImportError):  # an unknown name: the run itself fails, saying so
        origins = None
    if origins:
        prov["plugins"] = origins
    return prov


def resolved_pe_options(cfg: RunConfig) -> dict[str, Any]:
    """Every option the run's encoding is built with, defaults included
    (``pezoo.resolved_options``), as JSON values: what the run meant even if a default
    changes later. A variant's are those it is evaluated with."""
    import json

    from harness.config.pe_spec import build_options

    options = build_options(cfg.pe, cfg.eval_options(), task=cfg.task)  # with the task's coupling, where read
    return dict(json.loads(json.dumps(pezoo.resolved_options(cfg.pe, **options))))
