"""Numeric precision of a run: autocast over float32 master weights, loss scaling for fp16,
and the device defaults a GPU run gets (TF32 matmuls).

A run's precision is ``TrainConfig.precision`` (how it trains) and ``EvalConfig.precision``
(how it is evaluated; None: as it trained). The weights, the optimiser state and the
gradients stay float32 whatever the precision: ``torch.autocast`` runs the matrix work
(linear layers, attention matmuls) in bfloat16 or float16 and keeps reductions and
normalisations where torch's autocast policy puts them (float32). fp16 has 5 exponent
bits, so its gradients are scaled (``torch.amp.GradScaler``) to stay clear of underflow;
bf16 has float32's exponent range and needs no scaling.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from harness.config.precisions import PRECISIONS, evaluation_precision

__all__ = ["PRECISIONS", "autocast", "autocast_dtype", "evaluation_precision", "grad_scaler", "use_tf32"]


DTYPES: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
"""The autocast dtype of each precision (None: no autocast)."""


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The dtype ``precision`` runs its matrix work in, or None for plain float32."""
    try:
        return DTYPES[precision]
    except KeyError:
        raise ValueError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}") from None


@contextlib.contextmanager
def autocast(precision: str, device: torch.device | str) -> Iterator[None]:
    """``torch.autocast`` on ``device``'s type in ``precision`` (nothing at all for fp32)."""
    dtype = autocast_dtype(precision)
    if dtype is None:
        yield
        return
    with torch.autocast(torch.device(device).type, dtype=dtype):
        yield


def grad_scaler(precision: str, device: torch.device | str) -> torch.amp.GradScaler | None:
    """A loss scaler for an fp16 run on ``device`` (CPU or CUDA); None for the others."""
    if precision != "fp16":
        return None
    return torch.amp.GradScaler(torch.device(device).type)


def use_tf32(device: torch.device | str) -> bool:
    """Let float32 matmuls and convolutions on a CUDA device use TF32 tensor cores (10-bit
    mantissa inputs, float32 accumulation), as torch's own recommendation for training.
    Returns whether it applies (False off CUDA: a CPU has no TF32)."""
    if torch.device(device).type != "cuda":
        return False
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    return True
