"""``pezoo leaderboard``: export finished runs, check results files, build the site.

Attached to the root ``pezoo`` command by ``harness/cli.py`` (the composition root).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

import harness.tasks as tasks
import pezoo
from harness.commands.options import store_option
from harness.commands.printable import terminal_text
from harness.records.files import file_kind
from harness.records.store import StoreError
from leaderboard.board import RetiredRow, RetiredTable, assemble, retire
from leaderboard.compare import compare_cmd
from leaderboard.export import ExportError, export, import_results
from leaderboard.plans import Plans
from leaderboard.reach import unplanned_splits
from leaderboard.records import BoardError, check_protocols, record_label
from leaderboard.retired import RETIRED_FILE, RetiredFileError, read_retirements
from leaderboard.schema import Record, ResultsError, read_diagnostics, read_results, results_files

DEFAULT_RESULTS = Path("leaderboard") / "results"
DEFAULT_SITE = Path("leaderboard") / "site"

_results_option = click.option(
    "--results",
    "results_dir",
    default=str(DEFAULT_RESULTS),
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder of published results files (*.jsonl).",
)


@click.group("leaderboard")
def leaderboard() -> None:
    """Publish results files and render the static leaderboard site from them.

    \b
        pezoo leaderboard export     store -> new append-only results files
        pezoo leaderboard import     results files -> store (a sweep then skips them)
        pezoo leaderboard check      validate every results file
        pezoo leaderboard build      results files -> leaderboard/site/ + leaderboard/README.md
        pezoo leaderboard migrate    schema-1 results files (float metrics) -> counts, in place
        pezoo leaderboard compare    one task table from two results folders, row by row
    """


leaderboard.add_command(compare_cmd)  # one module per subcommand beyond the board's own: leaderboard.compare


@leaderboard.command("export")
@store_option("SQLite results store to read finished runs from.")
@click.option(
    "--out",
    "out_dir",
    default=str(DEFAULT_RESULTS),
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Results folder; new runs go to a new file, existing files are never changed.",
)
def export_cmd(store_path: Path, out_dir: Path) -> None:
    """Write the store's finished runs that are not yet published to a new results file per preset."""
    _require_out_folder(out_dir)
    try:
        summary = export(store_path, out_dir)
    except (ExportError, ResultsError, StoreError) as exc:
        raise click.ClickException(terminal_text(str(exc))) from None
    except OSError as exc:  # an unwritable --out, a full disk: each file is written whole or not at all
        raise click.ClickException(terminal_text(f"cannot export to {out_dir}: {_os_reason(exc)}")) from None
    for path, count in summary.written:
        _echo(f"wrote {count} run(s) to {path}")
    if not summary.written:
        _echo(f"nothing new to export to {out_dir}")
    if summary.diagnostics:
        _echo(f"wrote diagnostics of {summary.diagnostics} run(s) to {out_dir / 'diagnostics'}")
    if summary.already_published:
        _echo(f"{summary.already_published} finished run(s) were already published")
    if summary.not_finished:
        _echo(f"{summary.not_finished} run(s) not finished (running, failed, diverged, interrupted): not exported")


@leaderboard.command("import")
@_results_option
@store_option("SQLite results store to add the published runs to (created if missing).")
def import_cmd(results_dir: Path, store_path: Path) -> None:
    """Add the published runs to a store as finished, so `pezoo bench` skips them.

    For continuing a board on a machine that does not have the store it was run into:
    import, then run the board's sweep file; finished runs are not trained again, and a
    later `export` publishes only the new ones. Runs the store already holds finished are
    left as they are; those whose record in the store is not the published one are named.
    """
    _require_results(results_dir)
    try:
        summary = import_results(results_dir, store_path)
    except (ResultsError, StoreError) as exc:
        raise click.ClickException(terminal_text(str(exc))) from None
    _echo(f"imported {summary.imported} run(s) into {store_path} ({summary.diagnostics} with diagnostics)")
    if summary.already_in_store:
        _echo(f"{summary.already_in_store} run(s) were already in the store: left as they are")
    if summary.differing:
        shown = ", ".join(summary.differing[:10]) + (", ..." if len(summary.differing) > 10 else "")
        _echo(
            f"note: the store's record of {len(summary.differing)} of them is not the published one (other "
            f"numbers, provenance or timings); the store keeps its own, which bench and `pezoo results` read, and "
            f"export never publishes it over the published one: {shown}"
        )


@leaderboard.command("check")
@_results_option
def check_cmd(results_dir: Path) -> None:
    """Validate every results file (schema, checksum, duplicates) and diagnostics file, and the
    LM results under ``lm/`` (each record's checksum, each run once, one protocol and one
    corpus per table, a variant's trained run published: ``leaderboard.lm_results``); exit 1
    with path:line: reason if any is bad. Then say how much of each board's plan (the sweep
    files next to the results folder) is published, and which tables have left the board
    (``retired.toml`` next to it; exit 1 if a retirement does not hold). The board is
    rendered in memory as `build` renders it (exit 1 if it cannot be), so a board `check`
    passes is one `build` can write.

    A results folder that does not exist, or holds no results files, is an error too.
    """
    _require_results(results_dir)
    files = results_files(results_dir)
    try:
        records = read_results(results_dir)
        diagnostics = read_diagnostics(results_dir, records)
    except ResultsError as exc:
        raise click.ClickException(terminal_text(str(exc))) from None
    _echo(f"{len(files)} results file(s), {len(records)} run(s): valid")
    if diagnostics:
        _echo(f"{len(diagnostics)} diagnostics file(s): valid")
    lm_records = _lm_check(results_dir / "lm")
    from leaderboard.plans import read_plans

    plans = read_plans(results_dir.parent)
    for line in _plan_lines(records, plans):
        _echo(line)
    for problem in plans.problems:
        _echo(f"note: sweep file {problem} (not read as a plan)")
    kept, retired = _render_in_memory(records, diagnostics, plans, results_dir, lm_records)
    _note_stray(kept, plans)
    _note_unplanned_splits(records, plans, results_dir)
    for gone in retired:
        _echo(_retired_line(gone))
    _note_not_installed(records)


def _lm_check(lm_dir: Path) -> list[Any]:
    """The LM records under ``lm_dir``, validated as the board reads them (none without the folder)."""
    from leaderboard.lm_results import LmResultsError, read_lm_results

    try:
        lm_records = read_lm_results(lm_dir)
    except LmResultsError as exc:
        raise click.ClickException(terminal_text(f"invalid LM results:\n  {exc}")) from None
    if lm_records:
        files = sorted(p for p in lm_dir.glob("*.jsonl") if not p.is_dir())
        _echo(f"{len(files)} LM results file(s), {len(lm_records)} LM run(s): valid")
    return lm_records


def _render_in_memory(
    records: Sequence[Record],
    diagnostics: dict[str, dict[str, Any]],
    plans: Plans,
    results_dir: Path,
    lm_records: Sequence[Any] = (),
) -> tuple[list[Record], tuple[RetiredTable | RetiredRow, ...]]:
    """Everything `build` does but write: read the retirements, check one protocol per table
    and render the board; (the runs kept on the board, the retired tables and rows)."""
    from leaderboard.site import SiteError, render

    try:
        retirements = read_retirements(results_dir.parent)
        kept, _, retired = retire(records, plans, retirements)
        check_protocols(kept)  # as build does: one protocol per (preset, task) table
        # and everything else build does but write: what check passes, build draws
        render(
            records,
            results_href=".",
            repo_href=".",
            diagnostics=diagnostics,
            plans=plans,
            retirements=retirements,
            lm_records=lm_records,
        )
    except (RetiredFileError, BoardError, SiteError) as exc:
        raise click.ClickException(terminal_text(str(exc))) from None
    return kept, retired


def _note_stray(kept: Sequence[Record], plans: Plans) -> None:
    """Name the published runs of a planned preset that no sweep file plans and no
    retirement covers (they stay on the board)."""
    from leaderboard.plans import cell

    planned_cells = {c for plan in plans.presets.values() for c in (plan.cell_of or {}).values()}
    stray = sorted(
        {
            f"{record_label(r.data)} on {r.data['task']}"
            for r in kept
            if r.data["preset"] in plans.presets
            and r.run_id not in plans.presets[r.data["preset"]].run_ids
            and cell(r.data["config"]) not in planned_cells  # not standing in for a planned re-run
        }
    )
    if stray:
        _echo(
            f"note: published runs of a planned preset that no sweep file plans and no retirement covers "
            f"(still on the board): {', '.join(stray)}; plan them, or retire them in {RETIRED_FILE}"
        )


def _retired_line(gone: RetiredTable | RetiredRow) -> str:
    """The report line of a retired table or row: what left the board and what replaces it."""
    if isinstance(gone, RetiredRow):
        row = gone.retirement
        return (
            f"retired: preset {row.preset}'s row {row.row} ({gone.runs} run(s) on {', '.join(gone.tasks)}, "
            f"published, left off the board), superseded by {row.superseded_by}"
        )
    r = gone.retirement
    return f"retired: preset {r.preset} on {r.task} ({gone.runs} run(s), published, left off the board), " + (
        "withdrawn: no table replaces it"
        if r.superseded_by is None
        else f"superseded by preset {r.superseded_by}'s complete {r.task} table"
    )


def _note_not_installed(records: Sequence[Record]) -> None:
    """Name the encodings and tasks the runs use that are not installed here (their runs
    are valid and drawn, but cannot be re-run here)."""
    for kind, used, installed in (
        ("encoding", {r.data["pe"] for r in records}, pezoo.available()),
        ("task", {r.data["task"] for r in records}, tasks.available()),
    ):
        missing = sorted(n for n in used - set(installed) if not (kind == "encoding" and pezoo.is_known(n)))
        if missing:
            _echo(
                f"note: {kind}(s) {', '.join(missing)} are not installed here (a plugin's?); "
                "their runs are valid and are drawn, but cannot be re-run here"
            )


@leaderboard.command("migrate")
@_results_option
def migrate_cmd(results_dir: Path) -> None:
    """Rewrite schema-1 results files (metrics as float fractions) as schema 2 (counts).

    Each metric's counts are recovered exactly (examples right = round(exact match × n),
    tokens from the task's evaluation examples: ``harness.records.recount``); run ids, configs,
    provenance and timings stay as they are, and each line gets the checksum of its new
    body. Every file is migrated in memory first: a line that cannot be (edited, not a
    count) stops the command before anything is written. Files already at schema 2 are
    left untouched.
    """
    from harness.records.files import WriteError, write_atomically
    from harness.records.inputs import RESULTS_LIMIT, FileReadError, read_text
    from leaderboard.schema import migrate_line

    _require_results(results_dir)
    new: dict[Path, str] = {}
    for path in results_files(results_dir):
        try:
            text = read_text(path, RESULTS_LIMIT)
        except FileReadError as exc:  # it names the path
            raise click.ClickException(terminal_text(str(exc))) from None
        except (OSError, ValueError) as exc:
            raise click.ClickException(terminal_text(f"{path}: {exc}")) from None
        lines = []
        for i, line in enumerate(text.splitlines(), start=1):
            try:
                lines.append(migrate_line(line))
            except ValueError as exc:
                raise click.ClickException(terminal_text(f"{path}:{i}: {exc}; nothing was migrated")) from None
        body = "".join(f"{line}\n" for line in lines)
        if body != text:
            new[path] = body
    for path, body in new.items():
        try:
            data = body.encode()
            write_atomically(path, lambda f: f.write(data))  # noqa: B023 (called at once, in this iteration)
        except WriteError as exc:  # it names the file and the cause
            raise click.ClickException(terminal_text(str(exc))) from None
    kept = len(results_files(results_dir)) - len(new)
    _echo(f"migrated {len(new)} results file(s) to schema 2 (counts); {kept} already were")


@leaderboard.command("build")
@_results_option
@click.option(
    "--out",
    "out_dir",
    default=str(DEFAULT_SITE),
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Site folder (the pages of its previous build are replaced; nothing else in it is touched).",
)
@click.option(
    "--readme",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where to write the markdown board [default: README.md next to the site folder]; "
    "a README that `build` did not generate is never overwritten.",
)
def build_cmd(results_dir: Path, out_dir: Path, readme: Path | None) -> None:
    """Render the static site (and the markdown board) from the results files, and say
    how much of each board is still to come from the sweep files (``*.toml``) next to the
    results folder: a board whose sweep file plans more runs than are published is marked
    as being filled, and its unfinished tables as provisional.

    Everything is validated and rendered before anything is written; then every file is
    written under a temporary name and renamed into place. Only pages of the folder's
    previous build (its manifest) are ever deleted.
    """
    from leaderboard.plans import read_plans
    from leaderboard.site import SiteError, build

    plans = read_plans(results_dir.parent)
    for problem in plans.problems:
        _echo(f"note: sweep file {problem} (the board is built without its plan)")
    try:
        pages = build(results_dir, out_dir, readme=readme, plans=plans)
    except (ResultsError, BoardError, SiteError, RetiredFileError) as exc:
        raise click.ClickException(terminal_text(str(exc))) from None
    except OSError as exc:
        raise click.ClickException(terminal_text(f"cannot build the site in {out_dir}: {_os_reason(exc)}")) from None
    readme = readme if readme is not None else out_dir.parent / "README.md"
    _echo(f"wrote {len(pages)} page(s) to {out_dir} and the markdown board to {readme}")
    records = read_results(results_dir)
    for line in _plan_lines(records, plans):
        _echo(line)
    _note_unplanned_splits(records, plans, results_dir)
    _echo(f"open {out_dir / 'index.html'}")


def _note_unplanned_splits(records: Sequence[Record], plans: Plans, results_dir: Path) -> None:
    """A note per ranked row whose seeds split while its plan gives it fewer seeds than the
    board's rule (``leaderboard.reach.unplanned_splits``): the sweep file to extend, and how."""
    board = assemble(records, plans, read_retirements(results_dir.parent))
    for line in unplanned_splits(board):
        _echo(f"note: {line}")


def _plan_lines(records: Sequence[Record], plans: Plans) -> list[str]:
    """One line per board preset with a sweep file: how many of its planned runs are published."""
    from leaderboard.plans import filled, published_cells, seeds_by_run

    published, cells = seeds_by_run(records), published_cells(records)
    lines = []
    for preset, plan in sorted(plans.presets.items()):
        f = filled(plan, published, cells)
        state = "complete" if f.complete else f"{f.planned - f.done} still to run"
        if f.rerunning:
            state += f" ({f.rerunning} of them re-runs of published runs under corrected options)"
        sources = ", ".join(plans.sources[preset])
        lines.append(f"plan {sources} (preset {preset}): {f.done} of {f.planned} runs published, {state}")
    return lines


def _echo(line: str) -> None:
    """Print one line of the command's report with the names in it made safe for a
    terminal (``harness.commands.report.terminal_text``): a results file, a sweep file or a store
    may hold a name with escape sequences, NUL or bidi overrides."""
    click.echo(terminal_text(line))


def _require_results(results_dir: Path) -> None:
    """A missing or empty results folder is an error (a typo in --results must not read as an empty board)."""
    from leaderboard.site import results_folder_problem

    problem = results_folder_problem(results_dir)
    if problem:
        raise click.ClickException(terminal_text(problem))


def _require_out_folder(out_dir: Path) -> None:
    """A ClickException unless ``out_dir`` is a folder or does not exist yet (``/dev/null``
    passed click's folder check and answered "File exists" from mkdir, or a traceback)."""
    if out_dir.exists() and not out_dir.is_dir():
        kind = file_kind(out_dir.stat().st_mode)
        raise click.ClickException(terminal_text(f"--out {out_dir} is {kind}, not a folder; choose another --out"))


def _os_reason(exc: OSError) -> str:
    """One line for an OSError: the path and the system's reason (``Permission denied``)."""
    reason = exc.strerror or str(exc)
    return f"{exc.filename}: {reason}" if exc.filename else reason


def published_store_rows() -> list[dict]:
    """The runs published under ./leaderboard/results, as ``Store.runs()`` rows ([] when
    there is no such folder or it does not validate). The harness reads them through its
    ``pezoo.published_runs`` entry point, as hints and rough speeds for bench and sweep plan."""
    from harness.records.store.schema import run_row
    from leaderboard.schema import ResultsError, read_results

    if not DEFAULT_RESULTS.is_dir():
        return []
    try:
        records = read_results(DEFAULT_RESULTS)
    except ResultsError:
        return []
    return [run_row(r.record) for r in records]


@leaderboard.command("lm")
@click.option(
    "--results",
    "results_dir",
    default=str(DEFAULT_RESULTS / "lm"),
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder of published LM results files (*.jsonl, from `pezoo leaderboard export`).",
)
@click.option(
    "--out",
    "out_dir",
    default=str(DEFAULT_SITE),
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where lm.md and the curves (lm-<task>.svg) are written.",
)
def lm_cmd(results_dir: Path, out_dir: Path) -> None:
    """Render the language-modelling section (docs/lm.md) from the published LM records only."""
    from leaderboard.lm_board import lm_pages
    from leaderboard.lm_results import read_lm_results

    try:
        records = read_lm_results(results_dir)
        pages = lm_pages(records)
    except (ValueError, OSError) as exc:
        raise click.ClickException(terminal_text(str(exc))) from None
    if not records:
        how = "run `pezoo bench --sweep leaderboard/lm/sweep.toml` and `pezoo leaderboard export`"
        raise click.ClickException(f"no LM results under {results_dir}: {how}")
    _require_out_folder(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, text in pages.items():
            (out_dir / name).write_text(text, encoding="utf-8")
    except OSError as exc:  # a read-only folder, a full disk
        why = _os_reason(exc)
        raise click.ClickException(terminal_text(f"cannot write the LM pages to {out_dir}: {why}")) from None
    _echo(f"wrote {out_dir / 'lm.md'} and {len(pages) - 1} curve(s) from {len(records)} LM record(s)")
