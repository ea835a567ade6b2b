"""The static leaderboard site, rendered from results files alone.

Layout of the output folder::

    index.html              every task: curves (exact match) and the ranked table per preset
    tasks/<task>.html       one task: format, example, PE-solvability, both curves, per-length tables
    encodings/<name>.html   one encoding: docstring (paper, formula), options, results across tasks
    .pezoo-site-manifest.json   the files the last build wrote (a rebuild deletes only stale ones)

Every page is self-contained (inline CSS, inline JS, inline SVG; no network), carries the
provenance of the runs it shows (preset, device, commit, seeds, steps), and a warning
whenever they are not a GPU-preset board run on GPUs. Tables sort by clicking a header;
a preset selector hides the other presets. The output is deterministic: the same results
files (and the same pezoo checkout, whose docstrings and task formats the pages quote)
give the same bytes; nothing but the runs' own dates is written.

The HTML is in Jinja2 templates (``leaderboard/templates/*.j2``) rendered with
autoescape on (``leaderboard.text``): a string from a results or diagnostics file, or an
installed plugin's docstring, is escaped wherever it lands. This module computes what
the templates show and builds no HTML itself: docstrings are parsed into parts
(``leaderboard.text.inline``, ``doc_blocks``) that ``_doc.j2`` renders.

Writing is careful with what is already there: a missing or empty results folder is an
error (never an empty board); only files listed in the output folder's manifest are ever
deleted; a page or README that this command did not generate (no generator marker) is
never overwritten; every file is written to a temporary name first and renamed into
place only when all of them were written, so an unwritable target leaves nothing half done.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import posixpath
import random
import re
import secrets
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from markupsafe import Markup

from harness.config import shown
from harness.reading import MANIFEST_LIMIT, FileReadError, read_text
from leaderboard import board as bd
from leaderboard import claims, notes
from leaderboard import overview as ov
from leaderboard import permutation as pt
from leaderboard import provenance as prov
from leaderboard.plans import NO_PLANS, Plans, read_plans
from leaderboard.readme import README_MARK, is_generated_readme, render_readme
from leaderboard.retired import Retirement, RowRetirement, read_retirements
from leaderboard.schema import parse_json, read_diagnostics, read_results, results_files
from leaderboard.svg import VIRIDIS, Series, Style, heat_colour, line_plot, panel_plot, styles, swatch, trajectory_plot
from leaderboard.text import GENERATOR, NotANumber, environment, href, join, render_template, short_commit, slug

__all__ = ["MANIFEST", "SiteError", "build", "encoding_info", "render", "slug", "task_info"]

MANIFEST = ".pezoo-site-manifest.json"
"""The output folder's list of the files the last build wrote: a rebuild deletes only stale entries of it."""
LEGACY_MARKER = ".pezoo-leaderboard-site"
"""What marked a generated site before the manifest: every ``*.html`` under it counts as generated."""
PAGE_MARK = f'<meta name="generator" content="{GENERATOR}">'
"""The line every generated page carries (checked before a page that is not in the manifest is replaced)."""
REPO_ROOT = Path(__file__).resolve().parent.parent
BANNER_COMMITS = 3
"""The most commits a provenance banner names; more are counted, and listed in the Provenance table."""


class SiteError(ValueError):
    """The site cannot be built or written: no results, a file in the way that this
    command did not generate, or a target that cannot be written."""


# --------------------------------------------------------------------------------------
# What the registries say about tasks and encodings (with fallbacks for plugins that are
# not installed here, and for task attributes that may not exist yet)
# --------------------------------------------------------------------------------------


def _prose(text: str) -> Markup:
    """Docstring prose as HTML: its reST ``literals`` and ``:role:`target``` references
    set as <code>, everything escaped (``_doc.j2``'s ``prose``, from
    ``leaderboard.text.inline``)."""
    return _doc_macro("prose", text)


def _doc_html(doc: str) -> Markup:
    """A Google-style docstring as HTML (the encoding pages quote the class docstrings):
    paragraphs as ``<p>``, an indented block (a formula) as ``<pre>``, a section such as
    ``Args:`` as a heading over a definition list (``leaderboard.text.doc_blocks``,
    rendered by ``_doc.j2``'s ``doc_html``, where autoescape escapes every piece)."""
    return _doc_macro("doc_html", doc)


def _doc_macro(name: str, text: str) -> Markup:
    """``_doc.j2``'s macro ``name`` applied to ``text`` (a macro's output is Markup)."""
    return Markup(getattr(environment().get_template("_doc.j2").module, name)(text))


@dataclass(frozen=True)
class TaskInfo:
    source: str
    metric: str
    layout: str
    example: str
    example_scale: int | None
    pe_solvability: str
    pe_solvability_basis: str
    summary: str


def task_info(name: str) -> TaskInfo | None:
    """The task's description from the harness registry; None when it is not installed."""
    try:
        from harness.tasks import TASKS, vocab
        from harness.tasks.catalogue import example_scale

        task = TASKS[name]()
    except Exception:
        return None
    try:
        n = example_scale(task)
        ex = task.sample(n, random.Random(f"catalogue/{name}"))
        example = vocab.to_text([*ex.prompt, "=", *ex.target])
    except Exception:
        n, example = None, ""
    return TaskInfo(
        source=str(getattr(task, "source", "")),
        metric=str(getattr(task, "metric", "")),
        layout=str(getattr(task, "layout", "")),
        example=example,
        example_scale=n,
        pe_solvability=str(getattr(task, "pe_solvability", "") or "not labelled"),
        pe_solvability_basis=str(getattr(task, "pe_solvability_basis", "")),
        summary=(inspect.getdoc(type(task)) or "").split("\n\n")[0].replace("\n", " "),
    )


@dataclass(frozen=True)
class EncodingInfo:
    summary: str
    doc: str
    options: tuple[tuple[str, str], ...]  # (name, default) of the constructor
    wrapper_doc: str


def _default_text(value: Any) -> str:
    if value is inspect.Parameter.empty:
        return "required"
    text = repr(value)
    return type(value).__name__ if " at 0x" in text else text


def encoding_info(name: str) -> EncodingInfo | None:
    """The encoding's docstring and constructor options; None when it is not installed."""
    try:
        import pezoo
        from pezoo.base import WRAPPERS

        prefix, base = name.split(":", 1) if ":" in name else ("", name)
        factory = pezoo.get(base)
        wrapper = WRAPPERS[prefix] if prefix else None
    except Exception:
        return None
    doc = inspect.getdoc(factory) or ""
    params: Iterable[inspect.Parameter]
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        params = []
    options = tuple(
        (p.name, _default_text(p.default))
        for p in params
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"
    )
    return EncodingInfo(
        summary=doc.split("\n\n")[0].replace("\n", " "),
        doc=doc,
        options=options,
        wrapper_doc=(inspect.getdoc(wrapper) or "") if wrapper is not None else "",
    )


# --------------------------------------------------------------------------------------
# What the templates are given
# --------------------------------------------------------------------------------------


def _rel(from_dir: str, to: str) -> str:
    """Relative path from a page folder (relative to the site root) to a site path."""
    return os.path.relpath(to, from_dir or ".").replace(os.sep, "/")


def _seeds(seeds: Sequence[int]) -> str:
    return ("seed " if len(seeds) == 1 else "seeds ") + join(seeds)


@dataclass(frozen=True)
class Site:
    """What every page needs: the board, the encoding styles, link roots; and the values
    the templates show, as plain text, numbers or Markup built from escaped parts."""

    board: bd.Board
    styles: Mapping[str, Style]
    results_href: str  # from the site root to the results folder
    repo_href: str  # from the site root to the repository root (for docs/)
    repo_root: Path
    diagnostics: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # run_id -> body

    # -- links: relative, every segment percent-encoded (text.href) -----------------------
    def href(self, page_dir: str, to: str) -> str:
        return href(_rel(page_dir, to))

    def task_href(self, page_dir: str, task: str) -> str:
        return self.href(page_dir, f"tasks/{slug(task)}.html")

    def encoding_href(self, page_dir: str, encoding: str) -> str:
        return self.href(page_dir, f"encodings/{slug(encoding)}.html")

    def outside(self, page_dir: str, root_href: str, path: str) -> str:
        """Link from a page folder to ``path`` under a folder outside the site (lexical: no cwd involved)."""
        depth = len(PurePosixPath(page_dir).parts) if page_dir else 0
        return href(posixpath.normpath("/".join([*[".."] * depth, root_href, path])))

    # -- pieces ---------------------------------------------------------------------------
    def style(self, label: str) -> Style:
        return self.styles[label]

    def swatch(self, label: str) -> Markup:
        return swatch(self.style(label))

    def facts(self, p: prov.Provenance) -> str:
        """The banner's one-line summary of a preset's runs. A board filled over many
        sessions has many commits: past ``BANNER_COMMITS`` the banner counts them and the
        Provenance table at the page's foot lists them, so the banner stays a line."""
        if len(p.commits) <= BANNER_COMMITS:
            commits = f"commit {join(short_commit(c) for c in p.commits)}"
        else:
            commits = f"{len(p.commits)} commits (listed under Provenance)"
        return (
            f"{p.runs_text()}, {_seeds(p.seeds)}, {join(p.steps)} training steps, {join(p.backbones)}, "
            f"on {join(p.devices)}, {commits}"
        )

    def table_seeds(self, table: bd.Table) -> list[int]:
        return sorted({s for row in table.rows for s in row.seeds})

    def labels_with_encoding(self) -> list[tuple[str, str]]:
        return sorted({(row.label, row.encoding) for t in self.board.tables for row in t.rows})

    # -- plots --------------------------------------------------------------------------
    def metric_title(self, table: bd.Table, metric: str) -> str:
        if metric == "token_accuracy":
            return "per-token accuracy (teacher-forced)"
        return "exact match of the final answer" if table.match == "answer" else "exact match (greedy, EOS incl.)"

    def ordered_curves(self, table: bd.Table) -> list[bd.Curve]:
        """The table's curves in the order of its rows (rank order, then the unfitted)."""
        by_label = {c.label: c for c in table.curves}
        return [by_label[row.label] for row in table.rows if row.label in by_label]

    def series(self, curve: bd.Curve, metric: str) -> Series:
        stats = curve.exact_match if metric == "exact_match" else curve.token_accuracy
        band = curve.exact_match_band if metric == "exact_match" else curve.token_accuracy_band
        return Series(
            label=curve.label,
            style=self.style(curve.label),
            xs=tuple(float(x) for x in curve.lengths),
            ys=tuple(s.mean for s in stats),
            lo=tuple(b[0] for b in band),
            hi=tuple(b[1] for b in band),
        )

    def plot(self, table: bd.Table, metric: str) -> Markup:
        """Every encoding of one (preset, task) on one plot of ``metric`` (exact_match or
        token_accuracy); the best ranked is drawn last, on top. The legend is HTML (``legend``)."""
        series = [self.series(c, metric) for c in reversed(self.ordered_curves(table))]
        return line_plot(
            series,
            title=f"{table.task}: {self.metric_title(table, metric)} · preset {table.preset}",
            x_label="scale n (task length)",
            y_label=self.metric_title(table, metric).split(" (")[0],
            boundary=table.train_max + 0.5,
            boundary_label=f"trained on n ≤ {table.train_max}",
        )

    def panels(self, table: bd.Table, metric: str = "exact_match") -> list[tuple[bd.Row, Markup]]:
        """One small multiple per row of the table, in its order: the row's curve over the others in grey."""
        curves = {c.label: c for c in table.curves}
        x_range = self._x_range(table)
        out = []
        for row in table.rows:
            others = [self.series(c, metric) for label, c in sorted(curves.items()) if label != row.label]
            mine = self.series(curves[row.label], metric) if row.label in curves else None
            title = f"{row.label} on {table.task}: {self.metric_title(table, metric)} · preset {table.preset}"
            out.append((row, panel_plot(mine, others, title=title, boundary=table.train_max + 0.5, x_range=x_range)))
        return out

    def encoding_panels(self, encoding: str) -> list[tuple[bd.Table, bd.Row, Markup]]:
        """Per (task, preset) an encoding ran on: its exact-match curve over that table's others in grey."""
        out = []
        for table in self.board.tables:
            for row, svg in self.panels(table):
                if row.encoding == encoding:
                    out.append((table, row, svg))
        return out

    @staticmethod
    def _x_range(table: bd.Table) -> tuple[float, float]:
        xs = [x for c in table.curves for x in c.lengths] or [table.train_min, table.test_max]
        return float(min(min(xs), table.train_min)), float(max(max(xs), table.train_max + 1))

    # -- the at-a-glance heat-map ---------------------------------------------------------
    heat_ramp = ", ".join(VIRIDIS)
    """The heat-map's colour scale as a CSS gradient's stops (its legend)."""

    def heat_cell(self, table: bd.Table | None, task: str, row: bd.Row | None) -> dict[str, Any]:
        """What one grid cell shows (``leaderboard.overview.cell``), with its colours: how far
        its weakest seed holds, from not past N to the largest tested scale."""
        c = ov.cell(table, task, row)
        style = ""
        if c.kind == "value":
            background, ink = heat_colour(c.fraction)
            style = f"background-color:{background};color:{ink}"
        return {
            "kind": c.kind,
            "reach": c.reach,
            "spread": c.spread,
            "em": c.em,
            "sort": c.sort,
            "style": style,
            "title": c.title,
        }

    def overview(self, preset: str) -> tuple[ov.Overview, dict[str, bd.Table]]:
        """(the preset's grid, task -> the table the grid reads)."""
        return ov.overview(self.board, preset), {t.task: t for t in ov.first_tables(self.board, preset)}

    # -- tables ---------------------------------------------------------------------------
    def fit_title(self, row: bd.Row) -> str:
        """Each seed's exact match over the training scales (three decimals: 0.947 did not fit)."""
        values = row.per_seed.get("em_within", ())
        each = ", ".join(f"seed {s}: {v:.3f}" for s, v in zip(row.seeds, values, strict=False))
        return f"EM≤N per seed ({each}); fits at ≥ {bd.ranking.FIT_THRESHOLD:.2f}"

    def ranked_count(self, table: bd.Table) -> int:
        return sum(r.ranked for r in table.rows)

    def per_length_rows(self, table: bd.Table, metric: str) -> list[tuple[int, str, float, list[bd.Stat | None]]]:
        """Per evaluated scale: (n, split, mean token length, each curve's Stat or None), the
        curves in the order of ``ordered_curves``."""
        rows = []
        for n in sorted({n for c in table.curves for n in c.lengths}):
            split, tokens = "", 0.0
            stats: list[bd.Stat | None] = []
            for c in self.ordered_curves(table):
                if n in c.lengths:
                    k = c.lengths.index(n)
                    split, tokens = c.splits[k], c.token_lengths[k]
                    stats.append((c.exact_match if metric == "exact_match" else c.token_accuracy)[k])
                else:
                    stats.append(None)
            rows.append((n, split, tokens, stats))
        return rows

    def prism_runs(self, task: str, preset: str) -> list[tuple[Any, Mapping[str, Any], list[Markup]]]:
        """(seed, diagnostics, plots) of the PRISM runs of (task, preset) that published
        diagnostics: one trajectory plot per PRISM layer and side (query, key)."""
        runs = [
            r for r in self.board.records_where(task=task, preset=preset, pe="prism") if r.run_id in self.diagnostics
        ]
        out = []
        for rec in sorted(runs, key=lambda r: r.data["seed"]):
            diag = self.diagnostics[rec.run_id]
            plots = []
            try:
                for layer in diag["layers"]:
                    for side in ("query", "key"):
                        modes = layer[f"{side}_modes"]  # (h, c, s)
                        lines = [
                            (f"h{h} c{c}", trajectory)
                            for h, cursors in enumerate(modes)
                            for c, trajectory in enumerate(cursors)
                        ]
                        plots.append(
                            trajectory_plot(
                                lines,
                                title=f"layer {layer['layer']}: {side} cursors",
                                x_label="token index",
                                y_label="mode offset",
                            )
                        )
            except NotANumber as exc:
                raise SiteError(f"diagnostics/{rec.run_id}.json (run {rec.run_id}): {exc}") from None
            out.append((rec.data["seed"], diag, plots))
        return out


def _page(site: Site, template: str, page_dir: str, title: str, records: Sequence[bd.Record], **context: Any) -> str:
    """A whole page: ``template`` (extending page.html.j2) with the header, banners and provenance of ``records``."""
    return (
        render_template(
            template,
            site=site,
            board=site.board,
            bd=bd,
            pt=pt,
            prov=prov,
            notes=notes,
            ov=ov,
            page_dir=page_dir,
            title=title,
            generator=GENERATOR,
            presets=sorted({r.data["preset"] for r in records}),
            provenances=prov.provenance(records),
            departures=notes.departures(records),
            records=records,
            extra_inputs=notes.extra_inputs(records),
            per_task_setups=notes.per_task_setups(records),
            task_info=task_info,
            prose=_prose,
            doc_html=_doc_html,
            seeds_text=_seeds,
            claims=claims,
            **context,
        )
        + "\n"
    )


def index_page(site: Site) -> str:
    return _page(site, "index.html.j2", "", "leaderboard", site.board.records)


def task_page(site: Site, task: str) -> str:
    d = "tasks"
    info = task_info(task)
    catalogue = None
    if info is not None and (site.repo_root / "docs" / "tasks.md").is_file():
        catalogue = site.outside(d, site.repo_href, "docs/tasks.md")
    records = site.board.records_where(task=task)
    return _page(site, "task.html.j2", d, f"task {task}", records, task=task, info=info, catalogue=catalogue)


def encoding_page(site: Site, encoding: str) -> str:
    d = "encodings"
    info = encoding_info(encoding)
    docs = None
    if info is not None:
        path = site.repo_root / "docs" / "encodings" / f"{slug(encoding)}.md"
        if path.is_file():
            docs = {"href": site.outside(d, site.repo_href, f"docs/encodings/{path.name}"), "name": path.name}
    tables_rows = [(t, row) for t in site.board.tables for row in t.rows if row.encoding == encoding]
    traced = sorted({r.data["task"] for r in site.board.records_where(pe=encoding) if r.run_id in site.diagnostics})
    return _page(
        site,
        "encoding.html.j2",
        d,
        f"encoding {encoding}",
        site.board.records_where(pe=encoding),
        encoding=encoding,
        info=info,
        docs=docs,
        formula=info.doc.partition("\n\n")[2] if info is not None else "",  # its first paragraph is the summary
        labels=sorted({row.label for _, row in tables_rows}),
        rows=tables_rows,
        traced=traced,
    )


# --------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------


def render(
    records: Sequence[bd.Record],
    *,
    results_href: str,
    repo_href: str,
    repo_root: Path = REPO_ROOT,
    diagnostics: Mapping[str, Mapping[str, Any]] | None = None,
    plans: Plans = NO_PLANS,
    retirements: Sequence[Retirement | RowRetirement] = (),
) -> dict[str, str]:
    """Site path (relative, '/'-separated) -> page text, for validated ``records`` (and
    the diagnostics of some of them, by run id), against the sweep files' ``plans``, less
    the tables ``retirements`` retire."""
    board = bd.assemble(records, plans, retirements)
    return _render_board(board, results_href, repo_href, repo_root, diagnostics)


def _render_board(
    board: bd.Board,
    results_href: str,
    repo_href: str,
    repo_root: Path,
    diagnostics: Mapping[str, Mapping[str, Any]] | None,
) -> dict[str, str]:
    """:func:`render` of an assembled ``board``."""
    site = Site(board, styles(board.labels), results_href, repo_href, repo_root, dict(diagnostics or {}))
    pages = {"index.html": index_page(site)}
    for names, folder, make in ((board.tasks, "tasks", task_page), (board.encodings, "encodings", encoding_page)):
        slugs: dict[str, str] = {}
        for name in names:
            s = slug(name)
            if s in slugs:
                raise bd.BoardError(f"{folder}: {name!r} and {slugs[s]!r} would share the page {s}.html")
            slugs[s] = name
            pages[f"{folder}/{s}.html"] = make(site, name)
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
    if not results_files(results_dir):
        return (
            f"results folder {results_dir} holds no results files (*.jsonl); "
            "publish runs with `pezoo leaderboard export`"
        )
    return None


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
        results_dir: folder of ``*.jsonl`` results files (must exist and hold at least one).
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
    board = bd.assemble(records, plans, retirements)  # once, for the pages and the README
    pages = _render_board(board, results_href, repo_href, REPO_ROOT, diagnostics)
    readme = readme if readme is not None else out_dir.parent / "README.md"
    readme_text = render_readme(board, site_href=href(relative_href(readme.parent, out_dir)))
    write_site(out_dir, pages, readme, readme_text)
    return pages


# --------------------------------------------------------------------------------------
# Writing: only over what this command generated, all or nothing
# --------------------------------------------------------------------------------------


PAGE_PATH = re.compile(r"index\.html|(?:tasks|encodings)/[a-z0-9_.-]+\.html")
"""The site paths a build writes (``slug`` names the pages): the only entries a manifest
may list, so a manifest can name nothing outside the folder (no ``..``, no absolute path,
no other kind of file)."""


def _site_root(out_dir: Path) -> Path:
    """The output folder, resolved: the one folder a build writes and deletes under (the
    path given may lead there through links; nothing under it is followed)."""
    root = out_dir.resolve()
    if root.exists() and not root.is_dir():
        raise SiteError(f"{out_dir} is not a folder; choose another --out")
    return root


def _inside(root: Path, rel: str) -> Path:
    """``root / rel`` for a page path ``rel`` (``PAGE_PATH``), after checking that what
    exists of it is real folders and at most a regular file at its end: a symlink anywhere
    below ``root`` (``tasks`` -> ``../outside``) would make a write or a delete land outside
    the folder, and a FIFO would block the build; both are a SiteError."""
    path = root
    parts = rel.split("/")
    for i, part in enumerate(parts):
        path = path / part
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            break  # the rest does not exist yet: the build makes it
        except OSError as exc:
            raise SiteError(f"cannot check {path}: {exc.strerror or exc}") from None
        if stat.S_ISLNK(mode):
            raise SiteError(
                f"{path} is a symlink: `build` writes and deletes only inside {root}, never through a link; "
                "remove the link"
            )
        last = i == len(parts) - 1
        if (stat.S_ISDIR(mode) if last else not stat.S_ISDIR(mode)) or (last and not stat.S_ISREG(mode)):
            want = "a page file" if last else "a folder"
            raise SiteError(f"{path} is not {want}; move it aside or choose another --out")
    path = root.joinpath(*parts)
    if not path.resolve().is_relative_to(root):  # nothing above can lead out, but say so if it did
        raise SiteError(f"{path} is outside {root}; `build` writes only inside its folder")
    return path


def _previous_build(root: Path) -> tuple[set[str], bool]:
    """(files the previous build wrote, whether that build predates the manifest), for the
    resolved output folder ``root``.

    Raises SiteError for a non-empty folder that is not a generated site, and for a
    manifest that cannot be read (not a regular file of bounded size, not JSON) or that
    names anything but the pages a build writes (``PAGE_PATH``).
    """
    if not root.exists():
        return set(), False
    if not root.is_dir():
        raise SiteError(f"{root} is not a folder; choose another --out")
    manifest = root / MANIFEST
    if manifest.exists() or manifest.is_symlink():
        try:
            if manifest.is_symlink():
                raise ValueError("a symlink, not the manifest a build writes")
            body = parse_json(read_text(manifest, MANIFEST_LIMIT))
            files = body["files"] if isinstance(body, dict) and body.get("generator") == GENERATOR else None
        except FileReadError as exc:
            raise SiteError(f"{manifest} {exc.reason}; move the site folder aside and build again") from None
        except (ValueError, KeyError) as exc:
            raise SiteError(f"{manifest} cannot be read ({exc}); move the site folder aside and build again") from None
        bad = (
            [f for f in files if not (isinstance(f, str) and PAGE_PATH.fullmatch(f))] if isinstance(files, list) else []
        )
        if not isinstance(files, list) or bad:
            named = f" (it names {shown(bad[0])}, not a page a build writes)" if bad else ""
            raise SiteError(f"{manifest} is not a site manifest{named}; move the site folder aside and build again")
        return set(files), False
    if (root / LEGACY_MARKER).is_file():
        pages = {p.relative_to(root).as_posix() for p in root.rglob("*.html")}
        return {f for f in pages if PAGE_PATH.fullmatch(f)}, True
    if any(root.iterdir()):
        raise SiteError(f"{root} is not empty and is not a generated leaderboard site; choose another --out")
    return set(), False


def _carries_page_mark(path: Path) -> bool:
    if not path.is_file():  # a FIFO, a device: not a page, and never opened
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = [line.rstrip("\n") for line, _ in zip(f, range(8), strict=False)]  # the mark is on line 4
        return PAGE_MARK in head
    except OSError:
        return False


def _manifest_text(files: set[str]) -> str:
    return json.dumps({"generator": GENERATOR, "files": sorted(files)}, indent=1) + "\n"


def _unchanged(path: Path, text: str) -> bool:
    try:
        return path.is_file() and path.read_text(encoding="utf-8") == text
    except (OSError, UnicodeDecodeError):
        return False


def _readme_target(readme: Path) -> Path:
    """The README to write: refused when it is a symlink (it would be replaced by a file,
    or lead elsewhere) or something other than a regular file."""
    if readme.is_symlink():
        raise SiteError(f"{readme} is a symlink; `build` writes the README only as a file of its own (--readme)")
    if readme.exists() and not readme.is_file():
        raise SiteError(f"{readme} is not a regular file; choose another --readme")
    return readme


def write_site(out_dir: Path, pages: Mapping[str, str], readme: Path, readme_text: str) -> None:
    """Write ``pages`` under ``out_dir`` and the README, delete the previous build's stale pages.

    Refuses (SiteError, before writing anything) a non-empty ``out_dir`` that is not a
    generated site, a page path taken by a file the site did not generate, a README that
    is not a generated one (``README_MARK``), a manifest that names anything but the pages
    a build writes, and a symlink (or a FIFO, a device) anywhere a page is written or
    deleted: every path is resolved and must stay inside ``out_dir``. All files are first
    written under temporary names next to their targets; only when every one was written
    are they renamed into place. An OSError (permission, disk full) is a SiteError naming
    the path, with the temporary files removed and the old files untouched.

    One build writes a folder at a time: a build holds the lock export takes
    (``leaderboard.export.folder_lock``, on the folder's parent), so two concurrent builds
    cannot leave a page off the manifest.
    """
    from leaderboard.export import folder_lock

    try:
        with folder_lock(out_dir):
            _write_site(out_dir, pages, readme, readme_text)
    except OSError as exc:  # the lock's folder cannot be made or opened (the writes catch their own)
        raise SiteError(f"cannot write {exc.filename or out_dir}: {exc.strerror or exc}") from None


def _write_site(out_dir: Path, pages: Mapping[str, str], readme: Path, readme_text: str) -> None:
    root = _site_root(out_dir)
    previous, legacy = _previous_build(root)
    strange = sorted(rel for rel in pages if not PAGE_PATH.fullmatch(rel))
    if strange:  # the renderer names every page by ``slug``; this would be a bug
        raise SiteError(f"pages with paths a build does not write: {', '.join(strange)}")
    paths = {rel: _inside(root, rel) for rel in sorted(previous | set(pages))}
    foreign = sorted(
        str(paths[rel])
        for rel in pages
        if paths[rel].exists() and rel not in previous and not _carries_page_mark(paths[rel])
    )
    readme = _readme_target(readme)
    if readme.exists() and not is_generated_readme(readme):
        foreign.append(f"{readme} (no `{README_MARK}` first line)")
    if foreign:
        raise SiteError(
            "these files were not generated by `pezoo leaderboard build` and would be overwritten: "
            + "; ".join(foreign)
            + " (move them aside, or choose another --out / --readme)"
        )
    targets = {paths[rel]: text for rel, text in sorted(pages.items())}
    targets[readme] = readme_text
    # first: the manifest of everything either build wrote, so an interrupted write leaves
    # no generated file unlisted; after the pages, the manifest of this build
    manifest = _inside(root, MANIFEST)
    staged, final = _Staging(), _Staging()
    try:
        for path, text in [(manifest, _manifest_text(previous | set(pages))), *targets.items()]:
            if not _unchanged(path, text):
                staged.add(path, text)
        staged.commit()
        for rel in sorted(previous - set(pages)):
            stale = _inside(root, rel)  # checked again: never deleted through a link
            if stale.is_file():
                stale.unlink()
        if not _unchanged(manifest, _manifest_text(set(pages))):
            final.add(manifest, _manifest_text(set(pages)))
        final.commit()
        if legacy:
            (root / LEGACY_MARKER).unlink(missing_ok=True)
    except OSError as exc:
        staged.abandon()
        final.abandon()
        where = exc.filename or out_dir
        raise SiteError(f"cannot write {where}: {exc.strerror or exc}") from None


class _Staging:
    """Files written under temporary names, renamed into place together by ``commit``."""

    def __init__(self) -> None:
        self.files: list[tuple[Path, Path]] = []  # (temporary, target)
        self.made_dirs: list[Path] = []

    def add(self, path: Path, text: str) -> None:
        missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
        for d in reversed(missing):
            d.mkdir()
            self.made_dirs.append(d)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        with open(tmp, "x", encoding="utf-8", newline="\n") as f:  # a new file: never through a link put there
            self.files.append((tmp, path))  # created: removed by abandon() even if the write fails
            f.write(text)

    def commit(self) -> None:
        for tmp, path in self.files:
            os.replace(tmp, path)
        self.files, self.made_dirs = [], []

    def abandon(self) -> None:
        """Remove the temporary files not yet renamed, and the folders made for them if empty."""
        for tmp, _ in self.files:
            with contextlib.suppress(OSError):
                tmp.unlink()
        for d in reversed(self.made_dirs):
            with contextlib.suppress(OSError):
                d.rmdir()
