"""How long a run will take on this device: a short ordered list of speed sources, the
first that knows the run's speed answers.

A run's device time is ``(steps left) / steps/s + (evaluation units) × eval s/unit``.
``pezoo bench`` asks only what it needs (:func:`sources` with ``borrow=False``):

1. this store's finished runs of the same encoding (options included), task and model
   (preset, backbone, batch, training lengths, protocol, precision) on the same kind of
   device (:data:`SAME_RUN`), speeds measured on another CPU scaled to this one
   (:func:`machine_scales`);
2. a probe: a few training steps of the run timed here (``harness.training.probe``; ``pezoo sweep
   plan --probe`` and ``pezoo bench --time-limit`` take one);
3. the preset's recorded speed on this kind of device (``harness.sweeps.speeds``, rough);

else the estimate is *unknown*. ``pezoo sweep plan`` (``borrow=True``) also borrows, after
the probe: from this store's runs of similar runs (:func:`similar_runs`: the same encoding
on other tasks scaled by the tasks' speed ratio, other options, other encodings on the
task, the same model), then from the published runs (the leaderboard's, through the
``pezoo.published_runs`` entry points) in the same order, rough; a plan of a whole board
wants a number for every run, even a borrowed one.
"""

from __future__ import annotations

import functools
import json
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from harness.config import RunConfig, preset_config
from harness.sweeps.speeds import recorded_speed
from pezoo.spec import PeSpec


def device_kind(device: str) -> str:
    """``cpu`` or ``cuda`` from a run's recorded device (``cuda:NVIDIA H100``, ``cpu:x86_64 x1 threads``)."""
    return device.split(":", 1)[0]


def eval_units(cfg: RunConfig) -> int:
    """Evaluation work in (example × evaluated scale) units: ``samples × #scales`` (a
    language-modelling run: its scored regions × lengths)."""
    per_scale = cfg.lm_eval.regions if cfg.is_lm else cfg.decode_eval.samples
    return per_scale * (len(cfg.train_lengths()) + len(cfg.test_lengths()))


def _model_key(cfg: RunConfig) -> tuple[Any, ...]:
    """What sets a run's cost per step: the preset, the backbone (a frozen dataclass:
    compared field by field), batch size, training lengths, protocol and precision (a bf16
    step costs about 0.6 of an fp32 one on CPU; steps, evaluation samples and test lengths
    scale the estimate)."""
    return (cfg.preset, cfg.backbone, cfg.train.batch_size, cfg.train.train_max, cfg.protocol, cfg.train.precision)


def _encoding_key(cfg: RunConfig) -> tuple[str, str]:
    """The encoding *with its options*: ``prism{paper}`` resolves to one PRISM layer on
    copy and two on odds_first, which train at very different speeds."""
    return cfg.pe, json.dumps(dict(cfg.pe_options), sort_keys=True, default=str)


def probe_key(cfg: RunConfig) -> tuple[Any, ...]:
    """Runs that train at one speed: the same encoding (options included), task and model."""
    return (*_encoding_key(cfg), cfg.task, *_model_key(cfg))


SAME_RUN = "same encoding, task and model"
"""The basis of an estimate from finished runs that train at the run's own speed (:func:`probe_key`)."""

SIMILAR: tuple[tuple[str, Callable[[RunConfig], tuple[Any, ...]]], ...] = (
    ("same encoding name, task and model, other options", lambda c: (c.pe, c.task, *_model_key(c))),
    ("same task and model", lambda c: (c.task, *_model_key(c))),
    ("same encoding and model", lambda c: (*_encoding_key(c), *_model_key(c))),
    ("same encoding name and model, other options", lambda c: (c.pe, *_model_key(c))),
    ("same model", _model_key),
)
"""Which runs ``pezoo sweep plan`` borrows a speed from when none trains at the run's own
(:func:`similar_runs`), closest first.

The task comes before the encoding alone: a task's rows set the sequence length, which
moves the speed more than the encoding does for most encodings (on the committed CPU
board addition trains 3-4x slower than stack_manipulation; PRISM about 1.7x slower than
NoPE on the same task), but not for a wide PRISM (prism{paper}: 2.2 steps/s on copy,
where the other encodings run 7-10), so the same encoding on other tasks, scaled by the
tasks' speed ratio, comes first (:func:`scaled_rate`), and the encoding's name with other
options before the other encodings on this task. Options can still move the speed
(prism{paper} with two layers trains about 4x slower than with one), which only a probe
or a finished run measures. There is no level below the same model (preset included): a
run of another size says nothing reliable (a store of smoke runs put the quick board at
61 s per run; it took 8-12 h)."""


@dataclass(frozen=True)
class Measurement:
    """A finished run's speed: training steps/s and evaluation seconds per unit."""

    config: RunConfig
    steps_per_second: float
    eval_seconds_per_unit: float
    device: str
    cpu: str | None = None  # provenance["cpu"], None where the run did not record it


def measurements(runs: Iterable[Mapping[str, Any]]) -> list[Measurement]:
    """Speeds of the finished runs of a store (``Store.runs()`` rows) with timings."""
    out = []
    for run in runs:
        if run["status"] != "finished" or not run.get("train_seconds"):
            continue
        try:
            cfg = RunConfig.from_dict(run["config"])
        except (TypeError, ValueError):  # a config this version cannot read: no estimate from it
            continue
        out.append(
            Measurement(
                cfg,
                cfg.train.steps / run["train_seconds"],
                (run.get("eval_seconds") or 0.0) / eval_units(cfg),
                str(run["provenance"].get("device", "?")),
                run["provenance"].get("cpu"),
            )
        )
    return out


def unmeasured(
    configs: Sequence[RunConfig], store_runs: Iterable[Mapping[str, Any]], device_type: str | None = None
) -> list[RunConfig]:
    """One config per :func:`probe_key` group that has missing runs to train and no
    finished run in the store on ``device_type`` (any when None): what
    ``pezoo sweep plan --probe`` times."""
    rows = list(store_runs)
    finished = {r["run_id"] for r in rows if r["status"] == "finished"}
    measured = {
        probe_key(m.config) for m in measurements(rows) if device_type is None or device_kind(m.device) == device_type
    }
    groups: dict[tuple[Any, ...], RunConfig] = {}
    for cfg in configs:
        key = probe_key(cfg)
        if cfg.run_id() not in finished and not cfg.is_variant and key not in measured:
            groups.setdefault(key, cfg)
    return list(groups.values())


@dataclass(frozen=True)
class MachineScale:
    """How much faster this CPU trains ``encoding`` than another CPU does (or than the runs
    that did not record their CPU do): the median, over that encoding's runs measured on
    both (same options, task and model), of this CPU's speed over the other's, from
    ``pairs`` of them. Per encoding because encodings gain unequally from a faster CPU: on
    this project's two VMs plain attention trained 3.3x faster on the newer one, PRISM's
    sequential scan 1.7x; a factor borrowed across encodings would have promised PRISM's
    run in half the time it took, and a time limit would have started it."""

    factor: float
    pairs: int
    encoding: str


def machine_scales(measured: Iterable[Measurement], here: str) -> dict[tuple[str | None, str], MachineScale]:
    """For each other CPU among the CPU runs (None: runs that did not record one) and each
    encoding name measured both there and ``here`` (``harness.records.provenance.cpu_name()``), its
    :class:`MachineScale`."""
    rates: dict[str | None, dict[tuple[Any, ...], list[float]]] = {}
    names: dict[tuple[Any, ...], str] = {}
    for m in measured:
        if device_kind(m.device) == "cpu":
            key = probe_key(m.config)
            rates.setdefault(m.cpu, {}).setdefault(key, []).append(m.steps_per_second)
            names[key] = m.config.pe
    mine = rates.get(here, {})
    scales: dict[tuple[str | None, str], MachineScale] = {}
    for cpu, by_key in rates.items():
        if cpu == here:
            continue
        ratios = {k: statistics.median(mine[k]) / statistics.median(v) for k, v in by_key.items() if k in mine}
        for name in sorted({names[k] for k in ratios}):
            own = [r for k, r in ratios.items() if names[k] == name]
            scales[cpu, name] = MachineScale(statistics.median(own), len(own), name)
    return scales


def scaled_to_machine(
    measured: Sequence[Measurement], scales: Mapping[tuple[str | None, str], MachineScale]
) -> list[Measurement]:
    """``measured`` with each CPU run from another machine timed as if it had run here
    (speeds × its machine's factor for its encoding); runs with no factor are kept as they
    are: an encoding not yet run here is estimated at the other machine's speed."""
    out = []
    for m in measured:
        scale = scales.get((m.cpu, m.config.pe)) if device_kind(m.device) == "cpu" else None
        if scale is None:
            out.append(m)
        else:
            out.append(
                replace(
                    m,
                    steps_per_second=m.steps_per_second * scale.factor,
                    eval_seconds_per_unit=m.eval_seconds_per_unit / scale.factor,
                )
            )
    return out


@dataclass(frozen=True)
class Speed:
    """A run's speed as one source knows it: training steps/s, evaluation seconds per unit
    (:func:`eval_units`), what it rests on (``basis``, in the plan's words) and on how many
    finished runs (0 for a probe or a recorded speed); ``rough`` when measured elsewhere."""

    steps_per_second: float
    eval_seconds_per_unit: float
    basis: str
    n_measured: int
    rough: bool = False


Source = Callable[[RunConfig], Speed | None]
"""A speed source: a run's :class:`Speed`, or None when it has none for that run."""


def _median(runs: Sequence[Measurement], get: Callable[[Measurement], float]) -> float:
    return statistics.median(get(m) for m in runs)


def same_runs(cfg: RunConfig, measured: Sequence[Measurement], *, rough: bool = False) -> Speed | None:
    """The median speed of the finished runs that train at ``cfg``'s own speed
    (:data:`SAME_RUN`); ``rough``: published runs (another machine)."""
    runs = [m for m in measured if probe_key(m.config) == probe_key(cfg)]
    if not runs:
        return None
    basis = f"published runs of the {SAME_RUN} (rough: another machine)" if rough else SAME_RUN
    rate, per_unit = _median(runs, lambda m: m.steps_per_second), _median(runs, lambda m: m.eval_seconds_per_unit)
    return Speed(rate, per_unit, basis, len(runs), rough)


def probed(
    cfg: RunConfig, probes: Mapping[tuple[Any, ...], tuple[float, int]], measured: Sequence[Measurement]
) -> Speed | None:
    """The speed probed here (``harness.training.probe.probe_speeds``: ``probe_key`` -> (steps/s,
    steps timed)), evaluation from the closest finished runs; a variant trains nothing to probe."""
    found = probes.get(probe_key(cfg))
    if found is None or cfg.is_variant:
        return None
    return Speed(found[0], _closest_eval(cfg, measured), f"a probe here ({found[1]} steps of a fresh model)", 0)


def _closest_eval(cfg: RunConfig, measured: Sequence[Measurement]) -> float:
    """Evaluation seconds per unit of the closest finished runs (small beside training, and
    it varies less), 0 without any of the same model."""
    for key in (probe_key, *(k for _, k in SIMILAR)):
        group = [m for m in measured if key(m.config) == key(cfg)]
        if group:
            return _median(group, lambda m: m.eval_seconds_per_unit)
    return 0.0


def similar_runs(
    cfg: RunConfig, measured: Sequence[Measurement], ratio_runs: Sequence[Measurement] = (), *, rough: bool = False
) -> Speed | None:
    """A speed borrowed from runs like ``cfg``, closest first: the same encoding on other
    tasks scaled by the tasks' speed ratio (:func:`scaled_rate`), then :data:`SIMILAR`
    level by level (the encoding's name with other options scaled likewise after its own
    level). ``rough``: published runs (another machine)."""
    found = [(basis, [m for m in measured if key(m.config) == key(cfg)]) for basis, key in SIMILAR]
    found = [(basis, group) for basis, group in found if group]
    rate: float | None = None
    if (scaled := scaled_rate(cfg, measured, ratio_runs)) is not None:
        rate, n, borrowed = scaled
        basis = _scaled_basis("same encoding", borrowed)
    elif found and found[0][0] == SIMILAR[0][0]:
        basis, group = found[0]
        n = len(group)
    elif (scaled := scaled_rate(cfg, measured, ratio_runs, options=False)) is not None:
        rate, n, borrowed = scaled
        basis = _scaled_basis("same encoding name with other options", borrowed)
    elif found:
        basis, group = found[0]
        n = len(group)
    else:
        return None
    if rate is None:
        rate = _median(group, lambda m: m.steps_per_second)
    per_unit = _median(found[0][1], lambda m: m.eval_seconds_per_unit) if found else 0.0
    if rough:
        basis = f"published runs of the {basis} (rough: another machine)"
    return Speed(rate, per_unit, basis, n, rough)


def recorded(cfg: RunConfig, device_type: str | None) -> Speed | None:
    """The preset's recorded speed on ``device_type`` (``harness.sweeps.speeds``, rough), for a run
    of the preset's own model only."""
    found = recorded_speed(cfg.preset, device_type, cfg.task)
    if found is None or _model_key(cfg) != _preset_model_key(cfg.preset, cfg.task):
        return None
    where = "rough: another machine, harness/sweeps/speeds.py"
    basis = f"the recorded speed of preset {cfg.preset} on {device_type} ({where})"
    return Speed(found.steps_per_second, found.eval_seconds_per_unit, basis, 0, rough=True)


@functools.cache
def _preset_model_key(preset: str, task: str) -> tuple[Any, ...]:
    return _model_key(preset_config(preset, pe=PeSpec("nope"), task=task, seed=0))


def sources(
    measured: Sequence[Measurement],
    *,
    device_type: str | None = None,
    probes: Mapping[tuple[Any, ...], tuple[float, int]] | None = None,
    borrow: bool = False,
    published: Sequence[Measurement] = (),
) -> list[Source]:
    """The speed sources of a plan, in order (module docstring). ``measured``: this store's
    finished runs; ``device_type`` (``cpu``/``cuda``; any when None): only runs on that kind
    of device count; ``borrow``: also similar runs of the store, then ``published`` runs."""
    here = [m for m in measured if device_type is None or device_kind(m.device) == device_type]
    ordered: list[Source] = [partial(same_runs, measured=here), partial(probed, probes=probes or {}, measured=here)]
    if borrow:
        elsewhere = [m for m in published if device_type is None or device_kind(m.device) == device_type]
        ratio_runs = [*here, *elsewhere]
        ordered += [
            partial(similar_runs, measured=here, ratio_runs=ratio_runs),
            partial(same_runs, measured=elsewhere, rough=True),
            partial(similar_runs, measured=elsewhere, ratio_runs=ratio_runs, rough=True),
        ]
    return [*ordered, partial(recorded, device_type=device_type)]


@dataclass(frozen=True)
class Estimate:
    """Estimated device seconds of one run (what is left of it), and which runs it was
    estimated from; ``from_step`` > 0 when it resumes from a checkpoint at that step.
    ``rough``: not from this store's runs but from published runs or a recorded speed
    (another machine)."""

    seconds: float
    basis: str
    steps_per_second: float
    n_measured: int
    from_step: int = 0
    rough: bool = False


def estimate(cfg: RunConfig, speed_sources: Sequence[Source], from_step: int = 0) -> Estimate | None:
    """``(steps - from_step) / steps/s + units × eval s/unit`` from the first source that
    knows the run's speed (``from_step``: the step its checkpoint holds, 0 without one; a
    variant only evaluates); None when none does."""
    left = 0 if cfg.is_variant else max(0, cfg.train.steps - from_step)
    for source in speed_sources:
        speed = source(cfg)
        if speed is not None:
            seconds = left / speed.steps_per_second + eval_units(cfg) * speed.eval_seconds_per_unit
            return Estimate(seconds, speed.basis, speed.steps_per_second, speed.n_measured, from_step, speed.rough)
    return None


def _scaled_basis(encoding: str, borrowed: bool) -> str:
    """How :func:`scaled_rate` estimated a run, in the plan's words."""
    basis = f"{encoding} on other tasks, scaled by the tasks' speed ratio"
    return basis + (" (of another preset's runs of this model shape)" if borrowed else "")


def scaled_rate(
    cfg: RunConfig, runs: Sequence[Measurement], ratio_runs: Sequence[Measurement] = (), *, options: bool = True
) -> tuple[float, int, bool] | None:
    """Steps/s of ``cfg`` from the same encoding (options included) on other tasks, each
    scaled by how much faster the other encodings measured on both tasks train on
    ``cfg``'s task: ``median over T' of rate(E, T') x median over X of rate(X, T) /
    rate(X, T')``, X among ``runs`` of ``cfg``'s model.

    Where no other encoding of this model has run on both tasks (a board filled task by
    task has only its first task's runs), the ratio comes from ``ratio_runs`` of *other
    presets* with the same model shape (backbone, batch size, training lengths, protocol):
    a step's cost ratio between two tasks is set by their sequence lengths and the model,
    not by how many steps a preset trains. Every encoding measured on both tasks there
    counts, per preset.

    ``options=False``: E is the encoding's name with any options (another PRISM setup of
    ``prism{paper}`` on another task): its own cost is still the better guide than other
    encodings on this task, where the encoding sets the speed.

    Returns (rate, runs it rests on, whether a ratio came from another preset), or None
    without such runs."""
    model, enc = _model_key(cfg), (*_encoding_key(cfg), cfg.preset)

    def same(e: tuple[Any, ...]) -> bool:
        return e == enc if options else (e[0], e[2]) == (cfg.pe, cfg.preset)

    median = _median_rates(m for m in runs if _model_key(m.config) == model)
    shape = _model_key(cfg)[1:]
    elsewhere = _median_rates(
        m for m in ratio_runs if m.config.preset != cfg.preset and _model_key(m.config)[1:] == shape
    )
    estimates, used, borrowed = [], 0, False
    for (e, task), (rate, n) in median.items():
        if not same(e) or task == cfg.task:
            continue
        ratios = [
            median[x, cfg.task][0] / median[x, task][0]
            for (x, t) in median
            if t == task and x != e and (x, cfg.task) in median
        ]
        if not ratios:
            ratios = [
                elsewhere[x, cfg.task][0] / elsewhere[x, t][0]
                for (x, t) in elsewhere
                if t == task and (x, cfg.task) in elsewhere
            ]
            borrowed = borrowed or bool(ratios)
        if ratios:
            estimates.append(rate * statistics.median(ratios))
            used += n + len(ratios)
    return (statistics.median(estimates), used, borrowed) if estimates else None


def _median_rates(runs: Iterable[Measurement]) -> dict[tuple[Any, str], tuple[float, int]]:
    """(encoding with options [and preset], task) -> (median steps/s, runs) of ``runs``."""
    rates: dict[tuple[Any, str], list[float]] = {}
    for m in runs:
        key = (*_encoding_key(m.config), m.config.preset)
        rates.setdefault((key, m.config.task), []).append(m.steps_per_second)
    return {k: (statistics.median(v), len(v)) for k, v in rates.items()}


def steps_done(
    checkpoint_dir: str | Path, configs: Sequence[RunConfig], rows: Sequence[Mapping[str, Any]]
) -> dict[str, int]:
    """What the estimate counts as trained of each run: its checkpoint's step
    (:func:`checkpointed_steps`), or every step for a run that will evaluate the weights
    another run of the store (``rows``: its runs) kept instead of training
    (``harness.execution.kept_weights.weights_source``; only weights a finished run's record vouches for)."""
    from harness.execution.kept_weights import recorded_weights, trusted_weights, weights_source

    steps = checkpointed_steps(checkpoint_dir, [c.run_id() for c in configs])
    recorded = recorded_weights(rows)
    for cfg in configs:
        if not cfg.is_variant and weights_source(cfg, checkpoint_dir, trusted_weights(cfg, recorded)) is not None:
            steps[cfg.run_id()] = cfg.train.steps
    return steps


def checkpointed_steps(checkpoint_dir: str | Path, run_ids: Iterable[str]) -> dict[str, int]:
    """The training step each run's checkpoint holds, for the runs that have a readable one
    in ``checkpoint_dir`` (a missing or unreadable checkpoint means starting from step 0,
    which is what the run will do): what the estimate counts as done. Checkpoints are read
    without running code and their tensors mapped, not read
    (``harness.training.checkpoint.load_checkpoint``); nothing is changed: an unusable one is set
    aside only when its run starts."""
    from harness.execution.run import checkpoint_path
    from harness.training.checkpoint import CheckpointError, load_checkpoint

    steps = {}
    for run_id in run_ids:
        path = checkpoint_path(checkpoint_dir, run_id)
        if not path.is_file():
            continue
        try:
            steps[run_id] = load_checkpoint(path, run_id, mmap=True)["step"]
        except CheckpointError:  # the run starts over
            continue
    return steps
