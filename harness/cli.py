"""The ``pezoo`` command line: bench, list, results."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import pandas as pd
from click.core import ParameterSource

import harness.tasks as tasks
import harness.tblog as tblog
import pezoo
from harness.announce import bench_announcement, published_line
from harness.catalogue import listing, name_problem
from harness.config import GPU_PRESETS, INT64_MAX, PRESETS, RunConfig
from harness.deadline import MARGIN, TimeLimit, parse_duration, probing
from harness.estimate import checkpointed_steps
from harness.executors import (
    Executor,
    ExecutorError,
    InProcess,
    RayExecutor,
    local_devices,
    local_executor,
    run_sweep,
)
from harness.labels import varying_axes
from harness.options import max_runs_option, store_option
from harness.plan import ORDERS, format_duration, format_plan, longest_first, make_plan
from harness.printable import printable, terminal_text
from harness.progress import SweepReport
from harness.provenance import code_origins, cpu_name, resolve_device
from harness.report import LEGEND, leaderboard_tables
from harness.results import load
from harness.run import check_run, checkpoint_dir_for
from harness.store import Store, StoreError
from harness.sweep import AXES, Grid, SweepSpec, check_size, load_sweep, parse_list
from pezoo.backends import xformers_available
from pezoo.spec import names as pe_names
from pezoo.spec import parse_pe, split_pe_list


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _check_names(kind: str, names: list[str], valid: list[str], option: str | None = None) -> None:
    for name in names:
        if name in valid or (kind == "encoding" and "+" in name and pezoo.is_known(name)):
            continue
        if kind == "encoding" and "+" in name:  # a combination: name the part that is wrong
            parts = name.rpartition(":")[2].split("+")
            name = next((p for p in parts if p not in valid), name)
        raise click.BadParameter(terminal_text(name_problem(kind, name, valid)), param_hint=option)


def _refuse_broken_plugins(names: list[str], *, warn: bool = True) -> None:
    """Import every encoding plugin now; stop if one of ``names`` (wrapped forms included)
    failed to load, with its error, instead of failing each run at train time. With
    ``warn``, each other plugin that failed to load is named in a warning (stderr)."""
    broken = pezoo.base.ENCODINGS.load_plugins()
    used = {base for name in names for base in name.split(":", 1)[-1].split("+")}
    for base in sorted(used & set(broken)):
        raise click.BadParameter(f"encoding plugin {base!r} failed to load: {broken[base]}", param_hint="--pe")
    if warn:  # a broken plugin not used here: said, and the command goes on without it
        for base in sorted(set(broken) - used):
            click.echo(f"warning: encoding plugin {base!r} is skipped: {_one_line(broken[base])}", err=True)


def _check_runs(configs: Sequence[RunConfig]) -> None:
    """``check_run`` once per distinct run shape (seeds aside): what can be known not to
    work, before anything is written or trained (ValueError)."""
    shapes: dict[str, RunConfig] = {}
    for c in configs:
        shapes.setdefault(replace(c, seed=0).run_id(), c)  # the whole config but its seed
    for cfg in shapes.values():
        check_run(cfg)


def _naming_the_option(message: str) -> str:
    """``message`` about a config field (``train.lr must be ...``) with the option that sets it."""
    fields = {f"{section}.{key} ": f"--{name.replace('_', '-')}" for name, (section, key, _) in AXES.items()}
    options = [option for field, option in fields.items() if field in message]
    return f"{message} ({', '.join(options)})" if options else message


def _preset_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--preset``: a preset name, or an error with close matches ("Did you mean")."""
    if value not in PRESETS:
        raise click.BadParameter(name_problem("preset", value, list(PRESETS)))
    return value


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """A duration option (``2h30m``, ``90m``, seconds) as seconds; None when not given."""
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


class _Commands(click.Group):
    """The command group: a plugin name clash (``pezoo.PluginClashError``), met by whatever
    command first looks an encoding up, is a one-line error, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except pezoo.PluginClashError as exc:
            raise click.ClickException(str(exc)) from None


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(pezoo.__version__, prog_name="pezoo")
def main() -> None:
    """pezoo: positional encodings behind one interface, and a length-extrapolation benchmark.

    Train the same backbone once per (encoding, task, seed), evaluate exact match far
    beyond the training length, store results in a local SQLite file, print the
    leaderboard. Start with `pezoo list`, then e.g.

        pezoo bench --pe nope,rope --task copy
    """


@main.command("list")
def list_cmd() -> None:
    """Show the available encodings (and which a wrapper takes), tasks, presets and backends."""
    click.echo(listing())


class _ListOf(click.ParamType):
    """One value or a comma-separated list of them (a sweep axis): ``--lr 1e-3,3e-4``."""

    def __init__(self, kind: type) -> None:
        self.kind = kind
        self.name = f"{kind.__name__}[,{kind.__name__}...]"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            values = parse_list(str(value), self.kind)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if not values:
            self.fail("no value given", param, ctx)
        return values


@main.command()
@click.option(
    "--pe",
    "pes",
    help="Comma-separated encodings, each optionally with options in braces, e.g. "
    "nope,randomized:rope,'prism{paper}','prism{n_cursors=4,layers=[0,2]}'; 'rope@{scaling={rope_type=yarn,"
    "factor=4.0,original_max_position_embeddings=24}}' evaluates the trained rope run with other options, "
    "without training again (docs/sweeps.md).",
)
@click.option("--task", "task_names", help="Comma-separated tasks, e.g. copy,reverse.")
@click.option(
    "--sweep",
    "sweep_file",
    type=click.Path(exists=True, dir_okay=False),
    help="TOML sweep file (grids of encodings x tasks x options x seeds; see docs/sweeps.md). "
    "Options given on the command line replace the file's values.",
)
@click.option(
    "--preset",
    default="quick",
    show_default=True,
    callback=_preset_name,
    help=f"Named protocol: backbone size, steps, lengths ({', '.join(PRESETS)}; see `pezoo list`). "
    "quick = minutes per run on 2 CPU cores.",
)
@click.option(
    "--seeds",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Number of seeds per (encoding, task): seed0..seed0+k-1.",
)
@click.option("--seed", "seed0", default=0, show_default=True, type=click.IntRange(0, INT64_MAX), help="First seed.")
@click.option("--steps", type=_ListOf(int), help="Override the preset's training steps (a list sweeps them).")
@click.option("--batch-size", type=_ListOf(int), help="Override the training batch size.")
@click.option("--lr", type=_ListOf(float), help="Override the peak learning rate, e.g. 1e-4,3e-4,5e-4.")
@click.option("--train-len", type=_ListOf(int), help="Override the largest training scale N (train on 1..N).")
@click.option("--test-len", type=_ListOf(int), help="Override the largest test scale M (test N+1..M).")
@click.option("--test-stride", type=_ListOf(int), help="Evaluate every k-th test scale.")
@click.option("--eval-samples", type=_ListOf(int), help="Examples per evaluated scale.")
@click.option(
    "--eval-every",
    type=_ListOf(int),
    help="Also evaluate every N training steps (0: the final model only; the prism preset: 1000).",
)
@click.option(
    "--eval-start-loss",
    type=_ListOf(float),
    help="Start the periodic evaluations once the training loss first drops below this (prism preset: 0.1).",
)
@click.option(
    "--eval-select",
    type=_ListOf(str),
    help="Which evaluation a run reports: final, top3 (per length, mean of the 3 best: the PRISM paper) or "
    "best_in_dist (the one best on the training lengths). See docs/harness.md.",
)
@click.option("--backend", type=_ListOf(str), help="Attention backend (see `pezoo list`).")
@click.option(
    "--pack",
    type=_ListOf(int),
    help="Train on rows of this many tokens cut from a stream of examples laid end to end (0: one example "
    "per row; the turing preset: 500).",
)
@click.option(
    "--window",
    type=_ListOf(int),
    help="Decode and score with a sliding context of this many tokens, dropping the oldest eval.window_jump "
    "(20 by default) when full (0: whole sequence; the turing preset: 500).",
)
@click.option(
    "--precision",
    type=_ListOf(str),
    help="Arithmetic of training: fp32, bf16 or fp16 (autocast over float32 weights; fp16 with loss scaling). "
    "Default: the preset's (fp32 on the CPU presets, bf16 on the GPU ones). See docs/harness.md.",
)
@click.option(
    "--eval-precision",
    type=_ListOf(str),
    help="Arithmetic of evaluation: fp32, bf16 or fp16 (default: as the run trained).",
)
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda[:N].")
@click.option("--allow-cpu", is_flag=True, help="Run a GPU-sized preset on the CPU anyway (e.g. a few --steps).")
@click.option(
    "--checkpoint-every",
    default=250,
    show_default=True,
    type=click.IntRange(min=1),
    help="Save the training state every N steps; a killed run resumes from it.",
)
@click.option(
    "--checkpoint-dir",
    type=click.Path(file_okay=False),
    help="Where runs checkpoint (default: checkpoints/ next to the store). On a cluster, a directory "
    "every node shares lets a retried run resume.",
)
@click.option(
    "--executor",
    default="local",
    show_default=True,
    type=click.Choice(["local", "ray"]),
    help="local: this process, or a pool of worker processes; ray: Ray tasks on a cluster (pip install 'pezoo[ray]').",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="Runs in parallel. local: default one per GPU, else one per CPU core (1 = in this process); "
    "ray: default the cluster's GPU (else CPU) count.",
)
@click.option("--ray-address", help="Ray cluster to join (auto, host:port, ray://host:10001); default: start one here.")
@click.option(
    "--retries",
    default=2,
    show_default=True,
    type=click.IntRange(min=0),
    help="Run a failed attempt (an error, a dead worker) again up to this many times.",
)
@store_option("SQLite results store (created if missing).")
@click.option(
    "--order",
    default="listed",
    show_default=True,
    type=click.Choice(ORDERS),
    help="Order of the runs: as listed, or longest-first by the estimate of `pezoo sweep plan` (from "
    "runs the store has finished), so parallel workers finish together.",
)
@click.option(
    "--tensorboard",
    "tensorboard_dir",
    type=click.Path(file_okay=False),
    help="Also log every run's loss, learning rate and evaluations for TensorBoard under this folder "
    "(pip install 'pezoo[tensorboard]').",
)
@click.option(
    "--time-limit",
    "time_limit",
    callback=_duration,
    help="Start only runs expected to end within this time from now (e.g. 2h30m, 90m, 1.5h): one that would "
    "not is deferred to a later bench, and a shorter run after it may go first. For a machine that goes away "
    "with its disk at a known time; runs started are never stopped (docs/sweeps.md).",
)
@click.option(
    "--hang-timeout",
    "hang_timeout",
    callback=_duration,
    help="Local executor: stop a run whose worker sends no progress for this long (e.g. 30m; a training step "
    "and an evaluated length each report), as hung; it is retried, then recorded failed. Runs then train in "
    "worker processes, also with --workers 1. Default: wait for ever.",
)
@click.option(
    "--keep-weights",
    is_flag=True,
    help="Keep every trained run's final weights (<run_id>.weights.pt in the checkpoint folder), so a later "
    "inference-time variant or re-evaluation never trains again. Runs with variants in the sweep always keep them.",
)
@max_runs_option
def bench(pes, task_names, sweep_file, preset, seeds, seed0, steps, batch_size, lr, train_len, test_len, test_stride,
          eval_samples, eval_every, eval_start_loss, eval_select, backend, pack, window, precision, eval_precision,
          device, allow_cpu,
          checkpoint_every, checkpoint_dir, executor, workers, ray_address, retries, store_path, order,
          tensorboard_dir, time_limit, hang_timeout, max_runs, keep_weights) -> None:  # fmt: skip
    """Train and evaluate every (encoding, task, seed), then print the leaderboard.

    Finished runs already in the store are not trained again; an interrupted run
    (Ctrl-C, a crash, a killed process) resumes from its last checkpoint when the same
    command is run again. Exit status is 1 if any run failed or diverged.

    Lists make grids: `--lr 1e-4,3e-4 --seeds 3` trains every encoding and task at both
    learning rates with 3 seeds; larger grids go in a --sweep file.
    """
    ctx = click.get_current_context()

    def given(name: str) -> bool:
        return ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)

    try:
        pe_list = [str(parse_pe(p)) for p in split_pe_list(pes or "")]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--pe") from None
    task_list = _split(task_names or "")
    if sweep_file is None and not pe_list:
        raise click.UsageError("Missing option '--pe' (or give a --sweep FILE).")
    if sweep_file is None and not task_list:
        raise click.UsageError("Missing option '--task' (or give a --sweep FILE).")
    if hang_timeout is not None and executor == "ray":
        raise click.UsageError("--hang-timeout stops hung runs of the local executor; Ray runs are not watched.")
    if given("ray_address") and executor != "ray":  # else the runs would train here, not on the cluster named
        raise click.UsageError("--ray-address names a Ray cluster for --executor ray; add --executor ray, or drop it.")
    _refuse_broken_plugins(pe_names(pe_list))
    _check_names("encoding", pe_names(pe_list), pezoo.available())
    _check_names("task", task_list, tasks.available())
    axes = dict(
        zip(
            AXES,
            (steps, batch_size, lr, train_len, test_len, test_stride, eval_samples, eval_every, eval_start_loss,
             eval_select, backend, pack, window, precision, eval_precision),
            strict=True,
        )
    )  # fmt: skip
    try:
        check_size(seeds, max_runs)  # before the seeds are listed
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--seeds") from None
    cli = {
        "pe": tuple(pe_list) or None,
        "task": tuple(task_list) or None,
        "preset": preset if sweep_file is None or given("preset") else None,
        "seeds": tuple(range(seed0, seed0 + seeds)) if sweep_file is None else None,
        **axes,
    }
    try:
        spec = load_sweep(sweep_file, max_runs) if sweep_file else SweepSpec((Grid(pe=cli["pe"], task=cli["task"]),))
        spec = spec.override(**cli)
        if sweep_file is not None:  # each option replaces its own part of every grid's seeds
            spec = spec.with_seeds(seed0 if given("seed0") else None, seeds if given("seeds") else None)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    sweep_pes, sweep_tasks = spec.names()
    _refuse_broken_plugins(sweep_pes, warn=False)
    # a name from the sweep file is the file's mistake: say which file
    _check_names("encoding", sweep_pes, pezoo.available(), "--pe" if pe_list or not sweep_file else str(sweep_file))
    _check_names("task", sweep_tasks, tasks.available(), "--task" if task_list or not sweep_file else str(sweep_file))
    for grid in spec.grids:
        _check_names("attention backend", list(grid.backend), sorted(pezoo.BACKENDS))
    try:
        configs = spec.configs(max_runs)
        _check_runs(configs)
    except ValueError as exc:
        where = f"{sweep_file} (or an option beside it): " if sweep_file else ""
        raise click.UsageError(where + _naming_the_option(str(exc))) from None

    if tensorboard_dir is not None:
        try:
            tblog.check_available()
        except RuntimeError as exc:
            raise click.UsageError(str(exc)) from None

    ray_executor = None
    if executor == "ray":
        try:
            ray_executor = RayExecutor(ray_address, workers=workers, device=device)
        except ExecutorError as exc:
            raise click.UsageError(str(exc)) from None
        device_type, where = ray_executor.device_type, f"a Ray cluster ({ray_executor.device_type})"
    else:
        try:
            dev = resolve_device(device)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--device") from None
        device_type, where = dev.type, str(dev)
    if any(c.backbone.backend == "xformers" for c in configs) and (
        device_type != "cuda" or (ray_executor is None and not xformers_available())
    ):
        if ray_executor is not None:
            ray_executor.close()
        reason = "no CUDA device is in use" if device_type != "cuda" else "the xformers package does not load here"
        raise click.BadParameter(
            f"the xformers backend runs on CUDA tensors only, and {reason}; use --backend sdpa, flex or auto "
            "(auto picks xformers where it works), or install the gpu extra: pip install 'pezoo[gpu]'",
            param_hint="--backend",
        )
    gpu_presets = sorted({c.preset for c in configs if c.preset in GPU_PRESETS})
    if gpu_presets and device_type != "cuda" and not allow_cpu:
        if ray_executor is not None:
            ray_executor.close()
        raise click.UsageError(
            f"preset {gpu_presets[0]!r} is sized for a GPU and no CUDA device is in use; run it on a GPU, use "
            "--preset quick on CPU, or pass --allow-cpu to run it anyway (e.g. with --steps 10)"
        )
    problem = _unwritable_folder(checkpoint_dir_for(store_path, checkpoint_dir))
    if problem is not None:  # runs would train without checkpoints, warning at every interval
        if ray_executor is not None:
            ray_executor.close()
        why = f"{problem}; checkpoints (and the weights variants evaluate) go there"
        raise click.BadParameter(why, param_hint="--checkpoint-dir")
    try:
        store = Store(store_path)
    except StoreError as exc:
        if ray_executor is not None:
            ray_executor.close()
        raise click.ClickException(str(exc)) from None

    with store:
        rows = store.runs()
        resume = checkpointed_steps(checkpoint_dir_for(store.path, checkpoint_dir), [c.run_id() for c in configs])
        published = _published_runs()
        plan_options: dict[str, Any] = {
            "device_type": device_type,
            "published": published,
            "lapsed": store.lapsed(),
            "machine": cpu_name(),
        }
        if order == "longest-first":
            configs = longest_first(configs, rows, resume, **plan_options)
        plan = make_plan(configs, rows, resume, **plan_options)
        report = SweepReport(configs, plan)
        runner: Executor
        if ray_executor is not None:
            runner = ray_executor
        else:
            runner = local_executor(
                dev,
                workers,
                report.todo,
                report.progress_for,
                report.live_notice,
                isolate=_uses_plugins(configs),
                hang_seconds=hang_timeout,
            )
        report.in_process = isinstance(runner, InProcess)
        report.slots = min(runner.capacity, max(1, report.todo))
        report.held_elsewhere = store.held_by_others  # other processes on the store share the sweep
        if isinstance(runner, InProcess):
            how = "one run at a time, in this process"
        elif ray_executor is None and report.slots == 1:
            how = "one run at a time, in a worker process (one torch thread): a crash or hang ends only its run"
        elif ray_executor is None:
            how = f"{report.slots} runs at a time, in {report.slots} worker processes (one torch thread each)"
        else:
            how = f"{report.slots} Ray tasks at a time"
        click.echo(
            bench_announcement(
                configs,
                plan,
                store_path=store_path,
                published_ids={r["run_id"] for r in published},
                where=where,
                runner=how,
                workers=report.slots,
                device_type=device_type,
                others=report.other_processes(),
            )
            + "\n"
        )
        limit = None
        if time_limit is not None:
            expected: Callable[[int], float | None] = report.expected_seconds
            if ray_executor is None:  # a probe here says nothing of a Ray cluster's nodes
                expected = _probing_expectation(configs, plan, rows, resume, plan_options, report, dev)
            limit = TimeLimit(time_limit, expected)
            click.echo(
                f"time limit {format_duration(time_limit)}: a run is started only if it is expected to end "
                f"within it (its estimate x {MARGIN:g}); the others are deferred\n"
            )
        stopped: StoreError | None = None
        try:
            with _sigterm_interrupts():
                run_sweep(
                    runner,
                    configs,
                    store,
                    checkpoint_dir=checkpoint_dir,
                    checkpoint_every=checkpoint_every,
                    retries=retries,
                    events=report,
                    tensorboard=tensorboard_dir,
                    admit=None if limit is None else lambda index, _cfg: limit.admit(index),
                    keep_weights=keep_weights,
                )
        except KeyboardInterrupt as exc:
            report.close_bars()
            for index in sorted(report.running):
                click.echo(f"\n{report.label(index)}: interrupted; run the same command again to resume.", err=True)
            sys.exit(128 + signal.SIGTERM if isinstance(exc, Terminated) else 130)
        except StoreError as exc:  # claiming or recording: the table of what finished still shows
            stopped = exc
        finally:
            report.close_bars()
    run_ids = {c.run_id() for c in configs}
    try:
        df = load(store_path)
    except StoreError as exc:
        if stopped is None:
            raise click.ClickException(str(exc)) from None
        unreadable = f"the store cannot be read either ({_one_line(exc)})"
        raise click.ClickException(f"{_one_line(stopped)}; {unreadable}") from None
    df = df[df["run_id"].isin(run_ids)]
    presets = ", ".join(dict.fromkeys(c.preset for c in configs))
    click.echo(f"\npreset {presets} on {where}; results in {store_path}\n")
    planned_seeds: dict[str, set[int]] = {}
    for c in configs:
        planned_seeds.setdefault(c.task, set()).add(c.seed)
    wanted = {task: len(seeds) for task, seeds in planned_seeds.items()}
    for table in leaderboard_tables(df, seeds_wanted=wanted).values():
        click.echo(table + "\n")
    click.echo(LEGEND + "\n")
    if report.deferred_runs:
        n = len(report.deferred_runs)
        click.echo(
            f"{n} run{'s' if n > 1 else ''} deferred by --time-limit, not started: run the same command again "
            "to continue.",
            err=True,
        )
    if report.failures:
        click.echo("Some runs did not finish:\n  " + "\n  ".join(report.failures), err=True)
    if stopped is not None:
        left = getattr(stopped, "not_started", None)
        tail = f"; {left} run{'s' if left != 1 else ''} not started: run the same command again" if left else ""
        click.echo(f"Error: the sweep stopped: {_one_line(stopped)}{tail}", err=True)
    if report.failures or stopped is not None:
        sys.exit(1)


def _uses_plugins(configs: Sequence[RunConfig]) -> bool:
    """Whether a run uses an encoding (or task) not from pezoo (``code_origins``)."""
    for cfg in configs:
        try:
            if code_origins(cfg.pe, cfg.task):
                return True
        except (KeyError, ImportError):  # checked before: cannot happen, but never stop bench here
            return True
    return False


def _one_line(exc: object) -> str:
    """``exc`` (an exception or a message) on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _probing_expectation(configs, plan, rows, resume, plan_options, report, device) -> Callable[[int], float | None]:
    """``--time-limit``'s expected seconds per run: the ETA's, after a probe of the run here
    when its estimate is borrowed from other runs (``harness.deadline.probing``)."""
    from harness.estimate import SAME_RUN, probe_key
    from harness.probe import probe_speeds


    def measured(index: int) -> bool:
        cfg, est = configs[index - 1], plan.runs[index - 1].estimate
        return cfg.is_variant or (est is not None and est.basis == SAME_RUN)  # a variant only evaluates

    probes: dict[Any, tuple[float, int]] = {}  # one probe per speed group: a run's other seeds share it
    tried: set[Any] = set()

    def probe(index: int) -> None:
        cfg, key = configs[index - 1], probe_key(configs[index - 1])
        if key not in tried:
            tried.add(key)
            why = "no finished run of it to estimate from"
            report.echo(f"{report.label(index)}: timing a few training steps here: {why}")
            probes.update(probe_speeds([cfg], probe_key, device=str(device)))
            if key not in probes:
                report.echo(f"{report.label(index)}: the probe failed; estimated from other runs as before")
        if key not in probes:
            return
        est = make_plan([cfg], rows, resume, probes=probes, **plan_options).runs[0].estimate
        if est is not None:
            report.estimates[index] = est.seconds
            rate = f"{est.steps_per_second:.3g} steps/s"
            report.echo(f"{report.label(index)}: {rate} here, about {format_duration(est.seconds)} in all")

    return probing(report.expected_seconds, measured, probe)


class Terminated(KeyboardInterrupt):
    """SIGTERM reached the sweep's driver (``kill``, a scheduler's time limit)."""


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """Within the block, SIGTERM stops the sweep the way Ctrl-C does: the workers are
    stopped, the runs in flight are marked ``interrupted`` (their checkpoints stay) and
    bench exits with 143. Without it the driver would die on the spot and leave those
    runs ``running`` in the store. The handler fires once: a second SIGTERM during that
    cleanup is ignored rather than cutting it short. Off the main thread (no signals
    there), or where SIGTERM is ignored on purpose, it does nothing."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        yield
        return

    def terminate(_signum: int, _frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        if previous is not None:  # None: a handler installed outside Python, which cannot be restored
            signal.signal(signal.SIGTERM, previous)


@main.group()
def sweep() -> None:
    """Sweep files: `pezoo sweep plan FILE`; run one with `pezoo bench --sweep FILE`."""


@sweep.command("plan")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@store_option("SQLite results store: which runs are done, and the measured speeds (not created if missing).")
@click.option(
    "--checkpoint-dir",
    type=click.Path(file_okay=False),
    help="Where the sweep's runs checkpoint (default: checkpoints/ next to the store); a checkpointed run "
    "counts only the steps it has left.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="Parallel workers to work out the wall time for (default: as bench would use here: one per GPU, "
    "else one per CPU core).",
)
@click.option(
    "--probe",
    is_flag=True,
    help="Time a few training steps here of each encoding (options included) x task the store has no "
    "finished run of, and estimate their runs from that instead of borrowing other runs' speeds.",
)
@max_runs_option
def sweep_plan(file, store_path, checkpoint_dir, workers, probe, max_runs) -> None:
    """Print the runs of a sweep file, how many the store already holds finished, and an
    estimate of the device-hours the missing ones need (from the measured steps/s of
    finished runs in the store, or with --probe of a few steps timed here, less what
    their checkpoints have done)."""
    try:
        configs = load_sweep(file, max_runs).configs(max_runs)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    pes = list(dict.fromkeys(c.pe for c in configs))
    _check_names("encoding", pes, pezoo.available(), str(file))
    _check_names("task", list(dict.fromkeys(c.task for c in configs)), tasks.available(), str(file))
    try:
        _check_runs(configs)  # what bench would refuse, plan refuses too
    except ValueError as exc:
        raise click.UsageError(f"{file}: {exc}") from None
    rows: list[dict[str, Any]] = []
    lapsed: set[str] = set()
    if Path(store_path).exists():
        try:
            with Store(store_path, readonly=True) as store:
                rows, lapsed = store.runs(), store.lapsed()
        except StoreError as exc:
            raise click.ClickException(str(exc)) from None
    ckpt_dir = checkpoint_dir_for(store_path, checkpoint_dir)
    device = resolve_device("auto")
    published = _published_runs()
    resume = checkpointed_steps(ckpt_dir, [c.run_id() for c in configs]) if rows else None
    probes = _probe(configs, rows, device) if probe else None
    plan = make_plan(
        configs,
        rows,
        resume,
        device_type=device.type,
        published=published,
        probes=probes,
        lapsed=lapsed,
        machine=cpu_name(),
    )
    n_workers = len(local_devices(device, workers, plan.missing))
    click.echo(format_plan(plan, varying_axes(configs), n_workers))
    line = published_line(plan, {r["run_id"] for r in published}, store_path)
    if line:
        click.echo(line)


def _probe(configs, rows, device) -> dict:
    """Speeds probed here for the speed groups the store has not measured, with a line each."""
    from harness.estimate import probe_key, unmeasured
    from harness.pe_spec import config_display_name
    from harness.probe import DEFAULT_STEPS, DEFAULT_WARMUP, probe_speeds

    todo = unmeasured(configs, rows, device.type)
    if not todo:
        click.echo("probe: every encoding x task to run has a finished run in the store; nothing to probe", err=True)
        return {}
    load = ""
    with contextlib.suppress(OSError, AttributeError):  # no load average on Windows
        busy = os.getloadavg()[0]
        load = f"; load average {busy:.1f} on {os.cpu_count()} cores: other work slows probes and runs alike"
    click.echo(
        f"probe: timing {len(todo)} encoding x task group(s) the store has not measured, "
        f"{DEFAULT_WARMUP} + {DEFAULT_STEPS} training steps of a fresh model each on {device} (one thread){load}",
        err=True,
    )

    def report(i, cfg, rate) -> None:
        name = config_display_name(cfg)
        if isinstance(rate, Exception):
            said = f"failed ({type(rate).__name__}: {rate}); its runs are estimated without it"
        else:
            said = f"{rate:.2f} steps/s"
        click.echo(f"probe {i}/{len(todo)}: {name} on {cfg.task}: {said}", err=True)

    return probe_speeds(todo, probe_key, device=str(device), on_probe=report)


PUBLISHED_RUNS_GROUP = "pezoo.published_runs"
"""Entry point group of functions ``() -> list[dict]`` giving published runs as
``Store.runs()`` rows: the leaderboard package provides one (its results files); bench and
sweep plan use them only as hints and rough speeds. The harness imports no leaderboard
module: floors point down, and upper floors plug in here."""

COMMANDS_GROUP = "pezoo.commands"
"""Entry point group of click commands added to ``pezoo`` (the leaderboard's commands)."""


def _published_runs() -> list[dict]:
    """The runs every installed :data:`PUBLISHED_RUNS_GROUP` provider reports ([] when none
    is installed, or one fails: they serve only as hints and as rough speeds)."""
    from importlib.metadata import entry_points

    rows: list[dict] = []
    for ep in entry_points(group=PUBLISHED_RUNS_GROUP):
        try:
            rows += ep.load()()
        except Exception:
            continue
    return rows


@main.command()
@store_option("SQLite results store to read.")
@click.option("--pe", default=None, help="Only these encodings (comma-separated).")
@click.option("--task", default=None, help="Only these tasks (comma-separated).")
@click.option("--format", "fmt", default="table", type=click.Choice(["table", "csv", "json", "markdown"]))
def results(store_path, pe, task, fmt) -> None:
    """Print stored results: the leaderboard tables, or per-length rows as csv/json/markdown."""
    if not Path(store_path).exists():
        raise click.ClickException(f"no results store at {store_path}; run `pezoo bench` first")
    try:
        stored = load(store_path)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    df = _printable_frame(stored)  # names as a terminal may show them; filters match these
    # A filter name must be one this checkout knows or one the store holds (a plugin's runs
    # imported from published results): a typo is an error, not an empty table. A registry
    # name selects every run of it; a displayed name such as prism{paper} those runs only.
    if pe:
        try:
            wanted = split_pe_list(pe)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--pe") from None
        known = sorted(set(pezoo.available()) | set(df["pe"]) | set(df.get("pe_label", df["pe"])))
        _check_names("encoding", wanted, known, "--pe")
        df = df[df["pe"].isin(wanted) | df["pe_label"].isin(wanted)]
    if task:
        _check_names("task", _split(task), sorted(set(tasks.available()) | set(df["task"])), "--task")
        df = df[df["task"].isin(_split(task))]
    if df.empty:  # say so (on stderr: csv/json output stays parseable), rather than print nothing
        which = "no finished runs match" if pe or task else "no finished runs"
        click.echo(f"{which} in {store_path}{_unfinished(store_path)}", err=True)
    if fmt != "json":  # JSON escapes control characters itself; text formats go to a terminal
        df = df.map(lambda v: terminal_text(v, keep_newlines=False) if isinstance(v, str) else v)
    if fmt == "table":
        tables = leaderboard_tables(df)
        for table in tables.values():
            click.echo(table + "\n")
        if tables:
            click.echo(LEGEND)
    elif fmt == "csv":
        click.echo(df.to_csv(index=False), nl=False)
    elif fmt == "json":  # the stored values: the json encoder escapes what a terminal would act on
        click.echo(stored.loc[df.index].to_json(orient="records", lines=True), nl=False)
    else:
        click.echo(df.to_markdown(index=False))


def _printable_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every string cell :func:`harness.printable.printable`: a store's names
    (an imported plugin's, a contributed record's) may hold terminal escapes, NUL or bidi
    overrides, which the table, csv and markdown would print raw."""
    out = df.copy()
    for column in out.columns:
        if not pd.api.types.is_numeric_dtype(out[column]):  # object or str columns (pandas 3)
            out[column] = out[column].map(lambda v: printable(v) if isinstance(v, str) else v)
    return out


def _unwritable_folder(folder: Path) -> str | None:
    """Why runs could not write into ``folder`` (created when missing, as runs would), or None."""
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is None or not existing.is_dir():
        return f"{folder} cannot be created: {existing} is not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{folder}: {existing} is not writable by this user"
    return None


def _unfinished(store_path: str | Path) -> str:
    """``" (2 interrupted, 1 failed)"``: the store's runs that ``results`` leaves out."""
    try:
        with Store(store_path, readonly=True) as store:
            counts: dict[str, int] = {}
            for run in store.runs():
                if run["status"] != "finished":
                    counts[run["status"]] = counts.get(run["status"], 0) + 1
    except StoreError:
        return ""
    if not counts:
        return ""
    return " (" + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) + "; results lists finished runs)"


# `pezoo perf`: time and memory of every encoding side by side (harness/perf/).
from harness.perf import perf_command as _perf_command  # noqa: E402

main.add_command(_perf_command)



def _add_installed_commands() -> None:
    """Commands of upper floors (the leaderboard's export, check, build, import), found
    through the :data:`COMMANDS_GROUP` entry points; one that fails to load is named on
    stderr when used, never a traceback for every command."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=COMMANDS_GROUP):
        try:
            command = ep.load()
        except Exception as exc:
            main.add_command(_unavailable(ep.name, _one_line(exc)))
            continue
        if isinstance(command, click.Command):
            main.add_command(command, ep.name)


def _unavailable(name: str, why: str) -> click.Command:
    """A command standing in for one that failed to load: using it says why, on one line."""

    def say() -> None:
        raise click.ClickException(f"the {name!r} commands failed to load: {why}")

    return click.Command(name, callback=say, help=f"(not available: {why})")


_add_installed_commands()


if __name__ == "__main__":
    main()
