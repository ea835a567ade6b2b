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

The file's header says whose weights it holds, but anyone can write a header: the file
is trusted by its bytes. :func:`save_weights` returns the SHA-256 of the bytes it wrote,
which the trained run's record keeps (provenance ``weights_sha256``, written to the store
with the run's result); :func:`load_weights` reads a file only against that digest, so a
file with the right header and other tensors, a truncated one, or one edited since, is
not the file its run kept and is refused.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import re
from pathlib import Path
from typing import Any

import torch

from harness.config import RunConfig
from harness.records.files import NotRegularFileError, open_regular, write_atomically
from harness.training.checkpoint.format import CheckpointError, _short
from harness.training.checkpoint.reading import _check_layouts, read_payload

WEIGHTS_FORMAT = "pezoo-weights"
WEIGHTS_VERSION = 1
SHA256 = re.compile(r"[0-9a-f]{64}")
"""A digest as :func:`save_weights` returns it (lowercase hex)."""


def save_weights(path: Path, cfg: RunConfig, model: torch.nn.Module, final_loss: float) -> str:
    """Write the trained model of ``cfg`` (format above) atomically to ``path``.

    Returns:
        The SHA-256 (hex) of the bytes written: the run's record keeps it, and
        :func:`load_weights` reads the file only if its bytes still have it.

    Raises:
        harness.records.files.WriteError: it could not be written.
    """
    payload = {
        "format": WEIGHTS_FORMAT,
        "version": WEIGHTS_VERSION,
        "run_id": cfg.run_id(),
        "config": json.dumps(cfg.to_dict(), sort_keys=True),
        "final_loss": float(final_loss),
        "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
    }
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    data = buffer.getvalue()
    write_atomically(Path(path), lambda f: f.write(data))
    return hashlib.sha256(data).hexdigest()


def load_weights(path: Path, run_id: str, sha256: str, *, max_bytes: int) -> dict[str, Any]:
    """Read the final weights of run ``run_id`` without running code: ``{"model": state
    dict, "final_loss": float, ...}``, only if the file's bytes have the SHA-256 ``sha256``
    that the run's record keeps (:func:`save_weights`). The bytes checked are the bytes
    loaded; a file larger than ``max_bytes`` (more than the model's weights can take) is
    refused unread.

    Raises:
        CheckpointError: missing, unreadable, larger than ``max_bytes``, not the file the
            run kept (another SHA-256), asking for code, another format or another run's.
    """
    path = Path(path)
    try:
        with open_regular(path) as f:  # a FIFO put there would block the reader forever
            data = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise CheckpointError(f"no final weights of run {run_id} at {path}") from None
    except NotRegularFileError as exc:
        raise CheckpointError(f"weights file {exc}") from None
    except OSError as exc:
        raise CheckpointError(f"weights file {path} is unreadable ({exc})") from None
    if len(data) > max_bytes:
        raise CheckpointError(
            f"weights file {path} is larger than the {max_bytes >> 20} MiB the model's weights can take: "
            f"not the file run {run_id} kept"
        )
    if hashlib.sha256(data).hexdigest() != sha256:
        raise CheckpointError(
            f"weights file {path} is not the file run {run_id} kept: its SHA-256 is not the one the run's record "
            "holds (truncated, edited, or another run's weights under this name)"
        )
    payload = read_payload(path, "weights file", "pezoo weights file", data=data)
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


def weights_bytes(model: torch.nn.Module) -> int:
    """The most bytes a weights file of ``model`` can take: its state dict's tensors twice
    over (room for the zip format's alignment and any layout) plus 16 MiB for the header."""
    tensors = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    return 2 * tensors + (16 << 20)
