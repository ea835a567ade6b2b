"""Command-line options that several ``pezoo`` commands share (harness/ and leaderboard/)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click
from click.decorators import FC

from harness.sweep import MAX_RUNS

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
