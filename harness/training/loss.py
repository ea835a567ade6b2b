"""The training loss of one batch: the task's cross-entropy on its labelled tokens, plus an
encoding's regularisation, and how the loop takes it (eagerly, or replayed as CUDA graphs
by ``harness.training.graphs``).

Axis letters: b batch, s sequence, v vocab.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from harness.tasks.data import IGNORE, Batch
from harness.tasks.vocab import PAD_ID
from harness.training.backbone import Backbone
from harness.training.graphs import GraphedLoss, LossFn, one_pass_loss, padded_pass_loss
from harness.training.precision import autocast

LENGTH_GROUPS = 4
"""A causal model's training batch is run as this many groups of rows of similar length
(:func:`_task_loss`); 4 was the fastest of 1, 2, 4 and 8 on addition (docs/performance.md)."""


def training_loss(
    model: Backbone,
    batch: Batch,
    precision: str = "fp32",
    draws: torch.Generator | None = None,
    *,
    padded: bool = True,
) -> tuple[Tensor, Tensor]:
    """(the loss to minimise, the task's loss) on one batch, the forward pass in ``precision``
    (``harness.training.precision``: autocast over the float32 weights; the loss itself in float32).

    The task's loss is the cross-entropy of the labelled next tokens (the completion and
    its EOS), :func:`_task_loss`. The loss minimised adds the encoding's
    ``regularisation()`` when it has one (PRISM: ``frobenius_weight · ‖W_hh‖_F²`` with
    ``regulariser="frobenius"``, Lee 2025 §6.3; 0 otherwise). Logs, ``final_loss`` and
    ``eval.start_below_loss`` use the task's loss, so a penalty does not hold back
    periodic evaluation. ``draws``: the run's own torch RNG, which the encoding draws from
    (``PositionalEncoding.drawing_from``) and the length groups replay; None: the global one.
    ``padded`` False: the batch's rows are whole windows with no padding (a language-modelling
    task's, ``harness.tasks.lm.data.LmBatches``, whose bytes may take any token id, ``PAD``'s
    included): one plain pass, every label scored.
    """
    with autocast(precision, batch.inputs.device):
        task_loss = _task_loss(model, batch, draws=draws) if padded else padded_pass_loss(model, batch, None)
    regularisation = getattr(model.pe, "regularisation", None)
    if regularisation is None:
        return task_loss, task_loss
    return task_loss + regularisation(), task_loss


def _task_loss(
    model: Backbone, batch: Batch, groups: int = LENGTH_GROUPS, draws: torch.Generator | None = None
) -> Tensor:
    """The mean cross-entropy of ``batch``'s labelled tokens.

    A causal model's batch is right-padded to its longest row (each example draws its
    scale: 37-45 % of a board batch is padding), and no labelled token sees the padding.
    So its rows are sorted by length and run as ``groups`` groups, each cut to its own
    longest row, and within a group the MLPs skip the padding left (``Backbone.forward``'s
    ``keep``). The positions are planned once for the whole batch from its row lengths
    (``padded_positions``: randomized PE gives each row a draw of its own length, one
    per distinct length), and each group reads its rows' share; the loss is the sum
    over groups over the batch's labelled count. What an encoding draws once per pass
    (Abacus's offset, ``pe.plan_draws``) is drawn once for the batch and handed to every
    group, and each group starts from the same random state (for a draw an encoding makes
    in its pass without planning it), so a batch draws as one pass does. The same loss and
    gradients as one padded pass on those positions and draws, to float rounding
    (tests/harness/test_padding_skip.py).
    """
    if not model.cfg.causal:  # an encoder's tokens attend to the padding; its batches have none
        logits = _at_least_float32(model(batch.inputs, scale_hint=batch.scales))  # (b, s, v)
        return F.cross_entropy(logits.flatten(0, 1), batch.labels.flatten(), ignore_index=IGNORE)
    if batch.inputs.device.type == "cuda":
        return one_pass_loss(model, batch)
    keep = batch.inputs != PAD_ID  # (b, s)
    lengths = keep.sum(dim=1)  # (b,)
    s = batch.inputs.shape[1]
    positions = model.pe.padded_positions(lengths, s, batch.inputs.device)  # (b|1, s): the batch's draw
    planned = model.pe.plan_draws(batch.inputs.device)  # the batch's offsets (Abacus), one for every group
    if bool(keep.all()):  # no padding (packed rows, one scale per batch): one pass
        groups = 1
    total: Tensor | None = None
    rng = torch.default_generator if draws is None else draws  # the run's own (training) or the global one
    start_state = rng.get_state()  # CPU: a CUDA batch took graphs.one_pass_loss
    for group, rows in enumerate(torch.argsort(lengths, stable=True).chunk(groups)):
        if group:  # replay the random state the first group started from
            rng.set_state(start_state)
        width = max(int(lengths[rows].max()), 1)
        hint = batch.scales[rows, :width] if batch.scales.ndim == 2 else batch.scales[rows]
        logits = model(
            batch.inputs[rows, :width],
            scale_hint=hint,
            keep=keep[rows, :width],
            positions=positions[:, :width] if positions.shape[0] == 1 else positions[rows, :width],
            draws=planned,
        )  # (rows, width, v)
        labels = batch.labels[rows, :width].flatten()
        logits = _at_least_float32(logits)
        part = F.cross_entropy(logits.flatten(0, 1), labels, ignore_index=IGNORE, reduction="sum")
        total = part if total is None else total + part
    assert total is not None  # a batch has at least one row
    return total / (batch.labels != IGNORE).sum()


def _at_least_float32(logits: Tensor) -> Tensor:
    """bf16/fp16 logits (autocast) as float32, so the loss is taken in float32; others as they are."""
    return logits.float() if logits.dtype in (torch.bfloat16, torch.float16) else logits


def loss_function(
    model: Backbone,
    precision: str,
    device: torch.device,
    *,
    graphs: bool = False,
    draws: torch.Generator | None = None,
    padded: bool = True,
) -> LossFn:
    """How the training loop takes a batch's loss: eagerly (:func:`training_loss`,
    what every CPU run does), or, with ``graphs`` on CUDA, by :class:`GraphedLoss`.
    ``padded`` False: rows without padding (:func:`training_loss`)."""

    def eager(batch: Batch, host: Batch | None) -> tuple[Tensor, Tensor]:
        return training_loss(model, batch, precision, draws, padded=padded)

    if graphs and device.type == "cuda":
        return GraphedLoss(model, precision, eager, padded=padded)
    return eager
