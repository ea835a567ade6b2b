"""``pezoo leaderboard compare``: one task table built from two results folders, row by row
(``leaderboard.comparison``): the published CPU table against a GPU retrain of its configs.

Attached to the ``pezoo leaderboard`` group by ``leaderboard.cli``.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from harness.commands.printable import terminal_text
from harness.records.files import NotRegularFileError, check_regular, write_atomically
from leaderboard.records import BoardError
from leaderboard.retired import RetiredFileError
from leaderboard.schema import ResultsError

_folder = click.Path(file_okay=False, path_type=Path)


@click.command("compare")
@click.argument("results_a", type=_folder)
@click.argument("results_b", type=_folder)
@click.option("--task", required=True, help="The task whose table is compared (reverse).")
@click.option("--preset", default=None, help="The table's preset, where a folder has several on the task.")
@click.option("--preset-b", default=None, help="RESULTS_B's preset where it differs [default: --preset].")
@click.option("--tested-to", type=int, default=None, help="The table's test range, where a task has several.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["markdown", "json"]),
    default="markdown",
    show_default=True,
    help="A markdown report, or the same as JSON (counts and exact fractions as [numerator, denominator]).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the report there instead of printing it.",
)
def compare_cmd(
    results_a: Path,
    results_b: Path,
    task: str,
    preset: str | None,
    preset_b: str | None,
    tested_to: int | None,
    fmt: str,
    out: Path | None,
) -> None:
    """Build the same TASK table from RESULTS_A and RESULTS_B (results folders, each read as
    the site reads it: its sweep files and retired.toml beside it) and write down, row by
    row, the rank, ≈ mark, reach, EM>N and how the row was made in each, each claim's
    verdict in each, exact-match counts per length side by side, and per run in both (one
    run id: same config and seed) |EM_A − EM_B| at every length; then what agrees and what
    does not.

    \b
        pezoo leaderboard compare leaderboard/results gpu/results --task reverse
    """
    from leaderboard.comparison import ComparisonError, as_json, compare, load_side, markdown
    from leaderboard.site import results_folder_problem

    for folder in (results_a, results_b):
        problem = results_folder_problem(folder)
        if problem:
            raise click.ClickException(terminal_text(problem))
    if out is not None and (problem := _out_problem(out, (results_a, results_b))):
        raise click.ClickException(terminal_text(problem))
    try:
        a = load_side(results_a, task, preset, tested_to)
        b = load_side(results_b, task, preset_b or preset, tested_to)
    except (ComparisonError, ResultsError, BoardError, RetiredFileError) as exc:
        raise click.ClickException(terminal_text(str(exc))) from None
    c = compare(a, b)
    text = markdown(c) if fmt == "markdown" else json.dumps(as_json(c), indent=1, ensure_ascii=False) + "\n"
    if out is None:
        click.echo(text if fmt == "json" else terminal_text(text), nl=False)
        return
    try:
        write_atomically(out, lambda f: f.write(text.encode("utf-8")))  # the old report whole, or the new
    except OSError as exc:  # WriteError: names the file and the cause
        raise click.ClickException(terminal_text(str(exc))) from None
    click.echo(terminal_text(f"wrote the comparison of {task} ({a.source} against {b.source}) to {out}"))


def _out_problem(out: Path, folders: tuple[Path, Path]) -> str | None:
    """Why the report may not go to ``out``, or None: inside a results folder compared (a
    published results file, or a file the next read of that folder would take for one,
    overwritten by a report), or a path that holds something other than a regular file (a
    FIFO would block the write forever)."""
    target = out.resolve()
    for folder in folders:
        if target.is_relative_to(folder.resolve()):
            return f"--out {out} is inside the results folder {folder}: write the report outside the folders compared"
    try:
        check_regular(out)
    except NotRegularFileError as exc:
        return f"--out {exc}: write the report to a file"
    return None
