"""Executing runs: train, evaluate at every length, record in the store.

A run is idempotent: if the store already holds it as finished it is skipped. A NaN
loss ends the run as ``diverged`` (with its reason) without stopping the others; any
other error ends it as ``failed`` with the traceback; Ctrl-C marks it ``interrupted``
and stops. Unfinished runs are simply run again next time.

The work is split so that it can happen on another process or machine:
:func:`train_and_evaluate` needs no store and returns a :class:`RunResult` (plain,
picklable data), and ``harness.execution.recording.record`` writes such a result into the store.
:func:`execute` does both in this process; the sweep executors (``harness.sweeps.executors``)
run ``train_and_evaluate`` in workers and let the driver alone call ``record``.

What a run's steps share lives beside this module: the checks before training
(``harness.execution.preflight``), one attempt's notices and results (``harness.execution.attempt``), kept
final weights (``harness.execution.kept_weights``), recording or keeping results
(``harness.execution.recording``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

import harness.tasks as tasks
from harness.config import RunConfig
from harness.config.pe_spec import format_eval_options
from harness.evaluation.evaluate import Evaluation, evaluate_length, select_evaluation, summary
from harness.evaluation.lm import evaluate_run
from harness.execution.attempt import Attempt, exited, finished_result, note_history, restore_told
from harness.execution.kept_weights import (
    WEIGHTS_DIGEST,
    keep_final_weights,
    load_kept,
    recorded_weights,
    trusted_weights,
    weights_path,
)
from harness.execution.preflight import check_run
from harness.execution.recording import drop_leftovers, record_or_keep, recover_kept
from harness.records.counts import fixed
from harness.records.provenance import run_provenance
from harness.records.result import RunOutcome, RunResult
from harness.records.store import ClaimLostError, Store
from harness.tasks.data import evaluation_set
from harness.tasks.lm.data import LmBatches, lm_batches, task_split
from harness.training.accel import Accel
from harness.training.backbone import Backbone
from harness.training.checkpoint import CheckpointError, set_aside
from harness.training.precision import autocast, evaluation_precision, use_tf32
from harness.training.tblog import RunLog
from harness.training.train import Checkpointing, DivergedError, train, training_task

Progress = Callable[[str, int, int, str], None]
"""progress(phase, done, total, note): phase ``train`` (done of total steps, note
``loss 0.1234``) or ``eval`` (done of total lengths, note ``length 12: EM 0.85``;
reported with done 0 as the final evaluation starts)."""


FINETUNE_LR_RATIO = 0.1
"""A language-modelling variant's fine-tune runs at this fraction of the training's peak
learning rate (the papers fine-tune at a small constant rate: PI §3.1 2e-5 after
pre-training at 3e-4)."""


def checkpoint_dir_for(store_path: str | Path, checkpoint_dir: str | Path | None = None) -> Path:
    """Where a store's runs checkpoint: ``checkpoint_dir`` when given, else
    ``checkpoints/`` next to the store."""
    return Path(checkpoint_dir) if checkpoint_dir is not None else Path(store_path).parent / "checkpoints"


def checkpoint_path(checkpoint_dir: str | Path, run_id: str) -> Path:
    """The one checkpoint file of a run: ``<checkpoint_dir>/<run_id>.pt``."""
    return Path(checkpoint_dir) / f"{run_id}.pt"


def evaluate_all(
    cfg: RunConfig,
    model: Backbone,
    task: tasks.Task,
    device: torch.device,
    eval_sets: dict[int, list],
    report: Progress | None = None,
) -> Evaluation:
    """Evaluate ``model`` at every training and test scale of ``cfg`` the task has, on the
    fixed evaluation sets (built into ``eval_sets`` once, reused by later calls);
    ``report`` hears each scale's exact match (``eval`` phase)."""
    lengths = [("train", n) for n in cfg.train_lengths()] + [("test", n) for n in cfg.test_lengths()]
    lengths = [(split, n) for split, n in lengths if task.has_scale(n)]  # SCAN lacks some lengths
    metrics = []
    how = cfg.decode_eval
    precision = evaluation_precision(how.precision, cfg.train.precision)
    accel = Accel.for_device(device)
    if report is not None:
        report("eval", 0, len(lengths), "")
    for done, (split, n) in enumerate(lengths, start=1):
        if n not in eval_sets:
            eval_sets[n] = evaluation_set(task, n, how.samples, cfg.seed)
        with autocast(precision, device):
            m = evaluate_length(
                model,
                eval_sets[n],
                batch_size=how.batch_size,
                device=device,
                protocol=cfg.protocol,
                window=how.window,
                jump=how.window_jump,
                answer_task=task if how.match == "answer" else None,
                seed=cfg.seed,
                decode=not accel.forced,
            )
        metrics.append((split, m))
        if report is not None:
            report("eval", done, len(lengths), f"length {n}: EM {fixed(m.exact_match, 2)}")
    return tuple(metrics)


def how_made(cfg: RunConfig, device: torch.device) -> dict[str, str]:
    """How a run on ``device`` computes what its record holds, for its provenance: a GPU
    record and a CPU record of one config are made differently, and the page must be able
    to tell them apart.

    * ``exact_match_by``: ``greedy decode`` (the cached decode of ``prompt =``),
      ``teacher-forced read-off`` (exact match read off the teacher-forced pass: CUDA's
      default, ``Accel.forced``), or ``one encoder pass`` (the ``encoder`` protocol).
    * ``tf32``: ``on`` when float32 matrix products ran on TF32 tensor cores (CUDA's
      default here, ``harness.training.precision.use_tf32``), else ``off``.
    * ``loop``: the training loop's device features (``Accel``), comma-separated, or ``none``.
    """
    accel = Accel.for_device(device)
    if cfg.is_lm:  # bits per byte, and the passkey's answer read off the teacher-forced pass
        by = "teacher-forced read-off"
    elif cfg.protocol != "decoder":
        by = "one encoder pass"
    elif accel.forced and cfg.decode_eval.match != "answer":  # an answer is only scored by a decode
        by = "teacher-forced read-off"
    else:
        by = "greedy decode"
    tf32 = device.type == "cuda" and bool(torch.backends.cuda.matmul.allow_tf32)
    return {"exact_match_by": by, "tf32": "on" if tf32 else "off", "loop": accel.features() or "none"}


def made_with(cfg: RunConfig, device: torch.device) -> dict[str, Any]:
    """A run's provenance: where it ran (``run_provenance``), how its numbers are made
    (:func:`how_made`), and for a language-modelling run its corpus and split
    (``harness.tasks.lm.split.Split.provenance``: ``corpus_sha256`` and the held-out documents)."""
    prov: dict[str, Any] = {**run_provenance(cfg, device), **how_made(cfg, device)}
    if cfg.is_lm:  # a record's provenance holds strings: a list of documents joined, a number as JSON
        for key, value in task_split(cfg.task).provenance().items():
            prov[key] = _as_text(value)
    return prov


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value))
    return json.dumps(value, sort_keys=True)


def train_and_evaluate(
    cfg: RunConfig,
    device: torch.device,
    checkpoint: Path,
    progress: Progress | None = None,
    *,
    checkpoint_every: int = 250,
    notice: Callable[[str], None] = print,
    tensorboard: str | None = None,
    keep_weights: bool = False,
    kept_weights: Mapping[str, str] | None = None,
) -> RunResult:
    """Train ``cfg`` (resuming from ``checkpoint`` when it holds a usable state), evaluate
    it at every training and test scale, and return the result without touching a store.

    With ``cfg.eval.every``, the model is also evaluated during training and the reported
    metrics are chosen by ``cfg.eval.select`` among those evaluations and the final one.
    ``tensorboard`` (a folder) also logs the run there.

    ``keep_weights`` keeps the final weights next to the checkpoint
    (``harness.execution.kept_weights.weights_path``) for the run's inference-time variants and for
    runs that train as it does; their SHA-256 goes into the result's provenance
    (:data:`WEIGHTS_DIGEST`). ``kept_weights``: the kept weights the store's records vouch
    for (``harness.execution.kept_weights.trusted_weights``). A variant (``cfg.is_variant``) is not
    trained: :func:`evaluate_kept` evaluates its trained run's weights. Nor is a run whose
    training another run kept the weights of (``harness.execution.kept_weights.weights_source``), if
    the file is still the one that run kept (its SHA-256) and fits the model
    (:func:`_reuse_kept`).

    A NaN loss gives a ``diverged`` result (its checkpoint set aside as ``<name>.diverged``)
    and any other exception a ``failed`` one (:func:`_unfinished`); ``KeyboardInterrupt``
    propagates. Otherwise the checkpoint stays: the caller removes it once the result is
    safely recorded.

    Steps: reuse kept weights when it can (:func:`_reuse_kept`), else :func:`_train_run`:
    restore, train (:class:`_Evaluations` during), note who trained, keep the weights,
    evaluate and pick the metrics, :func:`harness.execution.attempt.finished_result`.
    """
    use_tf32(device)  # a GPU's float32 matmuls on its TF32 tensor cores (harness.training.precision)
    trusted = dict(kept_weights or {})
    if cfg.is_variant:
        trained_id = cfg.trained_config().run_id()
        return evaluate_kept(cfg, trained_id, trusted.get(trained_id), device, checkpoint, progress, notice=notice)
    run = Attempt(cfg, {}, notice)
    reused = _reuse_kept(cfg, trusted, device, checkpoint, progress, run)
    if reused is not None:
        return reused
    run.started_at, run.prov = time.time(), made_with(cfg, device)
    with ExitStack() as closing:  # the log closes after a failed run's result is built
        try:
            return _train_run(
                cfg, device, checkpoint, progress, run, closing, checkpoint_every, tensorboard, keep_weights
            )
        except (SystemExit, Exception) as exc:  # KeyboardInterrupt propagates
            return _unfinished(exc, run, checkpoint)


def _train_run(
    cfg: RunConfig,
    device: torch.device,
    checkpoint: Path,
    progress: Progress | None,
    run: Attempt,
    closing: ExitStack,
    checkpoint_every: int,
    tensorboard: str | None,
    keep_weights: bool,
) -> RunResult:
    """Restore, train, note who trained, keep the weights, evaluate and pick the metrics of
    :func:`train_and_evaluate`; raises what the run raises (its log closes with ``closing``)."""
    task = training_task(cfg)
    ckpt = Checkpointing(checkpoint, checkpoint_every, on_error=run.tell_run)
    model, resume = restore_told(cfg, ckpt.path, device, run)
    log = None
    if tensorboard:
        log = RunLog(tensorboard, cfg, first_step=resume["step"] if resume else 0)
        closing.callback(log.close)
    report = progress or (lambda *a: None)
    if isinstance(task, LmBatches):  # a language-modelling run: trained by the same loop, scored once at its end
        return _train_lm_run(cfg, model, task, device, resume, ckpt, run, report, log, keep_weights)
    evaluations = _Evaluations(cfg, model, task, device, run, log, report)
    result = train(
        cfg,
        model,
        task,
        device,
        on_step=evaluations.on_step,
        checkpointing=ckpt,
        resume=resume,
        evaluate=evaluations.periodic if cfg.eval.every else None,
        on_lr=log.lr if log is not None else None,
    )
    note_history(run, result)
    if keep_weights:  # for the run's inference-time variants (harness.training.checkpoint.save_weights)
        keep_final_weights(run, weights_path(checkpoint.parent, run.run_id), model, result.final_loss)
    t0 = time.perf_counter()
    metrics = evaluations.reported(result.evaluations)
    return finished_result(run, model, task, metrics, result.final_loss, result.seconds, t0, tell_diagnostics=True)


def _train_lm_run(
    cfg: RunConfig,
    model: Backbone,
    task: LmBatches,
    device: torch.device,
    resume: dict[str, Any] | None,
    ckpt: Checkpointing,
    run: Attempt,
    report: Progress,
    log: RunLog | None,
    keep_weights: bool,
) -> RunResult:
    """:func:`_train_run` for a language-modelling run: the one loop (``train``) on its
    windows, then its scores (``harness.evaluation.lm.evaluate_run``)."""

    def on_step(step: int, loss: float) -> None:
        report("train", step + 1, cfg.train.steps, f"loss {loss:.4f}")
        if log is not None:
            log.step(step + 1, loss)

    result = train(
        cfg, model, task, device, on_step=on_step, checkpointing=ckpt, resume=resume,
        on_lr=log.lr if log is not None else None,
    )  # fmt: skip
    note_history(run, result)
    if keep_weights:  # for the run's inference-time variants (harness.training.checkpoint.save_weights)
        keep_final_weights(run, weights_path(ckpt.path.parent, run.run_id), model, result.final_loss)
    t0 = time.perf_counter()
    lm = evaluate_run(cfg, model, device, lambda done, total, note: report("eval", done, total, note))
    return finished_result(run, model, task, (), result.final_loss, result.seconds, t0, tell_diagnostics=False, lm=lm)


def _fine_tuned(cfg: RunConfig, model: Backbone, device: torch.device, run: Attempt) -> tuple[float, float]:
    """A language-modelling variant's short fine-tune (``eval.finetune_steps``): ``model`` (its
    trained run's weights, built with the variant's encoding) trained that many steps on
    windows of ``eval.finetune_length`` bytes by the one loop, at :data:`FINETUNE_LR_RATIO`
    of the peak learning rate, warm-up a tenth of the steps at most; (final loss, seconds)."""
    lm = cfg.lm_eval
    t = cfg.train
    train_cfg = replace(
        t, steps=lm.finetune_steps, warmup=min(t.warmup, lm.finetune_steps // 10), lr=t.lr * FINETUNE_LR_RATIO,
        train_min=lm.finetune_length, train_max=lm.finetune_length,
    )  # fmt: skip
    tuned = replace(cfg, train=train_cfg)
    run.tell_run(f"fine-tuning {lm.finetune_steps} steps on windows of {lm.finetune_length} bytes")
    result = train(tuned, model, training_task(tuned), device)
    return result.final_loss, result.seconds


def _unfinished(exc: BaseException, run: Attempt, checkpoint: Path) -> RunResult:
    """The result of a run that raised ``exc``: ``diverged`` for a NaN loss (its checkpoint
    set aside: its last state leads to the same NaN, or holds it), else ``failed`` with the
    traceback (not retried when the run's code called ``sys.exit``: the run fails, not the
    sweep)."""
    if isinstance(exc, DivergedError):
        if checkpoint.exists():
            aside = set_aside(checkpoint, "diverged")
            where = f"set aside as {aside.name}" if aside is not None else "removed"
            run.tell_run(f"its checkpoint is {where}; the next attempt starts over from step 0")
        return RunResult(run.run_id, "diverged", run.prov, run.started_at, error=str(exc), notices=tuple(run.notices))
    if isinstance(exc, SystemExit):
        return RunResult.failed(
            run.run_id, run.prov, run.started_at, exited(exc, run.prov), run.notices, retryable=False
        )
    return RunResult.failed(run.run_id, run.prov, run.started_at, exc, run.notices)


def _reuse_kept(
    cfg: RunConfig,
    trusted: Mapping[str, str],
    device: torch.device,
    checkpoint: Path,
    progress: Progress | None,
    run: Attempt,
) -> RunResult | None:
    """The result of evaluating the kept weights of a run that trained as ``cfg`` would
    (``trusted``: run id -> SHA-256 its record holds), or None: the run trains. A file
    that is not the one its run kept, or does not fit the model, is set aside with a notice."""
    for source, digest in trusted.items():
        if not weights_path(checkpoint.parent, source).is_file():
            continue
        try:
            loaded = load_kept(cfg, source, digest, device, checkpoint.parent)
        except CheckpointError as exc:  # not the weights its run kept, or they do not fit: never read again
            aside = set_aside(weights_path(checkpoint.parent, source))
            where = f"set aside as {aside.name}" if aside is not None else "removed"
            run.tell_run(f"the weights run {source} kept are passed over: {exc}; {where}")
            continue
        except Exception:  # the model does not build: training below fails the same way, saying why
            break
        reused = evaluate_kept(cfg, source, digest, device, checkpoint, progress, notice=run.notice, loaded=loaded)
        return replace(reused, notices=(*run.notices, *reused.notices))
    if run.notices:
        run.tell_run("no usable kept weights of its training, so it trains")
    return None


class _Evaluations:
    """A trained run's evaluations: periodic ones during training, the final one, and the
    metrics reported among them (``cfg.eval.select``); each told, logged and traced."""

    def __init__(
        self,
        cfg: RunConfig,
        model: Backbone,
        task: tasks.Task,
        device: torch.device,
        run: Attempt,
        log: RunLog | None,
        report: Progress,
    ) -> None:
        self.cfg, self.model, self.task, self.device = cfg, model, task, device
        self.run, self.log, self.report = run, log, report
        self.eval_sets: dict[int, list] = {}  # fixed per (task, scale, seed): built once, reused by every evaluation

    def all(self, show: bool = False) -> Evaluation:
        return evaluate_all(self.cfg, self.model, self.task, self.device, self.eval_sets, self.report if show else None)

    def traces(self, step: int, metrics: Evaluation) -> None:
        if self.cfg.decode_eval.match == "answer":  # the answer is what is scored; log the whole trace too
            per_scale = ", ".join(f"{m.length}: {fixed(m.trace_exact_match, 2)}" for _, m in metrics)
            self.run.tell_run(f"step {step}: full-trace exact match per scale {per_scale}")

    def periodic(self, step: int) -> Evaluation:
        metrics = self.all()
        self.run.tell_run(f"step {step}: {summary(metrics)}")
        self.traces(step, metrics)
        if self.log is not None:
            self.log.evaluation(step, metrics)
        return metrics

    def on_step(self, step: int, loss: float) -> None:
        self.report("train", step + 1, self.cfg.train.steps, f"loss {loss:.4f}")
        if self.log is not None:
            self.log.step(step + 1, loss)

    def reported(self, periodic: Sequence[tuple[int, Evaluation]]) -> Evaluation:
        """Evaluate the final model; the metrics ``cfg.eval.select`` picks among it and ``periodic``."""
        steps = self.cfg.train.steps
        final = self.all(show=True)
        self.traces(steps, final)
        if self.log is not None:
            self.log.evaluation(steps, final)
        if not periodic and self.cfg.eval.select == "final":
            return final
        at = [step for step, _ in periodic] + [steps]
        metrics = select_evaluation([e for _, e in periodic] + [final], self.cfg.eval.select)
        self.run.tell_run(
            f"reporting {self.cfg.eval.select} of {len(at)} evaluations (steps {', '.join(map(str, at))}): "
            f"{summary(metrics)}"
        )
        if self.log is not None:
            self.log.evaluation(steps, metrics, tag=f"reported_{self.cfg.eval.select}")
        return metrics


def evaluate_kept(
    cfg: RunConfig,
    trained_id: str,
    sha256: str | None,
    device: torch.device,
    checkpoint: Path,
    progress: Progress | None = None,
    *,
    notice: Callable[[str], None] = print,
    loaded: tuple[Backbone, float] | None = None,
) -> RunResult:
    """Evaluate ``cfg`` without training: the final weights run ``trained_id`` kept in
    ``checkpoint``'s folder, as ``harness.execution.kept_weights.load_kept`` reads them against their record's
    SHA-256 ``sha256`` (``loaded``: what it returned already), evaluated as ``cfg`` says.

    The result carries the trained run's final loss, ``train_seconds`` 0, and
    ``provenance["weights_from"]`` = the trained run's id. Missing, unvouched or unusable
    weights give a ``failed`` result saying why.
    """
    use_tf32(device)
    run = Attempt(cfg, {**made_with(cfg, device), "weights_from": trained_id}, notice)
    try:
        try:
            model, final_loss = loaded or load_kept(cfg, trained_id, sha256, device, checkpoint.parent)
        except CheckpointError as exc:
            if not cfg.is_variant:
                raise
            raise CheckpointError(
                f"{exc}; a variant evaluates the final weights its trained run {trained_id} keeps when it trains "
                "in a sweep that lists the variant (a run finished without them must be trained again in a new "
                "store)"
            ) from None
        if cfg.is_variant:
            run.tell_run(
                f"evaluating the weights of run {trained_id} with {format_eval_options(cfg.eval_pe_options)}, "
                "no training"
            )
        else:
            run.tell_run(
                f"evaluating the kept weights of run {trained_id}, which trained as this run would "
                "(only the evaluation differs), no training"
            )
        if cfg.is_lm:
            seconds = 0.0
            if cfg.lm_eval.finetune_steps:
                final_loss, seconds = _fine_tuned(cfg, model, device, run)
            t0 = time.perf_counter()
            told = None if progress is None else (lambda done, total, note: progress("eval", done, total, note))
            lm = evaluate_run(cfg, model, device, told)
            data = lm_batches(cfg.task, cfg.seed, cfg.train.train_max)
            return finished_result(run, model, data, (), final_loss, seconds, t0, tell_diagnostics=False, lm=lm)
        task = tasks.create(cfg.task)
        t0 = time.perf_counter()
        metrics = evaluate_all(cfg, model, task, device, {}, progress)
        return finished_result(run, model, task, metrics, final_loss, 0.0, t0, tell_diagnostics=False)
    except CheckpointError as exc:  # no usable weights: another attempt would read the same file
        return RunResult.failed(run.run_id, run.prov, run.started_at, exc, retryable=False)
    except SystemExit as exc:
        return RunResult.failed(run.run_id, run.prov, run.started_at, exited(exc, run.prov), retryable=False)
    except Exception as exc:
        return RunResult.failed(run.run_id, run.prov, run.started_at, exc)


def execute(
    cfg: RunConfig,
    store: Store,
    device: torch.device,
    progress: Progress | None = None,
    *,
    checkpoint_every: int = 250,
    notice: Callable[[str], None] = print,
) -> RunOutcome:
    """Run ``cfg`` in this process unless the store already holds it finished or another
    process is training it (``store.claim``; outcomes ``cached`` and ``claimed``).

    Checkpoints go to ``<store folder>/checkpoints/<run_id>.pt`` every
    ``checkpoint_every`` steps; an unfinished run resumes from its checkpoint, and a
    finished result kept there because the store could not take it is recorded without
    training (``harness.execution.recording.record_or_keep``).
    ``notice`` receives messages worth showing (a corrupt checkpoint, a resume).
    """
    run_id = cfg.run_id()
    if store.status(run_id) == "finished":
        return RunOutcome(run_id, "cached")
    check_run(cfg)
    claim = store.claim(cfg, run_provenance(cfg, device))
    if claim.status == "finished":
        return RunOutcome(run_id, "cached")
    if claim.status == "busy":
        notice(f"run {run_id}: {claim.holder}; skipped (run again once that process is done)")
        return RunOutcome(run_id, "claimed", claim.holder)
    if claim.holder is not None:
        notice(f"run {run_id}: took over from a process that is gone (it was {claim.holder})")
    path = checkpoint_path(checkpoint_dir_for(store.path), run_id)
    kept = recover_kept(cfg, path, store.seal_key(), notice)
    if kept is not None:
        try:
            return record_or_keep(store, cfg, kept, path, provenance=kept.provenance)
        except ClaimLostError as exc:
            return RunOutcome(run_id, "claimed", str(exc))
    with store.keep_alive():
        try:
            trusted = trusted_weights(cfg, recorded_weights(store.finished_with(WEIGHTS_DIGEST)))
            result = train_and_evaluate(
                cfg, device, path, progress, checkpoint_every=checkpoint_every, notice=notice, kept_weights=trusted
            )
        except KeyboardInterrupt:
            store.mark(run_id, "interrupted", "interrupted by the user (KeyboardInterrupt)")
            raise
    held = store.check(run_id)
    if not held.taken:  # another process took over (our lease lapsed) or finished it meanwhile
        if held.status == "finished":
            drop_leftovers(path)  # what this attempt checkpointed after they finished
            return RunOutcome(run_id, "cached")
        return RunOutcome(run_id, "claimed", held.holder)
    try:  # recorded with the provenance its attempt made (how made, a corpus's hash), as a sweep records it
        return record_or_keep(store, cfg, result, path, provenance=result.provenance)
    except ClaimLostError as exc:
        return RunOutcome(run_id, "claimed", str(exc))
