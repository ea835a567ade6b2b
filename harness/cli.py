"""The ``pezoo`` command line: bench, list, results."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import click
from click.core import ParameterSource

import harness.tasks as tasks
import harness.tblog as tblog
import pezoo
from harness.config import GPU_PRESETS, PRESETS
from harness.executors import (
    ExecutorError,
    InProcess,
    Job,
    RayExecutor,
    SweepEvents,
    WorkerLost,
    local_devices,
    local_executor,
    run_sweep,
)
from harness.options import store_option
from harness.provenance import resolve_device
from harness.report import leaderboard_tables
from harness.results import load
from harness.run import RunOutcome, RunResult, check_run, checkpoint_dir_for
from harness.store import Store, StoreError
from harness.sweep import (
    AXES,
    ORDERS,
    Grid,
    Plan,
    SweepSpec,
    checkpointed_steps,
    format_duration,
    format_plan,
    load_sweep,
    longest_first,
    make_plan,
    makespan,
    parse_list,
    run_label,
    varying_axes,
)


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _check_names(kind: str, names: list[str], valid: list[str]) -> None:
    from pezoo.base import unknown_name_message

    for name in names:
        if name not in valid:
            raise click.BadParameter(unknown_name_message(kind, name, valid))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
    """Show the available encodings, tasks and presets."""
    click.echo("encodings: " + ", ".join(pezoo.available()))
    click.echo("tasks:     " + ", ".join(tasks.available()))
    click.echo("presets:   " + ", ".join(PRESETS))
    click.echo("backends:  " + ", ".join(sorted(pezoo.BACKENDS)))


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
@click.option("--pe", "pes", help="Comma-separated encodings, e.g. nope,rope,randomized:rope.")
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
    type=click.Choice(list(PRESETS)),
    help="Named protocol: backbone size, steps, lengths. quick = minutes per run on 2 CPU cores.",
)
@click.option("--seeds", default=1, show_default=True, help="Number of seeds per (encoding, task): seed0..seed0+k-1.")
@click.option("--seed", "seed0", default=0, show_default=True, help="First seed.")
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
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda[:N].")
@click.option("--allow-cpu", is_flag=True, help="Run a GPU-sized preset on the CPU anyway (e.g. a few --steps).")
@click.option(
    "--checkpoint-every",
    default=250,
    show_default=True,
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
def bench(pes, task_names, sweep_file, preset, seeds, seed0, steps, batch_size, lr, train_len, test_len, test_stride,
          eval_samples, eval_every, eval_start_loss, eval_select, backend, pack, window, device, allow_cpu,
          checkpoint_every, checkpoint_dir, executor, workers, ray_address, retries, store_path, order,
          tensorboard_dir) -> None:  # fmt: skip
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

    pe_list, task_list = _split(pes or ""), _split(task_names or "")
    if sweep_file is None and not pe_list:
        raise click.UsageError("Missing option '--pe' (or give a --sweep FILE).")
    if sweep_file is None and not task_list:
        raise click.UsageError("Missing option '--task' (or give a --sweep FILE).")
    _check_names("encoding", pe_list, pezoo.available())
    _check_names("task", task_list, tasks.available())
    axes = dict(
        zip(
            AXES,
            (steps, batch_size, lr, train_len, test_len, test_stride, eval_samples, eval_every, eval_start_loss,
             eval_select, backend, pack, window),
            strict=True,
        )
    )  # fmt: skip
    cli = {
        "pe": tuple(pe_list) or None,
        "task": tuple(task_list) or None,
        "preset": preset if sweep_file is None or given("preset") else None,
        "seeds": tuple(range(seed0, seed0 + seeds)) if sweep_file is None or given("seeds") or given("seed0") else None,
        **axes,
    }
    try:
        spec = load_sweep(sweep_file) if sweep_file else SweepSpec((Grid(pe=cli["pe"], task=cli["task"]),))
        spec = spec.override(**cli)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    sweep_pes, sweep_tasks = spec.names()
    _check_names("encoding", sweep_pes, pezoo.available())
    _check_names("task", sweep_tasks, tasks.available())
    for grid in spec.grids:
        _check_names("attention backend", list(grid.backend), sorted(pezoo.BACKENDS))
    try:
        configs = spec.configs()
        for cfg in {(c.task, c.preset): c for c in configs}.values():
            check_run(cfg)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None

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
    gpu_presets = sorted({c.preset for c in configs if c.preset in GPU_PRESETS})
    if gpu_presets and device_type != "cuda" and not allow_cpu:
        if ray_executor is not None:
            ray_executor.close()
        raise click.UsageError(
            f"preset {gpu_presets[0]!r} is sized for a GPU and no CUDA device is in use; run it on a GPU, use "
            "--preset quick on CPU, or pass --allow-cpu to run it anyway (e.g. with --steps 10)"
        )
    try:
        store = Store(store_path)
    except StoreError as exc:
        if ray_executor is not None:
            ray_executor.close()
        raise click.ClickException(str(exc)) from None

    with store:
        rows = store.runs()
        resume = checkpointed_steps(checkpoint_dir_for(store.path, checkpoint_dir), [c.run_id() for c in configs])
        if order == "longest-first":
            configs = longest_first(configs, rows, resume)
        report = _SweepReport(configs, make_plan(configs, rows, resume))
        if ray_executor is not None:
            runner = ray_executor
        else:
            runner = local_executor(dev, workers, report.todo, report.progress_for, report.live_notice)
        report.in_process = isinstance(runner, InProcess)
        report.slots = min(runner.capacity, max(1, report.todo))
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
                )
        except KeyboardInterrupt as exc:
            report.close_bars()
            for index in sorted(report.running):
                click.echo(f"\n{report.label(index)}: interrupted; run the same command again to resume.", err=True)
            sys.exit(128 + signal.SIGTERM if isinstance(exc, Terminated) else 130)
        finally:
            report.close_bars()
    run_ids = {c.run_id() for c in configs}
    df = load(store_path)
    df = df[df["run_id"].isin(run_ids)]
    presets = ", ".join(dict.fromkeys(c.preset for c in configs))
    click.echo(f"\npreset {presets} on {where}; results in {store_path}\n")
    for table in leaderboard_tables(df).values():
        click.echo(table + "\n")
    if report.failures:
        click.echo("Some runs did not finish:\n  " + "\n  ".join(report.failures), err=True)
        sys.exit(1)


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


class _SweepReport(SweepEvents):
    """Progress of a sweep on the terminal.

    In-process runs show their own train/eval bars (as one run at a time always has);
    pooled and Ray runs show one bar for the whole sweep (done, running, failed, ETA)
    and a line per finished run.
    """

    def __init__(self, configs, plan: Plan | None = None) -> None:
        """``plan``: the sweep's plan against the store (``make_plan`` over ``configs``),
        for the runs to do and their estimated seconds; without one every run is to do."""
        self.configs = list(configs)
        self.axes = varying_axes(self.configs)
        self.in_process = True
        # the runs to do, in the order the driver dispatches them (one per run id)
        self.queue: list[int] = []
        seen: set[str] = set()
        for i, cfg in enumerate(self.configs, start=1):
            run_id = cfg.run_id()
            if run_id not in seen and (plan is None or plan.runs[i - 1].status != "finished"):
                self.queue.append(i)
            seen.add(run_id)
        self.todo = len(self.queue)
        self.estimates: dict[int, float] = {}  # run index -> the plan's estimated seconds
        if plan is not None:
            self.estimates = {r.index: r.estimate.seconds for r in plan.runs if r.estimate is not None}
        self.slots = 1  # runs in flight at once (the executor's capacity); the caller sets it
        self.running: set[int] = set()
        self.done = 0
        self.failures: list[str] = []
        self._run_bars: dict[str, click._termui_impl.ProgressBar] = {}
        self._note = ""
        self._sweep_bar = None
        self._clock = time.monotonic
        self._started_at: dict[int, float] = {}  # run index -> when its current attempt started
        self._run_seconds: dict[int, float] = {}  # run index -> wall seconds of its finished attempt

    def label(self, index: int) -> str:
        return f"[{index}/{len(self.configs)}] {run_label(self.configs[index - 1], self.axes)}"

    # -- output that keeps a live sweep bar intact ----------------------------------
    def _echo(self, message: str, err: bool = False) -> None:
        live = self._sweep_bar is not None and sys.stdout.isatty()
        if live:
            click.echo("\r\033[K", nl=False)  # clear the bar's line, print, draw the bar again
        click.echo(message, err=err)
        if live:
            self._sweep_bar.render_progress()

    def _status(self) -> str:
        """``done 3/12, running 2, failed 0, ETA 4m`` (no ETA until there is one)."""
        status = f"done {self.done}/{self.todo}, running {len(self.running)}, failed {len(self.failures)}"
        eta = self.eta()
        if eta is not None and self.done + len(self.failures) < self.todo:
            status += f", ETA {format_duration(eta)}"
        return status

    def _expected_seconds(self, index: int) -> float | None:
        """How long run ``index`` should take: the plan's estimate scaled by how the
        finished runs' wall times compared with theirs (the estimate is device time from
        other runs; workers sharing a machine run slower), else the mean wall time of the
        finished runs; None when there is neither."""
        timed = [i for i in self._run_seconds if i in self.estimates]
        if index in self.estimates:
            planned = sum(self.estimates[i] for i in timed)
            scale = sum(self._run_seconds[i] for i in timed) / planned if timed and planned > 0 else 1.0
            return self.estimates[index] * scale
        if self._run_seconds:
            return sum(self._run_seconds.values()) / len(self._run_seconds)
        return None

    def eta(self) -> float | None:
        """Seconds until the sweep ends: the runs in flight finish what they have left,
        then the runs not yet started go, in dispatch order, each to the first worker free
        (the driver's own list scheduling over ``slots`` workers). None while a run left
        has no expected time, or a run in flight has outlived its expected time (how much
        longer it takes is then anyone's guess). A mean over runs left would be wrong twice
        on a sweep of unequal runs: it ignores which runs are left, and it misses that the
        last worker busy decides the end. A retried run counts in full, though it may
        resume from its checkpoint."""
        now = self._clock()
        running = {i: self._expected_seconds(i) for i in self.running}
        queued = [self._expected_seconds(i) for i in self.queue]
        if None in running.values() or None in queued:
            return None
        busy = [s - (now - self._started_at[i]) for i, s in running.items()]
        if any(left < 0 for left in busy):
            return None
        return makespan(queued, self.slots, busy)

    def _attempt_over(self, index: int, measured: bool) -> None:
        """Run ``index`` is no longer in flight; ``measured``: its time counts towards the ETA
        (a finished run's does; a failed or retried attempt's says little about a run's length)."""
        self.running.discard(index)
        started = self._started_at.pop(index, None)
        if measured and started is not None:
            self._run_seconds[index] = self._clock() - started

    def _bump(self, finished: bool) -> None:
        # Off a terminal (a log file, CI) a progress bar prints only its label; the
        # per-run "started"/"finished (done i/n, ETA)" lines carry the status there.
        if self.in_process or not sys.stdout.isatty():
            return
        if self._sweep_bar is None:
            self._sweep_bar = click.progressbar(
                length=self.todo, label="sweep", item_show_func=lambda _: self._status(), show_eta=False, width=30
            )
            self._sweep_bar.__enter__()
        self._sweep_bar.update(1 if finished else 0)

    # -- per-run bars of the in-process executor -------------------------------------
    def progress_for(self, job: Job):
        label = self.label(job.index)

        def progress(phase: str, done: int, total: int, note: str) -> None:
            if phase not in self._run_bars:
                for bar in self._run_bars.values():
                    bar.render_finish()
                self._run_bars[phase] = click.progressbar(
                    length=total, label=f"{label} {phase:5}", item_show_func=lambda _: self._note, width=30
                )
                self._run_bars[phase].__enter__()
            self._note = note
            self._run_bars[phase].update(done - self._run_bars[phase].pos)

        return progress

    def live_notice(self, job: Job, message: str) -> None:
        click.echo(f"\n{self.label(job.index)}: {message}", err=True)

    def close_bars(self) -> None:
        self.close_run_bars()
        if self._sweep_bar is not None:
            self._sweep_bar.__exit__(None, None, None)
            self._sweep_bar = None

    # -- SweepEvents -----------------------------------------------------------------
    def skipped(self, index: int, cfg) -> None:
        if index in self.queue:
            self.queue.remove(index)
        click.echo(f"{self.label(index)}: already in the store, skipped")

    def started(self, job: Job) -> None:
        if job.index in self.queue:
            self.queue.remove(job.index)
        self.running.add(job.index)
        self._started_at[job.index] = self._clock()
        self.slots = max(self.slots, len(self.running))
        if not self.in_process and not sys.stdout.isatty():
            click.echo(f"{self.label(job.index)}: started")
        self._bump(finished=False)

    def notice(self, job: Job, message: str) -> None:
        self._echo(f"{self.label(job.index)}: {message}", err=True)

    def retrying(self, job: Job, reason: str, attempts: int) -> None:
        self._attempt_over(job.index, measured=False)
        self.queue.insert(0, job.index)  # the driver runs a retry next
        self.close_run_bars()
        self._echo(
            f"{self.label(job.index)}: attempt {job.attempt} of {attempts} failed ({reason}); retrying", err=True
        )

    def finished(self, job: Job, outcome: RunOutcome, result: RunResult | WorkerLost) -> None:
        self._attempt_over(job.index, measured=outcome.status == "finished")
        self.close_run_bars()
        label = self.label(job.index)
        if outcome.status == "finished":
            self.done += 1
            if not self.in_process:
                seconds = (result.train_seconds or 0) + (result.eval_seconds or 0)
                self._echo(f"{label}: finished in {seconds:.1f}s ({self._status()})")
        else:
            self.failures.append(f"{label}: {outcome.status}: {outcome.error}")
            self._echo(f"{label}: {outcome.status}: {outcome.error}", err=True)
        self._bump(finished=True)

    def close_run_bars(self) -> None:
        for bar in self._run_bars.values():
            bar.__exit__(None, None, None)
        self._run_bars.clear()


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
def sweep_plan(file, store_path, checkpoint_dir, workers) -> None:
    """Print the runs of a sweep file, how many the store already holds finished, and an
    estimate of the device-hours the missing ones need (from the measured steps/s of
    finished runs in the store, less what their checkpoints have done)."""
    try:
        configs = load_sweep(file).configs()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    pes = list(dict.fromkeys(c.pe for c in configs))
    _check_names("encoding", pes, pezoo.available())
    _check_names("task", list(dict.fromkeys(c.task for c in configs)), tasks.available())
    rows = []
    if Path(store_path).exists():
        try:
            with Store(store_path) as store:
                rows = store.runs()
        except StoreError as exc:
            raise click.ClickException(str(exc)) from None
    ckpt_dir = checkpoint_dir_for(store_path, checkpoint_dir)
    plan = make_plan(configs, rows, checkpointed_steps(ckpt_dir, [c.run_id() for c in configs]) if rows else None)
    n_workers = len(local_devices(resolve_device("auto"), workers, plan.missing))
    click.echo(format_plan(plan, varying_axes(configs), n_workers))
    published = _published_but_missing(plan)
    if published:
        click.echo(
            f"{published} of the missing runs are published under leaderboard/results: "
            f"`pezoo leaderboard import --store {store_path}` counts them as done, so bench does not train them again"
        )


def _published_but_missing(plan: Plan) -> int:
    """How many of the plan's missing runs the results files in ./leaderboard/results hold
    (0 when there is no such folder or it does not validate: this is only a hint)."""
    from leaderboard.cli import DEFAULT_RESULTS
    from leaderboard.schema import ResultsError, read_results

    if not DEFAULT_RESULTS.is_dir():
        return 0
    try:
        published = {r.run_id for r in read_results(DEFAULT_RESULTS)}
    except ResultsError:
        return 0
    return len({r.config.run_id() for r in plan.runs if r.status != "finished"} & published)


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
        df = load(store_path)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    if pe:
        df = df[df["pe"].isin(_split(pe))]
    if task:
        df = df[df["task"].isin(_split(task))]
    if fmt == "table":
        for table in leaderboard_tables(df).values():
            click.echo(table + "\n")
    elif fmt == "csv":
        click.echo(df.to_csv(index=False), nl=False)
    elif fmt == "json":
        click.echo(df.to_json(orient="records", lines=True), nl=False)
    else:
        click.echo(df.to_markdown(index=False))


# `pezoo perf`: time and memory of every encoding side by side (harness/perf.py).
from harness.perf import perf_command as _perf_command  # noqa: E402

main.add_command(_perf_command)

# The leaderboard's commands (export, check, build); this composition root is the only
# harness module that imports the leaderboard package.
from leaderboard.cli import leaderboard as _leaderboard_group  # noqa: E402

main.add_command(_leaderboard_group)


if __name__ == "__main__":
    main()
