"""Executing runs: train, evaluate at every length, record in the store.

A run is idempotent: if the store already holds it as finished it is skipped. A NaN
loss ends the run as ``diverged`` (with its reason) without stopping the others; any
other error ends it as ``failed`` with the traceback; Ctrl-C marks it ``interrupted``
and stops. Unfinished runs are simply run again next time.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import torch

import harness.tasks as tasks
from harness.config import RunConfig
from harness.data import evaluation_set
from harness.evaluate import LengthMetrics, evaluate_length
from harness.provenance import provenance
from harness.store import Store
from harness.train import Checkpointing, DivergedError, restore, train

Progress = Callable[[str, int, int, str], None]
"""progress(phase, done, total, note) — phase is "train" or "eval"."""


@dataclass(frozen=True)
class RunOutcome:
    run_id: str
    status: str  # finished | cached | diverged | failed
    error: str | None = None


def check_run(cfg: RunConfig) -> None:
    """Fail fast, before any training, on a run that cannot work (ValueError says why)."""
    task = tasks.create(cfg.task)
    task.check_scale(cfg.train.train_min)
    if not any(task.has_scale(n) for n in cfg.train_lengths()):
        raise ValueError(f"task {cfg.task!r} has no instances at training scales {cfg.train_lengths()}")
    if not any(task.has_scale(n) for n in cfg.test_lengths()):
        raise ValueError(f"task {cfg.task!r} has no instances at test scales {cfg.test_lengths()}")
    if cfg.protocol == "encoder" and task.output_length(cfg.train.train_max) is None:
        raise ValueError(
            f"task {cfg.task!r} has no fixed output length, which the encoder protocol (preset "
            f"{cfg.preset!r}) needs; use a randomized-PE task or a decoder preset such as quick"
        )


def execute(
    cfg: RunConfig,
    store: Store,
    device: torch.device,
    progress: Progress | None = None,
    *,
    checkpoint_every: int = 250,
    notice: Callable[[str], None] = print,
) -> RunOutcome:
    """Run ``cfg`` unless the store already holds it finished.

    Checkpoints go to ``<store folder>/checkpoints/<run_id>.pt`` every
    ``checkpoint_every`` steps; an unfinished run resumes from its checkpoint.
    ``notice`` receives messages worth showing (a corrupt checkpoint, a resume).
    """
    run_id = cfg.run_id()
    if store.status(run_id) == "finished":
        return RunOutcome(run_id, "cached")
    check_run(cfg)
    task = tasks.create(cfg.task)
    store.start(cfg, provenance(device))
    try:
        ckpt = Checkpointing(store.path.parent / "checkpoints" / f"{run_id}.pt", checkpoint_every)
        model, resume, problem = restore(cfg, ckpt.path, device)
        if problem:
            notice(f"run {run_id}: {problem}")
        elif resume is not None:
            notice(f"run {run_id}: resuming from step {resume['step']}")
        report = progress or (lambda *a: None)
        result = train(
            cfg,
            model,
            task,
            device,
            on_step=lambda s, loss: report("train", s + 1, cfg.train.steps, f"{loss:.4f}"),
            checkpointing=ckpt,
            resume=resume,
        )
        t0 = time.perf_counter()
        lengths = [("train", n) for n in cfg.train_lengths()] + [("test", n) for n in cfg.test_lengths()]
        lengths = [(split, n) for split, n in lengths if task.has_scale(n)]  # SCAN lacks some lengths
        metrics: list[tuple[str, LengthMetrics]] = []
        for done, (split, n) in enumerate(lengths, start=1):
            examples = evaluation_set(task, n, cfg.eval.samples, cfg.seed)
            m = evaluate_length(model, examples, batch_size=cfg.eval.batch_size, device=device, protocol=cfg.protocol)
            metrics.append((split, m))
            report("eval", done, len(lengths), f"n={n} em={m.exact_match:.2f}")
        store.finish(
            run_id,
            metrics,
            final_loss=result.final_loss,
            train_seconds=result.seconds,
            eval_seconds=time.perf_counter() - t0,
            n_params=model.n_params(),
        )
        ckpt.path.unlink(missing_ok=True)  # the results are in the store now
        return RunOutcome(run_id, "finished")
    except DivergedError as exc:
        store.mark(run_id, "diverged", str(exc))
        return RunOutcome(run_id, "diverged", str(exc))
    except KeyboardInterrupt:
        store.mark(run_id, "interrupted", "interrupted by the user (KeyboardInterrupt)")
        raise
    except Exception as exc:
        store.mark(run_id, "failed", traceback.format_exc())
        return RunOutcome(run_id, "failed", f"{type(exc).__name__}: {exc}")
