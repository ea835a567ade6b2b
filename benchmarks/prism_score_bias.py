"""PRISM's position term as an attention score against widened q/k, side by side in one process.

Usage: ``PYTHONPATH=. python benchmarks/prism_score_bias.py [--tasks copy addition] [--steps 8] [--rounds 3]``

The board's training step (forward, loss with the encoding's regularisation, backward,
clipping, AdamW) of ``prism{paper}`` at the ``board`` preset on each task's training
batches (64 examples of scales 1..10, fixed per task), with Eq. 9's position term

* ``widened``: folded into q/k widened by C·d_pe dims in every layer;
* ``score``: added as a dense score from per-cursor products computed once per PRISM
  layer (``pezoo.encodings.prism.encoding.scores_as_bias``, docs/prism.md, reading J).

``--default-size`` also times the default PRISM (C = 2, d_pe = 32), where
``scores_as_bias`` keeps the widened q/k, with the score forced, to show why;
``--forced 'prism{d_pe=64,n_cursors=4}' ...`` other PRISM options, score forced;
``--ruoss 80 40`` the default PRISM on the ruoss model (``pezoo perf``'s batch of 128
sequences of reverse_string, cut to the given lengths), score forced, with NoPE's step
for scale.

One thread, process CPU time, the candidates interleaved round by round by ``pezoo
perf``'s ``time_interleaved`` (a background load hits them alike); the median round per
candidate is reported.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable

import torch


def _with_choice(fn: Callable[[], object], choice: Callable[..., bool]) -> Callable[[], None]:
    """``fn`` run with ``scores_as_bias`` replaced by ``choice`` (restored after the call)."""
    import pezoo.encodings.prism.encoding as prism_encoding

    def run() -> None:
        decide = prism_encoding.scores_as_bias
        prism_encoding.scores_as_bias = choice
        try:
            fn()
        finally:
            prism_encoding.scores_as_bias = decide

    return run


def _widened(*args: object) -> bool:
    return False


def _forced(q: torch.Tensor, k: torch.Tensor, streams: torch.Tensor, ctx: object) -> bool:
    return not ctx.state_kept  # type: ignore[attr-defined]


def step_time(pe: str, task_name: str, steps: int, rounds: int, forced: bool) -> dict[str, float]:
    """Seconds per board training step of ``pe`` on ``task_name``, widened q/k and score."""
    import harness.tasks as tasks
    import pezoo.encodings.prism.encoding as prism_encoding
    from harness.config import preset_config
    from harness.perf.timing import time_interleaved
    from harness.tasks.data import collate, sample_training_batch
    from harness.training.loss import training_loss
    from harness.training.train import build_model, make_optimizer

    cfg = preset_config("board", pe=pe, task=task_name, seed=0)
    task = tasks.create(task_name)
    torch.manual_seed(0)
    model = build_model(cfg, "cpu")
    opt = make_optimizer(model, cfg)
    rng = random.Random(0)
    batches = [
        collate(sample_training_batch(task, rng, cfg.train.batch_size, 1, cfg.train.train_max), cfg.protocol)
        for _ in range(steps)
    ]

    def train_steps() -> None:
        for batch in batches:
            loss, _ = training_loss(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
            opt.step()

    score = _forced if forced else prism_encoding.scores_as_bias
    candidates = {"widened": _with_choice(train_steps, _widened), "score": _with_choice(train_steps, score)}
    timings = time_interleaved(candidates, repeats=rounds, warmup=1)
    return {name: t.cpu_ms / 1000.0 / steps for name, t in timings.items()}


def ruoss_step_time(length: int, rounds: int) -> dict[str, float]:
    """Seconds per training step on the ruoss model: NoPE, PRISM widened, PRISM score forced."""
    import dataclasses

    from harness.perf.timing import time_interleaved
    from harness.perf.train import build_for, step_function, training_batch

    device = torch.device("cpu")
    _, batch = training_batch("ruoss", 0, device)
    batch = dataclasses.replace(
        batch, inputs=batch.inputs[:, :length].contiguous(), labels=batch.labels[:, :length].contiguous()
    )
    steps = {pe: step_function(*build_for("ruoss", pe, "auto", device), batch) for pe in ("nope", "prism")}
    candidates = {
        "nope": steps["nope"],
        "widened": _with_choice(steps["prism"], _widened),
        "score": _with_choice(steps["prism"], _forced),
    }
    timings = time_interleaved(candidates, repeats=rounds, warmup=1)
    return {name: t.cpu_ms / 1000.0 for name, t in timings.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["copy", "reverse", "odds_first", "addition"])
    parser.add_argument("--steps", type=int, default=8, help="training steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--default-size", action="store_true", help="also the default PRISM, score forced")
    parser.add_argument("--forced", nargs="*", default=[], help="other PRISM specs, score forced")
    parser.add_argument("--ruoss", nargs="*", type=int, default=[], help="lengths on the ruoss model")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [("prism{paper}", task, False) for task in args.tasks]
    if args.default_size:
        rows += [("prism", task, True) for task in args.tasks]
    rows += [(pe, task, True) for pe in args.forced for task in args.tasks]
    print("| encoding | task | widened q/k | score | score / widened |")
    print("|---|---|---:|---:|---:|")
    for pe, task, forced in rows:
        t = step_time(pe, task, args.steps, args.rounds, forced)
        label = f"{pe} (score forced)" if forced else pe
        print(
            f"| {label} | {task} | {1000 * t['widened']:.0f} ms | {1000 * t['score']:.0f} ms | "
            f"{t['score'] / t['widened']:.2f} |",
            flush=True,
        )
    for length in args.ruoss:
        t = ruoss_step_time(length, args.rounds)
        print(
            f"| prism (score forced), ruoss model, NoPE {1000 * t['nope']:.0f} ms | reverse_string, 128 x {length} | "
            f"{1000 * t['widened']:.0f} ms | {1000 * t['score']:.0f} ms | {t['score'] / t['widened']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
