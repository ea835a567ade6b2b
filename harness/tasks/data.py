"""Batches of task instances as tensors.

Axis letters: b batch, s sequence.

Training sequences are ``<bos> prompt = target <eos>``, right-padded; labels are the
next token on target and EOS positions and -100 (ignored) elsewhere, so the loss covers
exactly the completion and its end-of-sequence. The leading ``<bos>`` is the harness's
layout, not part of any task: it gives every encoding (NoPE above all) a fixed first
token to anchor on, as decoder LMs have.

The ``encoder`` protocol (Ruoss et al. 2023 / Delétang et al. 2023) lays an instance out
as ``prompt _ _ ... _`` with ``output_length(n)`` blanks and predicts the target *at*
the blank positions (non-causal attention, no decoding); labels are set on every blank,
and ``Batch.scored`` marks the tokens the paper's per-token accuracy counts.

Packed training (``TrainConfig.pack``, the Turing-Programs protocol) lays examples end to
end in one endless stream, ``<bos> p = t <eos> <bos> p = t <eos> ...``, and cuts it into
consecutive rows of a fixed width (:class:`PackedStream`): no padding, most rows start
mid-example, and attention is not reset at example boundaries.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from harness.tasks import Example, Task
from harness.tasks.vocab import BOS_ID, PAD_ID, SEP_ID, TOKEN_ID, encode

PROTOCOLS = ("decoder", "encoder")
BLANK_ID = TOKEN_ID["_"]

IGNORE = -100


@dataclass
class Batch:
    """inputs (b, s), labels (b, s) with IGNORE off-target, scales (b,): the scale hints
    (per token, (b, s), in packed rows),
    scored (b, s) bool: the labelled tokens that per-token accuracy counts."""

    inputs: Tensor
    labels: Tensor
    scales: Tensor
    scored: Tensor

    def to(self, device: torch.device | str) -> Batch:
        return Batch(*(t.to(device) for t in (self.inputs, self.labels, self.scales, self.scored)))


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


def collate(examples: Sequence[Example], protocol: str = "decoder") -> Batch:
    """Teacher-forcing batch (decoder: predict token t+1 from tokens <= t, loss on the
    completion) or encoder batch (predict the target at the blanks)."""
    if protocol == "encoder":
        return _collate_encoder(examples)
    encoded = [layout(ex) for ex in examples]
    width = max(len(ids) for ids, _ in encoded) - 1
    # rows built as Python lists and made one tensor each: a torch op per row cost 3-4x
    # the time, and on a GPU this runs on the host once per step (the producer thread)
    rows_in, rows_label = [], []
    for ids, start in encoded:
        pad = width - (len(ids) - 1)
        rows_in.append(ids[:-1] + [PAD_ID] * pad)
        # label at index t is token t+1; the first target token sits at ``start``
        rows_label.append([IGNORE] * (start - 1) + ids[start:] + [IGNORE] * pad)
    inputs = torch.tensor(rows_in, dtype=torch.long)
    labels = torch.tensor(rows_label, dtype=torch.long)
    scales = torch.tensor([hint(ex) for ex in examples])
    return Batch(inputs, labels, scales, labels != IGNORE)


def _collate_encoder(examples: Sequence[Example]) -> Batch:
    width = max(len(ex.prompt) + len(ex.target) for ex in examples)
    inputs = torch.full((len(examples), width), PAD_ID, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
    scored = torch.zeros((len(examples), width), dtype=torch.bool)
    for row, ex in enumerate(examples):
        p, t = len(ex.prompt), len(ex.target)
        inputs[row, :p] = torch.tensor(encode(ex.prompt))
        inputs[row, p : p + t] = BLANK_ID
        labels[row, p : p + t] = torch.tensor(encode(ex.target))
        scored[row, p : p + t] = torch.tensor(ex.mask) if ex.mask is not None else True
    scales = torch.tensor([hint(ex) for ex in examples])
    return Batch(inputs, labels, scales, scored)


def sample_training_batch(
    task: Task, rng: random.Random, batch_size: int, lo: int, hi: int, *, shared_scale: bool = False
) -> list[Example]:
    """``batch_size`` instances at scales drawn uniformly from lo..hi: one per example, or
    one for the whole batch (``shared_scale``, the randomized-PE protocol: no padding).
    Scales the task cannot produce (SCAN has gaps) are left out of the draw."""
    scales = [n for n in range(lo, hi + 1) if task.has_scale(n)]
    if shared_scale:
        n = rng.choice(scales)
        return [task.sample(n, rng) for _ in range(batch_size)]
    return [task.sample(rng.choice(scales), rng) for _ in range(batch_size)]


class PackedStream:
    """Training rows of ``width`` tokens cut one after another from an endless stream of
    examples laid end to end.

    Row r of a batch holds stream tokens ``[o + r*width, o + (r+1)*width)`` as inputs and
    the tokens one further as labels, ``o`` being where the batch starts; the next batch
    starts where this one ended, so every stream token is a label exactly once. With
    ``loss="completion"`` only target and EOS tokens are labels (as in unpacked rows);
    with ``"all"`` every next token is (a plain language-model loss).

    The examples are drawn from ``rng`` one at a time, each at a scale uniform over the
    current ``lo..hi``, when the stream runs short; :meth:`state` and :meth:`load_state`
    carry the unconsumed tail across a checkpoint (the rng's state is saved with it).
    ``Batch.scales`` is (b, s) here: per input token, the scale hint of its instance (a
    packed row mixes instances; a scale-hint encoding gives each query its own n).
    """

    def __init__(self, task: Task, rng: random.Random, width: int, *, loss: str = "all") -> None:
        if width < 2:
            raise ValueError(f"packed rows need a width of at least 2 tokens, got {width}")
        if loss not in ("all", "completion"):
            raise ValueError(f"unknown pack loss {loss!r}; valid: all, completion")
        self.task, self.rng, self.width, self.loss = task, rng, width, loss
        self.ids: list[int] = []  # unconsumed stream tokens
        self.target: list[bool] = []  # per token: part of a target or its EOS
        self.scale: list[int] = []  # per token: the scale of its example

    def _extend(self, lo: int, hi: int) -> None:
        example = sample_training_batch(self.task, self.rng, 1, lo, hi)[0]
        ids, start = layout(example)
        self.ids += ids
        self.target += [i >= start for i in range(len(ids))]
        self.scale += [hint(example)] * len(ids)

    def batch(self, batch_size: int, lo: int, hi: int) -> Batch:
        """The next ``batch_size`` rows; examples added from here on have scales lo..hi."""
        w, need = self.width, batch_size * self.width + 1
        while len(self.ids) < need:
            self._extend(lo, hi)
        ids = torch.tensor(self.ids[:need])
        target = torch.tensor(self.target[:need])
        inputs = ids[:-1].view(batch_size, w)
        labels = ids[1:].view(batch_size, w).clone()
        if self.loss == "completion":
            labels[~target[1:].view(batch_size, w)] = IGNORE
        scales = torch.tensor(self.scale[: need - 1]).view(batch_size, w)
        used = need - 1  # the last label token opens the next batch's first row
        del self.ids[:used], self.target[:used], self.scale[:used]
        return Batch(inputs, labels, scales, labels != IGNORE)

    def state(self) -> dict[str, list]:
        """The unconsumed stream (for a checkpoint; the rng state is saved separately)."""
        return {"ids": list(self.ids), "target": list(self.target), "scale": list(self.scale)}

    def load_state(self, state: dict[str, list]) -> None:
        self.ids, self.target, self.scale = list(state["ids"]), list(state["target"]), list(state["scale"])


def evaluation_set(task: Task, scale: int, samples: int, seed: int) -> list[Example]:
    """The fixed evaluation examples of (task, scale, seed): every encoding sees the same ones."""
    rng = random.Random(f"eval/{task.name}/{scale}/{seed}")
    return [task.sample_test(scale, rng) for _ in range(samples)]


@functools.cache
def longest_training_tokens(task: str, train_max: int, samples: int = 32) -> int:
    """Tokens in the longest of ``samples`` training sequences of ``task`` at its largest
    training scale ``train_max`` (``<bos>`` and ``<eos>`` included), drawn from a fixed
    stream: what a RoPE context extension's original length must cover, and the length an
    encoding option sized to the training data is set to (FoPE's clipping length, a
    sliding window: leaderboard/board-frontier.toml)."""
    import harness.tasks

    made = harness.tasks.create(task)
    rng = random.Random(0)
    return max(len(layout(made.sample(train_max, rng))[0]) for _ in range(samples))
