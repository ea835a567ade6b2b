"""Command-line options that several ``pezoo`` commands share (harness/ and leaderboard/)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click
from click.decorators import FC

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
