"""The ``pezoo`` command line: bench, list, results."""

from __future__ import annotations

import sys
from pathlib import Path

import click

import harness.tasks as tasks
import pezoo
from harness.config import GPU_PRESETS, PRESETS, preset_config
from harness.provenance import resolve_device
from harness.report import leaderboard_tables
from harness.results import load
from harness.run import check_run, execute
from harness.store import Store, StoreError

DEFAULT_STORE = Path("runs") / "pezoo.sqlite"


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


@main.command()
@click.option("--pe", "pes", required=True, help="Comma-separated encodings, e.g. nope,rope,randomized:rope.")
@click.option("--task", "task_names", required=True, help="Comma-separated tasks, e.g. copy,reverse.")
@click.option(
    "--preset",
    default="quick",
    show_default=True,
    type=click.Choice(list(PRESETS)),
    help="Named protocol: backbone size, steps, lengths. quick = minutes per run on 2 CPU cores.",
)
@click.option("--seeds", default=1, show_default=True, help="Number of seeds per (encoding, task): seed0..seed0+k-1.")
@click.option("--seed", "seed0", default=0, show_default=True, help="First seed.")
@click.option("--steps", type=int, help="Override the preset's training steps.")
@click.option("--batch-size", type=int, help="Override the training batch size.")
@click.option("--lr", type=float, help="Override the peak learning rate.")
@click.option("--train-len", type=int, help="Override the largest training scale N (train on 1..N).")
@click.option("--test-len", type=int, help="Override the largest test scale M (test N+1..M).")
@click.option("--test-stride", type=int, help="Evaluate every k-th test scale.")
@click.option("--eval-samples", type=int, help="Examples per evaluated scale.")
@click.option("--backend", type=str, help="Attention backend (see `pezoo list`).")
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda[:N].")
@click.option("--allow-cpu", is_flag=True, help="Run a GPU-sized preset on the CPU anyway (e.g. a few --steps).")
@click.option(
    "--checkpoint-every",
    default=250,
    show_default=True,
    help="Save the training state every N steps; a killed run resumes from it.",
)
@click.option(
    "--store",
    "store_path",
    default=str(DEFAULT_STORE),
    show_default=True,
    type=click.Path(dir_okay=False),
    help="SQLite results store (created if missing).",
)
def bench(pes, task_names, preset, seeds, seed0, steps, batch_size, lr, train_len, test_len, test_stride,
          eval_samples, backend, device, allow_cpu, checkpoint_every, store_path) -> None:  # fmt: skip
    """Train and evaluate every (encoding, task, seed), then print the leaderboard.

    Finished runs already in the store are not trained again; an interrupted run
    (Ctrl-C, a crash, a killed process) resumes from its last checkpoint when the same
    command is run again. Exit status is 1 if any run failed or diverged.
    """
    pe_list, task_list = _split(pes), _split(task_names)
    _check_names("encoding", pe_list, pezoo.available())
    _check_names("task", task_list, tasks.available())
    try:
        dev = resolve_device(device)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--device") from None
    if preset in GPU_PRESETS and dev.type != "cuda" and not allow_cpu:
        raise click.UsageError(
            f"preset {preset!r} is sized for a GPU and no CUDA device is in use; run it on a GPU, use "
            "--preset quick on CPU, or pass --allow-cpu to run it anyway (e.g. with --steps 10)"
        )
    overrides = {
        "train": {"steps": steps, "batch_size": batch_size, "lr": lr, "train_max": train_len},
        "eval": {"test_max": test_len, "test_stride": test_stride, "samples": eval_samples},
        "backbone": {"backend": backend},
    }
    if backend is not None:
        _check_names("attention backend", [backend], sorted(pezoo.BACKENDS))
    try:
        configs = [
            preset_config(preset, pe=pe, task=task, seed=seed, overrides=overrides)
            for task in task_list
            for pe in pe_list
            for seed in range(seed0, seed0 + seeds)
        ]
        for cfg in {(c.task, c.preset): c for c in configs}.values():
            check_run(cfg)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        store = Store(store_path)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None

    failures = []
    with store:
        for i, cfg in enumerate(configs, start=1):
            label = f"[{i}/{len(configs)}] {cfg.pe} on {cfg.task} seed {cfg.seed}"
            if store.status(cfg.run_id()) == "finished":
                click.echo(f"{label}: already in the store, skipped")
                continue
            try:
                outcome = _execute_with_progress(cfg, store, dev, label, checkpoint_every)
            except KeyboardInterrupt:
                click.echo(f"\n{label}: interrupted; run the same command again to resume.", err=True)
                sys.exit(130)
            if outcome.status != "finished":
                failures.append(f"{label}: {outcome.status}: {outcome.error}")
                click.echo(f"{label}: {outcome.status}: {outcome.error}", err=True)
    run_ids = {c.run_id() for c in configs}
    df = load(store_path)
    df = df[df["run_id"].isin(run_ids)]
    click.echo(f"\npreset {preset} on {dev}; results in {store_path}\n")
    for table in leaderboard_tables(df).values():
        click.echo(table + "\n")
    if failures:
        click.echo("Some runs did not finish:\n  " + "\n  ".join(failures), err=True)
        sys.exit(1)


def _execute_with_progress(cfg, store, device, label, checkpoint_every):
    bars: dict[str, click._termui_impl.ProgressBar] = {}
    state = {"note": ""}

    def progress(phase: str, done: int, total: int, note: str) -> None:
        if phase not in bars:
            for bar in bars.values():
                bar.render_finish()
            bars[phase] = click.progressbar(
                length=total, label=f"{label} {phase:5}", item_show_func=lambda _: state["note"], width=30
            )
            bars[phase].__enter__()
        state["note"] = note
        bars[phase].update(done - bars[phase].pos)

    try:
        return execute(
            cfg,
            store,
            device,
            progress,
            checkpoint_every=checkpoint_every,
            notice=lambda msg: click.echo(f"\n{label}: {msg}", err=True),
        )
    finally:
        for bar in bars.values():
            bar.__exit__(None, None, None)


@main.command()
@click.option("--store", "store_path", default=str(DEFAULT_STORE), show_default=True, type=click.Path(dir_okay=False))
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


# The leaderboard's commands (export, check, build); this composition root is the only
# harness module that imports the leaderboard package.
from leaderboard.cli import leaderboard as _leaderboard_group  # noqa: E402

main.add_command(_leaderboard_group)


if __name__ == "__main__":
    main()
