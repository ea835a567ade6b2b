"""What a trained PRISM model's cursors do, kept with the run for the leaderboard.

After a PRISM run is evaluated, :func:`prism_trajectories` runs the model once (teacher
forced) on the first evaluation example at the largest test scale and records, per PRISM
layer, the mode (most likely offset) of every query and key cursor after each token and
the probability mass at that mode (``pezoo.encodings.prism.diagnostics``). The result is
small, plain JSON: the store keeps it, ``pezoo leaderboard export`` publishes it next to
the results, and the site draws it (the paper's cursor-trajectory figures).
"""

from __future__ import annotations

from typing import Any

import torch

from harness.backbone import Backbone
from harness.config import RunConfig
from harness.data import collate, evaluation_set
from harness.tasks import Task
from harness.tasks.vocab import decode

VERSION = 1


@torch.no_grad()
def prism_trajectories(model: Backbone, cfg: RunConfig, task: Task) -> dict[str, Any] | None:
    """Cursor modes of a PRISM model on one long example (its first ``eval.window``
    tokens under a context window); None for any other encoding.

    Returns:
        {"version", "scale", "train_max", "tokens": [str] (s,), "layers": [{"layer",
        "support", "query_modes", "key_modes": [[[int]]] (h, c, s), "query_confidence",
        "key_confidence": [[[float]]] (h, c, s)}]}.
    """
    from pezoo.encodings.prism import PRISM
    from pezoo.encodings.prism.diagnostics import trace

    if not isinstance(model.pe, PRISM):
        return None
    scales = [n for n in cfg.test_lengths() if task.has_scale(n)]
    if not scales:
        return None
    scale = scales[-1]
    example = evaluation_set(task, scale, cfg.eval.samples, cfg.seed)[0]
    batch = collate([example], cfg.protocol).to(model.embed.weight.device)
    inputs = batch.inputs[:, : cfg.eval.window] if cfg.eval.window else batch.inputs  # what one context holds
    was_training = model.training
    model.eval()
    try:
        with trace(model.pe) as traces:
            model(inputs, scale_hint=batch.scales)
    finally:
        model.train(was_training)
    layers = []
    for tr in traces():
        modes, confidence = tr.modes[0], tr.confidence[0]  # (2, h, c, s)
        layers.append(
            {
                "layer": tr.layer,
                "support": tr.support,
                "query_modes": modes[0].tolist(),
                "key_modes": modes[1].tolist(),
                "query_confidence": confidence[0].mul(1000).round().div(1000).tolist(),
                "key_confidence": confidence[1].mul(1000).round().div(1000).tolist(),
            }
        )
    return {
        "version": VERSION,
        "scale": scale,
        "train_max": cfg.train.train_max,
        "tokens": decode(inputs[0].tolist()),
        "layers": layers,
    }
