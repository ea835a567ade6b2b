"""What a trained encoding did, kept with the run for the leaderboard.

After a run is evaluated, :func:`encoding_diagnostics` runs the model once (teacher
forced) on the first evaluation example at the largest test scale, under its encoding's
diagnostics (its paper card's ``diagnostics``: PRISM's records, per PRISM layer, the mode
of every query and key cursor after each token and the probability mass at that mode).
The result is small, plain JSON: the store keeps it, ``pezoo leaderboard export``
publishes it next to the results, and the site draws it (PRISM's paper's
cursor-trajectory figures).
"""

from __future__ import annotations

from typing import Any

import torch

from harness.config import RunConfig
from harness.tasks import Task
from harness.tasks.data import collate, evaluation_set
from harness.tasks.vocab import decode
from harness.training.backbone import Backbone

VERSION = 1


@torch.no_grad()
def encoding_diagnostics(model: Backbone, cfg: RunConfig, task: Task) -> dict[str, Any] | None:
    """What the run's encoding did on one long example (its first ``eval.window`` tokens
    under a context window), as its card's ``diagnostics`` report it; None for an encoding
    without diagnostics.

    Returns:
        {"version", "scale", "train_max", "tokens": [str] (s,), "layers": the diagnostics}.
    """
    import pezoo

    diagnose = pezoo.card_of(cfg.pe).diagnostics
    if diagnose is None or cfg.is_lm:  # traced on an algorithmic task's example only
        return None
    scales = [n for n in cfg.test_lengths() if task.has_scale(n)]
    if not scales:
        return None
    scale = scales[-1]
    how = cfg.decode_eval
    example = evaluation_set(task, scale, how.samples, cfg.seed)[0]
    batch = collate([example], cfg.protocol).to(model.embed.weight.device)
    inputs = batch.inputs[:, : how.window] if how.window else batch.inputs  # what one context holds
    was_training = model.training
    model.eval()
    try:
        layers = diagnose(model.pe, lambda: model(inputs, scale_hint=batch.scales))
    finally:
        model.train(was_training)
    if layers is None:
        return None
    return {
        "version": VERSION,
        "scale": scale,
        "train_max": cfg.train.train_max,
        "tokens": decode(inputs[0].tolist()),
        "layers": layers,
    }
