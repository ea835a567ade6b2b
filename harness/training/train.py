"""Training one backbone on one task: AdamW, warm-up + cosine decay, clipping, seeded.

Axis letters: b batch, s sequence, v vocab.

Seeds: ``cfg.seed`` fixes the initialisation (torch RNG) and, through a separate
``random.Random``, the training data stream; evaluation sets are fixed per
(task, scale, seed) independently of training (see ``harness.tasks.data.evaluation_set``).
"""

from __future__ import annotations

import contextlib
import functools
import math
import random
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

import harness.tasks
import harness.training.loss as step_loss
import harness.training.stacked as stacked
import pezoo
from harness.config import RunConfig
from harness.config.global_rng import GLOBAL_RNG
from harness.config.pe_spec import build_options
from harness.records.files import WriteError, remove_stale_temps
from harness.records.metrics import Evaluation
from harness.records.provenance import git_commit, machine_name
from harness.tasks import Task
from harness.tasks.data import PackedStream
from harness.tasks.lm.data import LmBatches, lm_batches
from harness.training.accel import Accel
from harness.training.backbone import Backbone
from harness.training.checkpoint import (
    CheckpointError,
    check_state,
    code_history,
    load_checkpoint,
    load_optimizer_state,
    machine_history,
    save_checkpoint,
    set_aside,
    training_state,
)
from harness.training.feed import BatchFeed, Fed
from harness.training.precision import grad_scaler
from harness.training.step_graph import GraphedStep


class DivergedError(RuntimeError):
    """The training loss became NaN or infinite."""


@dataclass(frozen=True)
class Checkpointing:
    """Where and how often a run saves its full training state (``harness.training.checkpoint``).

    Attributes:
        path: the checkpoint file (written atomically: a temporary file of this process's
            own, then a rename).
        every: save every this many steps (and never after the last step: a finished
            run's metrics are in the store, its checkpoint is removed).
        on_error: told (one line) when a checkpoint cannot be written (a full disk); the
            run trains on without it and keeps the previous one. None: a warning.
    """

    path: Path
    every: int = 250
    on_error: Callable[[str], None] | None = None


@dataclass(frozen=True)
class TrainResult:
    """How training ended; ``evaluations`` are the periodic ones ((step, result), oldest first)."""

    final_loss: float
    steps: int
    seconds: float
    evaluations: tuple[tuple[int, Any], ...] = ()
    # which commit trained from which step (harness.training.checkpoint.code_history)
    code: tuple[tuple[int, str], ...] = ()
    machine: tuple[tuple[int, str], ...] = ()  # and on which machine (harness.training.checkpoint.machine_history)
    stacked: tuple[int, int, str] | None = None
    """With the ``stack`` loop feature: (steps taken in a stacked pass, steps trained in this
    call, the attention backend of the stacked pass; ``harness.training.stacked``)."""


def build_encoding(cfg: RunConfig) -> pezoo.PositionalEncoding:
    """The encoding of ``cfg``, built for its backbone (on torch's current default device)."""
    b = cfg.backbone
    # stored runs' missing options as they meant; Abacus's digit ids; the task's position coupling
    options = build_options(cfg.pe, cfg.pe_options, task=cfg.task)
    return pezoo.create(cfg.pe, dims=pezoo.ModelDims(b.d_model, b.n_heads, b.n_layers), **options)


def build_model(cfg: RunConfig, device: torch.device | str = "cpu") -> Backbone:
    """The backbone of ``cfg`` with its encoding, initialised from ``cfg.seed``.

    The initialisation draws from torch's global RNG seeded with ``cfg.seed``; the state it
    leaves is kept as ``model.init_rng_state``, where the run's training draws continue
    (:func:`train`, from a generator of its own)."""
    with GLOBAL_RNG:
        torch.manual_seed(cfg.seed)
        model = Backbone(cfg.backbone, build_encoding(cfg)).to(device)
        model.init_rng_state = torch.get_rng_state()
    return model


def training_task(cfg: RunConfig) -> Task | LmBatches:
    """What ``cfg`` trains on, as :func:`train` takes it: its task's examples, or a
    language-modelling task's windows of L bytes (``harness.tasks.lm.data.lm_batches``)."""
    if cfg.is_lm:
        return lm_batches(cfg.task, cfg.seed, cfg.train.train_max)
    return harness.tasks.create(cfg.task)


def lr_factor(step: int, cfg: RunConfig) -> float:
    """Linear warm-up to 1, then cosine or linear decay (``train.schedule``) towards
    ``min_lr_ratio``, reached one step after the last."""
    t = cfg.train
    if step < t.warmup:
        return (step + 1) / t.warmup
    progress = min(1.0, (step - t.warmup) / max(1, t.steps - t.warmup))
    shape = 1 - progress if t.schedule == "linear" else 0.5 * (1 + math.cos(math.pi * progress))
    return t.min_lr_ratio + (1 - t.min_lr_ratio) * shape


def curriculum_max(step: int, cfg: RunConfig) -> int:
    """Largest training scale at ``step``: the last curriculum stage started by then
    (``TrainConfig.curriculum`` = ((start_step, max_scale), ...)), else ``train_max``."""
    current = cfg.train.train_max
    for start, max_scale in cfg.train.curriculum:
        if step >= start:
            current = max_scale
        else:
            break
    return min(current, cfg.train.train_max) if cfg.train.curriculum else current


def make_optimizer(model: Backbone, cfg: RunConfig, *, fused: bool = False) -> torch.optim.Optimizer:
    """AdamW (or Adam, ``train.optimizer``); weight decay on matrices only. An encoding may ask for its own parameter
    groups (e.g. PRISM's α scales, §6.4) through an ``optimizer_groups()`` method
    returning ``[{"params": [...], **adamw_options}]``. ``fused``: the fused kernel at
    every precision (a GPU run, :class:`Accel`), not only mixed precision."""
    t = cfg.train
    special = list(getattr(model.pe, "optimizer_groups", list)())
    taken = {id(p) for g in special for p in g["params"]}
    rest = [p for p in model.parameters() if id(p) not in taken and p.requires_grad]
    groups = [
        {"params": [p for p in rest if p.ndim >= 2], "weight_decay": t.weight_decay},
        {"params": [p for p in rest if p.ndim < 2], "weight_decay": 0.0},
        *special,
    ]
    for g in groups:
        g.setdefault("lr", t.lr)
        g["base_lr"] = g["lr"]
    optimizer = torch.optim.AdamW if t.optimizer == "adamw" else torch.optim.Adam
    # A mixed-precision run takes the fused kernel: one pass over all parameters instead of a
    # dozen elementwise passes per tensor (half the optimiser's time at the quick size on CPU;
    # docs/performance.md). An fp32 run keeps the per-tensor loop it was always trained with, so
    # its numbers (the board's) stay bit for bit what they were.
    # On a GPU (``fused``) every precision takes it: one launch instead of a dozen per tensor.
    fused_kw = {"fused": True} if fused or t.precision != "fp32" else {}
    return optimizer([g for g in groups if g["params"]], lr=t.lr, betas=t.betas, **fused_kw)


def restore(
    cfg: RunConfig, path: Path, device: torch.device | str
) -> tuple[Backbone, dict[str, Any] | None, str | None]:
    """The model to train and the checkpoint to resume, if ``path`` holds a usable one.

    Returns (model, checkpoint or None, problem or None). The checkpoint is read without
    running code and checked field by field (``harness.training.checkpoint.check_state``); one
    that is unreadable, needs code to read, lacks a field, has a wrong type or shape, or
    is another run's is set aside as ``<name>.unreadable`` (never read again) and the
    run starts over from a fresh model; ``problem`` then says why, for the caller to
    report. Temporary files of writers killed more than a day ago are removed.
    """
    remove_stale_temps(path)
    model = build_model(cfg, device)
    if not path.exists():
        return model, None, None
    try:
        ck = load_checkpoint(path, cfg.run_id())
        try:
            ck = check_state(ck, cfg, model, make_optimizer(model, cfg))
        except CheckpointError as exc:
            raise CheckpointError(f"checkpoint {path} is unusable: {exc}") from None
        except Exception as exc:  # whatever else a hostile or damaged file provokes: never fail forever
            raise CheckpointError(f"checkpoint {path} is unusable ({type(exc).__name__}: {exc})") from None
        return model, ck, None
    except CheckpointError as exc:
        aside = set_aside(path)
        where = f"set aside as {aside.name}" if aside is not None else "removed (it could not be renamed)"
        return build_model(cfg, device), None, f"{exc}; {where}; the run starts over from step 0"


class LossReadback:
    """The step losses, kept on the device and read back every ``every`` steps (:meth:`due`)
    or when the loop needs them (:meth:`flush`: before a periodic evaluation, a
    checkpoint, the end).

    :meth:`flush` reports each step's task loss to ``on_step`` in order, updates
    :attr:`last` and :attr:`evaluating` (once a step's loss is below ``threshold``), and
    raises :class:`DivergedError` at the first step whose minimised loss is not finite,
    with the same message a per-step check gives.
    """

    def __init__(
        self,
        every: int,
        on_step: Callable[[int, float], None] | None,
        threshold: float | None,
        *,
        last: float = math.nan,
        evaluating: bool = False,
    ) -> None:
        self.every, self.on_step, self.threshold = every, on_step, threshold
        self.last, self.evaluating = last, evaluating
        self._pending: list[tuple[int, Tensor, Tensor | None]] = []

    def add(self, step: int, task_loss: Tensor, loss: Tensor) -> None:
        """Keep ``step``'s losses (the minimised one only when it differs from the task's)."""
        self._pending.append((step, task_loss.detach(), None if loss is task_loss else loss.detach()))

    def due(self, step: int) -> bool:
        """Whether the losses up to ``step`` are read back now (every ``every`` steps)."""
        return (step + 1) % self.every == 0

    def flush(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        if self.every == 1:  # the per-step path of old: one .item() per value
            tasks_ = [pending[0][1].item()]
            totals = [tasks_[0] if pending[0][2] is None else pending[0][2].item()]
        else:
            tasks_ = torch.stack([t.float() for _, t, _ in pending]).tolist()
            extra = [(i, x) for i, (_, _, x) in enumerate(pending) if x is not None]
            totals = list(tasks_)
            if extra:
                for (i, _), value in zip(extra, torch.stack([x.float() for _, x in extra]).tolist(), strict=True):
                    totals[i] = value
        for (step, _, _), value, total in zip(pending, tasks_, totals, strict=True):
            if not math.isfinite(total):  # NaN in the task's loss makes the total NaN too
                raise DivergedError(f"loss became {total} at step {step}")
            self.last = value
            if self.on_step is not None:
                self.on_step(step, value)
            self.evaluating = self.evaluating or (self.threshold is not None and value < self.threshold)


@dataclass
class _Run:
    """What the loop carries from step to step (and a checkpoint saves)."""

    opt: torch.optim.Optimizer
    scaler: Any
    rng: random.Random
    draws: torch.Generator
    """The run's own torch RNG: its encoding's random draws and the loss's replays of them
    (``harness.training.loss``) come from it, never from torch's global one."""
    stream: PackedStream | None
    first_step: int
    elapsed: float
    evaluations: list
    code: list
    machine: list


def _start(
    cfg: RunConfig,
    model: Backbone,
    task: Task | LmBatches,
    device: torch.device,
    resume: dict[str, Any] | None,
    accel: Accel,
) -> tuple[_Run, float, bool]:
    """The optimiser, scaler and data state of a fresh run, or of ``resume``'s; with the
    last loss and whether periodic evaluation had started."""
    t = cfg.train
    rng = random.Random(f"train/{cfg.task}/{cfg.seed}")
    stream = PackedStream(task, rng, t.pack, loss=t.pack_loss) if t.pack and not isinstance(task, LmBatches) else None
    opt = make_optimizer(model, cfg, fused=accel.fused and device.type == "cuda")
    scaler = grad_scaler(t.precision, device)  # fp16 only: gradients scaled clear of underflow
    draws = torch.Generator()  # continues where the model's initialisation left the global RNG
    initialised = getattr(model, "init_rng_state", None)
    draws.set_state(initialised if initialised is not None else torch.get_rng_state())
    run = _Run(
        opt,
        scaler,
        rng,
        draws,
        stream,
        0,
        0.0,
        [],
        code_history(resume, git_commit()),
        machine_history(resume, machine_name(device)),
    )
    last, evaluating = math.nan, cfg.eval.start_below_loss is None
    if resume is None:
        return run, last, evaluating
    load_optimizer_state(opt, resume["optimizer"])  # model weights were restored by the caller
    rng.setstate(resume["data_rng"])
    draws.set_state(resume["torch_rng"])
    if "cuda_rng" in resume and device.type == "cuda":
        torch.cuda.set_rng_state(resume["cuda_rng"], device)
    run.first_step, last, run.elapsed = resume["step"], resume["loss"], resume["seconds"]
    evaluating = resume.get("evaluating", evaluating)
    run.evaluations = list(resume.get("evaluations", []))
    if stream is not None:
        stream.load_state(resume["stream"])
    if scaler is not None:  # fp16: the loss scale reached (harness.training.checkpoint checked it)
        saved = resume["scaler"]
        scaler.load_state_dict(
            {**scaler.state_dict(), "scale": saved["scale"], "_growth_tracker": saved["growth_tracker"]}
        )
    return run, last, evaluating


def optimizer_step(model: Backbone, run: _Run, loss: Tensor, grad_clip: float) -> None:
    """Backward, clip the gradients' global norm, step (fp16: on the scaled loss, skipping a
    step that overflowed)."""
    run.opt.zero_grad(set_to_none=True)
    if run.scaler is None:
        loss.backward()
        apply_update(model, run, grad_clip)
        return
    run.scaler.scale(loss).backward()
    run.scaler.unscale_(run.opt)
    nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    run.scaler.step(run.opt)
    run.scaler.update()


def apply_update(model: Backbone, run: _Run, grad_clip: float) -> None:
    """Clip the gradients' global norm and step, the gradients already in the parameters
    (an unscaled run's: a backward here, or a stacked pass's, ``harness.training.stacked``)."""
    nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    run.opt.step()


@dataclass(frozen=True)
class _Due:
    """Which steps end with a periodic evaluation or a checkpoint (never the last step): plain
    numbers, so a producer process can take it (``saves_after``)."""

    steps: int
    every: int
    checkpoint_every: int | None

    def evaluation(self, done: int) -> bool:
        return bool(self.every) and done % self.every == 0 and done < self.steps

    def save(self, done: int) -> bool:
        every = self.checkpoint_every
        return every is not None and done % every == 0 and done < self.steps

    def saves_after(self, step: int) -> bool:
        """Whether a checkpoint follows step ``step`` (0-based): its batch keeps the data state."""
        return self.save(step + 1)


def _feed(
    cfg: RunConfig,
    task: Task | LmBatches,
    run: _Run,
    device: torch.device,
    accel: Accel,
    keep_state: Callable[[int], bool],
) -> BatchFeed:
    """The batches of the steps the run has left (``harness.training.feed``), from its data state."""
    t = cfg.train
    return BatchFeed(
        task, run.rng, run.stream,
        batch_size=t.batch_size, protocol=cfg.protocol,
        scale_range=functools.partial(_scale_range, cfg),  # a function a producer process can take
        first=run.first_step, last=t.steps, device=device, ahead=accel.prefetch, keep_state=keep_state,
        spawn=accel.spawn,
    )  # fmt: skip


def _scale_range(cfg: RunConfig, step: int) -> tuple[int, int]:
    """The (lo, hi) training scales of ``step``'s examples (its curriculum stage)."""
    return cfg.train.train_min, curriculum_max(step, cfg)


def _evaluate_at(
    done: int, evaluate: Callable[[int], Evaluation], model: Backbone, run: _Run, device: torch.device
) -> float:
    """Run the periodic evaluation after step ``done``, its encoding's draws from a scratch
    generator (never the run's training stream, nor torch's global RNG), keep its result;
    the seconds it took."""
    t_eval = time.perf_counter()
    with model.pe.drawing_from(torch.Generator()):  # a scratch stream: the run's own is the training's
        run.evaluations.append((done, evaluate(done)))
    return time.perf_counter() - t_eval


def _save(
    cfg: RunConfig,
    model: Backbone,
    run: _Run,
    fed: Fed,
    losses: LossReadback,
    seconds: float,
    checkpointing: Checkpointing,
    device: torch.device,
) -> None:
    """Save the full training state after step ``fed.step`` (a failed write is told, not raised)."""
    done = fed.step + 1
    data_rng = random.Random()
    data_rng.setstate(fed.data_rng)
    payload = training_state(
        cfg,
        step=done,
        loss=losses.last,
        seconds=seconds,
        model=model,
        optimizer=run.opt,
        data_rng=data_rng,
        torch_rng=run.draws.get_state(),
        device=device,
        evaluating=losses.evaluating,
        evaluations=run.evaluations,
        stream=fed.stream,
        scaler=run.scaler.state_dict() if run.scaler is not None else None,
        code=run.code,
        machine=run.machine,
    )
    for group in payload["optimizer"]["param_groups"]:  # a captured update's device-held rate: a number
        if isinstance(group.get("lr"), Tensor):
            group["lr"] = float(group["lr"])
    try:
        save_checkpoint(checkpointing.path, payload)
    except WriteError as exc:  # a full disk: train on, the previous checkpoint stays
        message = f"no checkpoint at step {done}: {exc}; training goes on"
        if checkpointing.on_error is not None:
            checkpointing.on_error(message)
        else:
            warnings.warn(message, RuntimeWarning, stacklevel=3)


def train(
    cfg: RunConfig,
    model: Backbone,
    task: Task | LmBatches,
    device: torch.device | str = "cpu",
    on_step: Callable[[int, float], None] | None = None,
    checkpointing: Checkpointing | None = None,
    resume: dict[str, Any] | None = None,
    evaluate: Callable[[int], Evaluation] | None = None,
    on_lr: Callable[[int, float], None] | None = None,
    accel: Accel | None = None,
) -> TrainResult:
    """Train ``model`` for ``cfg.train.steps`` steps on ``task``'s examples (or a
    language-modelling task's windows, ``LmBatches``); ``on_step(step, loss)`` after each
    (in order; on a GPU a few steps late, when the losses are read back: :class:`Accel`);
    ``on_lr(step, lr)`` reports each step's learning rate (for loggers).

    With ``evaluate`` and ``cfg.eval.every > 0``, ``evaluate(step)`` runs every ``every``
    steps once a step's loss has first dropped below ``cfg.eval.start_below_loss`` (never
    at the last step: the caller evaluates the final model), under its own torch RNG, so
    the training stream is the same with or without it; its results are kept in
    checkpoints and returned in order.

    With ``checkpointing``, the full state (``harness.training.checkpoint``) is saved periodically;
    a save that fails (a full disk) is reported and skipped. ``resume`` is such a
    checkpoint as :func:`restore` returns it, its weights already loaded: an interrupted
    run ends with exactly the metrics of an uninterrupted one (CPU). ``accel`` (default
    :meth:`Accel.for_device`): how the loop drives the device. A NaN/inf loss raises
    :class:`DivergedError` (the run is then recorded as diverged).
    """
    t = cfg.train
    device = torch.device(device)
    accel = Accel.for_device(device) if accel is None else accel
    run, last, evaluating = _start(cfg, model, task, device, resume, accel)
    model.train()
    due = _Due(t.steps, cfg.eval.every if evaluate is not None else 0, checkpointing.every if checkpointing else None)
    losses = LossReadback(accel.readback, on_step, cfg.eval.start_below_loss, last=last, evaluating=evaluating)
    padded = not isinstance(task, LmBatches)  # a language-modelling task's windows have no padding
    compute = step_loss.loss_function(model, t.precision, device, graphs=accel.graphs, draws=run.draws, padded=padded)
    whole = accel.step and GraphedStep.supported(device, t.precision)
    stepper = GraphedStep(model, t.precision, run.opt, t.grad_clip, padded=padded) if whole else None
    start = time.perf_counter()
    feed = _feed(cfg, task, run, device, accel, keep_state=functools.partial(_Due.saves_after, due))
    with feed, model.pe.drawing_from(run.draws), contextlib.ExitStack() as leaving:
        member, stacked_steps = None, 0
        if accel.stack:  # a stack of this thread's group (harness.training.stacked), left however the loop ends
            options = (cfg.pe, repr(cfg.pe_options), repr(model.pe))
            member = stacked.join(model, t.precision, padded, options, graphs=accel.graphs, draws=run.draws)
            if member is not None:
                leaving.enter_context(member)
        for fed in feed:
            step, done = fed.step, fed.step + 1
            set_learning_rate(run.opt, cfg, step, on_lr)
            shared = member.step(fed.batch, fed.host) if member is not None else None
            stepped = stepper(fed.batch, fed.host) if stepper is not None and shared is None else None
            if shared is not None:  # the stack's pass: this run's losses, its gradients in place
                stacked_steps += 1
                losses.add(step, shared[1], shared[0])
                if accel.readback == 1:
                    losses.flush()  # before the update, as below
                apply_update(model, run, t.grad_clip)
            elif stepped is not None:  # replayed, the update applied: a NaN is caught at the read-back
                losses.add(step, stepped[1], stepped[0])
            else:
                loss, task_loss = compute(fed.batch, fed.host)
                losses.add(step, task_loss, loss)
                if accel.readback == 1:
                    losses.flush()  # before the step, as ever: a NaN step is never applied
                optimizer_step(model, run, loss, t.grad_clip)
            if losses.due(step) or due.evaluation(done) or due.save(done) or done == t.steps:
                losses.flush()
            if due.evaluation(done) and losses.evaluating and evaluate is not None:
                start += _evaluate_at(done, evaluate, model, run, device)  # training seconds leave evaluation out
            if due.save(done) and checkpointing is not None:
                _save(cfg, model, run, fed, losses, run.elapsed + time.perf_counter() - start, checkpointing, device)
    losses.flush()
    seconds = run.elapsed + time.perf_counter() - start
    shared_by = None
    if member is not None:
        shared_by = (stacked_steps, t.steps - run.first_step, member.stack.backend or member.stack.template.backend)
    return TrainResult(
        losses.last, t.steps, seconds, tuple(run.evaluations), tuple(run.code), tuple(run.machine), shared_by
    )


def set_learning_rate(
    opt: torch.optim.Optimizer, cfg: RunConfig, step: int, on_lr: Callable[[int, float], None] | None = None
) -> None:
    """Every parameter group's learning rate for ``step`` (:func:`lr_factor` × its base rate);
    a rate held on the device for a captured update (``harness.training.step_graph``) is
    filled in place, where the graph reads it."""
    for g in opt.param_groups:
        lr = g["base_lr"] * lr_factor(step, cfg)
        if isinstance(g["lr"], Tensor) and g.get("capturable"):
            g["lr"].fill_(lr)
        else:
            g["lr"] = lr
    if on_lr is not None:
        on_lr(step, cfg.train.lr * lr_factor(step, cfg))
