"""Batches of task instances as tensors.

Axis letters: b batch, s sequence.

Training sequences are ``<bos> prompt = target <eos>``, right-padded; labels are the
next token on target and EOS positions and -100 (ignored) elsewhere, so the loss covers
exactly the completion and its end-of-sequence. The leading ``<bos>`` is the harness's
layout, not part of any task: it gives every encoding (NoPE above all) a fixed first
token to anchor on, as decoder LMs have.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from harness.tasks import Example, Task
from harness.tasks.vocab import BOS_ID, PAD_ID, SEP_ID, encode

IGNORE = -100


@dataclass
class Batch:
    """inputs (b, s), labels (b, s) with IGNORE off-target, scales (b,): the scale hints."""

    inputs: Tensor
    labels: Tensor
    scales: Tensor

    def to(self, device: torch.device | str) -> Batch:
        return Batch(self.inputs.to(device), self.labels.to(device), self.scales.to(device))


def layout(example: Example) -> tuple[list[int], int]:
    """(ids of ``<bos> prompt = target <eos>``, index of the first target token)."""
    ids, start = example.token_ids()
    return [BOS_ID, *ids], start + 1


def prompt_ids(example: Example) -> list[int]:
    """The decoding prompt ``<bos> prompt =``: what the model continues at evaluation."""
    return [BOS_ID, *encode(example.prompt), SEP_ID]


def hint(example: Example) -> int:
    """The instance scale a scale-hint encoding receives (``Example.scale_hint``, else the scale)."""
    return example.scale if example.scale_hint is None else example.scale_hint


def collate(examples: Sequence[Example]) -> Batch:
    """Teacher-forcing batch: predict token t+1 from tokens <= t, loss on the completion."""
    encoded = [layout(ex) for ex in examples]
    width = max(len(ids) for ids, _ in encoded) - 1
    inputs = torch.full((len(examples), width), PAD_ID, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
    for row, (ids, start) in enumerate(encoded):
        seq = torch.tensor(ids)
        inputs[row, : len(ids) - 1] = seq[:-1]
        # label at index t is token t+1; the first target token sits at ``start``
        labels[row, start - 1 : len(ids) - 1] = seq[start:]
    scales = torch.tensor([hint(ex) for ex in examples])
    return Batch(inputs, labels, scales)


def sample_training_batch(task: Task, rng: random.Random, batch_size: int, lo: int, hi: int) -> list[Example]:
    """``batch_size`` instances, each at a scale drawn uniformly from lo..hi."""
    return [task.sample(rng.randint(lo, hi), rng) for _ in range(batch_size)]


def evaluation_set(task: Task, scale: int, samples: int, seed: int) -> list[Example]:
    """The fixed evaluation examples of (task, scale, seed): every encoding sees the same ones."""
    rng = random.Random(f"eval/{task.name}/{scale}/{seed}")
    return [task.sample(scale, rng) for _ in range(samples)]
