"""Checkpoints: a run's full training state, read without running any code, and the
final weights an inference-time variant loads.

One module per part:

    format   the file format (its fields and version), ``CheckpointError``, evaluations as plain data
    writing  a run's state as a checkpoint payload, its code and machine history, the atomic write
    reading  reading a checkpoint back and checking every field before the model takes any of it
    weights  a finished run's final weights (``<run_id>.weights.pt``), written and read
    aside    setting an unusable checkpoint aside (``.unreadable``, ``.diverged``)
"""

from harness.training.checkpoint.aside import set_aside
from harness.training.checkpoint.format import FORMAT, VERSION, CheckpointError, decode_evaluation, encode_evaluation
from harness.training.checkpoint.reading import check_state, layout_problem, load_checkpoint, load_optimizer_state
from harness.training.checkpoint.weights import (
    WEIGHTS_FORMAT,
    WEIGHTS_VERSION,
    load_weights,
    save_weights,
    weights_bytes,
)
from harness.training.checkpoint.writing import (
    UNKNOWN_CODE,
    UNKNOWN_MACHINE,
    code_history,
    machine_history,
    save_checkpoint,
    training_state,
)

__all__ = [
    "FORMAT",
    "UNKNOWN_CODE",
    "UNKNOWN_MACHINE",
    "VERSION",
    "WEIGHTS_FORMAT",
    "WEIGHTS_VERSION",
    "CheckpointError",
    "check_state",
    "code_history",
    "decode_evaluation",
    "encode_evaluation",
    "layout_problem",
    "load_checkpoint",
    "load_optimizer_state",
    "load_weights",
    "machine_history",
    "save_checkpoint",
    "save_weights",
    "set_aside",
    "training_state",
    "weights_bytes",
]
