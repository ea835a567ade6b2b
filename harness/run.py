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
from harness.train import DivergedError, build_model, train

Progress = Callable[[str, int, int, str], None]
"""progress(phase, done, total, note) — phase is "train" or "eval"."""


@dataclass(frozen=True)
class RunOutcome:
    run_id: str
    status: str  # finished | cached | diverged | failed
    error: str | None = None


def execute(cfg: RunConfig, store: Store, device: torch.device, progress: Progress | None = None) -> RunOutcome:
    """Run ``cfg`` unless the store already holds it finished."""
    run_id = cfg.run_id()
    if store.status(run_id) == "finished":
        return RunOutcome(run_id, "cached")
    task = tasks.create(cfg.task)
    for n in (cfg.train.train_max, cfg.eval.test_max):  # fail fast on impossible scales
        task.check_scale(n)
    store.start(cfg, provenance(device))
    try:
        model = build_model(cfg, device)
        report = progress or (lambda *a: None)
        result = train(
            cfg, model, task, device, on_step=lambda s, loss: report("train", s + 1, cfg.train.steps, f"{loss:.4f}")
        )
        t0 = time.perf_counter()
        lengths = [("train", n) for n in cfg.train_lengths()] + [("test", n) for n in cfg.test_lengths()]
        metrics: list[tuple[str, LengthMetrics]] = []
        for done, (split, n) in enumerate(lengths, start=1):
            examples = evaluation_set(task, n, cfg.eval.samples, cfg.seed)
            m = evaluate_length(model, examples, batch_size=cfg.eval.batch_size, device=device)
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
