"""Command-line options that several ``pezoo`` commands share (harness/ and leaderboard/)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
from click.decorators import FC

from harness.commands.catalogue import name_problem
from harness.config import PRESETS
from harness.sweeps.deadline import parse_duration
from harness.sweeps.sweep import MAX_RUNS, SETTINGS, parse_list

DEFAULT_STORE = Path("runs") / "pezoo.sqlite"
"""The working SQLite results store, relative to where ``pezoo`` runs."""


def store_option(help_text: str) -> Callable[[FC], FC]:
    """``--store FILE`` (passed as ``store_path``, a Path), defaulting to DEFAULT_STORE."""
    return click.option(
        "--store",
        "store_path",
        default=str(DEFAULT_STORE),
        show_default=True,
        type=click.Path(dir_okay=False, path_type=Path),
        help=help_text,
    )


def max_runs_option(f: FC) -> FC:
    """``--max-runs N`` (passed as ``max_runs``): refuse a sweep of more runs, before building them."""
    return click.option(
        "--max-runs",
        "max_runs",
        default=MAX_RUNS,
        show_default=True,
        type=click.IntRange(min=1),
        help="Refuse a sweep of more runs than this (a typo such as seeds = 1000000 would take the memory).",
    )(f)


class ListOf(click.ParamType):
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


def preset_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--preset``: a preset name, or an error with close matches ("Did you mean")."""
    if value not in PRESETS:
        raise click.BadParameter(name_problem("preset", value, list(PRESETS)))
    return value


def duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """A duration option (``2h30m``, ``90m``, seconds) as seconds; None when not given."""
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def setting_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """One command-line option per override setting (``harness.sweeps.sweep.SETTINGS``: ``--lr``,
    ``--eval-samples``, ...), each taking a comma-separated list, all handed to the
    command as one ``settings`` dict (setting name -> values or None)."""
    f = grouped("settings", tuple(SETTINGS))(f)
    for name, setting in reversed(SETTINGS.items()):
        f = click.option(setting.option(name), name, type=ListOf(setting.kind), help=setting.help)(f)
    return f


def grouped(name: str, keys: Sequence[str]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator under a command's options: hand the options ``keys`` to the command as one
    dict argument ``name`` (so a command takes a few groups, not one parameter per option)."""

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def command(**params: Any) -> Any:
            params[name] = {key: params.pop(key) for key in keys}
            return f(**params)

        return command

    return deco
