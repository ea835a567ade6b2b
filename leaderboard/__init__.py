"""The published leaderboard: results files, their schema, and the static site rendered from them.

``leaderboard.schema``      the JSON Lines results format (schema version, checksum, files); the
                            record each line holds is ``harness.records.record``'s
``leaderboard.export``      store -> new append-only results files
``leaderboard.records``     each run's board label, the per-length frame, one protocol per table
``leaderboard.making``      how a row's runs were made (device, exact match's method, TF32): one way per row, marked
``leaderboard.rows``        a table's rows (scores per seed and over seeds, rank) and curves
``leaderboard.board``       results records -> the tables every page shows, less what left the board
``leaderboard.reach``       how far each row holds past N: the answer each table leads with
``leaderboard.provisional`` tables still being filled, or of an earlier protocol being replaced
``leaderboard.provenance``  where each preset's runs came from, what each run trained
``leaderboard.notes``       runs unlike their papers, extra inputs, per-task setups
``leaderboard.overview``    the at-a-glance grid: encodings × tasks per preset
``leaderboard.styles``      how each encoding is drawn (colour, dash, marker), derived from the registry
``leaderboard.svg``         hand-drawn SVG curves and heat-map colours
``leaderboard.text``        the one rendering path: Jinja2 templates (``templates/``) with autoescape
``leaderboard.descriptions`` what the registries say about each task and encoding the pages describe
``leaderboard.pages``       the site's pages: what each template is given (``Site``), index, task and encoding pages
``leaderboard.writing``     writing the site over its own files only, all or nothing
``leaderboard.site``        the static site (HTML + inline CSS/JS): results -> board -> pages -> written
``leaderboard.readme``      leaderboard/README.md: the ranking tables as markdown, record fields escaped
``leaderboard.frames``      the results as pandas DataFrames, ranked as on the board (:func:`read_results`)
``leaderboard.comparison``  one task table from two results sets, row by row (the cross-device check)
``leaderboard.cli``         ``pezoo leaderboard export | import | check | build | migrate``
``leaderboard.compare``     ``pezoo leaderboard compare``

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
