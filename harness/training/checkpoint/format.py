"""The checkpoint file format: a run's full training state, read without running any code;
its error type, and the plain-data form of evaluations it stores.

A checkpoint is one ``torch.save`` dict, read back with ``torch.load(weights_only=True)``:
it holds only tensors and plain Python values (dict, list, tuple, str, int, float, bool,
None), so opening one can never execute code, whoever put the file in the checkpoint
folder. Format version 2:

    format       "pezoo-checkpoint"
    version      2
    run_id       str, ``RunConfig.run_id()``
    config       str, the run's config as JSON (``RunConfig.to_dict()``)
    step         int, training steps done
    loss         float, the loss of the last step
    seconds      float, training seconds so far
    model        the model's state dict (str -> tensor)
    optimizer    the optimiser's state dict (tensors and plain values)
    data_rng     tuple, ``random.Random.getstate()`` of the training data stream
    torch_rng    uint8 tensor, ``torch.get_rng_state()``
    cuda_rng     uint8 tensor, ``torch.cuda.get_rng_state(device)``; only when training on a GPU
    evaluating   bool, whether periodic evaluation has started
    evaluations  list of [step, [[split, {LengthMetrics field: value}], ...]], oldest first
    stream       {"ids": [int], "target": [bool], "scale": [int]}: a packed run's unconsumed
                 stream (``PackedStream.state()``); only for packed runs
    scaler       {"scale": float, "growth_tracker": int}: an fp16 run's loss scale and the
                 steps since it last grew (``torch.amp.GradScaler``); only for fp16 runs
    code         list of [step, commit]: which commit (``harness.records.provenance.git_commit``)
                 trained the run from which step on; absent in checkpoints written
                 before it was recorded (their steps count as trained by unknown code)
    machine      list of [step, machine]: on which device and CPU
                 (``harness.records.provenance.machine_name``) the run trained from which step
                 on; absent in checkpoints written before it was recorded

Version 1 had no ``format`` field and pickled harness objects (``LengthMetrics``), which
only an unpickler that runs code can read: it is refused like any file that is not
version 2 (``harness.training.checkpoint.reading``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from harness.config import is_finite_number
from harness.records.metrics import Evaluation, LengthMetrics

FORMAT = "pezoo-checkpoint"
VERSION = 2


class CheckpointError(RuntimeError):
    """A checkpoint file is unreadable, needs code to read, is incomplete or inconsistent,
    or belongs to another run; the message says which."""


def encode_evaluation(evaluation: Evaluation) -> list[list[Any]]:
    """``((split, LengthMetrics), ...)`` as plain lists and dicts."""
    return [[split, dataclasses.asdict(m)] for split, m in evaluation]


_METRIC_FIELDS = {f.name: f for f in dataclasses.fields(LengthMetrics)}


def decode_evaluation(value: Any) -> Evaluation:
    """The inverse of :func:`encode_evaluation`; ``CheckpointError`` on anything else."""
    if not isinstance(value, list):
        raise CheckpointError(f"an evaluation is a {type(value).__name__}, not a list")
    rows = []
    for row in value:
        if not (isinstance(row, list) and len(row) == 2 and row[0] in ("train", "test") and isinstance(row[1], dict)):
            raise CheckpointError(f"an evaluation row is not [split, metrics]: {_short(row)}")
        fields = row[1]
        if set(fields) != set(_METRIC_FIELDS):
            raise CheckpointError(f"evaluation metrics have fields {sorted(fields)}, not {sorted(_METRIC_FIELDS)}")
        for name in ("length", "n", "exact", "tokens", "tokens_right", "trace_exact"):
            if not _is_int(fields[name]) and not (name == "trace_exact" and fields[name] is None):
                raise CheckpointError(f"evaluation metric {name} is not an integer: {_short(fields[name])}")
        if fields["length"] < 1 or fields["n"] < 1 or fields["tokens"] < 1:
            raise CheckpointError(
                f"an evaluation row has length {fields['length']}, n {fields['n']} and tokens {fields['tokens']}"
            )
        counts = (("exact", "n"), ("trace_exact", "n"), ("tokens_right", "tokens"))
        for part, total in counts:  # counts of examples or tokens: 0..their total
            if fields[part] is not None and not 0 <= fields[part] <= fields[total]:
                raise CheckpointError(f"evaluation metric {part} is not in 0..{total}: {_short(fields[part])}")
        if not is_finite_number(fields["token_length"]) or fields["token_length"] < 0:
            bad = _short(fields["token_length"])
            raise CheckpointError(f"evaluation metric token_length is not a finite number >= 0: {bad}")
        rows.append((row[0], LengthMetrics(**fields)))
    return tuple(rows)


# How a CheckpointError shows a value or an exception (every module of the package uses these).


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]


def _brief(exc: BaseException) -> str:
    """All of ``exc``'s message on one line, cut at 300 characters (torch lists size mismatches line by line)."""
    text = " ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
