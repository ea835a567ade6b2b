"""Writing a checkpoint: a run's training state as the payload of the checkpoint format
(``harness.training.checkpoint.format``), which commit and machine trained which steps, and the
atomic write of the file.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from harness.config import RunConfig
from harness.records.files import write_atomically
from harness.records.metrics import Evaluation
from harness.training.checkpoint.format import FORMAT, VERSION, encode_evaluation


def training_state(
    cfg: RunConfig,
    *,
    step: int,
    loss: float,
    seconds: float,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    data_rng: random.Random,
    device: torch.device | str,
    torch_rng: torch.Tensor | None = None,
    evaluating: bool,
    evaluations: list[tuple[int, Evaluation]],
    stream: Mapping[str, list] | None = None,
    scaler: Mapping[str, Any] | None = None,
    code: Sequence[tuple[int, str]] = (),
    machine: Sequence[tuple[int, str]] = (),
) -> dict[str, Any]:
    """The checkpoint payload (``harness.training.checkpoint.format``) of a run at ``step``; ``code`` and ``machine``
    are which commit trained the run from which step on, and on which machine
    (:func:`code_history`, :func:`machine_history`); ``torch_rng`` the state of the run's own
    torch RNG (``harness.training.train``; None: torch's global one)."""
    payload: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "run_id": cfg.run_id(),
        "config": json.dumps(cfg.to_dict(), sort_keys=True),
        "step": int(step),
        "loss": float(loss),
        "seconds": float(seconds),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "data_rng": data_rng.getstate(),
        "torch_rng": torch.get_rng_state() if torch_rng is None else torch_rng,
        "evaluating": bool(evaluating),
        "evaluations": [[int(s), encode_evaluation(e)] for s, e in evaluations],
    }
    if torch.device(device).type == "cuda":
        payload["cuda_rng"] = torch.cuda.get_rng_state(torch.device(device))
    if stream is not None:
        payload["stream"] = {k: list(v) for k, v in stream.items()}
    if scaler is not None:  # an fp16 run's loss scale (torch.amp.GradScaler.state_dict)
        payload["scaler"] = {"scale": float(scaler["scale"]), "growth_tracker": int(scaler["_growth_tracker"])}
    if code:
        payload["code"] = [[int(s), str(c)] for s, c in code]
    if machine:
        payload["machine"] = [[int(s), str(m)] for s, m in machine]
    return payload


UNKNOWN_CODE = "unknown (a checkpoint from before pezoo recorded it)"
"""What :func:`code_history` says trained the steps of a checkpoint that has no ``code``."""

UNKNOWN_MACHINE = "unknown (a checkpoint from before pezoo recorded it)"
"""What :func:`machine_history` says trained the steps of a checkpoint that has no ``machine``."""


def _history(resume: Mapping[str, Any] | None, field: str, now: str, unknown: str) -> list[tuple[int, str]]:
    """``[(step, value), ...]``: the checkpoint's ``field`` history continued by ``now``."""
    if resume is None:
        return [(0, now)]
    history = [(int(s), str(v)) for s, v in resume.get(field, [[0, unknown]])]
    if history[-1][1] != now:
        history.append((int(resume["step"]), now))
    return history


def code_history(resume: Mapping[str, Any] | None, commit: str) -> list[tuple[int, str]]:
    """Which commit trained a run from which step on, once ``commit`` continues from
    ``resume`` (a checked checkpoint, or None for a fresh run): ``[(0, commit)]`` for a
    fresh run; a resumed one keeps the checkpoint's history and adds ``(step, commit)``
    when the commit changed. A checkpoint written before the history was recorded
    contributes ``(0, UNKNOWN_CODE)``: which code trained those steps is not known."""
    return _history(resume, "code", commit, UNKNOWN_CODE)


def machine_history(resume: Mapping[str, Any] | None, machine: str) -> list[tuple[int, str]]:
    """As :func:`code_history`, for the machine (device, threads and CPU) that trained
    each step: a run resumed on another machine, or with another thread count, may not
    round as the uninterrupted run would, and its record says so."""
    return _history(resume, "machine", machine, UNKNOWN_MACHINE)


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically under a temporary name of this process's own.

    Raises:
        harness.records.files.WriteError: it could not be written (``disk_full`` says whether the
            disk was full); its temporary file is removed and the previous checkpoint kept.
    """
    write_atomically(Path(path), lambda f: torch.save(payload, f))
