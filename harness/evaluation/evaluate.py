"""Evaluation: greedy decoding with a KV cache, exact match and per-token accuracy.

Axis letters: b batch, s sequence, v vocab.

Two metrics per length, so both source papers' numbers can be compared:

* ``exact_match`` (PRISM paper): the greedy continuation of ``prompt =`` must equal
  ``target <eos>`` token for token, the EOS included.
* ``token_accuracy`` (randomized-PE paper): teacher-forced, the completion tokens (EOS
  included) whose argmax prediction is right, of all completion tokens of the scale's
  examples (where every example of a scale scores as many tokens, as on every task of
  the board, this is also the mean over examples of each one's fraction).

Both are kept as counts (``LengthMetrics``: examples right of ``n``, tokens right of
tokens), never as a float mean, so a fraction or a threshold made from them is exact
(``harness.records.counts``).

Under the ``encoder`` protocol there is nothing to decode: one non-causal forward pass
predicts every output slot; ``token_accuracy`` counts the slots under the task's mask,
and ``exact_match`` requires every masked slot to be right.

With a context window (``EvalConfig.window``, the Turing-Programs paper's sliding-window
inference) the model predicts the token after position t from positions
``context_start(t)..t`` only: the context grows to ``window`` tokens, then its oldest
``jump`` tokens are dropped at once and it grows again. Greedy decoding re-reads the kept
tokens as a fresh sequence after each drop; teacher-forced accuracy uses the same
contexts. ``match="answer"`` scores only the final answer of a scratchpad completion.

Exact match without a decode. For the whole completion, the greedy decode is right
exactly when every teacher-forced prediction over ``target <eos>`` is: while the decoded
prefix equals the target's, each greedy token is the argmax the teacher-forced pass makes
at that position, so the decode first leaves the target where the teacher-forced pass
first errs, and not before. It holds under a context window (both read the same
contexts) and at random positions (both read one plan). So ``exact_match`` can be read
off the teacher-forced counts, ``tokens_right == tokens`` per example: one forward pass
per batch instead of one per decoded token, which on a GPU replaces a launch-bound loop
of ``len(target) + 1`` steps. The two can differ only where the cached decode and the
full pass round an argmax near-tie differently. CPU runs decode (the board's records);
CUDA runs read it off the pass (``harness.training.accel.Accel.forced``), and a scratchpad task
scored on its final answer (``match="answer"``) always decodes.

Random positions at evaluation (randomized PE, Ruoss et al. 2023 §3: "at test time [...]
the same procedure but for all token positions"): an encoding whose ``random_at_eval``
is true gets its positions planned once per evaluated example, from a generator seeded
by the run's seed, the scale and the example's index in that scale's evaluation set
(:func:`example_seed`, through the encoding's ``seeded(seed)``), for the longest whole
sequence of the scale (``<bos> prompt = target <eos>``; the encoder's prompt and
blanks). Teacher forcing and greedy decoding read the same plan (a sequence uses its
first positions), the cached decode and the recomputing one too, and a sliding-window
context reads the plan's first positions as a fresh sequence. So an evaluation is
deterministic, the same after a resume, and independent of the batch size and of the
order and grouping of the examples.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import torch
from torch import Tensor

from harness.records.counts import fixed
from harness.records.metrics import Evaluation, LengthMetrics
from harness.tasks import Example, Task
from harness.tasks.data import collate, hint, prompt_ids
from harness.tasks.vocab import EOS_ID, decode, encode
from harness.training.backbone import Backbone


def context_start(t: int, window: int, jump: int) -> int:
    """First position of the context that predicts the token after position ``t`` under
    a sliding window of ``window`` tokens dropping its oldest ``jump`` when full (0: no
    window). Positions ``0..window-1`` see everything before them; from there the start
    moves ``jump`` tokens at a time, so a context holds ``window - jump + 1..window``."""
    if not window or t < window:
        return 0
    return jump * -(-(t - window + 1) // jump)


def example_seed(seed: int, scale: int, index: int) -> int:
    """The seed of one evaluated example's random positions: a stable hash (not Python's
    salted ``hash``) of the run's seed, the scale and the example's index in the scale's
    evaluation set; in ``[0, 2**63)``."""
    digest = hashlib.sha256(f"pezoo/eval-positions/{seed}/{scale}/{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def sequence_length(example: Example, protocol: str = "decoder") -> int:
    """Tokens of the whole sequence: ``<bos> prompt = target <eos>`` (decoder) or the
    prompt and its blanks (encoder)."""
    extra = 3 if protocol == "decoder" else 0  # <bos>, "=", <eos>
    return len(example.prompt) + len(example.target) + extra


def planned_positions(
    model: Any, examples: Sequence[Example], seed: int, device: torch.device | str, protocol: str, window: int = 0
) -> Tensor | None:
    """Per example, the positions it is evaluated at (n, S) when the model's encoding
    draws random positions at evaluation (``pe.random_at_eval``), else None (plain
    positions, computed as always). Example i's are one draw, under
    ``pe.seeded(example_seed(seed, scale, i))``, for the longest whole sequence of
    ``examples`` (S tokens; at most ``window`` with a sliding window)."""
    pe = getattr(model, "pe", None)
    if pe is None or not getattr(pe, "random_at_eval", False):
        return None
    length = max(sequence_length(ex, protocol) for ex in examples)
    if window:
        length = min(length, window)
    rows = []
    for index, ex in enumerate(examples):
        with pe.seeded(example_seed(seed, ex.scale, index)):
            rows.append(pe.positions(1, length, device))  # (1, S)
    return torch.cat(rows).to(device)  # (n, S)


def _forward(model: Backbone, tokens: Tensor, scales: Tensor | None, positions: Tensor | None) -> Tensor:
    """One full forward pass (b, s) -> (b, s, v), at planned ``positions`` (b, >= s) when given."""
    if positions is None:
        return model(tokens, scale_hint=scales)
    state = model.start_state(tokens.shape[0], tokens.shape[1], tokens.device, positions=positions)
    return model(tokens, state=state, scale_hint=scales)


@torch.no_grad()
def greedy_decode(
    model: Backbone,
    prompts: Tensor,
    max_new: int,
    *,
    scale_hint: Tensor | None = None,
    use_cache: bool = True,
    window: int = 0,
    jump: int = 20,
    positions: Tensor | None = None,
) -> Tensor:
    """Greedy continuation of equal-length ``prompts`` (b, s) -> (b, max_new) token ids.

    Stops early once every row has produced EOS (later tokens are then EOS-padded).
    ``use_cache=False`` recomputes the whole context every step (the reference the
    cached path must equal). With ``window``, each token is predicted from
    ``context_start`` on (module docstring); the cache is rebuilt after each drop.

    Positions are planned once for the whole sequence (prompt and ``max_new`` tokens, at
    most ``window``) and every step, cached or not, reads that plan: ``positions``
    (b|1, >= that length) when given, else one call to ``model.pe.positions``.
    """
    b, s = prompts.shape
    total = min(s + max_new, window) if window else s + max_new
    if positions is None:
        positions = model.pe.positions(b, total, prompts.device)  # (b|1, total): one plan for every step
    out = torch.full((b, max_new), EOS_ID, dtype=torch.long, device=prompts.device)
    done = torch.zeros(b, dtype=torch.bool, device=prompts.device)
    seq = torch.cat([prompts, out], dim=1)  # (b, s + max_new): the prompt, then what is decoded
    start, state = None, None
    for t in range(max_new):
        last = s + t - 1  # the newest position: predict the token after it
        a = context_start(last, window, jump)
        if not use_cache:
            fresh = model.start_state(b, total, prompts.device, positions=positions)
            logits = model(seq[:, a : last + 1], state=fresh, scale_hint=scale_hint)[:, -1]
        elif a != start:  # first step or the window moved: read the context afresh
            state = model.start_state(b, total, prompts.device, positions=positions)
            logits = model(seq[:, a : last + 1], state=state, scale_hint=scale_hint)[:, -1]  # (b, v)
        else:
            logits = model(seq[:, last : last + 1], state=state, scale_hint=scale_hint)[:, -1]
        start = a
        nxt = logits.argmax(-1).masked_fill(done, EOS_ID)  # (b,)
        out[:, t] = seq[:, s + t] = nxt
        done |= nxt == EOS_ID
        if bool(done.all()):
            break
    return out


def answer_matches(task: Task, generated: Sequence[int], target: Sequence[str]) -> bool:
    """Whether a decoded completion (ids, EOS-terminated or cut off) ends with EOS and
    holds the same final answer (``Task.answer``) as ``target``: what follows its last
    ``answer_separator``, which it must contain when the target does (a bare answer
    without the scratchpad does not count)."""
    ids = list(generated)
    if EOS_ID not in ids:
        return False
    tokens = decode(ids[: ids.index(EOS_ID)])
    sep = task.answer_separator
    if sep is not None and sep in target and sep not in tokens:
        return False
    return task.answer(tokens) == task.answer(target)


@torch.no_grad()
def exact_match(
    model: Backbone,
    examples: Sequence[Example],
    batch_size: int,
    device: torch.device | str,
    *,
    window: int = 0,
    jump: int = 20,
    task: Task | None = None,
    positions: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Per example 1.0/0.0 (n,) twice: the greedy decode equals ``target <eos>`` (EOS
    included), and it has the target's final answer (``answer_matches``; needs
    ``task``, else it equals the first). The decode is ``len(target) + 1`` tokens long.
    ``positions`` (n, S): each example's planned positions (:func:`planned_positions`)."""
    hits, answers = torch.zeros(len(examples)), torch.zeros(len(examples))
    by_prompt_len: dict[int, list[int]] = defaultdict(list)  # equal lengths: no padding needed
    for idx, ex in enumerate(examples):
        by_prompt_len[len(ex.prompt)].append(idx)
    for indices in by_prompt_len.values():
        for lo in range(0, len(indices), batch_size):
            chunk = indices[lo : lo + batch_size]
            prompts = torch.tensor([prompt_ids(examples[i]) for i in chunk], device=device)
            wanted = [[*encode(examples[i].target), EOS_ID] for i in chunk]
            scales = torch.tensor([hint(examples[i]) for i in chunk], device=device)
            longest = max(len(w) for w in wanted)
            planned = None if positions is None else positions[chunk]  # (b, S)
            generated = greedy_decode(
                model, prompts, longest, scale_hint=scales, window=window, jump=jump, positions=planned
            ).cpu()
            for row, (i, w) in enumerate(zip(chunk, wanted, strict=True)):
                got = generated[row, : len(w)].tolist()
                hits[i] = float(got == w)
                answers[i] = float(answer_matches(task, got, examples[i].target)) if task is not None else hits[i]
    return hits, answers


@torch.no_grad()
def windowed_predictions(
    model: Backbone,
    inputs: Tensor,
    scales: Tensor,
    window: int = 0,
    jump: int = 20,
    positions: Tensor | None = None,
) -> Tensor:
    """Teacher-forced argmax next-token predictions (b, s) -> (b, s), each made from the
    context ``context_start(t)..t`` (one forward pass per context start; the whole row
    at once without a window). ``positions`` (b, >= s): planned positions; a context
    reads their first ones, as a fresh sequence."""
    s = inputs.shape[1]
    if not window or s <= window:
        return _forward(model, inputs, scales, positions).argmax(-1)
    pred = torch.empty_like(inputs)
    t = 0
    while t < s:
        a = context_start(t, window, jump)
        end = t + 1  # extend over every later t with the same start
        while end < s and context_start(end, window, jump) == a:
            end += 1
        pred[:, t:end] = _forward(model, inputs[:, a:end], scales, positions)[:, t - a :].argmax(-1)
        t = end
    return pred


@torch.no_grad()
def scored_accuracy(
    model: Backbone,
    examples: Sequence[Example],
    batch_size: int,
    device: torch.device | str,
    protocol: str,
    *,
    window: int = 0,
    jump: int = 20,
    positions: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Per example (n,) integer counts: scored tokens predicted right, and tokens scored.

    Decoder: teacher-forced next-token predictions over ``target <eos>`` (under the
    window's contexts, if any). Encoder: the predictions at the output slots under the
    task's accuracy mask. ``positions`` (n, S): each example's planned positions. An
    example is all right when its two counts are equal.
    """
    rights, scoreds = [], []
    for lo in range(0, len(examples), batch_size):
        batch = collate(examples[lo : lo + batch_size], protocol).to(device)
        planned = None if positions is None else positions[lo : lo + batch_size]  # (b, S)
        pred = windowed_predictions(model, batch.inputs, batch.scales, window, jump, planned)  # (b, s)
        right = (pred == batch.labels) & batch.scored
        rights.append(right.sum(-1).cpu())  # (b,)
        scoreds.append(batch.scored.sum(-1).cpu())  # (b,)
    return torch.cat(rights), torch.cat(scoreds)


def evaluate_length(
    model: Backbone,
    examples: Sequence[Example],
    *,
    batch_size: int,
    device: torch.device | str,
    protocol: str = "decoder",
    window: int = 0,
    jump: int = 20,
    answer_task: Task | None = None,
    seed: int = 0,
    decode: bool = True,
) -> LengthMetrics:
    """Both metrics on the examples of one scale. With ``answer_task``,
    ``exact_match`` scores the final answer (``Task.answer``) and ``trace_exact_match``
    the whole completion; otherwise ``exact_match`` is the whole completion and
    ``trace_exact_match`` None. ``seed`` (the run's) seeds random evaluation positions
    (:func:`planned_positions`); ``examples`` must be the scale's whole evaluation set,
    in its order, for an example's positions to be its own.

    ``decode=False`` reads the whole-completion exact match off the teacher-forced pass
    instead of decoding (module docstring, "exact match without a decode"); with ``answer_task`` it decodes
    anyway, as only a decode can score an answer."""
    was_training = model.training
    model.eval()
    try:
        positions = planned_positions(model, examples, seed, device, protocol, window)  # (n, S) or None
        right, scored = scored_accuracy(
            model, examples, batch_size, device, protocol, window=window, jump=jump, positions=positions
        )
        trace = answer = (right == scored).float()
        if protocol == "decoder" and (decode or answer_task is not None):
            trace, answer = exact_match(
                model, examples, batch_size, device, window=window, jump=jump, task=answer_task, positions=positions
            )
    finally:
        model.train(was_training)
    token_length = sum(sequence_length(ex, protocol) for ex in examples) / len(examples)
    return LengthMetrics(
        length=examples[0].scale,
        token_length=token_length,
        n=len(examples),
        exact=int(answer.sum().item()),
        tokens=int(scored.sum().item()),
        tokens_right=int(right.sum().item()),
        trace_exact=int(trace.sum().item()) if answer_task is not None else None,
    )


def select_evaluation(evaluations: Sequence[Evaluation], rule: str) -> Evaluation:
    """The metrics a run reports from its evaluations (oldest first, the final model last).

    ``rule`` is an ``EvalConfig.select`` value:

    * ``final``: the last evaluation.
    * ``top3``: per scale, both metrics over the (up to) three evaluations with
      the highest exact match at that scale, ties broken by token accuracy and then by
      recency (PRISM paper §6.1); their counts are summed (examples right of ``3 × n``:
      the mean of the three fractions, exactly). This picks checkpoints on the test
      scales themselves.
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
        best, best_score = evaluations[-1], Fraction(-1)
        for e in evaluations:
            train = [m.exact_match for split, m in e if split == "train"]
            score = sum(train, Fraction(0)) / max(1, len(train))
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
                        n=sum(m.n for m in picks),
                        exact=sum(m.exact for m in picks),
                        tokens=sum(m.tokens for m in picks),
                        tokens_right=sum(m.tokens_right for m in picks),
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
            parts.append(f"{name} exact match {fixed(sum(values, Fraction(0)) / len(values), 2)}")
    return ", ".join(parts)
