"""``pezoo list``: the encodings (and which a wrapper takes), tasks, presets and backends."""

from __future__ import annotations

import click

from harness.commands.catalogue import listing


@click.command("list")
def list_cmd() -> None:
    """Show the available encodings (and which a wrapper takes), tasks, presets and backends."""
    click.echo(listing())
