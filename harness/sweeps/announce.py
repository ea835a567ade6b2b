"""What ``pezoo bench`` says before it trains anything: the runs (how many, which are
already in the store), what each preset means (model, steps, batch,
training and test lengths), where the runs train, and how long they should take.

Pure functions from a sweep's configs and plan (``harness.sweeps.plan.make_plan``) to text;
the command line prints them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness import tasks
from harness.config import PRESET_DESCRIPTIONS, PRESETS, RunConfig
from harness.config.pe_spec import config_display_name
from harness.sweeps.labels import varying_axes
from harness.sweeps.plan import Plan, estimate_bases, format_duration, wall_seconds
from harness.tasks.data import longest_training_tokens
from harness.training.precision import evaluation_precision

CPU_PRESETS = ("quick", "smoke")
"""Presets sized for a CPU; on CUDA the announcement points at ``GPU_PRESET``."""

GPU_PRESET = "gpu"


def _values(configs: Sequence[RunConfig], get: Callable[[RunConfig], Any]) -> str:
    """The distinct values of ``get`` over ``configs``, in order: ``20`` or ``20, 40``."""
    return ", ".join(str(v) for v in dict.fromkeys(get(c) for c in configs))


def _names(values: Sequence[str], limit: int = 6) -> str:
    shown = list(dict.fromkeys(values))
    more = f", ... (+{len(shown) - limit})" if len(shown) > limit else ""
    return ", ".join(shown[:limit]) + more


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _counted(values: str, word: str) -> str:
    """``1 layer``, ``3 layers``, ``3, 5 layers`` from ``_values`` text."""
    return f"{values} {word}" if values == "1" else f"{values} {word}s"


def _lengths(lengths: list[int]) -> str:
    """``1..5``, or ``50, 60, ..., 150`` when strided."""
    if len(lengths) > 1 and all(b - a == 1 for a, b in itertools.pairwise(lengths)):
        return f"{lengths[0]}..{lengths[-1]}"
    if len(lengths) > 4:
        return f"{lengths[0]}, {lengths[1]}, ..., {lengths[-1]}"
    return ", ".join(map(str, lengths))


PRECISION_WORDS = {"fp32": "fp32", "bf16": "bf16 autocast", "fp16": "fp16 autocast, loss scaling"}
"""How the banner names each ``harness.training.precision`` precision a run trains in."""

EVAL_PRECISION_WORDS = {**PRECISION_WORDS, "fp16": "fp16 autocast"}
"""How it names the precision a run is tested in: evaluation computes no loss and takes no
gradient, so fp16 there has nothing to scale."""


def describe_preset(preset: str, configs: Sequence[RunConfig]) -> list[str]:
    """What the runs of ``preset`` (``configs``) are: its one-line purpose, then the
    model, training and testing as the configs have them (several values where a sweep
    varies them)."""
    b = lambda f: _values(configs, lambda c: getattr(c.backbone, f))  # noqa: E731
    t = lambda f: _values(configs, lambda c: getattr(c.train, f))  # noqa: E731
    e = lambda f: _values(configs, lambda c: getattr(c.eval, f))  # noqa: E731
    train = _values(configs, lambda c: _lengths(c.train_lengths()))
    test = _values(configs, lambda c: _lengths(c.test_lengths()))
    packed = f", packed in rows of {t('pack')} tokens" if any(c.train.pack for c in configs) else ""
    periodic = ""
    if any(c.eval.every for c in configs):
        periodic = f"; also every {e('every')} steps, reporting {e('select')}"
    short = []  # tasks with no instances at the largest asked scales: say where they stop
    for task_name in dict.fromkeys(c.task for c in configs if not c.is_lm):
        task = tasks.create(task_name)
        asked = sorted({n for c in configs if c.task == task_name for n in c.test_lengths()})
        reached = [n for n in asked if task.has_scale(n)]
        if reached and reached[-1] < asked[-1]:
            short.append(f"{task_name} only up to {reached[-1]}, the largest it has instances of")
    if short:
        test += f" ({'; '.join(short)})"
    precision = _values(configs, lambda c: PRECISION_WORDS[c.train.precision])
    evaluated = _values(
        configs, lambda c: EVAL_PRECISION_WORDS[evaluation_precision(c.eval.precision, c.train.precision)]
    )
    if all(c.is_lm for c in configs):  # bytes: windows of L, bits per byte on held-out regions
        testing = (
            f"  testing: bits per byte at {_values(configs, lambda c: _lengths(list(c.lm_eval.lengths)))} bytes on "
            f"{e('regions')} held-out regions, passkey {e('passkey')} samples a cell ({evaluated})"
        )
        training = f"on windows of {train} bytes"
    else:
        testing = f"  testing: lengths {test}, {e('samples')} examples each ({evaluated}){periodic}"
        training = f"on lengths {train}{packed}"
    return [
        f"preset {preset}: {PRESET_DESCRIPTIONS.get(preset, '')}".rstrip(": "),
        f"  model: {_values(configs, lambda c: c.protocol)}, d_model {b('d_model')}, "
        f"{_counted(b('n_layers'), 'layer')}, {_counted(b('n_heads'), 'head')}, {b('backend')} attention"
        f"{'' if b('head') == 'tied' else ', ' + b('head') + ' output layer'}",
        f"  training: {t('steps')} steps of batch {t('batch_size')} (lr {t('lr')}, {precision}) {training}",
        testing,
    ]


def gpu_hint(configs: Sequence[RunConfig], device_type: str) -> str | None:
    """On CUDA with a CPU-sized preset, which preset a GPU user likely wants."""
    cpu = [p for p in dict.fromkeys(c.preset for c in configs) if p in CPU_PRESETS]
    if device_type != "cuda" or not cpu:
        return None
    gpu = PRESETS[GPU_PRESET]
    return (
        f"note: preset {cpu[0]} is sized for a CPU; on a GPU you likely want --preset {GPU_PRESET} "
        f"(d_model {gpu['backbone']['d_model']}, {gpu['backbone']['n_layers']} layers, "
        f"{gpu['train']['steps']} steps of batch {gpu['train']['batch_size']})"
    )


def longest_training_sequence(cfg: RunConfig, samples: int = 32) -> int:
    """Tokens in the longest training sequence of ``cfg`` (``<bos>`` and ``<eos>`` included),
    over ``samples`` draws at its largest training scale: what a RoPE context extension's
    original length must cover (a language-modelling run's: its windows, BOS included)."""
    if cfg.is_lm:
        return cfg.train.train_max
    return longest_training_tokens(cfg.task, cfg.train.train_max, samples)


def extension_notes(configs: Sequence[RunConfig]) -> list[str]:
    """A note for each RoPE context-extension variant whose original length L
    (``original_max_position_embeddings``) is shorter than the sequences its weights were
    trained on: the scaling then treats trained lengths as new ones (dynamic NTK rescales
    them). Decoder runs without packing, where a sequence is one example."""
    notes, seen = [], set()
    for cfg in configs:
        scaling = cfg.eval_pe_options.get("scaling")
        if not isinstance(scaling, Mapping) or cfg.protocol != "decoder" or cfg.train.pack:
            continue
        original = scaling.get("original_max_position_embeddings")
        key = (config_display_name(cfg), cfg.task, cfg.train.train_max)
        if not isinstance(original, int) or key in seen:
            continue
        seen.add(key)
        longest = longest_training_sequence(cfg)
        if original < longest:
            notes.append(
                f"note: {key[0]} on {cfg.task}: original_max_position_embeddings = {original}, but its training "
                f"sequences are up to {longest} tokens at scale {cfg.train.train_max} (<bos> and <eos> included), so "
                "the scaling treats trained lengths as new ones (dynamic NTK rescales them); docs/sweeps.md"
            )
    return notes


def wall_line(plan: Plan, workers: int, others: int = 0) -> str:
    """The estimated wall time of the plan's missing runs on ``workers`` workers in the
    order given (the driver's list scheduling), its device time and what it rests on.
    ``others``: other processes training runs of the same plan from the same store, each
    counted as one more worker (they share the runs through the store's claims)."""
    if not plan.missing:
        return "estimated wall time: none, every run is finished in the store"
    wall = wall_seconds(plan, workers + others)
    if wall is None:
        on = f" on {plan.device_type}" if plan.device_type else ""
        return (
            f"estimated wall time: unknown ({plan.unestimated} of {_plural(plan.missing, 'run')} to train have no "
            f"finished run of the same encoding, task and model{on} in the store to estimate from, and no speed is "
            "recorded for their preset; `pezoo sweep plan` also borrows from similar and published runs, roughly)"
        )
    device = format_duration(plan.device_hours * 3600)
    about = "under 1s" if wall[0] < 1 else f"about {format_duration(wall[0])}"
    on = _plural(workers, "worker")
    if others:
        on += f" and {others} other process{'es' if others > 1 else ''} on this store"
    return f"estimated wall time: {about} on {on} (device time {device}; {estimate_bases(plan)})"


def bench_announcement(
    configs: Sequence[RunConfig],
    plan: Plan,
    *,
    store_path: str | Path,
    where: str,
    runner: str,
    workers: int,
    device_type: str,
    others: int = 0,
) -> str:
    """The lines ``pezoo bench`` prints before it starts: runs, presets, where, how long.

    ``where``: the device in words (``cpu``, ``a Ray cluster (cuda)``); ``runner``: how
    the runs go (``in this process``, ``in 4 worker processes``); ``workers``: runs in
    flight at once; ``device_type``: ``cpu`` or ``cuda``; ``others``: other processes
    training runs of this sweep from the same store (see :func:`wall_line`)."""
    counts = plan.counts()
    todo = plan.missing
    pes = _names([config_display_name(c) for c in configs])
    tasks = _names([c.task for c in configs])
    seeds = _names([str(c.seed) for c in configs])
    axes = [a for a in varying_axes(configs) if a != "preset"]
    grid = f" ({pes} on {tasks}, seed {seeds}{', varying ' + ', '.join(axes) if axes else ''})"
    # `running` here is a live claim (a claim whose process is gone counts as interrupted):
    # another process trains it, and this one skips it unless that process stops
    resumable = ", ".join(
        f"{n} {k}" for k, n in sorted(counts.items()) if k not in ("finished", "not started", "running")
    )
    parts = [f"{resumable}: resumed from a checkpoint where there is one"] if resumable else []
    if counts.get("running"):
        parts.append(f"{counts['running']} running in another process: left to it")
    # variants, and runs of a training whose weights another run kept: evaluated, never trained
    kept = sum(
        r.status != "finished"
        and (r.config.is_variant or (r.estimate is not None and r.estimate.from_step >= r.config.train.steps))
        for r in plan.runs
    )
    work = f"{todo - kept} to train" + (f", {kept} to evaluate on kept weights" if kept else "")
    lines = [
        f"pezoo bench: {_plural(len(plan.runs), 'run')}{grid}: {plan.done} already in the store ({store_path}), "
        + work
        + (f" ({'; '.join(parts)})" if parts else "")
    ]
    for preset in dict.fromkeys(c.preset for c in configs):
        lines += describe_preset(preset, [c for c in configs if c.preset == preset])
    lines.append(f"device {where}: {runner}")
    hint = gpu_hint(configs, device_type)
    if hint:
        lines.append(hint)
    lines += extension_notes(configs)
    lines.append(wall_line(plan, workers, others))
    return "\n".join(lines)
