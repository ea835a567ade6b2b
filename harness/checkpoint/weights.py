"""Final weights (``<run_id>.weights.pt``): what an inference-time variant
(``RunConfig.eval_pe_options``) of a finished run, or a run that trains exactly as it did
(``RunConfig.training_id``: another test range), loads instead of training again. Kept
for runs that have variants in a sweep, and for every run with ``bench --keep-weights``;
read as checkpoints are, weights only:

    format       "pezoo-weights"
    version      1
    run_id       str, the trained run's ``RunConfig.run_id()``
    config       str, its config as JSON
    final_loss   float, the loss of its last training step
    model        the trained model's state dict (str -> tensor)
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import torch

from harness.checkpoint.format import CheckpointError, _short
from harness.checkpoint.reading import _check_layouts, read_payload
from harness.config import RunConfig
from harness.files import write_atomically

WEIGHTS_FORMAT = "pezoo-weights"
WEIGHTS_VERSION = 1


def save_weights(path: Path, cfg: RunConfig, model: torch.nn.Module, final_loss: float) -> None:
    """Write the trained model of ``cfg`` (format above) atomically to ``path``.

    Raises:
        harness.files.WriteError: it could not be written.
    """
    payload = {
        "format": WEIGHTS_FORMAT,
        "version": WEIGHTS_VERSION,
        "run_id": cfg.run_id(),
        "config": json.dumps(cfg.to_dict(), sort_keys=True),
        "final_loss": float(final_loss),
        "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
    }
    write_atomically(Path(path), lambda f: torch.save(payload, f))


def load_weights(path: Path, run_id: str, *, mmap: bool = False) -> dict[str, Any]:
    """Read the final weights of run ``run_id`` without running code: ``{"model": state
    dict, "final_loss": float, ...}``. ``mmap`` maps the tensors instead of reading them
    (for reading just the config).

    Raises:
        CheckpointError: missing, unreadable, asking for code, another format or another run's.
    """
    if not Path(path).is_file():
        raise CheckpointError(f"no final weights of run {run_id} at {path}")
    payload = read_payload(path, "weights file", "pezoo weights file", mmap=mmap)
    if not isinstance(payload, dict) or payload.get("format") != WEIGHTS_FORMAT:
        raise CheckpointError(f"{path} is not a pezoo weights file (no format {WEIGHTS_FORMAT!r})")
    if payload.get("version") != WEIGHTS_VERSION:
        raise CheckpointError(f"weights file {path} has version {_short(payload.get('version'))}, not 1")
    if payload.get("run_id") != run_id:
        raise CheckpointError(f"weights file {path} is not run {run_id}'s (it says {_short(payload.get('run_id'))})")
    loss, weights = payload.get("final_loss"), payload.get("model")
    if not (isinstance(loss, float) and math.isfinite(loss)):
        raise CheckpointError(f"weights file {path} has no finite final_loss ({_short(loss)})")
    if not isinstance(weights, dict) or not all(isinstance(v, torch.Tensor) for v in weights.values()):
        raise CheckpointError(f"weights file {path}: field model is not a state dict of tensors")
    _check_layouts(weights, f"weights file {path}")
    return payload


WEIGHTS_SUFFIX = ".weights.pt"
_RUN_ID = re.compile(r"[0-9a-f]{16}")


def kept_trainings(folder: Path) -> dict[str, str]:
    """``{training id: run id}`` of the final weights kept in ``folder``
    (``<run_id>.weights.pt``; ``RunConfig.training_id``), read without running code and
    with their tensors mapped, not read. A file that is not a readable weights file of
    its name's run, or whose run evaluated during training, is left out: the run that
    would have used it trains."""
    found: dict[str, str] = {}
    for path in sorted(Path(folder).glob("*" + WEIGHTS_SUFFIX)):
        run_id = path.name[: -len(WEIGHTS_SUFFIX)]
        if not _RUN_ID.fullmatch(run_id):
            continue
        try:
            payload = load_weights(path, run_id, mmap=True)
            cfg = RunConfig.from_dict(json.loads(payload["config"]))
        except (CheckpointError, ValueError, TypeError, KeyError):
            continue
        if cfg.run_id() == run_id and (training := cfg.training_id()) is not None:
            found.setdefault(training, run_id)
    return found
