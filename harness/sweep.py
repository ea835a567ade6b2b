"""Sweep specifications (from the command line or a TOML file) and sweep plans.

A sweep is a union of *grids*; a grid is the cross product

    task × pe × (every list-valued override, in ``AXES`` order) × seed

of ``RunConfig`` s built from one preset (``harness.config.preset_config``). The same
names serve the command line (``--pe nope,rope --lr 1e-3,3e-4 --seeds 3``) and a sweep
file read with the standard library's ``tomllib``::

    preset = "quick"
    pe = ["nope", "rope", "randomized:rope", "prism{paper}"]   # specs: harness.pe_spec
    task = ["copy", "reverse"]
    seeds = 3                  # a count from `seed` (default 0), or a list: [0, 4, 7]
    lr = [1e-3, 3e-4]          # any override may be one value or a list (a grid axis)

    [[grid]]                   # optional: several grids, each over the keys above
    task = ["addition"]
    steps = 3000

Without ``[[grid]]`` tables the top-level keys are the one grid; with them, the top
level only gives defaults to every ``[[grid]]``. Unknown keys are errors naming the
valid ones. A run that two grids both contain (same ``run_id``) is planned once.

The plan (:func:`make_plan`) says, for a store, which runs are done and which are
missing, and estimates the device time of the missing ones from the training speed
(steps/s = ``train.steps / train_seconds``) and evaluation time of finished runs of the
same preset and model on the same kind of device; else, marked rough, from published
runs or from the preset's recorded speed (``harness.speeds``); else it says *unknown*.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import json
import math
import statistics
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.backbone import BackboneConfig
from harness.config import INT64_MAX, PRESETS, RunConfig, check_int, check_number, preset_config
from harness.pe_spec import config_display_name, names, pe_values
from harness.reading import TOML_LIMIT, FileReadError, parse_toml, read_text
from harness.speeds import recorded_speed

AXES: dict[str, tuple[str, str, type]] = {
    "steps": ("train", "steps", int),
    "batch_size": ("train", "batch_size", int),
    "lr": ("train", "lr", float),
    "train_len": ("train", "train_max", int),
    "test_len": ("eval", "test_max", int),
    "test_stride": ("eval", "test_stride", int),
    "eval_samples": ("eval", "samples", int),
    "eval_every": ("eval", "every", int),
    "eval_start_loss": ("eval", "start_below_loss", float),
    "eval_select": ("eval", "select", str),
    "backend": ("backbone", "backend", str),
    "pack": ("train", "pack", int),
    "window": ("eval", "window", int),
    "precision": ("train", "precision", str),
    "eval_precision": ("eval", "precision", str),
}
"""Override axes: sweep/CLI name -> (config section, config key, value type)."""


MAX_RUNS = 100_000
"""The most runs a sweep may hold unless told otherwise (``bench``/``sweep plan --max-runs``):
more is almost surely a typo (``seeds = 1000000``), and building them would take the memory."""


def check_size(runs: int, max_runs: int | None) -> None:
    """ValueError if a sweep of ``runs`` runs exceeds ``max_runs`` (None: no limit)."""
    if max_runs is not None and runs > max_runs:
        raise ValueError(
            f"the sweep holds {runs:,} runs, more than the limit of {max_runs:,}; split it, or raise the "
            "limit with --max-runs"
        )


@dataclass(frozen=True)
class Grid:
    """One cross product of runs.

    Attributes:
        preset: the named protocol every run starts from.
        pe: encoding specs (``harness.pe_spec``: registry names, wrappers included, with
            options: ``randomized:rope``, ``prism{paper}``, ``prism{n_cursors=4}``).
        task: tasks.
        seeds: the seeds, each a separate run.
        steps, batch_size, lr, train_len, test_len, test_stride, eval_samples,
        eval_every, eval_start_loss, eval_select, backend, pack, window, precision,
        eval_precision: override axes (see
            ``AXES``); empty = the preset's value, several values = one run per value.
    """

    preset: str = "quick"
    pe: tuple[str, ...] = ()
    task: tuple[str, ...] = ()
    seeds: tuple[int, ...] = (0,)
    steps: tuple[int, ...] = ()
    batch_size: tuple[int, ...] = ()
    lr: tuple[float, ...] = ()
    train_len: tuple[int, ...] = ()
    test_len: tuple[int, ...] = ()
    test_stride: tuple[int, ...] = ()
    eval_samples: tuple[int, ...] = ()
    eval_every: tuple[int, ...] = ()
    eval_start_loss: tuple[float, ...] = ()
    eval_select: tuple[str, ...] = ()
    backend: tuple[str, ...] = ()
    pack: tuple[int, ...] = ()
    window: tuple[int, ...] = ()
    precision: tuple[str, ...] = ()
    eval_precision: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; valid presets: {', '.join(PRESETS)}")
        if not self.pe or not self.task:
            raise ValueError("a sweep needs at least one encoding (pe) and one task")
        if not self.seeds:
            raise ValueError("a sweep needs at least one seed")

    def size(self) -> int:
        """How many runs the grid holds (counted, not built)."""
        return math.prod(len(v) for v in (self.task, self.pe, self.seeds, *(getattr(self, a) for a in AXES)) if v)

    def configs(self, max_runs: int | None = MAX_RUNS) -> list[RunConfig]:
        """The grid's runs, in order task, pe, override axes, seed (ValueError if one is
        invalid, or if there are more than ``max_runs``: None for no limit). An inference-time
        variant (``rope@{...}``) comes right after its trained run, which is added if the
        grid does not list it."""
        check_size(self.size(), max_runs)
        axes = [(name, values) for name in AXES if (values := getattr(self, name))]
        combos = list(itertools.product(*(values for _, values in axes)))
        runs: list[RunConfig] = []
        for task, pe, combo, seed in itertools.product(self.task, self.pe, combos, self.seeds):
            overrides: dict[str, dict[str, Any]] = {}
            for (name, _), value in zip(axes, combo, strict=True):
                section, key, _ = AXES[name]
                overrides.setdefault(section, {})[key] = value
            cfg = preset_config(self.preset, pe=pe, task=task, seed=seed, overrides=overrides)
            if "start_below_loss" in overrides.get("eval", {}) and cfg.eval.every == 0:
                # it would do nothing but change the run id: a finished run would train again
                raise ValueError(
                    "eval.start_below_loss delays periodic evaluation, and this run evaluates only its final "
                    "model (eval.every is 0): set eval.every > 0 too"
                )
            if cfg.is_variant:  # a variant needs its trained run: planned first, once
                trained = cfg.trained_config()
                if all(r.run_id() != trained.run_id() for r in runs):
                    runs.append(trained)
            runs.append(cfg)
        return runs


@dataclass(frozen=True)
class SweepSpec:
    """A union of grids; ``configs()`` lists each distinct run once, in grid order."""

    grids: tuple[Grid, ...]

    def size(self) -> int:
        """How many runs the grids hold together (a run in two grids counted twice)."""
        return sum(g.size() for g in self.grids)

    def configs(self, max_runs: int | None = MAX_RUNS) -> list[RunConfig]:
        """ValueError if a run is invalid, or if the grids hold more than ``max_runs`` runs
        (None: no limit), checked before any is built."""
        check_size(self.size(), max_runs)
        seen: set[str] = set()
        runs = []
        for grid in self.grids:
            for cfg in grid.configs(None):
                if cfg.run_id() not in seen:
                    seen.add(cfg.run_id())
                    runs.append(cfg)
        return runs

    def override(self, **values: Any) -> SweepSpec:
        """Replace keys (already parsed: tuples, a preset name) in every grid; None = keep."""
        given = {k: v for k, v in values.items() if v is not None}
        return SweepSpec(tuple(replace(g, **given) for g in self.grids))

    def with_seeds(self, first: int | None, count: int | None) -> SweepSpec:
        """Each grid's seeds with the command line's ``--seed`` (first) and/or ``--seeds``
        (count): a given one replaces the grid's, the other is kept (its first seed, or its
        count). ``--seed`` alone on a grid that lists seeds not in a row (``[0, 4, 7]``) is
        a ValueError: there is no first seed to move."""
        if first is None and count is None:
            return self
        grids = []
        for i, g in enumerate(self.grids, start=1):
            own = tuple(g.seeds)
            in_a_row = own == tuple(range(own[0], own[0] + len(own)))
            if count is None and not in_a_row:
                raise ValueError(
                    f"--seed gives the first of a grid's seeds in a row, but grid {i} lists {list(own)}: "
                    "give --seeds too (the count), or change the file"
                )
            start = own[0] if first is None else first
            grids.append(replace(g, seeds=tuple(range(start, start + (len(own) if count is None else count)))))
        return SweepSpec(tuple(grids))

    def names(self) -> tuple[list[str], list[str]]:
        """Every encoding and task named anywhere in the sweep (for validation)."""
        pes = names(p for g in self.grids for p in g.pe)  # registry names, options left out
        tasks = list(dict.fromkeys(t for g in self.grids for t in g.task))
        return pes, tasks


# --------------------------------------------------------------------------------------
# Parsing: command-line strings and TOML values
# --------------------------------------------------------------------------------------

GRID_KEYS = ("preset", "pe", "task", "seeds", "seed", *AXES)
"""Keys a sweep file (top level or a ``[[grid]]`` table) may hold."""


def parse_list(value: str, kind: type) -> tuple[Any, ...]:
    """``"1e-3, 3e-4"`` -> ``(0.001, 0.0003)`` for kind float (ValueError names the bad item)."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    try:
        return tuple(kind(v) for v in items)
    except ValueError:
        raise ValueError(f"{value!r} is not a comma-separated list of {kind.__name__} values") from None


def _values(key: str, value: Any, kind: type, where: str) -> tuple[Any, ...]:
    """One TOML value or list as a tuple of ``kind``; strings may be comma-separated."""
    items = value if isinstance(value, list) else [value]
    out: list[Any] = []
    for item in items:
        if kind is str and isinstance(item, str):
            out += [v.strip() for v in item.split(",") if v.strip()]
        elif kind is float and isinstance(item, int | float) and not isinstance(item, bool):
            check_number(f"{where}: {key}", item)  # lr = nan, or an int beyond the float range
            out.append(float(item))
        elif kind is int and isinstance(item, int) and not isinstance(item, bool):
            check_int(f"{where}: {key}", item, minimum=-INT64_MAX)
            out.append(item)
        else:
            raise ValueError(f"{where}: {key} must be a {kind.__name__} or a list of them, got {item!r}")
    if not out:
        raise ValueError(f"{where}: {key} is empty")
    return tuple(out)


def grid_from_mapping(values: Mapping[str, Any], where: str = "sweep", max_runs: int | None = MAX_RUNS) -> Grid:
    """A ``Grid`` from sweep-file keys (``GRID_KEYS``); unknown keys, values of the wrong type
    (non-finite numbers, integers beyond SQLite's 64 bits) and a seed count above
    ``max_runs`` are errors naming ``where``."""
    unknown = sorted(set(values) - set(GRID_KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(GRID_KEYS)}")
    kw: dict[str, Any] = {}
    if "preset" in values:
        if not isinstance(values["preset"], str):
            raise ValueError(f"{where}: preset must be a string")
        kw["preset"] = values["preset"]
    if "pe" in values:
        kw["pe"] = pe_values(values["pe"], where)
    if "task" in values:
        kw["task"] = _values("task", values["task"], str, where)
    first = values.get("seed", 0)
    if not isinstance(first, int) or isinstance(first, bool):
        raise ValueError(f"{where}: seed must be an integer (the first seed)")
    check_int(f"{where}: seed (the first seed)", first)
    seeds = values.get("seeds", 1)
    if isinstance(seeds, list):
        if "seed" in values:
            raise ValueError(f"{where}: give either seeds = [list] or seed (first) with seeds (count), not both")
        kw["seeds"] = _values("seeds", seeds, int, where)
    elif isinstance(seeds, int) and not isinstance(seeds, bool) and seeds >= 1:
        try:
            check_size(seeds, max_runs)  # before the seeds are listed: seeds = 10**12 would take the memory
        except ValueError as exc:
            raise ValueError(f"{where}: seeds = {seeds:,}: {exc}") from None
        kw["seeds"] = tuple(range(first, first + seeds))
    else:
        raise ValueError(f"{where}: seeds must be a count >= 1 or a list of seeds")
    for name, (_, _, kind) in AXES.items():
        if name in values:
            kw[name] = _values(name, values[name], kind, where)
    try:
        return Grid(**kw)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def load_sweep(path: str | Path, max_runs: int | None = MAX_RUNS) -> SweepSpec:
    """Read a TOML sweep file (see the module docstring); ValueError says what is wrong and
    names the file. ``max_runs``: see :func:`grid_from_mapping`."""
    path = Path(path)
    try:
        text = read_text(path, TOML_LIMIT)  # a regular file of bounded size (a FIFO would hang)
    except FileReadError as exc:
        reason = exc.reason.replace("not UTF-8 text", "is not UTF-8 text")
        raise ValueError(f"sweep file {path} {reason}") from None
    if not text.strip():
        raise ValueError(f"sweep file {path} is empty; it needs at least pe = [...] and task = [...]")
    try:
        data = parse_toml(text)  # nesting bounded: never a RecursionError
    except ValueError as exc:
        raise ValueError(f"sweep file {path} is {exc}") from None
    tables = data.pop("grid", None)
    if tables is None:
        return SweepSpec((grid_from_mapping(data, str(path), max_runs),))
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise ValueError(f"{path}: grid must be one or more [[grid]] tables")
    return SweepSpec(
        tuple(grid_from_mapping({**data, **t}, f"{path} [[grid]] #{i}", max_runs) for i, t in enumerate(tables, 1))
    )


# --------------------------------------------------------------------------------------
# Labels: what distinguishes the runs of a sweep
# --------------------------------------------------------------------------------------


def _axis_value(cfg: RunConfig, name: str) -> Any:
    section, key, _ = AXES[name]
    return getattr(getattr(cfg, section), key)


def varying_axes(configs: Sequence[RunConfig]) -> list[str]:
    """The override axes (and ``preset``) whose value differs between the runs."""
    names = ["preset"] if len({c.preset for c in configs}) > 1 else []
    return names + [n for n in AXES if len({_axis_value(c, n) for c in configs}) > 1]


def run_label(cfg: RunConfig, axes: Sequence[str] = ()) -> str:
    """``rope on copy seed 0``, plus ``lr 0.0003`` etc. for each of ``axes``."""
    extra = "".join(f" {a} {cfg.preset if a == 'preset' else _axis_value(cfg, a)}" for a in axes)
    return f"{config_display_name(cfg)} on {cfg.task} seed {cfg.seed}{extra}"


# --------------------------------------------------------------------------------------
# Plans: done / missing, and the device time the missing runs need
# --------------------------------------------------------------------------------------


def _backbone_key(cfg: RunConfig) -> BackboneConfig:
    """The backbone, compared field by field (a frozen dataclass: hashable, cheap to
    compare; serialising the whole config for it made ``pezoo sweep plan`` take a minute
    on the board's 273 runs)."""
    return cfg.backbone


def _model_key(cfg: RunConfig) -> tuple[Any, ...]:
    """What sets a run's cost per step: the preset, the backbone, batch size, training
    lengths, protocol and precision (a bf16 step costs about 0.6 of an fp32 one on CPU;
    steps, evaluation samples and test lengths scale the estimate)."""
    return (
        cfg.preset,
        _backbone_key(cfg),
        cfg.train.batch_size,
        cfg.train.train_max,
        cfg.protocol,
        cfg.train.precision,
    )


def _encoding_key(cfg: RunConfig) -> tuple[str, str]:
    """The encoding *with its options*: ``prism{paper}`` resolves to one PRISM layer on
    copy and two on odds_first, which train at very different speeds."""
    return cfg.pe, json.dumps(dict(cfg.pe_options), sort_keys=True, default=str)


MATCH_LEVELS: tuple[tuple[str, Callable[[RunConfig], tuple[Any, ...]]], ...] = (
    ("same encoding, task and model", lambda c: (*_encoding_key(c), c.task, *_model_key(c))),
    ("same encoding name, task and model, other options", lambda c: (c.pe, c.task, *_model_key(c))),
    ("same task and model", lambda c: (c.task, *_model_key(c))),
    ("same encoding and model", lambda c: (*_encoding_key(c), *_model_key(c))),
    ("same encoding name and model, other options", lambda c: (c.pe, *_model_key(c))),
    ("same model", _model_key),
)
"""How a missing run finds measured runs to estimate from: the first level with any
(after the speed probed here, and the same encoding, with its options or failing that
with others, on other tasks scaled by the tasks' speed ratio: see :func:`estimate`).

"Same encoding" includes its options. The task comes before the encoding alone: a task's
rows set the sequence length, which moves the speed more than the encoding does for most
encodings (on the committed CPU board addition trains 3-4x slower than
stack_manipulation; PRISM about 1.7x slower than NoPE on the same task), but not for a
wide PRISM (prism{paper}: 2.2 steps/s on copy, where the other encodings run 7-10), so
the encoding's name with other options, scaled from another task, comes before the
other encodings on this task. Options can still move the speed (prism{paper} with two
layers trains about 4x slower than with one), which only a probe
(``pezoo sweep plan --probe``) or a finished run measures. There is no level
below the same model (preset included): a run of another size says nothing reliable (a
store of smoke runs put the quick board at 61 s per run; it took 8-12 h)."""


def probe_key(cfg: RunConfig) -> tuple[Any, ...]:
    """Runs that train at one speed: the same encoding (options included), task and model."""
    return MATCH_LEVELS[0][1](cfg)


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


def device_kind(device: str) -> str:
    """``cpu`` or ``cuda`` from a run's recorded device (``cuda:NVIDIA H100``, ``cpu:x86_64 x1 threads``)."""
    return device.split(":", 1)[0]


@functools.cache
def _preset_model_key(preset: str, task: str) -> tuple[Any, ...]:
    return _model_key(preset_config(preset, pe="nope", task=task, seed=0))


def eval_units(cfg: RunConfig) -> int:
    """Evaluation work in (example × evaluated scale) units: ``samples × #scales``."""
    return cfg.eval.samples * (len(cfg.train_lengths()) + len(cfg.test_lengths()))


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
    encoding name measured both there and ``here`` (``harness.provenance.cpu_name()``), its
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


def estimate(
    cfg: RunConfig,
    measured: Sequence[Measurement],
    from_step: int = 0,
    *,
    device_type: str | None = None,
    published: Sequence[Measurement] = (),
    probed: tuple[float, int] | None = None,
) -> Estimate | None:
    """``(steps - from_step) / steps/s + units × eval s/unit`` (``from_step``: the step its
    checkpoint holds, 0 without one). Training speed, from the first that has it:

    1. the median of the store's runs (``measured``) on ``device_type`` (``cpu``/``cuda``;
       any when None) of the same encoding (options included), task and model;
    2. ``probed``: (steps/s, steps timed) by :func:`harness.probe.probe_speed` here;
    3. the same encoding on other tasks, scaled by the tasks' speed ratio
       (:func:`scaled_rate`; the ratio from another preset's runs of the same model shape,
       this store's or published, where this preset has none);
    4. the median of the same encoding name with other options, task and model;
    5. the same encoding name with other options on other tasks, scaled likewise;
    6. the median of the next ``MATCH_LEVELS`` level with measurements;

    then the same from ``published`` runs (rough), else the preset's recorded speed on
    ``device_type`` (``harness.speeds``, rough, only for the preset's own model); None
    when there is none of these. Evaluation time comes from the most specific level."""
    left = 0 if cfg.is_variant else max(0, cfg.train.steps - from_step)  # a variant only evaluates
    units = eval_units(cfg)
    ratio_runs = [m for m in (*measured, *published) if device_type is None or device_kind(m.device) == device_type]
    for source, runs in (("", measured), ("published runs of the ", published)):
        runs = [m for m in runs if device_type is None or device_kind(m.device) == device_type]
        found = [(basis, [m for m in runs if key(m.config) == key(cfg)]) for basis, key in MATCH_LEVELS]
        found = [(basis, group) for basis, group in found if group]
        use_probe = probed is not None and not source and left > 0  # a variant trains nothing to probe
        if not found and not use_probe:
            continue
        # evaluation from the closest group: small beside training, and it varies less
        per_unit = statistics.median(m.eval_seconds_per_unit for m in found[0][1]) if found else 0.0
        rough = " (rough: another machine)" if source else ""
        group = found[0][1] if found else []
        named = dict(found).get(MATCH_LEVELS[1][0])  # the encoding's name on this task, other options
        if found and found[0][0] == MATCH_LEVELS[0][0]:
            rate, basis, n = None, found[0][0], len(group)
        elif use_probe and probed is not None:
            rate, n = probed
            basis, n = f"a probe here ({n} steps of a fresh model)", 0
        elif (scaled := scaled_rate(cfg, runs, ratio_runs)) is not None:
            rate, n, borrowed = scaled
            basis = _scaled_basis("same encoding", borrowed)
        elif named:
            rate, basis, n, group = None, MATCH_LEVELS[1][0], len(named), named
        elif (scaled := scaled_rate(cfg, runs, ratio_runs, options=False)) is not None:
            rate, n, borrowed = scaled
            basis = _scaled_basis("same encoding name with other options", borrowed)
        else:
            rate, basis, n = None, found[0][0], len(group)
        if rate is None:
            rate = statistics.median(m.steps_per_second for m in group)
        return Estimate(left / rate + units * per_unit, f"{source}{basis}{rough}", rate, n, from_step, bool(source))
    speed = recorded_speed(cfg.preset, device_type, cfg.task)
    if speed is not None and _model_key(cfg) == _preset_model_key(cfg.preset, cfg.task):
        basis = (
            f"the recorded speed of preset {cfg.preset} on {device_type} (rough: another machine, harness/speeds.py)"
        )
        seconds = left / speed.steps_per_second + units * speed.eval_seconds_per_unit
        return Estimate(seconds, basis, speed.steps_per_second, 0, from_step, rough=True)
    return None


def checkpointed_steps(checkpoint_dir: str | Path, run_ids: Iterable[str]) -> dict[str, int]:
    """The training step each run's checkpoint holds, for the runs that have a readable one
    in ``checkpoint_dir`` (a missing or unreadable checkpoint means starting from step 0,
    which is what the run will do). Checkpoints are read without running code and their
    tensors mapped, not read (``harness.checkpoint.load_checkpoint``); nothing is changed:
    an unusable one is set aside only when its run starts."""
    from harness.checkpoint import CheckpointError, load_checkpoint
    from harness.run import checkpoint_path

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


@dataclass(frozen=True)
class PlannedRun:
    index: int
    config: RunConfig
    status: str | None  # the store's status, None when never started
    estimate: Estimate | None  # only for runs that are not finished


@dataclass(frozen=True)
class Plan:
    """The runs of a sweep against a store."""

    runs: tuple[PlannedRun, ...]
    devices: tuple[str, ...]  # devices the store's measured runs ran on
    device_type: str | None = None  # the kind of device the runs are estimated for (None: any)
    machine_scales: tuple[MachineScale, ...] = ()  # speeds of other CPUs scaled to this one
    machine_names: tuple[str | None, ...] = ()  # the CPU of each of machine_scales (None: not recorded)

    @property
    def done(self) -> int:
        return sum(r.status == "finished" for r in self.runs)

    @property
    def missing(self) -> int:
        return len(self.runs) - self.done

    def counts(self) -> dict[str, int]:
        """Runs per store status (``not started`` for runs the store has never seen)."""
        counts: dict[str, int] = {}
        for r in self.runs:
            key = r.status or "not started"
            counts[key] = counts.get(key, 0) + 1
        return counts

    @property
    def device_hours(self) -> float:
        """Estimated device hours of the missing runs that have an estimate."""
        return sum(r.estimate.seconds for r in self.runs if r.estimate is not None) / 3600

    @property
    def unestimated(self) -> int:
        return sum(r.status != "finished" and r.estimate is None for r in self.runs)


def make_plan(
    configs: Sequence[RunConfig],
    store_runs: Iterable[Mapping[str, Any]],
    resume_steps: Mapping[str, int] | None = None,
    *,
    device_type: str | None = None,
    published: Iterable[Mapping[str, Any]] = (),
    probes: Mapping[tuple[Any, ...], tuple[float, int]] | None = None,
    lapsed: Collection[str] = (),
    machine: str | None = None,
) -> Plan:
    """Done/missing per run and an estimate for each missing one (``store_runs`` are
    ``Store.runs()`` rows; pass ``[]`` for a store that does not exist yet).
    ``resume_steps`` (run id → step, from ``checkpointed_steps``) counts only the steps a
    checkpointed run has left. ``device_type`` (``cpu``/``cuda``): the kind of device the
    runs will train on, estimated only from runs on that kind. ``published``: finished
    runs in the same row shape from published results, a rough fallback (see :func:`estimate`).
    ``probes``: speeds probed here, by :func:`probe_key` (``harness.probe.probe_speeds``).
    ``lapsed``: ids of runs whose ``running`` claim's process is gone
    (``Store.lapsed``): they count as ``interrupted``, which is what they are.
    ``machine``: this CPU (``harness.provenance.cpu_name()``): speeds measured on another
    CPU are scaled by how much faster this one ran the runs measured on both
    (:func:`machine_scales`), so a store filled on a slower machine does not double every
    estimate here (nor a time limit defer runs that fit it). The store's runs are paired
    among themselves and the published runs among themselves (the plan names the store's
    factors; the published fallback is marked rough anyway)."""
    rows = list(store_runs)
    status = {r["run_id"]: "interrupted" if r["run_id"] in lapsed else r["status"] for r in rows}
    measured = measurements(rows)
    others = measurements(published)
    scales: dict[tuple[str | None, str], MachineScale] = {}
    if machine is not None:
        # each source pairs its own runs: runs that did not record their CPU are one machine
        # within a store (the one that filled it), not across a store and the published board
        scales = machine_scales(measured, machine)
        measured = scaled_to_machine(measured, scales)
        others = scaled_to_machine(others, machine_scales(others, machine))
    resume_steps = resume_steps or {}
    planned = []
    for i, cfg in enumerate(configs, start=1):
        run_id = cfg.run_id()
        st = status.get(run_id)
        est = None
        if st != "finished":
            probed = (probes or {}).get(probe_key(cfg))
            est = estimate(
                cfg, measured, resume_steps.get(run_id, 0), device_type=device_type, published=others, probed=probed
            )
        planned.append(PlannedRun(i, cfg, st, est))
    ordered = sorted(scales.items(), key=lambda kv: (kv[0][0] or "", kv[0][1]))
    return Plan(
        tuple(planned),
        tuple(sorted({m.device for m in measured})),
        device_type,
        tuple(scale for _, scale in ordered),
        tuple(cpu for (cpu, _), _ in ordered),
    )


def makespan(durations: Iterable[float], workers: int, busy: Iterable[float] = ()) -> float:
    """When ``workers`` workers finish ``durations`` (seconds, in dispatch order), each run
    going to the first worker free, with some workers ``busy`` for that many seconds
    first: list scheduling, as the sweep driver dispatches."""
    free_at = list(busy)
    free_at += [0.0] * max(0, workers - len(free_at))
    heapq.heapify(free_at)
    for seconds in durations:
        heapq.heappush(free_at, heapq.heappop(free_at) + seconds)
    return max(free_at, default=0.0)


ORDERS = ("listed", "longest-first")
"""How ``pezoo bench --sweep`` orders its runs (``--order``)."""


def longest_first(
    configs: Sequence[RunConfig],
    store_runs: Iterable[Mapping[str, Any]],
    resume_steps: Mapping[str, int] | None = None,
    **plan_options: Any,
) -> list[RunConfig]:
    """``configs`` with the missing runs longest first by ``estimate`` (ties and runs with
    no estimate keep their listed order; runs without one go first, since they may be long).

    A pool of workers that takes runs in this order finishes them closer together: the
    last run to start is a short one, so no worker waits alone on a long one at the end
    (longest-processing-time-first list scheduling). Finished runs come first; they are
    skipped anyway. A checkpointed run counts by what it has left (``resume_steps``);
    ``plan_options`` go to :func:`make_plan` (``device_type``, ``published``)."""
    plan = make_plan(configs, store_runs, resume_steps, **plan_options)

    def rank(run: PlannedRun) -> tuple[int, float]:
        if run.status == "finished":
            return (0, 0.0)
        return (1, 0.0) if run.estimate is None else (2, -run.estimate.seconds)

    return [run.config for run in sorted(plan.runs, key=rank)]


def format_duration(seconds: float) -> str:
    if seconds < 1:
        return "<1s"
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def wall_seconds(plan: Plan, workers: int) -> tuple[float, float] | None:
    """Wall seconds the plan's missing runs take on ``workers`` workers, in the listed order
    and longest first (``makespan`` of their estimates); None when a missing run has none."""
    missing = [r for r in plan.runs if r.status != "finished"]
    if any(r.estimate is None for r in missing):
        return None
    listed = [r.estimate.seconds for r in missing if r.estimate is not None]
    return makespan(listed, workers), makespan(sorted(listed, reverse=True), workers)


def format_plan(plan: Plan, axes: Sequence[str] = (), workers: int | None = None) -> str:
    """The runs as a table (status, estimated time), then the counts and the estimate
    (with ``workers``, also the wall time on that many workers in either order)."""
    from tabulate import tabulate

    rows = []
    for r in plan.runs:
        c = r.config
        extra = [c.preset if a == "preset" else _axis_value(c, a) for a in axes]
        est = "" if r.estimate is None else format_duration(r.estimate.seconds)
        if r.estimate is not None and r.estimate.from_step:
            est += f" (from step {r.estimate.from_step})"
        rows.append([r.index, config_display_name(c), c.task, c.seed, *extra, r.status or "-", est, c.run_id()])
    headers = ["#", "pe", "task", "seed", *axes, "status", "estimate", "run_id"]
    lines = [tabulate(rows, headers=headers, tablefmt="simple"), ""]
    counts = plan.counts()
    missing = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()) if k != "finished")
    lines.append(
        f"{len(plan.runs)} runs: {plan.done} done, {plan.missing} missing" + (f" ({missing})" if missing else "")
    )
    if plan.missing:
        lines += estimate_lines(plan)
        by_task = task_lines(plan)
        if by_task:
            lines.append(by_task)
        wall = wall_seconds(plan, workers) if workers else None
        if wall is not None:
            rough = " (rough)" if any(r.estimate is not None and r.estimate.rough for r in plan.runs) else ""
            lines.append(
                f"wall time on {workers} worker(s){rough}: about {format_duration(wall[0])} in the listed order, "
                f"{format_duration(wall[1])} with --order longest-first"
            )
    return "\n".join(lines)


def task_lines(plan: Plan) -> str | None:
    """``left by task: copy 3 runs, 1.2 h; addition 51 runs, 64.7 h`` (runs missing and their
    estimated device-hours, in the plan's task order) when the plan spans several tasks:
    which column of a board costs what decides which to fill first, or to leave out."""
    left: dict[str, list[float]] = {}
    for r in plan.runs:
        if r.status != "finished":
            left.setdefault(r.config.task, []).append(r.estimate.seconds if r.estimate is not None else math.nan)
    if len({r.config.task for r in plan.runs}) < 2 or not left:
        return None
    parts = []
    for task, seconds in left.items():
        known = [s for s in seconds if not math.isnan(s)]
        hours = f"{sum(known) / 3600:.1f} h" + (
            "" if len(known) == len(seconds) else f" ({len(seconds) - len(known)} unknown)"
        )
        parts.append(f"{task} {len(seconds)} run{'s' if len(seconds) != 1 else ''}, {hours}")
    return "left by task (device time): " + "; ".join(parts)


def estimate_bases(plan: Plan) -> str:
    """What the estimates of the missing runs rest on (rough ones say so): ``2 from same
    task and model; 1 from the recorded speed of preset quick on cpu (rough: ...); speeds
    measured on cpu:...``."""
    bases: dict[str, int] = {}
    for r in plan.runs:
        if r.estimate is not None:
            bases[r.estimate.basis] = bases.get(r.estimate.basis, 0) + 1
    text = "; ".join(f"{n} from {b}" for b, n in bases.items())
    if plan.devices and any(r.estimate is not None and not r.estimate.rough for r in plan.runs):
        text += f"; speeds measured on {', '.join(plan.devices)}"
    for cpu, scale in zip(plan.machine_names, plan.machine_scales, strict=True):
        where = cpu or "a CPU the runs did not record"
        text += (
            f"; {scale.encoding} on {where} scaled ×{scale.factor:.2f} to this CPU "
            f"(from {scale.pairs} measured on both)"
        )
    return text


def estimate_lines(plan: Plan) -> list[str]:
    """What the estimate of the missing runs rests on: device-hours and their bases (the
    rough ones marked), and how many runs have none (unknown) and why."""
    lines = []
    estimated = plan.missing - plan.unestimated
    on = f" on {plan.device_type}" if plan.device_type else ""
    if estimated:
        lines.append(
            f"estimate: {plan.device_hours:.2f} device-hours for {estimated} missing runs{on} ({estimate_bases(plan)})"
        )
    if plan.unestimated:
        lines.append(
            f"{plan.unestimated} missing runs have no estimate (unknown): no finished run of the same preset and "
            f"model{on} in the store, and no recorded speed of their preset{on}; finish one first (e.g. --seeds 1) "
            "and plan again"
        )
    return lines
