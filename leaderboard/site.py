"""The static leaderboard site, rendered from results files alone: ``build`` reads and
validates the results, assembles the board once (``leaderboard.board``), renders its
pages (``leaderboard.pages``) and the markdown board (``leaderboard.readme``), then
writes them all (``leaderboard.writing``).

Layout of the output folder::

    index.html              every task: curves (exact match) and the ranked table per preset
    tasks/<task>.html       one task: format, example, PE-solvability, both curves, per-length tables
    encodings/<name>.html   one encoding: docstring (paper, formula), options, results across tasks
    .pezoo-site-manifest.json   the files the last build wrote (a rebuild deletes only stale ones)

The output is deterministic: the same results files (and the same pezoo checkout, whose
docstrings and task formats the pages quote) give the same bytes; nothing but the runs'
own dates is written. Everything is read, validated and rendered before anything is
written, and writing is careful with what is already there (``leaderboard.writing``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from leaderboard.board import assemble
from leaderboard.pages import render_pages
from leaderboard.plans import NO_PLANS, Plans, read_plans
from leaderboard.readme import render_readme
from leaderboard.retired import Retirement, RowRetirement, read_retirements
from leaderboard.schema import Record, read_diagnostics, read_results, results_files
from leaderboard.text import href
from leaderboard.writing import SiteError, write_site

__all__ = ["SiteError", "build", "render", "results_folder_problem"]

REPO_ROOT = Path(__file__).resolve().parent.parent


def render(
    records: Sequence[Record],
    *,
    results_href: str,
    repo_href: str,
    repo_root: Path = REPO_ROOT,
    diagnostics: Mapping[str, Mapping[str, Any]] | None = None,
    plans: Plans = NO_PLANS,
    retirements: Sequence[Retirement | RowRetirement] = (),
    lm_records: Sequence[Any] = (),
) -> dict[str, str]:
    """Site path (relative, '/'-separated) -> page text, for validated ``records`` (and
    the diagnostics of some of them, by run id), against the sweep files' ``plans``, less
    the tables ``retirements`` retire, with the language-modelling section of ``lm_records``
    (``harness.lm.record.LmRecord``, read by ``leaderboard.lm_results``) where there are any."""
    board = assemble(records, plans, retirements)
    pages = render_pages(board, results_href, repo_href, repo_root, diagnostics, lm_records)
    if lm_records:
        from leaderboard.lm_board import lm_pages, readme_section

        pages.update(lm_pages(lm_records))
        readme_section(lm_records, ".")
    return pages


def relative_href(from_dir: Path, to: Path) -> str:
    return os.path.relpath(to.resolve(), from_dir.resolve()).replace(os.sep, "/")


def results_folder_problem(results_dir: Path) -> str | None:
    """Why ``results_dir`` cannot be a board's results (missing, not a folder, no results
    files), or None. A typo in ``--results`` must never read as an empty board."""
    if not results_dir.exists():
        return f"results folder {results_dir} does not exist (a typo in --results?)"
    if not results_dir.is_dir():
        return f"results folder {results_dir} is not a folder"
    lm_dir = results_dir / "lm"  # a folder whose only results are an LM sweep's export is one
    if not results_files(results_dir) and not (lm_dir.is_dir() and any(lm_dir.glob("*.jsonl"))):
        return (
            f"results folder {results_dir} holds no results files (*.jsonl); "
            "publish runs with `pezoo leaderboard export`"
        )
    return None


def _lm_records(lm_dir: Path) -> list[Any]:
    """The LM records in ``lm_dir`` (none when it has none: the board then has no LM section);
    an invalid LM record, or a set the section cannot show (``leaderboard.lm_results``), is a SiteError."""
    from leaderboard.lm_results import read_lm_results

    try:
        return read_lm_results(lm_dir)
    except (ValueError, OSError) as exc:
        raise SiteError(f"LM results in {lm_dir}: {exc}") from None


def build(
    results_dir: Path,
    out_dir: Path,
    *,
    readme: Path | None = None,
    results_href: str | None = None,
    repo_href: str | None = None,
    plans: Plans | None = None,
    retirements: Sequence[Retirement | RowRetirement] | None = None,
) -> dict[str, str]:
    """Read and validate the results files, then write the site (and the markdown board).

    Everything is read, validated and rendered before anything is written.

    Args:
        results_dir: folder of ``*.jsonl`` results files (must exist and hold at least one);
            its ``lm/`` subfolder's LM records, where it has any, add the language-modelling
            section (``lm.md`` and its curves, ``leaderboard.lm_board``).
        out_dir: site folder (created; the pages of its previous build are replaced).
        readme: where to write the markdown board; default ``out_dir/../README.md``.
        results_href, repo_href: links from the site root to the results folder and to the
            repository root; default: the relative paths on this machine.
        plans: the runs the board's sweep files plan (what is still to come); default: the
            sweep files (``*.toml``) next to the results folder (``leaderboard.plans``).
        retirements: the tables that have left the board; default: ``retired.toml`` next
            to the results folder (``leaderboard.retired``).

    Returns:
        the pages written (site path -> text).

    Raises:
        SiteError: no results; a file in the way that this command did not generate; a
            target that cannot be written (nothing is changed then).
        ResultsError, BoardError: invalid results, or a retirement that does not hold
            (nothing is written).
        RetiredFileError: ``retired.toml`` cannot be read (nothing is written).
    """
    problem = results_folder_problem(results_dir)
    if problem:
        raise SiteError(problem)
    records = read_results(results_dir)
    results_href = results_href if results_href is not None else relative_href(out_dir, results_dir)
    repo_href = repo_href if repo_href is not None else relative_href(out_dir, REPO_ROOT)
    diagnostics = read_diagnostics(results_dir, (r.run_id for r in records))
    plans = read_plans(results_dir.parent) if plans is None else plans
    retirements = read_retirements(results_dir.parent) if retirements is None else retirements
    board = assemble(records, plans, retirements)  # once, for the pages and the README
    lm_records = _lm_records(results_dir / "lm")
    pages = render_pages(board, results_href, repo_href, REPO_ROOT, diagnostics, lm_records)
    readme = readme if readme is not None else out_dir.parent / "README.md"
    site_href = href(relative_href(readme.parent, out_dir))
    lm_lines: list[str] = []
    if lm_records:
        from leaderboard.lm_board import lm_pages, readme_section

        pages.update(lm_pages(lm_records))  # lm.md and its curves, for reading on a forge
        lm_lines = readme_section(lm_records, site_href)
    readme_text = render_readme(board, site_href=site_href, lm=lm_lines)
    write_site(out_dir, pages, readme, readme_text)
    return pages
