"""Train and evaluate one language-modelling run; a sweep of them into an :class:`LmStore`.

Training is the plain next-byte loss on random windows (``harness.tasks.lm.data``) with the
harness's optimiser and schedule (``harness.training.train.make_optimizer``, ``lr_factor``) and
precision (``train.precision``: bf16 or fp16 autocast over float32 weights, fp16's loss scaled
as the algorithmic loop scales it, ``harness.training.precision.grad_scaler``). A run checkpoints every
:data:`CHECKPOINT_EVERY` steps and resumes from there: the windows of a step depend only on
the seed and the step, so a resumed run reads what it would have. Its final weights are kept
for its inference-time variants, which evaluate them (zero-shot) or fine-tune them first.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

import pezoo
from harness.config.pe_spec import build_options
from harness.evaluation.lm import evaluate_lengths, evaluate_passkey
from harness.lm.config import LmConfig
from harness.lm.record import LmRecord, LmStore
from harness.records.lm_metrics import LengthScore, PasskeyCell, grid_text
from harness.records.provenance import provenance
from harness.tasks.lm import lm_task
from harness.tasks.lm.corpora import Corpus, load_corpus
from harness.tasks.lm.data import TrainingWindows, scored_regions
from harness.tasks.lm.split import Split, split
from harness.training.backbone import Backbone
from harness.training.checkpoint.aside import set_aside
from harness.training.graphs import capture
from harness.training.precision import autocast, evaluation_precision, grad_scaler
from harness.training.train import Accel, DivergedError, lr_factor, make_optimizer

__all__ = [
    "CHECKPOINT_EVERY",
    "LmLoss",
    "build_lm_model",
    "lock_problem",
    "run_lm",
    "step_loss",
    "sweep_lm",
    "train_steps",
]

CHECKPOINT_EVERY = 250
"""Steps between checkpoints."""

FINETUNE_LR_RATIO = 0.1
"""A variant's fine-tune runs at this fraction of the training's peak learning rate (the
papers fine-tune at a small constant rate: PI §3.1 2e-5 after pre-training at 3e-4)."""

Notice = Callable[[str], None]


def build_lm_model(
    cfg: LmConfig, options: dict[str, Any] | None = None, device: torch.device | str = "cpu"
) -> Backbone:
    """The backbone of ``cfg`` (encoding options ``options``, default the trained ones), initialised from the seed."""
    torch.manual_seed(cfg.seed)
    b = cfg.backbone
    opts = build_options(cfg.pe, cfg.pe_options if options is None else options)
    pe = pezoo.create(cfg.pe, dims=pezoo.ModelDims(b.d_model, b.n_heads, b.n_layers), **opts)
    return Backbone(b, pe).to(device)


WEIGHTS_DIGEST = "weights_sha256"
"""The provenance key of a trained run's kept weights: the SHA-256 of the file's bytes. A
variant loads a weights file only when the record of the run that wrote it vouches for it,
so a file swapped or edited in the store's folder is never evaluated as that run."""


def _save(path: Path, payload: dict[str, Any]) -> str:
    """Write ``payload`` atomically; the SHA-256 of the bytes written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    digest = hashlib.sha256(tmp.read_bytes()).hexdigest()
    os.replace(tmp, path)
    return digest


def _vouched_weights(store: LmStore, cfg: LmConfig) -> dict[str, Any]:
    """The kept weights of the run a variant evaluates, read only if that run's record vouches
    for the file's bytes (:data:`WEIGHTS_DIGEST`)."""
    trained = cfg.trained_config()
    source = store.weights(trained.run_id())
    said = f"run {cfg.run_id()} evaluates the weights of run {trained.run_id()} ({trained.pe} seed {trained.seed})"
    if not source.is_file():
        raise ValueError(f"{said}, which {store.folder} does not hold: run it first")
    record = next((r for r in store.records() if r.run_id == trained.run_id()), None)
    digest = record.provenance.get(WEIGHTS_DIGEST) if record is not None else None
    data = source.read_bytes()
    if digest is None or hashlib.sha256(data).hexdigest() != digest:
        raise ValueError(
            f"{said}, but {source.name} is not the file that run's record vouches for "
            f"({'no record holds its digest' if digest is None else 'its bytes differ'}): run {trained.run_id()} again"
        )
    return cast(dict[str, Any], torch.load(io.BytesIO(data), weights_only=True))


def _resume(
    cfg: LmConfig,
    model: Backbone,
    opt: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None,
    checkpoint: Path | None,
    notice: Notice,
) -> tuple[int, float, float]:
    """(first step, loss, seconds so far) of :func:`train_steps`: from ``checkpoint`` when it
    holds a state of this run (loaded into ``model``, ``opt``, ``scaler`` and the RNG), else a
    fresh start. A checkpoint that cannot be read, or that names this run but does not load
    (a missing field, another shape), is set aside (``harness.training.checkpoint.set_aside``:
    ``<name>.unreadable``, never read again) and the run starts over from the state it was
    given, so a damaged file never fails every retry."""
    if checkpoint is None or not checkpoint.is_file():
        return 0, math.nan, 0.0
    fresh = (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()), torch.get_rng_state())
    fresh_scaler = None if scaler is None else scaler.state_dict()
    try:  # tensors and plain values only: a checkpoint never runs code when read
        state = torch.load(checkpoint, weights_only=True)
        if not isinstance(state, dict):
            raise TypeError(f"it holds a {type(state).__name__}, not a training state")
        if state.get("run_id") != cfg.run_id():
            return 0, math.nan, 0.0  # another run's: this run's first save replaces it
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        if scaler is not None:  # fp16: the loss scale reached
            scaler.load_state_dict(state["scaler"])
        first, loss_value, elapsed = int(state["step"]), float(state["loss"]), float(state["seconds"])
    except Exception as exc:  # whatever a damaged or hostile file provokes: set aside, start over
        model.load_state_dict(fresh[0])  # a failed load may have changed some tensors already
        opt.load_state_dict(fresh[1])
        torch.set_rng_state(fresh[2])
        if scaler is not None and fresh_scaler is not None:
            scaler.load_state_dict(fresh_scaler)
        aside = set_aside(checkpoint)
        where = f"set aside as {aside.name}" if aside is not None else "removed (it could not be renamed)"
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}" if str(exc) else type(exc).__name__
        notice(f"run {cfg.run_id()}: its checkpoint could not be used ({why}); {where}; the run starts over")
        return 0, math.nan, 0.0
    notice(f"run {cfg.run_id()}: resumed from step {first}")
    return first, loss_value, elapsed


class LmLoss(nn.Module):
    """The mean next-byte cross-entropy of a batch of windows, the forward pass in
    ``precision`` and the loss in float32: what a training step minimises (a module, so a
    CUDA graph can record it)."""

    def __init__(self, model: Backbone, precision: str) -> None:
        super().__init__()
        self.model, self.precision = model, precision

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with autocast(self.precision, tokens.device):
            logits = self.model(tokens)  # (b, L, v)
        assert isinstance(logits, torch.Tensor)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def step_loss(model: Backbone, precision: str, accel: Accel) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """How a step takes its loss: :class:`LmLoss` eagerly (every CPU run), or with
    ``accel.graphs`` (CUDA only, :meth:`Accel.for_device`) its forward and backward replayed
    as a CUDA graph per batch shape (``harness.training.graphs.capture``; a shape whose pass
    cannot be recorded runs eagerly). A small model's step on a GPU is launch-bound: the
    graph is one launch for the few hundred kernels of the pass. The same loss to float rounding."""
    loss = LmLoss(model, precision)
    if not accel.graphs:
        return loss
    graphed: dict[tuple[int, ...], Callable | None] = {}

    def replay(tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        key = tuple(tokens.shape)
        if key not in graphed:
            graphed[key] = capture(loss, (tokens.clone(), targets.clone()))
        run = graphed[key]
        # a graph's output is a buffer its next replay overwrites: a copy for the read-back
        return loss(tokens, targets) if run is None else run(tokens, targets).clone()

    return replay


def _read_back(pending: list[tuple[int, torch.Tensor]]) -> float:
    """The last of the ``(step, loss)`` kept on the device (one sync for all of them); DivergedError
    at the first that is not finite. Empties ``pending``."""
    values = torch.stack([v for _, v in pending]).tolist()
    steps = [s for s, _ in pending]
    pending.clear()
    for step, value in zip(steps, values, strict=True):
        if not math.isfinite(value):
            raise DivergedError(f"loss became {value} at step {step}")
    return float(values[-1])


def _optimizer_step(
    model: Backbone, opt: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None, loss: torch.Tensor, clip: float
) -> None:
    """Backward, clip the gradients' global norm, step; fp16 (``scaler``) on the scaled loss,
    unscaled before the clip, a step whose gradients overflowed skipped (as the algorithmic
    loop, ``harness.training.train.optimizer_step``)."""
    opt.zero_grad(set_to_none=True)
    if scaler is None:
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        return
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(model.parameters(), clip)
    scaler.step(opt)
    scaler.update()


def train_steps(
    cfg: LmConfig,
    model: Backbone,
    windows: TrainingWindows,
    device: torch.device,
    *,
    steps: int,
    lr_scale: float = 1.0,
    checkpoint: Path | None = None,
    notice: Notice = print,
    accel: Accel | None = None,
) -> tuple[float, float, int]:
    """Train ``steps`` steps of ``cfg.train.batch_size`` windows; (final loss, seconds, steps),
    the seconds and steps of the whole training, a resumed one's earlier part included (its
    checkpoint carries the seconds so far). Resumes from ``checkpoint`` when it holds a state of this run.

    ``accel`` (default :meth:`Accel.for_device`: nothing on CPU) sets how the loop drives a
    GPU: the step losses read back every ``accel.readback`` steps (and at every checkpoint
    and the end) instead of a sync per step, the pass replayed as a CUDA graph with
    ``accel.graphs`` (:func:`step_loss`). A CPU run computes the same either way."""
    t = cfg.train
    accel = Accel.for_device(device) if accel is None else accel
    opt = make_optimizer(model, cast(Any, cfg))
    scaler = grad_scaler(t.precision, device)  # fp16 only: gradients scaled clear of underflow
    first, loss_value, elapsed = _resume(cfg, model, opt, scaler, checkpoint, notice)
    model.train()
    compute = step_loss(model, t.precision, accel)
    pending: list[tuple[int, torch.Tensor]] = []
    start = time.perf_counter()
    schedule = cast(Any, cfg)
    for step in range(first, steps):
        for g in opt.param_groups:
            g["lr"] = g["base_lr"] * lr_scale * lr_factor(step, schedule)
        tokens, targets = windows.batch(cfg.seed, step, t.batch_size)
        tokens, targets = tokens.to(device, non_blocking=True), targets.to(device, non_blocking=True)
        loss = compute(tokens, targets)
        done = step + 1
        pending.append((step, loss.detach()))
        due = checkpoint is not None and done % CHECKPOINT_EVERY == 0 and done < steps
        if len(pending) >= accel.readback or due or done == steps:
            loss_value = _read_back(pending)  # read back every step (CPU): a diverged step is never applied
        _optimizer_step(model, opt, scaler, loss, t.grad_clip)
        if due:
            assert checkpoint is not None
            seconds = elapsed + time.perf_counter() - start
            pace = f"loss {loss_value:.4f} nats/byte, {seconds / done:.2f} s/step"
            notice(f"run {cfg.run_id()}: step {done} of {steps}, {pace}")
            _save(
                checkpoint,
                {
                    "run_id": cfg.run_id(),
                    "step": done,
                    "loss": loss_value,
                    "seconds": seconds,
                    "model": model.state_dict(),
                    "optimizer": opt.state_dict(),
                    "torch_rng": torch.get_rng_state(),
                    **({} if scaler is None else {"scaler": scaler.state_dict()}),
                },
            )
    return loss_value, elapsed + time.perf_counter() - start, steps


def corpus_parts(cfg: LmConfig, corpus: Corpus | None = None) -> tuple[Split, list[bytes]]:
    """The run's corpus split (``harness.tasks.lm.split``) and its scored regions (``harness.tasks.lm.data``)."""
    parts = split(corpus or load_corpus(lm_task(cfg.task).corpus))
    return parts, [r.data for r in scored_regions(parts, cfg.eval.lengths[-1], cfg.eval.regions)]


def run_lm(
    cfg: LmConfig,
    store: LmStore,
    device: torch.device,
    *,
    corpus: Corpus | None = None,
    notice: Notice = print,
    report: Callable[[LengthScore], None] | None = None,
    report_passkey: Callable[[PasskeyCell], None] | None = None,
) -> LmRecord:
    """Train (or, for a variant, load and perhaps fine-tune) and evaluate ``cfg`` (bits per byte,
    and the passkey grid where ``cfg.eval.passkey`` asks for it, on the same held-out regions);
    the record is added to ``store``."""
    run_id = cfg.run_id()
    parts, regions = corpus_parts(cfg, corpus)
    train_docs = parts.train
    prov: dict[str, Any] = {**provenance(device), **parts.provenance()}
    if cfg.is_variant:
        model, final_loss, seconds, steps = _variant_model(cfg, store, device, train_docs, prov, notice)
    else:
        windows = TrainingWindows(train_docs, cfg.length)
        model = build_lm_model(cfg, device=device)
        final_loss, seconds, steps = train_steps(
            cfg, model, windows, device, steps=cfg.train.steps, checkpoint=store.checkpoint(run_id), notice=notice
        )
        prov[WEIGHTS_DIGEST] = _save(
            store.weights(run_id), {"run_id": run_id, "final_loss": final_loss, "model": model.state_dict()}
        )
    t0 = time.perf_counter()
    precision = evaluation_precision(cfg.eval.precision, cfg.train.precision)
    scores = evaluate_lengths(
        model,
        regions,
        cfg.eval.lengths,
        cfg.eval.tail,
        chunk=cfg.eval.chunk,
        batch_size=cfg.eval.batch_size,
        precision=precision,
        device=device,
        seed=cfg.seed,
        report=report,
        positions=cfg.eval.positions,
    )
    passkey = None
    if cfg.eval.passkey:
        passkey = evaluate_passkey(
            model,
            regions,
            cfg.eval.lengths,
            cfg.eval.passkey,
            chunk=cfg.eval.chunk,
            batch_size=cfg.eval.batch_size,
            precision=precision,
            device=device,
            seed=cfg.seed,
            report=report_passkey,
        )
    n_params = {
        "total": sum(p.numel() for p in model.parameters()),
        "pe": sum(p.numel() for p in model.pe.parameters()),
    }
    record = LmRecord(
        cfg,
        tuple(scores),
        final_loss,
        steps,
        seconds,
        time.perf_counter() - t0,
        n_params,
        prov,
        None if passkey is None else tuple(passkey),
    )
    store.add(record)
    store.checkpoint(run_id).unlink(missing_ok=True)
    return record


def _variant_model(
    cfg: LmConfig,
    store: LmStore,
    device: torch.device,
    train_docs: tuple[tuple[str, bytes], ...],
    prov: dict[str, Any],
    notice: Notice,
) -> tuple[Backbone, float, float, int]:
    """A variant's model: its trained run's vouched weights (``prov["weights_from"]`` set),
    fine-tuned when ``cfg.finetune_steps``; with its final loss, training seconds and steps."""
    trained = cfg.trained_config()
    payload = _vouched_weights(store, cfg)
    model = build_lm_model(cfg, cfg.eval_options(), device)
    model.load_state_dict(payload["model"])
    prov["weights_from"] = trained.run_id()
    final_loss, seconds, steps = float(payload["final_loss"]), 0.0, 0
    if cfg.finetune_steps:
        windows = TrainingWindows(train_docs, cfg.finetune_length)
        tuned = _replace_train(cfg, steps=cfg.finetune_steps, length=cfg.finetune_length)
        final_loss, seconds, steps = train_steps(
            tuned,
            model,
            windows,
            device,
            steps=cfg.finetune_steps,
            lr_scale=FINETUNE_LR_RATIO,
            checkpoint=store.checkpoint(cfg.run_id()),
            notice=notice,
        )
    return model, final_loss, seconds, steps


def _replace_train(cfg: LmConfig, *, steps: int, length: int) -> LmConfig:
    import dataclasses

    train = dataclasses.replace(
        cfg.train, steps=steps, warmup=min(cfg.train.warmup, steps // 10), train_min=length, train_max=length
    )
    return dataclasses.replace(cfg, train=train)


def sweep_lm(
    configs: Sequence[LmConfig], store: LmStore, device: torch.device, *, notice: Notice = print
) -> dict[str, str]:
    """Run every config the store does not hold finished, trained runs before their
    variants; {run_id: "finished" | "cached" | "busy: why" | "failed: why"}. A failed run does
    not stop the others, nor does a run whose lock cannot be taken (a folder where its lock
    file goes, ``locks`` a file): it fails, naming the file. Sweeps may run side by side on
    one store (:meth:`LmStore.hold`): each run is trained by one of them, the others skip it
    as busy."""
    outcomes: dict[str, str] = {}
    ordered = sorted(configs, key=lambda c: c.is_variant)
    for i, cfg in enumerate(ordered, start=1):
        run_id = cfg.run_id()
        label = f"[{i}/{len(ordered)}] {cfg.task} {cfg.pe}{_variant(cfg)} seed {cfg.seed} ({run_id})"
        with contextlib.ExitStack() as held:
            try:
                taken = held.enter_context(store.hold(run_id))
                trained_busy = cfg.is_variant and store.held(cfg.trained_config().run_id())
            except OSError as exc:  # a lock that cannot be taken (a folder in its place, locks/ a file): this run only
                outcomes[run_id] = f"failed: {lock_problem(store, exc)}"
                notice(f"{label}: {outcomes[run_id]}")
                continue
            if run_id in store.finished():  # read again: a sweep beside this one may have finished it
                outcomes[run_id] = "cached"
                continue
            if not taken or trained_busy:
                outcomes[run_id] = "busy: another sweep on this store is running it or its trained run"
                notice(f"{label}: {outcomes[run_id]}; left to that sweep")
                continue
            notice(f"{label}: starting")
            try:
                record = run_lm(cfg, store, device, notice=notice)
            except Exception as exc:  # one run's failure (a plugin's error included) never stops the sweep
                outcomes[run_id] = f"failed: {exc}"
                notice(f"{label}: failed: {exc}")
                continue
        outcomes[run_id] = "finished"
        at = ", ".join(
            f"{s.length}: {s.bpb:.3f}" if s.bpb is not None else f"{s.length}: -"
            for s in record.scores
            if s.mode == "windows"
        )
        sps = record.seconds_per_step
        keys = f"; passkey {grid_text(record.passkey)}" if record.passkey is not None else ""
        notice(f"{label}: bpb {at}{keys}; {sps:.3f} s/step" if sps else f"{label}: bpb {at}{keys}")
    return outcomes


def lock_problem(store: LmStore, exc: OSError) -> str:
    """Why a run's lock (:meth:`LmStore.hold`) could not be taken, naming the file."""
    where = exc.filename or store.folder / "locks"
    return f"cannot take its lock {where}: {exc.strerror or type(exc).__name__}"


def _variant(cfg: LmConfig) -> str:
    if not cfg.is_variant:
        return ""
    text = "@" + ",".join(f"{k}={v}" for k, v in sorted(cfg.eval_pe_options.items()))
    return text + (f" +{cfg.finetune_steps} steps at {cfg.finetune_length}" if cfg.finetune_steps else "")
