"""Sweep specifications (from the command line or a TOML file) and sweep plans.

A sweep is a union of *grids*; a grid is the cross product

    task × pe × (every list-valued override, in ``AXES`` order) × seed

of ``RunConfig`` s built from one preset (``harness.config.preset_config``). The same
names serve the command line (``--pe nope,rope --lr 1e-3,3e-4 --seeds 3``) and a sweep
file read with the standard library's ``tomllib``::

    preset = "quick"
    pe = ["nope", "rope", "randomized:rope", "prism{paper}"]   # specs: pezoo.spec
    task = ["copy", "reverse"]
    seeds = 3                  # a count from `seed` (default 0), or a list: [0, 4, 7]
    lr = [1e-3, 3e-4]          # any override may be one value or a list (a grid axis)

    [[grid]]                   # optional: several grids, each over the keys above
    task = ["addition"]
    steps = 3000

Without ``[[grid]]`` tables the top-level keys are the one grid; with them, the top
level only gives defaults to every ``[[grid]]``. Unknown keys are errors naming the
valid ones. A run that two grids both contain (same ``run_id``) is planned once.

Which of a sweep's runs a store has done and how long the others take is its plan
(``harness.sweeps.plan``); how runs are told apart in its tables, ``harness.sweeps.labels``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.config import INT64_MAX, PRESETS, RunConfig, check_int, check_number, preset_config
from harness.records.inputs import TOML_LIMIT, FileReadError, parse_toml, read_text
from pezoo.spec import PeSpec, names, parse_pe, pe_from_table, split_pe_list


@dataclass(frozen=True)
class Setting:
    """One override of a preset's config: where it goes, its type, and what it does.

    The one declaration of a setting: the command line's option (``--eval-samples``), the
    sweep file's key (``eval_samples``), the grid axis and the config field it sets
    (``eval.samples``, as runs record it) are all made from its entry in :data:`SETTINGS`.

    Attributes:
        section, key: the config field (``RunConfig.<section>.<key>``).
        kind: the type of one value (a list of values is a grid axis).
        help: the command-line option's help.
    """

    section: str
    key: str
    kind: type
    help: str

    def option(self, name: str) -> str:
        """The command-line option: ``--eval-samples`` for ``eval_samples``."""
        return f"--{name.replace('_', '-')}"


SETTINGS: dict[str, Setting] = {
    "steps": Setting("train", "steps", int, "Override the preset's training steps (a list sweeps them)."),
    "batch_size": Setting("train", "batch_size", int, "Override the training batch size."),
    "lr": Setting("train", "lr", float, "Override the peak learning rate, e.g. 1e-4,3e-4,5e-4."),
    "train_len": Setting("train", "train_max", int, "Override the largest training scale N (train on 1..N)."),
    "test_len": Setting("eval", "test_max", int, "Override the largest test scale M (test N+1..M)."),
    "test_stride": Setting("eval", "test_stride", int, "Evaluate every k-th test scale."),
    "eval_samples": Setting("eval", "samples", int, "Examples per evaluated scale."),
    "eval_every": Setting(
        "eval", "every", int, "Also evaluate every N training steps (0: the final model only; the prism preset: 1000)."
    ),
    "eval_start_loss": Setting(
        "eval",
        "start_below_loss",
        float,
        "Start the periodic evaluations once the training loss first drops below this (prism preset: 0.1).",
    ),
    "eval_select": Setting(
        "eval",
        "select",
        str,
        "Which evaluation a run reports: final, top3 (per length, mean of the 3 best: the PRISM paper) or "
        "best_in_dist (the one best on the training lengths). See docs/harness.md.",
    ),
    "backend": Setting("backbone", "backend", str, "Attention backend (see `pezoo list`)."),
    "head": Setting(
        "backbone", "head", str, "Output layer: tied (the input embedding, the default) or untied (its own weights)."
    ),
    "pack": Setting(
        "train",
        "pack",
        int,
        "Train on rows of this many tokens cut from a stream of examples laid end to end (0: one example "
        "per row; the turing preset: 500).",
    ),
    "window": Setting(
        "eval",
        "window",
        int,
        "Decode and score with a sliding context of this many tokens, dropping the oldest eval.window_jump "
        "(20 by default) when full (0: whole sequence; the turing preset: 500).",
    ),
    "precision": Setting(
        "train",
        "precision",
        str,
        "Arithmetic of training: fp32, bf16 or fp16 (autocast over float32 weights; fp16 with loss scaling). "
        "Default: the preset's (fp32 on the CPU presets, bf16 on the GPU ones). See docs/harness.md.",
    ),
    "eval_precision": Setting(
        "eval", "precision", str, "Arithmetic of evaluation: fp32, bf16 or fp16 (default: as the run trained)."
    ),
    "finetune_steps": Setting(
        "eval",
        "finetune_steps",
        int,
        "Language modelling: an inference-time variant's short fine-tune, its trained run's weights trained this "
        "many more steps with the variant's encoding before they are scored (0: zero-shot).",
    ),
    "finetune_length": Setting(
        "eval", "finetune_length", int, "Language modelling: the fine-tune's windows in bytes (default 4 L)."
    ),
}
"""The override settings, in grid-axis order: a new setting is one entry here."""

AXES: dict[str, tuple[str, str, type]] = {name: (s.section, s.key, s.kind) for name, s in SETTINGS.items()}
"""Override axes: sweep/CLI name -> (config section, config key, value type), from :data:`SETTINGS`."""


def naming_the_option(message: str) -> str:
    """``message`` about a config field (``train.lr must be ...``) with the option that sets it."""
    fields = {f"{s.section}.{s.key} ": s.option(name) for name, s in SETTINGS.items()}
    options = [option for field, option in fields.items() if field in message]
    return f"{message} ({', '.join(options)})" if options else message


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


@dataclass(frozen=True, init=False)
class Grid:
    """One cross product of runs.

    ``Grid(preset=..., pe=..., task=..., seeds=..., lr=(1e-3, 3e-4), ...)``: any
    :data:`SETTINGS` name as a keyword gives that axis's values (``dataclasses.replace``
    too); read one back as an attribute (``grid.lr``; empty: the preset's value).

    Attributes:
        preset: the named protocol every run starts from.
        pe: encoding specs (``pezoo.spec.PeSpec``: registry names, wrappers included, with
            options: ``randomized:rope``, ``prism{paper}``, ``prism{n_cursors=4}``); a string
            given here is parsed once, when the grid is made.
        task: tasks.
        seeds: the seeds, each a separate run.
        axes: the override axes that are set, (setting name, values), in :data:`SETTINGS`
            order; several values = one run per value.
    """

    preset: str
    pe: tuple[PeSpec, ...]
    task: tuple[str, ...]
    seeds: tuple[int, ...]
    axes: tuple[tuple[str, tuple[Any, ...]], ...]

    def __init__(
        self,
        preset: str = "quick",
        pe: tuple[PeSpec | str, ...] = (),
        task: tuple[str, ...] = (),
        seeds: tuple[int, ...] = (0,),
        axes: tuple[tuple[str, tuple[Any, ...]], ...] = (),
        **settings: tuple[Any, ...],
    ) -> None:
        axes_given = {**dict(axes), **settings}  # dataclasses.replace passes axes, and the changes by name
        unknown = sorted(set(axes_given) - set(SETTINGS))
        if unknown:
            raise TypeError(f"Grid got unknown setting(s) {', '.join(unknown)}; settings: {', '.join(SETTINGS)}")
        object.__setattr__(self, "preset", preset)
        object.__setattr__(self, "pe", tuple(parse_pe(p) if isinstance(p, str) else p for p in pe))  # parsed once
        object.__setattr__(self, "task", tuple(task))
        object.__setattr__(self, "seeds", tuple(seeds))
        object.__setattr__(self, "axes", tuple((n, tuple(axes_given[n])) for n in SETTINGS if axes_given.get(n)))
        if self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; valid presets: {', '.join(PRESETS)}")
        if not self.pe or not self.task:
            raise ValueError("a sweep needs at least one encoding (pe) and one task")
        if not self.seeds:
            raise ValueError("a sweep needs at least one seed")

    def __getattr__(self, name: str) -> tuple[Any, ...]:
        if name in SETTINGS:  # an axis not set: the preset's value
            return dict(self.axes).get(name, ())
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def size(self) -> int:
        """How many runs the grid holds (counted, not built)."""
        return math.prod(len(v) for v in (self.task, self.pe, self.seeds, *(values for _, values in self.axes)) if v)

    def configs(self, max_runs: int | None = MAX_RUNS) -> list[RunConfig]:
        """The grid's runs, in order task, pe, override axes, seed (ValueError if one is
        invalid, or if there are more than ``max_runs``: None for no limit). An inference-time
        variant (``rope@{...}``) comes right after its trained run, which is added if the
        grid does not list it."""
        check_size(self.size(), max_runs)
        axes = self.axes
        combos = list(itertools.product(*(values for _, values in axes)))
        runs: list[RunConfig] = []
        for task, pe, combo, seed in itertools.product(self.task, self.pe, combos, self.seeds):
            overrides: dict[str, dict[str, Any]] = {}
            for (name, _), value in zip(axes, combo, strict=True):
                setting = SETTINGS[name]
                overrides.setdefault(setting.section, {})[setting.key] = value
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


GRID_KEYS = ("preset", "pe", "task", "seeds", "seed", *SETTINGS)
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


def pe_values(value: Any, where: str = "sweep") -> tuple[PeSpec, ...]:
    """A sweep file's ``pe``: a string (one spec or a comma-separated list), a table, or a
    list of those -> parsed specs."""
    items = value if isinstance(value, list) else [value]
    out: list[PeSpec] = []
    for item in items:
        if isinstance(item, str):
            try:
                out += [parse_pe(p) for p in split_pe_list(item)]
            except ValueError as exc:
                raise ValueError(f"{where}: pe: {exc}") from None
        elif isinstance(item, Mapping):
            out.append(pe_from_table(item, f"{where}: pe"))
        else:
            raise ValueError(f"{where}: pe must be a string, a table or a list of them, got {item!r}")
    if not out:
        raise ValueError(f"{where}: pe is empty")
    return tuple(out)


def grid_from_mapping(values: Mapping[str, Any], where: str = "sweep", max_runs: int | None = MAX_RUNS) -> Grid:
    """A ``Grid`` from sweep-file keys (``GRID_KEYS``); unknown keys, values of the wrong type
    (non-finite numbers, integers beyond SQLite's 64 bits) and a seed count above
    ``max_runs`` are errors naming ``where``."""
    valid = ("preset", "pe", "task", "seeds", "seed", *SETTINGS)  # GRID_KEYS, read when called
    unknown = sorted(set(values) - set(valid))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(valid)}")
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
    for name, setting in SETTINGS.items():
        if name in values:
            kw[name] = _values(name, values[name], setting.kind, where)
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
