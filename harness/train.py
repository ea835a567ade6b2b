"""Training one backbone on one task: AdamW, warm-up + cosine decay, clipping, seeded.

Axis letters: b batch, s sequence, v vocab.

Seeds: ``cfg.seed`` fixes the initialisation (torch RNG) and, through a separate
``random.Random``, the training data stream; evaluation sets are fixed per
(task, scale, seed) independently of training (see ``harness.data.evaluation_set``).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

import pezoo
from harness.backbone import Backbone
from harness.config import RunConfig
from harness.data import IGNORE, collate, sample_training_batch
from harness.tasks import Task


class DivergedError(RuntimeError):
    """The training loss became NaN or infinite."""


@dataclass(frozen=True)
class TrainResult:
    final_loss: float
    steps: int
    seconds: float


def build_model(cfg: RunConfig, device: torch.device | str = "cpu") -> Backbone:
    """The backbone of ``cfg`` with its encoding, initialised from ``cfg.seed``."""
    torch.manual_seed(cfg.seed)
    b = cfg.backbone
    pe = pezoo.create(cfg.pe, dims=pezoo.ModelDims(b.d_model, b.n_heads, b.n_layers), **cfg.pe_options)
    return Backbone(b, pe).to(device)


def lr_factor(step: int, cfg: RunConfig) -> float:
    """Linear warm-up to 1, then cosine decay to ``min_lr_ratio`` at the last step."""
    t = cfg.train
    if step < t.warmup:
        return (step + 1) / t.warmup
    progress = (step - t.warmup) / max(1, t.steps - t.warmup)
    return t.min_lr_ratio + (1 - t.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def make_optimizer(model: Backbone, cfg: RunConfig) -> torch.optim.Optimizer:
    """AdamW; weight decay on matrices only. An encoding may ask for its own parameter
    groups (e.g. PRISM's α scales, §6.4) through an ``optimizer_groups()`` method
    returning ``[{"params": [...], **adamw_options}]``."""
    t = cfg.train
    special = list(getattr(model.pe, "optimizer_groups", list)())
    taken = {id(p) for g in special for p in g["params"]}
    rest = [p for p in model.parameters() if id(p) not in taken and p.requires_grad]
    groups = [
        {"params": [p for p in rest if p.ndim >= 2], "weight_decay": t.weight_decay},
        {"params": [p for p in rest if p.ndim < 2], "weight_decay": 0.0},
        *special,
    ]
    for g in groups:
        g.setdefault("lr", t.lr)
        g["base_lr"] = g["lr"]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=t.lr, betas=t.betas)


def train(
    cfg: RunConfig,
    model: Backbone,
    task: Task,
    device: torch.device | str = "cpu",
    on_step: Callable[[int, float], None] | None = None,
) -> TrainResult:
    """Train ``model`` for ``cfg.train.steps`` steps; ``on_step(step, loss)`` after each.

    Raises:
        DivergedError: the loss became NaN/inf (the run is then recorded as diverged).
    """
    t = cfg.train
    rng = random.Random(f"train/{cfg.task}/{cfg.seed}")
    opt = make_optimizer(model, cfg)
    model.train()
    start, loss_value = time.perf_counter(), math.nan
    for step in range(t.steps):
        for g in opt.param_groups:
            g["lr"] = g["base_lr"] * lr_factor(step, cfg)
        batch = collate(sample_training_batch(task, rng, t.batch_size, t.train_min, t.train_max)).to(device)
        logits = model(batch.inputs, scale_hint=batch.scales)  # (b, s, v)
        loss = F.cross_entropy(logits.flatten(0, 1), batch.labels.flatten(), ignore_index=IGNORE)
        loss_value = loss.item()
        if not math.isfinite(loss_value):
            raise DivergedError(f"loss became {loss_value} at step {step}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
        opt.step()
        if on_step is not None:
            on_step(step, loss_value)
    return TrainResult(final_loss=loss_value, steps=t.steps, seconds=time.perf_counter() - start)
