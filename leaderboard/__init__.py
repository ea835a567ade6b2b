"""The published leaderboard: results files, their schema, and the static site rendered from them.

``leaderboard.schema``      the JSON Lines results format (schema version, checksum, files); the
                            record each line holds is ``harness.record``'s
``leaderboard.export``      store -> new append-only results files
``leaderboard.board``       results records -> the numbers every page shows
``leaderboard.provenance``  where each preset's runs came from, what each run trained
``leaderboard.notes``       runs unlike their papers, extra inputs, per-task setups
``leaderboard.overview``    the at-a-glance grid: encodings × tasks per preset
``leaderboard.svg``         hand-drawn SVG curves, the colour of each encoding
``leaderboard.text``        the one rendering path: Jinja2 templates (``templates/``) with autoescape
``leaderboard.site``        the static site (HTML + inline CSS/JS), built and written over its own files only
``leaderboard.readme``      leaderboard/README.md: the ranking tables as markdown, record fields escaped
``leaderboard.frames``      the results as pandas DataFrames, ranked as on the board (:func:`read_results`)
``leaderboard.cli``         ``pezoo leaderboard export | check | build``

Depends on ``harness`` (store, report, task registry) and ``pezoo``; neither imports it
(``harness/cli.py``, the composition root, attaches the command group).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


def read_results(path: str | Path | None = None, *, per: str = "row", plans: bool = True) -> pd.DataFrame:
    """The published results as a pandas DataFrame in one call, with the board's ranking and
    fit rules applied: ``leaderboard.read_results()`` (the board's own results) or
    ``leaderboard.read_results("my/results", per="seed")``. See :mod:`leaderboard.frames`."""
    from leaderboard.frames import read_results as read

    return read(path, per=per, plans=plans)
