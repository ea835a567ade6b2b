"""``pezoo results``: what a store holds, as the leaderboard tables or per-length rows
(csv, json, markdown), filtered by encoding and task; a language-modelling run's as bits per
byte per length (its rows: nats and bytes per mode and length)."""

from __future__ import annotations

from pathlib import Path

import click
import pandas as pd

import harness.tasks as tasks
import pezoo
from harness.commands.checks import check_names, split
from harness.commands.options import store_option
from harness.commands.printable import printable, terminal_text
from harness.commands.report import LEGEND, LM_LEGEND, leaderboard_tables, lm_tables
from harness.records.frames import load, load_lm
from harness.records.store import Store, StoreError
from pezoo.spec import parse_pe, split_pe_list


@click.command()
@store_option("SQLite results store to read.")
@click.option("--pe", default=None, help="Only these encodings (comma-separated).")
@click.option("--task", default=None, help="Only these tasks (comma-separated).")
@click.option("--format", "fmt", default="table", type=click.Choice(["table", "csv", "json", "markdown"]))
def results(store_path, pe, task, fmt) -> None:
    """Print stored results: the leaderboard tables, or per-length rows as csv/json/markdown."""
    if not Path(store_path).exists():
        raise click.ClickException(f"no results store at {store_path}; run `pezoo bench` first")
    try:
        stored, lm_stored = load(store_path), load_lm(store_path)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    df = _printable_frame(stored)  # names as a terminal may show them; filters match these
    lm_df = _printable_frame(lm_stored)
    # A filter name must be one this checkout knows or one the store holds (a plugin's runs
    # imported from published results): a typo is an error, not an empty table. A registry
    # name selects every run of it; a displayed name such as prism{paper} those runs only.
    try:
        wanted = split_pe_list(pe) if pe else []  # "," names none, as "": no filter (bench: not given)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--pe") from None
    if wanted:
        known = sorted(set(pezoo.available()) | set(df["pe"]) | set(df.get("pe_label", df["pe"])))
        known = sorted(set(known) | set(lm_df["pe"]) | set(lm_df["pe_label"]))
        # a spec of an installed encoding (rope{layout=half}) is no typo: it matches its runs
        # as the store labels them (options sorted), or none ("no finished runs match")
        specs = {name: spelled for name in wanted if (spelled := _installed_spec(name)) is not None}
        check_names("encoding", [name for name in wanted if name not in specs], known, "--pe")
        wanted = sorted(set(wanted) | set(specs.values()))
        df = df[df["pe"].isin(wanted) | df["pe_label"].isin(wanted)]
        lm_df = lm_df[lm_df["pe"].isin(wanted) | lm_df["pe_label"].isin(wanted)]
    if task and split(task):
        check_names("task", split(task), sorted(set(tasks.bench_tasks()) | set(df["task"])), "--task")
        df = df[df["task"].isin(split(task))]
        lm_df = lm_df[lm_df["task"].isin(split(task))]
    if not lm_df.empty and (fmt == "table" or df.empty):  # language-modelling runs: bits per byte
        _lm_results(lm_df, lm_stored, fmt, table_too=not df.empty)
        if df.empty:
            return
    elif not lm_df.empty:
        raise click.UsageError(
            "the selection holds algorithmic and language-modelling runs, whose rows differ: pick one kind with "
            "--task (the language-modelling tasks: lm_en, lm_code)"
        )
    if df.empty:  # say so (on stderr: csv/json output stays parseable), rather than print nothing
        which = "no finished runs match" if pe or task else "no finished runs"
        click.echo(f"{which} in {store_path}{_unfinished(store_path)}", err=True)
    if fmt != "json":  # JSON escapes control characters itself; text formats go to a terminal
        df = df.map(lambda v: terminal_text(v, keep_newlines=False) if isinstance(v, str) else v)
    if fmt == "table":
        tables = leaderboard_tables(df)
        for table in tables.values():
            click.echo(table + "\n")
        if tables:
            click.echo(LEGEND)
    elif fmt == "csv":
        click.echo(_as_floats(df).to_csv(index=False), nl=False)
    elif fmt == "json":  # the stored values: the json encoder escapes what a terminal would act on
        click.echo(_as_floats(stored.loc[df.index]).to_json(orient="records", lines=True), nl=False)
    else:
        click.echo(_as_floats(df).to_markdown(index=False))


def _installed_spec(name: str) -> str | None:
    """``name``'s canonical spelling where it is a spec with options of an encoding installed
    here (``rope{layout=half}``), else None (a plain name, a run label, or a typo)."""
    if "{" not in name:
        return None
    try:
        spec = parse_pe(name)
    except ValueError:
        return None
    return str(spec) if pezoo.is_known(spec.name) else None


def _lm_results(lm_df: pd.DataFrame, stored: pd.DataFrame, fmt: str, *, table_too: bool) -> None:
    """The language-modelling runs: their tables (bits per byte per length, ``lm_tables``), or
    per (run, mode, length) rows with their counts (nats, bytes) as csv, json or markdown."""
    if fmt == "table":
        for table in lm_tables(lm_df).values():
            click.echo(table + "\n")
        click.echo(LM_LEGEND + ("\n" if table_too else ""))
    elif fmt == "csv":
        click.echo(lm_df.to_csv(index=False), nl=False)
    elif fmt == "json":  # the stored values: the json encoder escapes what a terminal would act on
        click.echo(stored.loc[lm_df.index].to_json(orient="records", lines=True), nl=False)
    else:
        click.echo(lm_df.to_markdown(index=False))


def _as_floats(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its exact fractions (exact match, per-token accuracy) as floats for a file
    format: the counts beside them (exact of n, tokens_right of tokens) stay exact."""
    fractions = [c for c in ("exact_match", "token_accuracy") if c in df]
    return df.assign(**{c: df[c].map(float) for c in fractions}) if fractions else df


def _printable_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every string cell :func:`harness.commands.printable.printable`: a store's names
    (an imported plugin's, a contributed record's) may hold terminal escapes, NUL or bidi
    overrides, which the table, csv and markdown would print raw."""
    out = df.copy()
    for column in out.columns:
        if not pd.api.types.is_numeric_dtype(out[column]):  # object or str columns (pandas 3)
            out[column] = out[column].map(lambda v: printable(v) if isinstance(v, str) else v)
    return out


def _unfinished(store_path: str | Path) -> str:
    """``" (2 interrupted, 1 failed)"``: the store's runs that ``results`` leaves out."""
    try:
        with Store(store_path, readonly=True) as store:
            counts: dict[str, int] = {}
            for run in store.runs():
                if run["status"] != "finished":
                    counts[run["status"]] = counts.get(run["status"], 0) + 1
    except StoreError:
        return ""
    if not counts:
        return ""
    return " (" + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) + "; results lists finished runs)"
