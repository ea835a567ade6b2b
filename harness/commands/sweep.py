"""``pezoo sweep plan FILE``: a sweep file's runs, which the store has done, and an estimate
of the device time the others need, borrowing speeds where nothing measured a run's own:
from similar runs, and from the published board (the leaderboard's records, through the
:data:`PUBLISHED_RUNS_GROUP` entry points). ``pezoo bench`` reads nothing published."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import click

import harness.tasks as tasks
import pezoo
from harness.commands.checks import check_backends, check_names, check_runs
from harness.commands.options import max_runs_option, store_option
from harness.config import RunConfig
from harness.execution.run import checkpoint_dir_for
from harness.records.provenance import cpu_name, resolve_device
from harness.records.store import Store, StoreError
from harness.sweeps.estimate import probe_key, steps_done, unmeasured
from harness.sweeps.executors import local_devices
from harness.sweeps.executors.sizing import group_mode, packed_per_gpu
from harness.sweeps.labels import varying_axes
from harness.sweeps.plan import ORDERS, Plan, format_plan, make_plan, order_runs
from harness.sweeps.sweep import load_sweep

PUBLISHED_RUNS_GROUP = "pezoo.published_runs"
"""Entry point group of functions ``() -> list[dict]`` giving published runs as
``Store.runs()`` rows: the leaderboard package provides one (its results files); ``pezoo
sweep plan`` uses them as hints and rough speeds. The harness imports no leaderboard
module: floors point down, and upper floors plug in here."""


@click.group()
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
@click.option(
    "--order",
    default="listed",
    show_default=True,
    type=click.Choice(ORDERS),
    help="List and time the runs in the order `pezoo bench --order` would run them (listed, longest-first "
    "or seeds-first).",
)
@max_runs_option
def sweep_plan(file, store_path, checkpoint_dir, workers, probe, max_runs, order) -> None:
    """Print the runs of a sweep file, how many the store already holds finished, and an
    estimate of the device-hours the missing ones need (from the measured steps/s of
    finished runs in the store, or with --probe of a few steps timed here, less what
    their checkpoints have done)."""
    try:
        spec = load_sweep(file, max_runs)  # its errors name the file
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        configs = spec.configs(max_runs)
    except ValueError as exc:  # a value out of range ("seed must be an integer >= 0"): the file's
        raise click.UsageError(f"{file}: {exc}") from None
    pes = list(dict.fromkeys(c.pe for c in configs))
    check_names("encoding", pes, pezoo.available(), str(file))
    check_names("task", list(dict.fromkeys(c.task for c in configs)), tasks.bench_tasks(), str(file))
    check_backends((c.backbone.backend for c in configs), str(file))
    try:
        check_runs(configs)  # what bench would refuse, plan refuses too
    except ValueError as exc:
        raise click.UsageError(f"{file}: {exc}") from None
    rows: list[dict[str, Any]] = []
    lapsed: set[str] = set()
    suspects: set[str] = set()
    if Path(store_path).exists():
        try:
            with Store(store_path, readonly=True) as store:
                rows, lapsed, suspects = store.runs(), store.lapsed(), store.suspects()
        except StoreError as exc:
            raise click.ClickException(str(exc)) from None
    ckpt_dir = checkpoint_dir_for(store_path, checkpoint_dir)
    device = resolve_device("auto")
    published = published_runs()
    resume = steps_done(ckpt_dir, configs, rows) if rows else None
    probes = _probe(configs, rows, device) if probe else None
    plan_options: dict[str, Any] = {"device_type": device.type, "lapsed": lapsed, "machine": cpu_name()}
    configs = order_runs(configs, order, rows, resume, probes=probes, suspects=suspects, **plan_options)
    plan = make_plan(configs, rows, resume, published=published, probes=probes, **plan_options)
    grouped = group_mode(device_type=device.type) == "threads"  # CUDA's default: runs side by side in one process
    per_gpu = packed_per_gpu(configs, device, grouped=grouped) if workers is None and plan.missing > 1 else 1
    n_workers = len(local_devices(device, workers, plan.missing, per_gpu))
    click.echo(format_plan(plan, varying_axes(configs), n_workers, grouped=grouped and n_workers > 1, order=order))
    line = published_line(plan, {r["run_id"] for r in published}, store_path)
    if line:
        click.echo(line)


def _probe(configs: Sequence[RunConfig], rows: list[dict[str, Any]], device: Any) -> dict:
    """Speeds probed here for the speed groups the store has not measured, with a line each."""
    from harness.config.pe_spec import config_display_name
    from harness.training.probe import DEFAULT_STEPS, DEFAULT_WARMUP, probe_speeds

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


def published_runs() -> list[dict]:
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


def published_line(plan: Plan, published_ids: Collection[str], store_path: str | Path) -> str | None:
    """How many of the plan's missing runs are published under leaderboard/results, and
    how to count them as done; None when none are."""
    n = len({r.config.run_id() for r in plan.runs if r.status != "finished"} & set(published_ids))
    if not n:
        return None
    return (
        f"{n} of the runs to train are published under leaderboard/results: "
        f"`pezoo leaderboard import --store {store_path}` counts them as done, so bench does not train them again"
    )
