"""One attempt at a run, from its first notice to its result: who trained which steps,
the ``finished`` result with its diagnostics and timings, and a ``sys.exit`` in the run's
code turned into the run's failure (:class:`RunExited`) instead of the sweep's end.

The steps of ``harness.execution.run.train_and_evaluate`` and ``evaluate_kept`` share these.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

import harness.tasks as tasks
from harness.config import RunConfig
from harness.evaluation.evaluate import Evaluation
from harness.records.lm_metrics import LmScores
from harness.records.result import RunResult
from harness.tasks.lm.data import LmBatches
from harness.training.backbone import Backbone
from harness.training.diagnostics import encoding_diagnostics
from harness.training.train import TrainResult, restore


class Attempt:
    """One attempt at a run: its id, provenance and start, and the notices it told."""

    def __init__(self, cfg: RunConfig, prov: Mapping[str, Any], notice: Callable[[str], None]) -> None:
        self.cfg, self.run_id, self.prov, self.notice = cfg, cfg.run_id(), dict(prov), notice
        self.started_at = time.time()
        self.notices: list[str] = []

    def tell(self, msg: str) -> None:
        self.notices.append(msg)
        self.notice(msg)

    def tell_run(self, msg: str) -> None:
        """:meth:`tell` ``run <id>: msg``."""
        self.tell(f"run {self.run_id}: {msg}")


def restore_told(
    cfg: RunConfig, path: Path, device: torch.device, run: Attempt
) -> tuple[Backbone, dict[str, Any] | None]:
    """``harness.training.train.restore``, telling a resume or why a checkpoint was set aside."""
    model, resume, problem = restore(cfg, path, device)
    if problem:
        run.tell_run(problem)
    elif resume is not None:
        run.tell_run(f"resuming from step {resume['step']}")
    return model, resume


def note_history(run: Attempt, result: TrainResult) -> None:
    """Put in the provenance which commit (and machine) trained which steps, when more than one did,
    and how many steps a stacked pass took."""
    if len(result.code) > 1:  # resumed under other code: the record says which commit trained which steps
        run.prov["code_by_step"] = by_step(result.code, result.steps)
        run.tell_run(f"trained by more than one commit: {run.prov['code_by_step']}")
    if result.stacked is not None:  # the stack feature: how many steps shared a stacked pass (harness.training.stacked)
        shared, trained, backend = result.stacked
        run.prov["stacked"] = f"{shared} of the {trained} steps trained in this attempt, {backend} attention"
    if len(result.machine) > 1:  # resumed on another machine: which one trained which steps
        run.prov["machine_by_step"] = by_step(result.machine, result.steps)
        run.tell_run(f"trained on more than one machine: {run.prov['machine_by_step']}")


def finished_result(
    run: Attempt,
    model: Backbone,
    task: tasks.Task | LmBatches,
    metrics: Evaluation,
    final_loss: float,
    train_seconds: float,
    t0: float,
    *,
    tell_diagnostics: bool,
    lm: LmScores | None = None,
) -> RunResult:
    """The ``finished`` result of a run evaluated from ``t0`` on, trained or not: its
    diagnostics (a bonus: never lose a finished run to them; ``tell_diagnostics`` says
    why there are none), parameter counts and timings; ``lm`` a language-modelling run's
    scores (its ``metrics`` then empty)."""
    # the backend that ran, where the encoding could not run the configured one (stick-breaking: eager)
    run.prov["attention_backend"] = str(getattr(model, "backend", run.cfg.backbone.backend))
    try:
        diagnostics = None if isinstance(task, LmBatches) else encoding_diagnostics(model, run.cfg, task)
    except Exception as exc:
        diagnostics = None
        if tell_diagnostics:
            run.tell_run(f"no diagnostics ({type(exc).__name__}: {exc})")
    return RunResult(
        run.run_id,
        "finished",
        run.prov,
        run.started_at,
        metrics=metrics,
        final_loss=final_loss,
        train_seconds=train_seconds,
        eval_seconds=time.perf_counter() - t0,
        n_params=dict(model.n_params()),
        notices=tuple(run.notices),
        diagnostics=diagnostics,
        lm=lm,
    )


def by_step(code: Sequence[tuple[int, str]], steps: int) -> str:
    """``[(0, "abc..."), (6750, "def...")]`` of a ``steps``-step run ->
    ``"steps 0-6749: abc...; steps 6750-9999: def..."``: the provenance string of a run
    trained by more than one commit, or on more than one machine (steps counted from 0)."""
    ends = [s - 1 for s, _ in code[1:]] + [steps - 1]
    return "; ".join(f"steps {start}-{end}: {commit}" for (start, commit), end in zip(code, ends, strict=True))


class RunExited(RuntimeError):
    """The run's code raised ``SystemExit`` (``sys.exit()``, e.g. in a plugin's ``forward``):
    the run failed. Caught, SystemExit would have ended the whole sweep, with the exit
    status the code chose (0: a silent success with the later runs never run)."""


def exited(
    exc: SystemExit, provenance: Mapping[str, Any], then: str = "the run failed, the sweep goes on"
) -> RunExited:
    """The :class:`RunExited` for ``exc``, naming the code the run used that is not
    pezoo's own (``provenance["plugins"]``), where the call most likely came from."""
    code = "" if exc.code is None else repr(exc.code)
    where = f" (its code not from pezoo: {provenance['plugins']})" if provenance.get("plugins") else ""
    return RunExited(f"the run's code called sys.exit({code}){where}; {then}")
