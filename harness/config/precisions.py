"""The precisions a run may train and evaluate in, by name (what each one does to the
arithmetic is ``harness.training.precision``)."""

from __future__ import annotations

PRECISIONS = ("fp32", "bf16", "fp16")
"""Valid values of ``TrainConfig.precision`` / ``EvalConfig.precision`` (``--precision``)."""


def evaluation_precision(eval_precision: str | None, train_precision: str) -> str:
    """The precision a run is evaluated in: ``eval.precision``, else its training's."""
    return eval_precision if eval_precision is not None else train_precision
