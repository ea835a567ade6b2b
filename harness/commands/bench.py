"""``pezoo bench``: train and evaluate every (encoding, task, seed) of a sweep, then print
the leaderboard of what it holds.

The command reads as its steps: the sweep's runs from the options (every name and option
checked before anything is written), where they train, the plan against the store (which
are done, how long the others take: ``harness.sweeps.plan``), the announcement, the runs
(``harness.sweeps.executors.run_sweep``), and the tables.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import torch
from click.core import ParameterSource

import harness.tasks as tasks
import harness.training.tblog as tblog
import pezoo
from harness.commands.checks import check_backends, check_names, check_runs, refuse_broken_plugins, split
from harness.commands.options import duration, grouped, max_runs_option, preset_name, setting_options, store_option
from harness.commands.printable import one_line
from harness.commands.report import LEGEND, LM_LEGEND, leaderboard_tables, lm_tables
from harness.config import GPU_PRESETS, INT64_MAX, PRESETS, RunConfig
from harness.execution.run import checkpoint_dir_for
from harness.records.files import unwritable_folder
from harness.records.frames import load, load_lm
from harness.records.provenance import cpu_name, resolve_device, uses_plugins
from harness.records.store import Store, StoreError
from harness.sweeps.announce import bench_announcement
from harness.sweeps.deadline import MARGIN, TimeLimit, probing_expectation
from harness.sweeps.estimate import steps_done
from harness.sweeps.executors import (
    Executor,
    ExecutorError,
    Grouped,
    InProcess,
    RayExecutor,
    local_executor,
    run_sweep,
)
from harness.sweeps.plan import ORDERS, Plan, format_duration, make_plan, order_runs
from harness.sweeps.progress import SweepReport
from harness.sweeps.sweep import Grid, SweepSpec, check_size, load_sweep, naming_the_option
from pezoo.backends import xformers_available
from pezoo.spec import parse_pe, split_pe_list


@click.command()
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
    callback=preset_name,
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
@setting_options
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
    help="Order of the runs: as listed; longest-first by the estimate of `pezoo sweep plan` (from "
    "runs the store has finished), so parallel workers finish together; or seeds-first, every row's first "
    "seed before any row's second, so a sweep stopped early has every row.",
)
@click.option(
    "--tensorboard",
    "tensorboard",
    type=click.Path(file_okay=False),
    help="Also log every run's loss, learning rate and evaluations for TensorBoard under this folder "
    "(pip install 'pezoo[tensorboard]').",
)
@click.option(
    "--time-limit",
    "time_limit",
    callback=duration,
    help="Start only runs expected to end within this time from now (e.g. 2h30m, 90m, 1.5h; a bare number is "
    "seconds): one that would "
    "not is deferred to a later bench, and a shorter run after it may go first. For a machine that goes away "
    "with its disk at a known time; runs started are never stopped (docs/sweeps.md).",
)
@click.option(
    "--hang-timeout",
    "hang_timeout",
    callback=duration,
    help="Local executor: stop a run whose worker sends no progress for this long (e.g. 30m; a training step "
    "and an evaluated length each report), as hung; it is retried, then recorded failed. Runs then train in "
    "worker processes, also with --workers 1. Default: wait for ever.",
)
@click.option(
    "--keep-weights",
    is_flag=True,
    help="Keep every trained run's final weights (<run_id>.weights.pt in the checkpoint folder), so a later "
    "inference-time variant, or a run of the same training tested further (another --test-len), never trains again. "
    "Runs with variants in the sweep always keep them.",
)
@max_runs_option
@grouped("machine", ("executor", "device", "workers", "ray_address", "allow_cpu", "hang_timeout"))
@grouped("running", ("checkpoint_every", "checkpoint_dir", "retries", "tensorboard", "keep_weights"))
def bench(
    pes: str | None,
    task_names: str | None,
    sweep_file: str | None,
    preset: str,
    seeds: int,
    seed0: int,
    settings: dict[str, Any],
    machine: dict[str, Any],
    running: dict[str, Any],
    store_path: Path,
    order: str,
    time_limit: float | None,
    max_runs: int,
) -> None:
    """Train and evaluate every (encoding, task, seed), then print the leaderboard.

    Finished runs already in the store are not trained again; an interrupted run
    (Ctrl-C, a crash, a killed process) resumes from its last checkpoint when the same
    command is run again. Exit status is 1 if any run failed or diverged.

    Lists make grids: `--lr 1e-4,3e-4 --seeds 3` trains every encoding and task at both
    learning rates with 3 seeds; larger grids go in a --sweep file.
    """
    ctx = click.get_current_context()
    given = {name for name in ctx.params if ctx.get_parameter_source(name) not in _DEFAULTS}
    _check_executor_options(machine, given)
    # 1. the runs, every name and option checked before anything is written
    configs = _sweep_configs(pes, task_names, sweep_file, preset, seeds, seed0, settings, max_runs, given)
    _check_tensorboard(running["tensorboard"])
    # 2. where they train, and the store
    target, store = _target_and_store(machine, configs, store_path, running["checkpoint_dir"])
    with store:
        # 3. the plan: which runs are done, how long the others take (from what was measured here)
        rows = store.runs()
        resume = steps_done(checkpoint_dir_for(store.path, running["checkpoint_dir"]), configs, rows)
        plan_options: dict[str, Any] = {"device_type": target.device_type, "lapsed": store.lapsed(),
                                        "machine": cpu_name(), "borrow": False}  # fmt: skip
        configs = order_runs(configs, order, rows, resume, suspects=store.suspects(), **plan_options)
        plan = make_plan(configs, rows, resume, **plan_options)
        report = SweepReport(configs, plan)
        runner = target.runner(report, machine["hang_timeout"], isolate=uses_plugins(configs), configs=configs)
        report.held_elsewhere = store.held_by_others  # other processes on the store share the sweep
        # 4. the announcement
        how = target.how(runner, report.slots)
        click.echo(
            bench_announcement(configs, plan, store_path=store_path, where=target.where, runner=how,
                               workers=report.slots, device_type=target.device_type, others=report.other_processes())
            + "\n"
        )  # fmt: skip
        admit = _time_limit(time_limit, target, configs, plan, rows, resume, plan_options, report)
        # 5. the runs
        stopped = _run(runner, configs, store, report, admit, running)
    # 6. the tables, and what did not finish
    _print_tables(configs, store_path, target.where, stopped)
    _print_unfinished(report, stopped)
    if report.failures or stopped is not None:
        sys.exit(1)


_DEFAULTS = (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


def _check_executor_options(machine: dict[str, Any], given: set[str]) -> None:
    """Refuse executor options that do nothing with the executor chosen; click errors."""
    executor = machine["executor"]
    if machine["hang_timeout"] is not None and executor == "ray":
        raise click.UsageError("--hang-timeout stops hung runs of the local executor; Ray runs are not watched.")
    if "ray_address" in given and executor != "ray":  # else the runs would train here, not on the cluster named
        raise click.UsageError("--ray-address names a Ray cluster for --executor ray; add --executor ray, or drop it.")


def _check_tensorboard(folder: str | None) -> None:
    """Refuse ``--tensorboard`` (a ``folder``) when TensorBoard's writer is not installed, or
    when the folder cannot be made (a file on its way): every run then failed at its start,
    the store made; click errors."""
    if folder is None:
        return
    try:
        tblog.check_available()
    except RuntimeError as exc:
        raise click.UsageError(str(exc)) from None
    problem = unwritable_folder(Path(folder))
    if problem is not None:
        raise click.BadParameter(f"{problem}; every run logs there", param_hint="--tensorboard")


def _target_and_store(
    machine: dict[str, Any], configs: list[RunConfig], store_path: Path, checkpoint_dir: str | None
) -> tuple[_Target, Store]:
    """Where the runs train (checked against them) and the opened store, once the checkpoint
    folder is known writable; click errors, the target closed on any."""
    target = _Target.choose(machine["executor"], machine["device"], machine["workers"], machine["ray_address"])
    with target.closed_on_error():
        target.check(configs, machine["allow_cpu"])
        problem = unwritable_folder(checkpoint_dir_for(store_path, checkpoint_dir))
        if problem is not None:  # runs would train without checkpoints, warning at every interval
            why = f"{problem}; checkpoints (and the weights variants evaluate) go there"
            raise click.BadParameter(why, param_hint="--checkpoint-dir")
        try:
            store = Store(store_path)
        except StoreError as exc:
            raise click.ClickException(str(exc)) from None
    return target, store


def _sweep_configs(
    pes: str | None,
    task_names: str | None,
    sweep_file: str | None,
    preset: str,
    seeds: int,
    seed0: int,
    axes: dict[str, Any],
    max_runs: int,
    given: set[str],
) -> list[RunConfig]:
    """The sweep's runs from the options (``--pe`` parsed once) and the sweep file, every
    name checked (close matches named) and every run checked (``check_run``); click errors."""
    try:
        specs = [parse_pe(p) for p in split_pe_list(pes or "")]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--pe") from None
    pe_names = list(dict.fromkeys(s.name for s in specs))
    task_list = split(task_names or "")
    if sweep_file is None and not specs:
        raise click.UsageError("Missing option '--pe' (or give a --sweep FILE).")
    if sweep_file is None and not task_list:
        raise click.UsageError("Missing option '--task' (or give a --sweep FILE).")
    refuse_broken_plugins(pe_names)
    check_names("encoding", pe_names, pezoo.available())
    check_names("task", task_list, tasks.bench_tasks())
    try:
        check_size(seeds, max_runs)  # before the seeds are listed
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--seeds") from None
    cli = {
        "pe": tuple(specs) or None,
        "task": tuple(task_list) or None,
        "preset": preset if sweep_file is None or "preset" in given else None,
        "seeds": tuple(range(seed0, seed0 + seeds)) if sweep_file is None else None,
        **axes,
    }
    try:
        spec = load_sweep(sweep_file, max_runs) if sweep_file else SweepSpec((Grid(pe=cli["pe"], task=cli["task"]),))
        spec = spec.override(**cli)
        if sweep_file is not None:  # each option replaces its own part of every grid's seeds
            spec = spec.with_seeds(seed0 if "seed0" in given else None, seeds if "seeds" in given else None)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if sweep_file is not None:  # a name from the sweep file is the file's mistake: say which file
        sweep_pes, sweep_tasks = spec.names()
        refuse_broken_plugins(sweep_pes, warn=False)
        check_names("encoding", sweep_pes, pezoo.available(), "--pe" if specs else str(sweep_file))
        check_names("task", sweep_tasks, tasks.bench_tasks(), "--task" if task_list else str(sweep_file))
    from_file = sweep_file is not None and not axes.get("backend")  # else --backend replaced the file's
    check_backends((b for grid in spec.grids for b in grid.backend), str(sweep_file) if from_file else "--backend")
    try:
        configs = spec.configs(max_runs)
        check_runs(configs)
    except ValueError as exc:
        where = f"{sweep_file} (or an option beside it): " if sweep_file else ""
        raise click.UsageError(where + naming_the_option(str(exc))) from None
    return configs


@dataclass
class _Target:
    """Where the runs train: this machine's ``device``, or a Ray cluster (``ray``)."""

    device_type: str
    where: str  # in words: cpu, cuda:0, a Ray cluster (cuda)
    workers: int | None
    device: Any = None  # torch.device here; None on Ray
    ray: RayExecutor | None = None

    @classmethod
    def choose(cls, executor: str, device: str, workers: int | None, ray_address: str | None) -> _Target:
        if executor == "ray":
            try:
                ray = RayExecutor(ray_address, workers=workers, device=device)
            except ExecutorError as exc:
                raise click.UsageError(str(exc)) from None
            return cls(ray.device_type, f"a Ray cluster ({ray.device_type})", workers, ray=ray)
        try:
            dev = resolve_device(device)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--device") from None
        return cls(dev.type, str(dev), workers, device=dev)

    @contextlib.contextmanager
    def closed_on_error(self) -> Iterator[None]:
        """A Ray cluster joined is left again when bench stops before its runs."""
        try:
            yield
        except BaseException:
            if self.ray is not None:
                self.ray.close()
            raise

    def check(self, configs: Sequence[RunConfig], allow_cpu: bool) -> None:
        """Click errors for runs this target cannot train: xformers off CUDA, a GPU preset on a CPU."""
        if any(c.backbone.backend == "xformers" for c in configs) and (
            self.device_type != "cuda" or (self.ray is None and not xformers_available())
        ):
            no_cuda = self.device_type != "cuda"
            reason = "no CUDA device is in use" if no_cuda else "the xformers package does not load here"
            raise click.BadParameter(
                f"the xformers backend runs on CUDA tensors only, and {reason}; use --backend sdpa, flex or auto "
                "(auto picks xformers where it works), or install the gpu extra: pip install 'pezoo[gpu]'",
                param_hint="--backend",
            )
        gpu_presets = sorted({c.preset for c in configs if c.preset in GPU_PRESETS})
        if gpu_presets and self.device_type != "cuda" and not allow_cpu:
            raise click.UsageError(
                f"preset {gpu_presets[0]!r} is sized for a GPU and no CUDA device is in use; run it on a GPU, use "
                "--preset quick on CPU, or pass --allow-cpu to run it anyway (e.g. with --steps 10)"
            )

    def runner(
        self, report: SweepReport, hang_timeout: float | None, *, isolate: bool, configs: Sequence[RunConfig] = ()
    ) -> Executor:
        """The executor the runs go to (a pool here, or the Ray cluster), its slots told to ``report``."""
        runner: Executor
        if self.ray is not None:
            runner = self.ray
        else:
            runner = local_executor(
                self.device,
                self.workers,
                report.todo,
                report.progress_for,
                report.live_notice,
                isolate=isolate,
                hang_seconds=hang_timeout,
                configs=configs,  # on CUDA: how many runs share each GPU (harness.sweeps.executors.sizing)
            )
        report.in_process = isinstance(runner, InProcess)
        report.slots = min(runner.capacity, max(1, report.todo))
        return runner

    def how(self, runner: Executor, slots: int) -> str:
        """How the runs go, in words."""
        if isinstance(runner, InProcess):
            # the process's own thread count (pool workers use one): said, because on a busy
            # CPU several threads per run can train many times slower than one
            threads = torch.get_num_threads()
            how = f"one run at a time, in this process ({threads} torch thread{'s' if threads != 1 else ''})"
            return how + (_busy_cpu(threads) if self.device_type == "cpu" else "")
        if isinstance(runner, Grouped):
            how = f"{slots} runs at a time, side by side in this process (a thread and a CUDA stream each)"
            if runner.stacks_runs:
                how += "; runs of one model shape take each step's pass together (PEZOO_ACCEL stack)"
            return how
        if self.ray is None and slots == 1:
            return "one run at a time, in a worker process (one torch thread): a crash or hang ends only its run"
        if self.ray is None:
            return f"{slots} runs at a time, in {slots} worker processes (one torch thread each)"
        return f"{slots} Ray tasks at a time"


def _busy_cpu(threads: int) -> str:
    """A warning when ``threads`` torch threads would share this machine's cores with work
    already running (another sweep: two in-process sweeps of two threads each on two cores
    trained 6-10 times slower than with one thread each), else ''. Read off the 1-minute
    load average, which this process's planning has barely moved yet."""
    try:
        load = os.getloadavg()[0]
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    except OSError:  # no load average on this platform
        return ""
    if threads <= 1 or load < 0.5 or threads + load <= cores + 0.5:
        return ""
    return (
        f"; this machine is busy already (1-minute load {load:.1f} on {cores} core{'s' if cores != 1 else ''}), "
        f"and {threads} threads sharing busy cores can train many times slower than one: "
        "OMP_NUM_THREADS=1 before the command trains on one"
    )


def _time_limit(
    seconds: float | None,
    target: _Target,
    configs: Sequence[RunConfig],
    plan: Plan,
    rows: list[dict[str, Any]],
    resume: dict[str, int],
    plan_options: dict[str, Any],
    report: SweepReport,
) -> Callable[[int, RunConfig], str | None] | None:
    """``--time-limit``: which runs may start (``run_sweep``'s ``admit``), said in a line; None without one."""
    if seconds is None:
        return None
    expected: Callable[[int], float | None] = report.expected_seconds
    if target.ray is None:  # a probe here says nothing of a Ray cluster's nodes
        expected = probing_expectation(configs, plan, rows, resume, plan_options, report, target.device)
    limit = TimeLimit(seconds, expected)
    click.echo(
        f"time limit {format_duration(seconds)}: a run is started only if it is expected to end "
        f"within it (its estimate x {MARGIN:g}); the others are deferred\n"
    )
    return lambda index, _cfg: limit.admit(index)


def _run(
    runner: Executor,
    configs: Sequence[RunConfig],
    store: Store,
    report: SweepReport,
    admit: Callable[[int, RunConfig], str | None] | None,
    options: dict[str, Any],
) -> StoreError | None:
    """The sweep's runs (``run_sweep``); Ctrl-C or SIGTERM exits (130, 143) once the runs in
    flight are marked interrupted; a store that fails returns its error, so the tables of
    what finished still show."""
    try:
        with _sigterm_interrupts():
            run_sweep(runner, configs, store, events=report, admit=admit, **options)
    except KeyboardInterrupt as exc:
        report.close_bars()
        for index in sorted(report.running):
            click.echo(f"\n{report.label(index)}: interrupted; run the same command again to resume.", err=True)
        sys.exit(128 + signal.SIGTERM if isinstance(exc, Terminated) else 130)
    except StoreError as exc:  # claiming or recording
        return exc
    finally:
        report.close_bars()
    return None


def _print_tables(configs: Sequence[RunConfig], store_path: Path, where: str, stopped: StoreError | None) -> None:
    """The leaderboard tables of the sweep's runs, read back from the store."""
    try:
        df = load(store_path)
    except StoreError as exc:
        if stopped is None:
            raise click.ClickException(str(exc)) from None
        unreadable = f"the store cannot be read either ({one_line(exc)})"
        raise click.ClickException(f"{one_line(stopped)}; {unreadable}") from None
    df = df[df["run_id"].isin({c.run_id() for c in configs})]
    presets = ", ".join(dict.fromkeys(c.preset for c in configs))
    click.echo(f"\npreset {presets} on {where}; results in {store_path}\n")
    planned_seeds: dict[str, set[int]] = {}
    for c in configs:
        planned_seeds.setdefault(c.task, set()).add(c.seed)
    wanted = {task: len(seeds) for task, seeds in planned_seeds.items()}
    for table in leaderboard_tables(df, seeds_wanted=wanted).values():
        click.echo(table + "\n")
    if any(not c.is_lm for c in configs):
        click.echo(LEGEND + "\n")
    lm_ids = {c.run_id() for c in configs if c.is_lm}
    if lm_ids:
        try:
            scores = load_lm(store_path)
        except StoreError as exc:
            raise click.ClickException(str(exc)) from None
        for table in lm_tables(scores[scores["run_id"].isin(lm_ids)]).values():
            click.echo(table + "\n")
        click.echo(LM_LEGEND + "\n")


def _print_unfinished(report: SweepReport, stopped: StoreError | None) -> None:
    """Runs deferred by the time limit, runs that failed, and why the sweep stopped (stderr)."""
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
        click.echo(f"Error: the sweep stopped: {one_line(stopped)}{tail}", err=True)


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
