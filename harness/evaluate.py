"""Evaluation: greedy decoding with a KV cache, exact match and per-token accuracy.

Axis letters: b batch, s sequence, v vocab.

Two metrics per length, so both source papers' numbers can be compared:

* ``exact_match`` (PRISM paper): the greedy continuation of ``prompt =`` must equal
  ``target <eos>`` token for token, the EOS included.
* ``token_accuracy`` (randomized-PE paper): teacher-forced, the fraction of completion
  tokens (EOS included) whose argmax prediction is right, averaged per sequence, then
  over sequences.

Under the ``encoder`` protocol there is nothing to decode: one non-causal forward pass
predicts every output slot; ``token_accuracy`` counts the slots under the task's mask,
and ``exact_match`` requires every masked slot to be right.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from harness.backbone import Backbone
from harness.data import collate, hint, prompt_ids
from harness.tasks import Example
from harness.tasks.vocab import EOS_ID, encode


@dataclass(frozen=True)
class LengthMetrics:
    """Metrics of one evaluated scale."""

    length: int
    token_length: float
    n: int
    exact_match: float
    token_accuracy: float


@torch.no_grad()
def greedy_decode(
    model: Backbone, prompts: Tensor, max_new: int, *, scale_hint: Tensor | None = None, use_cache: bool = True
) -> Tensor:
    """Greedy continuation of equal-length ``prompts`` (b, s) -> (b, max_new) token ids.

    Stops early once every row has produced EOS (later tokens are then EOS-padded).
    ``use_cache=False`` recomputes the whole prefix every step (the reference the
    cached path must equal).
    """
    b, s = prompts.shape
    out = torch.full((b, max_new), EOS_ID, dtype=torch.long, device=prompts.device)
    done = torch.zeros(b, dtype=torch.bool, device=prompts.device)
    if use_cache:
        state = model.start_state(b, s + max_new, prompts.device)
        logits = model(prompts, state=state, scale_hint=scale_hint)[:, -1]  # (b, v)
    seq = prompts
    for t in range(max_new):
        if not use_cache:
            logits = model(seq, scale_hint=scale_hint)[:, -1]
        nxt = logits.argmax(-1).masked_fill(done, EOS_ID)  # (b,)
        out[:, t] = nxt
        done |= nxt == EOS_ID
        if bool(done.all()) or t == max_new - 1:
            break
        if use_cache:
            logits = model(nxt[:, None], state=state, scale_hint=scale_hint)[:, -1]
        else:
            seq = torch.cat([seq, nxt[:, None]], dim=1)
    return out


@torch.no_grad()
def exact_match(model: Backbone, examples: Sequence[Example], batch_size: int, device: torch.device | str) -> Tensor:
    """Per example 1.0/0.0: greedy decode equals ``target <eos>`` (EOS included). -> (n,)"""
    hits = torch.zeros(len(examples))
    by_prompt_len: dict[int, list[int]] = defaultdict(list)  # equal lengths: no padding needed
    for idx, ex in enumerate(examples):
        by_prompt_len[len(ex.prompt)].append(idx)
    for indices in by_prompt_len.values():
        for lo in range(0, len(indices), batch_size):
            chunk = indices[lo : lo + batch_size]
            prompts = torch.tensor([prompt_ids(examples[i]) for i in chunk], device=device)
            wanted = [[*encode(examples[i].target), EOS_ID] for i in chunk]
            scales = torch.tensor([hint(examples[i]) for i in chunk], device=device)
            generated = greedy_decode(model, prompts, max(len(w) for w in wanted), scale_hint=scales).cpu()
            for row, (i, w) in enumerate(zip(chunk, wanted, strict=True)):
                hits[i] = float(generated[row, : len(w)].tolist() == w)
    return hits


@torch.no_grad()
def scored_accuracy(
    model: Backbone, examples: Sequence[Example], batch_size: int, device: torch.device | str, protocol: str
) -> tuple[Tensor, Tensor]:
    """Per example (n,): fraction of scored tokens predicted right, and whether all were.

    Decoder: teacher-forced next-token predictions over ``target <eos>``. Encoder: the
    predictions at the output slots under the task's accuracy mask.
    """
    fractions, alls = [], []
    for lo in range(0, len(examples), batch_size):
        batch = collate(examples[lo : lo + batch_size], protocol).to(device)
        pred = model(batch.inputs, scale_hint=batch.scales).argmax(-1)  # (b, s)
        right = (pred == batch.labels) & batch.scored
        n_scored = batch.scored.sum(-1)
        fractions.append((right.sum(-1).float() / n_scored).cpu())
        alls.append((right.sum(-1) == n_scored).float().cpu())
    return torch.cat(fractions), torch.cat(alls)


def evaluate_length(
    model: Backbone,
    examples: Sequence[Example],
    *,
    batch_size: int,
    device: torch.device | str,
    protocol: str = "decoder",
) -> LengthMetrics:
    """Both metrics on the examples of one scale."""
    was_training = model.training
    model.eval()
    try:
        acc, all_right = scored_accuracy(model, examples, batch_size, device, protocol)
        em = exact_match(model, examples, batch_size, device) if protocol == "decoder" else all_right
    finally:
        model.train(was_training)
    extra = 3 if protocol == "decoder" else 0  # <bos>, "=", <eos>
    token_length = sum(len(ex.prompt) + len(ex.target) + extra for ex in examples) / len(examples)
    return LengthMetrics(
        length=examples[0].scale,
        token_length=token_length,
        n=len(examples),
        exact_match=em.mean().item(),
        token_accuracy=acc.mean().item(),
    )


Evaluation = tuple[tuple[str, LengthMetrics], ...]
"""One evaluation of a model: (split, metrics) per scale, training scales first."""


def select_evaluation(evaluations: Sequence[Evaluation], rule: str) -> Evaluation:
    """The metrics a run reports from its evaluations (oldest first, the final model last).

    ``rule`` is an ``EvalConfig.select`` value:

    * ``final``: the last evaluation.
    * ``top3``: per scale, both metrics averaged over the (up to) three evaluations with
      the highest exact match at that scale, ties broken by token accuracy and then by
      recency (PRISM paper §6.1). This picks checkpoints on the test scales themselves.
    * ``best_in_dist``: the single evaluation with the highest mean exact match over the
      training scales (ties: the later one); the test scales play no part in the choice.
    """
    if not evaluations:
        raise ValueError("no evaluations to select from")
    layout = [(split, m.length) for split, m in evaluations[0]]
    if any([(split, m.length) for split, m in e] != layout for e in evaluations):
        raise ValueError("evaluations cover different scales; cannot select among them")
    if rule == "final":
        return tuple(evaluations[-1])
    if rule == "best_in_dist":
        best, best_score = evaluations[-1], -1.0
        for e in evaluations:
            train = [m.exact_match for split, m in e if split == "train"]
            score = sum(train) / max(1, len(train))
            if score >= best_score:
                best, best_score = e, score
        return tuple(best)
    if rule == "top3":
        selected = []
        for i, (split, first) in enumerate(evaluations[0]):
            ranked = sorted(
                range(len(evaluations)),
                key=lambda k: (evaluations[k][i][1].exact_match, evaluations[k][i][1].token_accuracy, k),
                reverse=True,
            )[:3]
            picks = [evaluations[k][i][1] for k in ranked]
            selected.append(
                (
                    split,
                    LengthMetrics(
                        length=first.length,
                        token_length=first.token_length,
                        n=first.n,
                        exact_match=sum(m.exact_match for m in picks) / len(picks),
                        token_accuracy=sum(m.token_accuracy for m in picks) / len(picks),
                    ),
                )
            )
        return tuple(selected)
    raise ValueError(f"unknown selection rule {rule!r}; valid: final, top3, best_in_dist")


def summary(evaluation: Evaluation) -> str:
    """One log line: mean exact match in and beyond the training range."""
    parts = []
    for split, name in (("train", "in-dist"), ("test", "beyond")):
        values = [m.exact_match for s, m in evaluation if s == split]
        if values:
            parts.append(f"{name} exact match {sum(values) / len(values):.2f}")
    return ", ".join(parts)
