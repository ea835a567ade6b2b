"""Executing runs: train, evaluate at every length, record in the store.

A run is idempotent: if the store already holds it as finished it is skipped. A NaN
loss ends the run as ``diverged`` (with its reason) without stopping the others; any
other error ends it as ``failed`` with the traceback; Ctrl-C marks it ``interrupted``
and stops. Unfinished runs are simply run again next time.

The work is split so that it can happen on another process or machine:
:func:`train_and_evaluate` needs no store and returns a :class:`RunResult` (plain,
picklable data), and :func:`record` writes such a result into the store. :func:`execute`
does both in this process; the sweep executors (``harness.executors``) run
``train_and_evaluate`` in workers and let the driver alone call ``record``.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

import harness.tasks as tasks
from harness import kept_results
from harness.backbone import Backbone
from harness.checkpoint import CheckpointError, load_weights, save_weights, set_aside, weights_bytes
from harness.checkpoint.weights import SHA256
from harness.config import RunConfig
from harness.counts import fixed
from harness.data import evaluation_set
from harness.diagnostics import encoding_diagnostics
from harness.evaluate import Evaluation, evaluate_length, select_evaluation, summary
from harness.files import WriteError, describe_write_error
from harness.pe_spec import format_eval_options, preflight_build
from harness.precision import autocast, evaluation_precision, use_tf32
from harness.provenance import run_provenance
from harness.result import RunOutcome, RunResult
from harness.store import ClaimLostError, Store, StoreError
from harness.tblog import RunLog
from harness.train import Accel, Checkpointing, DivergedError, TrainResult, build_model, restore, train

Progress = Callable[[str, int, int, str], None]
"""progress(phase, done, total, note): phase ``train`` (done of total steps, note
``loss 0.1234``) or ``eval`` (done of total lengths, note ``length 12: EM 0.85``;
reported with done 0 as the final evaluation starts)."""


def check_run(cfg: RunConfig) -> None:
    """Fail fast, before any training, on a run that cannot work (ValueError says why),
    a bad ``$PEZOO_ACCEL`` included (``harness.train.Accel``)."""
    Accel.for_device("cpu")  # its syntax; what it switches on depends on the worker's device
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
    _check_positions_fit(cfg, task)


def _check_positions_fit(cfg: RunConfig, task: tasks.Task) -> None:
    """ValueError before training when the encoding has no position for the longest
    sequence the run will feed it (a learned table's rows, randomized PE's range L): that
    used to surface at evaluation, after all of training, and then twice more on retries."""
    try:
        bound = preflight_build(cfg.pe, cfg.pe_options, cfg.backbone)  # shared with the spec's option check
    except SystemExit as exc:  # a plugin's constructor: else bench would end here, with its status
        why = _exited(exc, run_provenance(cfg, torch.device("cpu")), "building it exits, so no run can use it")
        raise ValueError(f"encoding {cfg.pe}: {why}") from None
    if bound is None:
        return
    longest: list[tuple[int, str]] = []  # (tokens, where)
    if cfg.train.pack:
        longest.append((cfg.train.pack, f"training rows of {cfg.train.pack} tokens (train.pack)"))
    scales = [n for n in (*cfg.train_lengths(), *cfg.test_lengths()) if task.has_scale(n)]
    if scales and not cfg.eval.window:  # a sliding window bounds what the model sees
        n = max(scales)
        tokens = max(ex.token_length for ex in evaluation_set(task, n, cfg.eval.samples, cfg.seed))
        longest.append((tokens, f"{cfg.task} at scale {n}: sequences of up to {tokens} tokens"))
    for tokens, where in longest:
        if tokens > bound:
            raise ValueError(
                f"{cfg.pe} has positions 0..{bound - 1} only, but the run would feed it {where}; lower the "
                f"test length (--test-len) or give the encoding more positions (max_position / max_length)"
            )


def checkpoint_dir_for(store_path: str | Path, checkpoint_dir: str | Path | None = None) -> Path:
    """Where a store's runs checkpoint: ``checkpoint_dir`` when given, else
    ``checkpoints/`` next to the store."""
    return Path(checkpoint_dir) if checkpoint_dir is not None else Path(store_path).parent / "checkpoints"


def checkpoint_path(checkpoint_dir: str | Path, run_id: str) -> Path:
    """The one checkpoint file of a run: ``<checkpoint_dir>/<run_id>.pt``."""
    return Path(checkpoint_dir) / f"{run_id}.pt"


def weights_path(checkpoint_dir: str | Path, run_id: str) -> Path:
    """The final weights a finished run keeps for its inference-time variants and for the
    runs that train as it did: ``<checkpoint_dir>/<run_id>.weights.pt``
    (``harness.checkpoint.save_weights``)."""
    return Path(checkpoint_dir) / f"{run_id}.weights.pt"


WEIGHTS_DIGEST = "weights_sha256"
"""The provenance key under which a run that kept its final weights records the SHA-256
of the file it wrote (``harness.checkpoint.save_weights``). The record, written to the
store with the run's result, is what a later run trusts that file by: a weights file is
evaluated only if its bytes still have the digest its run's record holds."""


def recorded_weights(runs: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str | None, str]]:
    """``{run id: (training id, SHA-256)}`` of the finished runs among ``runs`` (store
    rows, as ``Store.run`` gives them) whose record holds the digest of the final weights
    they kept (:data:`WEIGHTS_DIGEST`). The training id comes from the record's config,
    never from the weights file's header."""
    found = {}
    for run in runs:
        digest = run["provenance"].get(WEIGHTS_DIGEST) if isinstance(run.get("provenance"), dict) else None
        if run.get("status") != "finished" or not (isinstance(digest, str) and SHA256.fullmatch(digest)):
            continue
        found[run["run_id"]] = (_training_id(json.dumps(run["config"], sort_keys=True)), digest)
    return found


@functools.lru_cache(maxsize=4096)
def _training_id(config: str) -> str | None:
    """``RunConfig.training_id`` of a stored config (its JSON); None if it reads as no run config."""
    try:
        return RunConfig.from_dict(json.loads(config)).training_id()
    except (ValueError, TypeError, KeyError, RecursionError):
        return None


def trusted_weights(cfg: RunConfig, recorded: Mapping[str, tuple[str | None, str]]) -> dict[str, str]:
    """``{run id: SHA-256}``: the kept weights ``cfg`` may evaluate instead of training, as
    their runs' records vouch for them (``recorded``: :func:`recorded_weights` of the
    store): for an inference-time variant its trained run's; else those of every other run
    with the same ``RunConfig.training_id`` (the same training, only the evaluation
    differs), oldest first."""
    if cfg.is_variant:
        trained = cfg.trained_config().run_id()
        return {trained: recorded[trained][1]} if trained in recorded else {}
    training, run_id = cfg.training_id(), cfg.run_id()
    if training is None:
        return {}
    return {r: digest for r, (t, digest) in recorded.items() if t == training and r != run_id}


def weights_source(cfg: RunConfig, checkpoint_dir: str | Path, trusted: Mapping[str, str]) -> str | None:
    """The run whose kept final weights ``cfg`` evaluates instead of training, or None (it
    trains): the first run of ``trusted`` (:func:`trusted_weights`) whose weights file is
    in ``checkpoint_dir``. Whether the file is still the one its run kept is checked when
    the run starts (:func:`train_and_evaluate`)."""
    return next((r for r in trusted if weights_path(checkpoint_dir, r).is_file()), None)


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
    precision = evaluation_precision(cfg.eval.precision, cfg.train.precision)
    if report is not None:
        report("eval", 0, len(lengths), "")
    for done, (split, n) in enumerate(lengths, start=1):
        if n not in eval_sets:
            eval_sets[n] = evaluation_set(task, n, cfg.eval.samples, cfg.seed)
        with autocast(precision, device):
            m = evaluate_length(
                model,
                eval_sets[n],
                batch_size=cfg.eval.batch_size,
                device=device,
                protocol=cfg.protocol,
                window=cfg.eval.window,
                jump=cfg.eval.window_jump,
                answer_task=task if cfg.eval.match == "answer" else None,
                seed=cfg.seed,
            )
        metrics.append((split, m))
        if report is not None:
            report("eval", done, len(lengths), f"length {n}: EM {fixed(m.exact_match, 2)}")
    return tuple(metrics)


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

    ``keep_weights`` keeps the final weights next to the checkpoint (:func:`weights_path`)
    for the run's inference-time variants and for runs that train as it does; their
    SHA-256 goes into the result's provenance (:data:`WEIGHTS_DIGEST`). ``kept_weights``:
    the kept weights the store's records vouch for (:func:`trusted_weights`). A variant
    (``cfg.is_variant``) is not trained: :func:`evaluate_kept` evaluates its trained run's
    weights. Nor is a run whose training another run kept the weights of
    (:func:`weights_source`), if the file is still the one that run kept (its SHA-256) and
    fits the model (:func:`_reuse_kept`).

    A NaN loss gives a ``diverged`` result (its checkpoint set aside as ``<name>.diverged``)
    and any other exception a ``failed`` one (:func:`_unfinished`); ``KeyboardInterrupt``
    propagates. Otherwise the checkpoint stays: the caller removes it once the result is
    safely recorded.

    Steps: restore, train (:class:`_Evaluations` during), note who trained, keep the
    weights, evaluate and pick the metrics, :func:`_finished`.
    """
    use_tf32(device)  # a GPU's float32 matmuls on its TF32 tensor cores (harness.precision)
    trusted = dict(kept_weights or {})
    if cfg.is_variant:
        trained_id = cfg.trained_config().run_id()
        return evaluate_kept(cfg, trained_id, trusted.get(trained_id), device, checkpoint, progress, notice=notice)
    run = _Attempt(cfg, {}, notice)
    reused = _reuse_kept(cfg, trusted, device, checkpoint, progress, run)
    if reused is not None:
        return reused
    run.started_at, run.prov = time.time(), dict(run_provenance(cfg, device))
    log = None
    try:
        task = tasks.create(cfg.task)
        ckpt = Checkpointing(checkpoint, checkpoint_every, on_error=run.tell_run)
        model, resume = _restore_told(cfg, ckpt.path, device, run)
        if tensorboard:
            log = RunLog(tensorboard, cfg, first_step=resume["step"] if resume else 0)
        evaluations = _Evaluations(cfg, model, task, device, run, log, progress or (lambda *a: None))
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
        _note_history(run, result)
        if keep_weights:  # for the run's inference-time variants (harness.checkpoint.save_weights)
            _keep_weights(run, weights_path(checkpoint.parent, run.run_id), model, result.final_loss)
        t0 = time.perf_counter()
        metrics = evaluations.reported(result.evaluations)
        return _finished(run, model, task, metrics, result.final_loss, result.seconds, t0, tell_diagnostics=True)
    except (SystemExit, Exception) as exc:  # KeyboardInterrupt propagates
        return _unfinished(exc, run, checkpoint)
    finally:
        if log is not None:
            log.close()


def _unfinished(exc: BaseException, run: _Attempt, checkpoint: Path) -> RunResult:
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
            run.run_id, run.prov, run.started_at, _exited(exc, run.prov), run.notices, retryable=False
        )
    return RunResult.failed(run.run_id, run.prov, run.started_at, exc, run.notices)


def _reuse_kept(
    cfg: RunConfig,
    trusted: Mapping[str, str],
    device: torch.device,
    checkpoint: Path,
    progress: Progress | None,
    run: _Attempt,
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


class _Attempt:
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


def _restore_told(
    cfg: RunConfig, path: Path, device: torch.device, run: _Attempt
) -> tuple[Backbone, dict[str, Any] | None]:
    """``harness.train.restore``, telling a resume or why a checkpoint was set aside."""
    model, resume, problem = restore(cfg, path, device)
    if problem:
        run.tell_run(problem)
    elif resume is not None:
        run.tell_run(f"resuming from step {resume['step']}")
    return model, resume


def _keep_weights(run: _Attempt, path: Path, model: Backbone, final_loss: float) -> None:
    """Keep the final weights at ``path``, their SHA-256 in the provenance (the record
    vouches for the file: :data:`WEIGHTS_DIGEST`); a failed write is told (the run still
    finishes)."""
    try:
        run.prov[WEIGHTS_DIGEST] = save_weights(path, run.cfg, model, final_loss)
    except WriteError as exc:
        run.tell_run(f"its final weights could not be kept ({exc}); its variants cannot be evaluated")


def _note_history(run: _Attempt, result: TrainResult) -> None:
    """Put in the provenance which commit (and machine) trained which steps, when more than one did."""
    if len(result.code) > 1:  # resumed under other code: the record says which commit trained which steps
        run.prov["code_by_step"] = by_step(result.code, result.steps)
        run.tell_run(f"trained by more than one commit: {run.prov['code_by_step']}")
    if len(result.machine) > 1:  # resumed on another machine: which one trained which steps
        run.prov["machine_by_step"] = by_step(result.machine, result.steps)
        run.tell_run(f"trained on more than one machine: {run.prov['machine_by_step']}")


class _Evaluations:
    """A trained run's evaluations: periodic ones during training, the final one, and the
    metrics reported among them (``cfg.eval.select``); each told, logged and traced."""

    def __init__(
        self,
        cfg: RunConfig,
        model: Backbone,
        task: tasks.Task,
        device: torch.device,
        run: _Attempt,
        log: RunLog | None,
        report: Progress,
    ) -> None:
        self.cfg, self.model, self.task, self.device = cfg, model, task, device
        self.run, self.log, self.report = run, log, report
        self.eval_sets: dict[int, list] = {}  # fixed per (task, scale, seed): built once, reused by every evaluation

    def all(self, show: bool = False) -> Evaluation:
        return evaluate_all(self.cfg, self.model, self.task, self.device, self.eval_sets, self.report if show else None)

    def traces(self, step: int, metrics: Evaluation) -> None:
        if self.cfg.eval.match == "answer":  # the answer is what is scored; log the whole trace too
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


def _finished(
    run: _Attempt,
    model: Backbone,
    task: tasks.Task,
    metrics: Evaluation,
    final_loss: float,
    train_seconds: float,
    t0: float,
    *,
    tell_diagnostics: bool,
) -> RunResult:
    """The ``finished`` result of a run evaluated from ``t0`` on, trained or not: its
    diagnostics (a bonus: never lose a finished run to them; ``tell_diagnostics`` says
    why there are none), parameter counts and timings."""
    try:
        diagnostics = encoding_diagnostics(model, run.cfg, task)
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
    )


def by_step(code: Sequence[tuple[int, str]], steps: int) -> str:
    """``[(0, "abc..."), (6750, "def...")]`` of a ``steps``-step run ->
    ``"steps 0-6749: abc...; steps 6750-9999: def..."``: the provenance string of a run
    trained by more than one commit, or on more than one machine (steps counted from 0)."""
    ends = [s - 1 for s, _ in code[1:]] + [steps - 1]
    return "; ".join(f"steps {start}-{end}: {commit}" for (start, commit), end in zip(code, ends, strict=True))


def load_kept(
    cfg: RunConfig, trained_id: str, sha256: str | None, device: torch.device, folder: Path
) -> tuple[Backbone, float]:
    """The model of ``cfg`` (built with ``cfg.eval_options()``) holding the final weights
    run ``trained_id`` kept in ``folder`` (:func:`weights_path`), and that run's final loss.
    The file is read only if its bytes have the SHA-256 ``sha256`` the run's record holds
    (:data:`WEIGHTS_DIGEST`; None: the record holds none, so the file cannot be trusted).

    Raises:
        CheckpointError: missing, not vouched for, not the file the run kept, unreadable,
            or not fitting the model.
    """
    path = weights_path(folder, trained_id)
    model = build_model(replace(cfg.trained_config(), pe_options=cfg.eval_options()), device)
    if sha256 is None:
        raise CheckpointError(
            f"no final weights of run {trained_id} at {path}"
            if not path.is_file()
            else f"weights file {path} is not vouched for: run {trained_id} is not finished in this store with the "
            f"SHA-256 of the weights it kept ({WEIGHTS_DIGEST}; runs recorded before pezoo kept one have none), so "
            "the file cannot be checked"
        )
    payload = load_weights(path, trained_id, sha256, max_bytes=weights_bytes(model))
    try:
        model.load_state_dict(payload["model"])
    except (RuntimeError, KeyError, ValueError) as exc:
        raise CheckpointError(
            f"the weights of run {trained_id} do not fit this run's model ({_one_line(exc)})"
        ) from None
    return model, payload["final_loss"]


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
    ``checkpoint``'s folder, as :func:`load_kept` reads them against their record's
    SHA-256 ``sha256`` (``loaded``: what it returned already), evaluated as ``cfg`` says.

    The result carries the trained run's final loss, ``train_seconds`` 0, and
    ``provenance["weights_from"]`` = the trained run's id. Missing, unvouched or unusable
    weights give a ``failed`` result saying why.
    """
    run = _Attempt(cfg, {**run_provenance(cfg, device), "weights_from": trained_id}, notice)
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
        task = tasks.create(cfg.task)
        t0 = time.perf_counter()
        metrics = evaluate_all(cfg, model, task, device, {}, progress)
        return _finished(run, model, task, metrics, final_loss, 0.0, t0, tell_diagnostics=False)
    except CheckpointError as exc:  # no usable weights: another attempt would read the same file
        return RunResult.failed(run.run_id, run.prov, run.started_at, exc, retryable=False)
    except SystemExit as exc:
        return RunResult.failed(run.run_id, run.prov, run.started_at, _exited(exc, run.prov), retryable=False)
    except Exception as exc:
        return RunResult.failed(run.run_id, run.prov, run.started_at, exc)


def _one_line(exc: BaseException) -> str:
    """``exc``'s message on one line, cut at 300 characters (torch lists mismatches line by line)."""
    text = " ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


class RunExited(RuntimeError):
    """The run's code raised ``SystemExit`` (``sys.exit()``, e.g. in a plugin's ``forward``):
    the run failed. Caught, SystemExit would have ended the whole sweep, with the exit
    status the code chose (0: a silent success with the later runs never run)."""


def _exited(
    exc: SystemExit, provenance: Mapping[str, Any], then: str = "the run failed, the sweep goes on"
) -> RunExited:
    """The :class:`RunExited` for ``exc``, naming the code the run used that is not
    pezoo's own (``provenance["plugins"]``), where the call most likely came from."""
    code = "" if exc.code is None else repr(exc.code)
    where = f" (its code not from pezoo: {provenance['plugins']})" if provenance.get("plugins") else ""
    return RunExited(f"the run's code called sys.exit({code}){where}; {then}")


def record(store: Store, result: RunResult) -> RunOutcome:
    """Write a worker's result for a run that ``store.start`` has registered: metrics and
    ``finished`` atomically, or the terminal status with its traceback (failed) or reason
    (diverged)."""
    if result.status == "finished":
        if result.final_loss is None or result.train_seconds is None or result.eval_seconds is None:
            raise ValueError(f"run {result.run_id}: a finished result without its final loss and timings")
        store.finish(
            result.run_id,
            result.metrics,
            final_loss=result.final_loss,
            train_seconds=result.train_seconds,
            eval_seconds=result.eval_seconds,
            n_params=result.n_params,
            diagnostics=result.diagnostics,
        )
        return RunOutcome(result.run_id, "finished")
    store.mark(result.run_id, result.status, result.traceback or result.error)
    return RunOutcome(result.run_id, result.status, result.error)


def _storage_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is the store failing to write (SQLite or OS error, possibly wrapped in
    a ``StoreError``), as opposed to a refusal the store means."""
    current: BaseException | None = exc
    while current is not None:
        if isinstance(current, sqlite3.Error | OSError):
            return True
        current = current.__cause__ or current.__context__
    return False


def record_or_keep(
    store: Store,
    cfg: RunConfig,
    result: RunResult,
    checkpoint: Path,
    *,
    provenance: Mapping[str, Any] | None = None,
) -> RunOutcome:
    """:func:`record` ``result`` of a run this process has claimed (``store.claim``; with
    ``provenance``, recorded as where the result was made); once a finished result is in
    the store, the run's checkpoint (and a kept result) are removed.

    A finished result the store cannot write (a full disk, an I/O error) is not lost: it is
    kept in ``<run_id>.result.json`` next to the checkpoint (``harness.kept_results``) and
    the next ``bench`` of the run records it without training; the checkpoint is then
    removed to free the space (first, when the disk is too full for the small JSON file).
    The outcome is ``unrecorded`` with a message saying so.
    """
    run_id = cfg.run_id()
    kept = kept_results.path_for(checkpoint)
    try:
        if provenance is not None:
            store.set_provenance(run_id, provenance, result.started_at)
        outcome = record(store, result)
    except (sqlite3.Error, OSError, StoreError) as exc:
        if isinstance(exc, ClaimLostError) or result.status != "finished" or not _storage_failure(exc):
            raise
        why = describe_write_error(exc, Path(store.path).parent)
        try:
            key = store.seal_key()
            if key is None:  # every writer makes one: a store opened read-only could not have claimed the run
                raise ValueError(f"results store {store.path} has no seal key to seal it with")
            try:
                kept_results.keep(kept, result.record(cfg), key)
            except WriteError as keep_exc:
                if not (keep_exc.disk_full and checkpoint.exists()):
                    raise
                checkpoint.unlink()  # the finished result is worth more than a mid-training state
                kept_results.keep(kept, result.record(cfg), key)
        except (OSError, TypeError, ValueError) as keep_exc:
            fate = (
                "its checkpoint stays: the next bench resumes from it"
                if checkpoint.exists()
                else "the next bench trains it from step 0"
            )
            return RunOutcome(
                run_id,
                "unrecorded",
                f"finished, but the store could not record it ({why}) and it could not be kept either "
                f"({keep_exc}); {fate}",
            )
        checkpoint.unlink(missing_ok=True)
        return RunOutcome(
            run_id,
            "unrecorded",
            f"finished, but the store could not record it ({why}); the result is kept in {kept} and the "
            "next bench of this run records it without training",
        )
    if outcome.status == "finished":
        drop_leftovers(checkpoint)  # the results are in the store now
    return outcome


def drop_leftovers(checkpoint: Path) -> None:
    """Remove the checkpoint and kept result of a run the store holds finished (recorded
    by this process, or by another one meanwhile): nothing resumes or records from them."""
    for path in (checkpoint, kept_results.path_for(checkpoint)):
        try:
            path.unlink(missing_ok=True)
        except OSError:  # not ours to delete (another user's folder): harmless, never read again
            pass


def recover_kept(
    cfg: RunConfig, checkpoint: Path, key: bytes | None, notice: Callable[[str], None] = print
) -> RunResult | None:
    """The finished result of ``cfg`` kept next to ``checkpoint`` by :func:`record_or_keep`,
    checked (``harness.kept_results.read``: sealed with ``key``, the store's
    ``Store.seal_key``), or None when there is none. One that fails the checks is set
    aside (``.unreadable``), ``notice`` says why, and the run trains."""
    run_id = cfg.run_id()
    path = kept_results.path_for(checkpoint)
    if not path.exists():
        return None
    try:
        kept = kept_results.read(path, cfg, key)
    except kept_results.KeptResultError as exc:
        aside = set_aside(path)
        where = f"set aside as {aside.name}" if aside is not None else "removed"
        notice(f"run {run_id}: {exc}; {where}; the run trains")
        return None
    notice(f"run {run_id}: recording the finished result kept in {path}, without training")
    return RunResult.from_record(kept)


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
    training (:func:`record_or_keep`).
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
    try:
        return record_or_keep(store, cfg, result, path)
    except ClaimLostError as exc:
        return RunOutcome(run_id, "claimed", str(exc))
