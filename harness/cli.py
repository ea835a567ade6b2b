"""The ``pezoo`` command line: the group, its subcommands (one module each under
``harness.commands``; ``pezoo perf`` is ``harness.perf``), and the commands upper floors add
through the :data:`COMMANDS_GROUP` entry points (the leaderboard's), so that the harness
never imports them. ``python -m harness.cli`` runs it too."""

from __future__ import annotations

from typing import Any

import click

import pezoo
from harness.commands.bench import bench
from harness.commands.list import list_cmd
from harness.commands.lm import lm
from harness.commands.printable import one_line
from harness.commands.results import results
from harness.commands.sweep import sweep
from harness.perf import perf_command

COMMANDS_GROUP = "pezoo.commands"
"""Entry point group of click commands added to ``pezoo`` (the leaderboard's commands)."""


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


for _command in (list_cmd, bench, sweep, results, perf_command, lm):
    main.add_command(_command)


def _add_installed_commands() -> None:
    """Commands of upper floors (the leaderboard's export, check, build, import), found
    through the :data:`COMMANDS_GROUP` entry points; one that fails to load is named on
    stderr when used, never a traceback for every command."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=COMMANDS_GROUP):
        try:
            command = ep.load()
        except Exception as exc:
            main.add_command(_unavailable(ep.name, one_line(exc)))
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
