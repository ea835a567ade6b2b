"""What several commands check before they do anything, as click errors: names (with
close matches), encoding plugins that failed to load, and runs that cannot work."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

import click

import pezoo
from harness.commands.catalogue import name_problem
from harness.commands.printable import one_line, terminal_text
from harness.config import RunConfig
from harness.execution.preflight import check_run
from harness.sweeps.executors.sizing import group_mode
from harness.training.accel import Accel


def split(value: str) -> list[str]:
    """``"copy, reverse"`` -> ``["copy", "reverse"]`` (empty items dropped)."""
    return [v.strip() for v in value.split(",") if v.strip()]


def check_names(kind: str, names: list[str], valid: list[str], option: str | None = None) -> None:
    """BadParameter naming the first of ``names`` not in ``valid`` (a combination: its part
    that is wrong), with close matches, under ``option``."""
    for name in names:
        if name in valid or (kind == "encoding" and "+" in name and pezoo.is_known(name)):
            continue
        if kind == "encoding" and "+" in name:  # a combination: name the part that is wrong
            parts = name.rpartition(":")[2].split("+")
            name = next((p for p in parts if p not in valid), name)
        raise click.BadParameter(terminal_text(name_problem(kind, name, valid)), param_hint=option)


def check_backends(names: Iterable[str], option: str | None = None) -> None:
    """BadParameter naming the first attention backend of ``names`` not registered
    (``pezoo.BACKENDS``), with close matches, under ``option``. One check for bench and
    ``sweep plan``: plan once listed and estimated runs on a backend bench refuses."""
    check_names("attention backend", list(dict.fromkeys(names)), sorted(pezoo.BACKENDS), option)


def refuse_broken_plugins(names: list[str], *, warn: bool = True) -> None:
    """Import every encoding plugin now; stop if one of ``names`` (wrapped forms included)
    failed to load, with its error, instead of failing each run at train time. With
    ``warn``, each other plugin that failed to load is named in a warning (stderr)."""
    broken = pezoo.base.ENCODINGS.load_plugins()
    used = {base for name in names for base in name.split(":", 1)[-1].split("+")}
    for base in sorted(used & set(broken)):
        raise click.BadParameter(f"encoding plugin {base!r} failed to load: {broken[base]}", param_hint="--pe")
    if warn:  # a broken plugin not used here: said, and the command goes on without it
        for base in sorted(set(broken) - used):
            click.echo(f"warning: encoding plugin {base!r} is skipped: {one_line(broken[base])}", err=True)


def check_environment() -> None:
    """The environment variables that steer how runs train, checked before anything is
    written (ValueError naming the variable): ``PEZOO_ACCEL`` (its syntax; ``check_run``
    checks it too), ``PEZOO_GROUP`` and ``PEZOO_PRISM_SCAN``. A bad ``PEZOO_GROUP`` was a
    traceback after the store was made; a bad ``PEZOO_PRISM_SCAN`` failed every PRISM run
    at its first step, three times."""
    Accel.for_device("cpu")
    group_mode()
    pezoo.check_scan_backend()


def check_runs(configs: Sequence[RunConfig]) -> None:
    """``check_run`` once per distinct run shape (seeds aside): what can be known not to
    work, before anything is written or trained (ValueError)."""
    check_environment()
    shapes: dict[str, RunConfig] = {}
    for c in configs:
        shapes.setdefault(replace(c, seed=0).run_id(), c)  # the whole config but its seed
    for cfg in shapes.values():
        check_run(cfg)
