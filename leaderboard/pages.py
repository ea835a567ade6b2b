"""The site's pages: what each template is given (``Site``: the board, the encoding
styles, links, plots, the values the templates show) and the four kinds of page.

Layout of a site::

    index.html              every task: curves (exact match) and the ranked table per preset
    tasks/<task>.html       one task: format, example, PE-solvability, both curves, per-length tables
    encodings/<name>.html   one encoding: docstring (paper, formula), options, results across tasks
    lm.html                 the language-modelling section (leaderboard.lm_board), where LM records exist

Every page is self-contained (inline CSS, inline JS, inline SVG; no network), carries the
provenance of the runs it shows (preset, device, commit, seeds, steps), and a warning
whenever they are not a GPU-preset board run on GPUs. Tables sort by clicking a header;
a preset selector hides the other presets.

The HTML is in Jinja2 templates (``leaderboard/templates/*.j2``) rendered with
autoescape on (``leaderboard.text``): a string from a results or diagnostics file, or an
installed plugin's docstring, is escaped wherever it lands. This module computes what
the templates show and builds no HTML itself: docstrings are parsed into parts
(``leaderboard.text.inline``, ``doc_blocks``) that ``_doc.j2`` renders.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from markupsafe import Markup

import pezoo
from harness.config.protocols import extra_input_badge
from harness.records import counts, ranking
from leaderboard import board as bd
from leaderboard import claims, notes, provisional, reach
from leaderboard import overview as ov
from leaderboard import permutation as pt
from leaderboard import provenance as prov
from leaderboard import rows as rw
from leaderboard.descriptions import encoding_info, task_info
from leaderboard.records import BoardError
from leaderboard.rows import Curve, Row, Stat
from leaderboard.schema import Record
from leaderboard.styles import Style, styles
from leaderboard.svg import VIRIDIS, Series, heat_colour, line_plot, panel_plot, swatch, trajectory_plot
from leaderboard.text import GENERATOR, NotANumber, environment, href, join, render_template, short_commit, slug
from leaderboard.writing import SiteError

BANNER_COMMITS = 3
"""The most commits a provenance banner names; more are counted, and listed in the Provenance table."""


def prose(text: str) -> Markup:
    """Docstring prose as HTML: its reST ``literals`` and ``:role:`target``` references
    set as <code>, everything escaped (``_doc.j2``'s ``prose``, from
    ``leaderboard.text.inline``)."""
    return _doc_macro("prose", text)


def doc_html(doc: str) -> Markup:
    """A Google-style docstring as HTML (the encoding pages quote the class docstrings):
    paragraphs as ``<p>``, an indented block (a formula) as ``<pre>``, a section such as
    ``Args:`` as a heading over a definition list (``leaderboard.text.doc_blocks``,
    rendered by ``_doc.j2``'s ``doc_html``, where autoescape escapes every piece)."""
    return _doc_macro("doc_html", doc)


def _doc_macro(name: str, text: str) -> Markup:
    """``_doc.j2``'s macro ``name`` applied to ``text`` (a macro's output is Markup)."""
    return Markup(getattr(environment().get_template("_doc.j2").module, name)(text))


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
    lm_records: Sequence[Any] = ()  # the language-modelling section's records (harness.lm.record.LmRecord)
    # each table's small multiples, drawn once: the front page, its task page and every encoding
    # page show them (keyed by id, the table kept alive beside them)
    _panels: dict[tuple[int, str], tuple[bd.Table, list[tuple[Row, Markup]]]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def lm_answers(self) -> list[tuple[str, str, list[tuple[list[str], float, bool]]]]:
        """(corpus task, seeds behind it, answer groups) of the LM section, for the front page."""
        from leaderboard import lm_board

        return [(task, *lm_board.answer_groups(rows)) for task, rows in lm_board.lm_rows(self.lm_records).items()]

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
            f"{p.runs_text()}, {_seeds(p.seeds)}, {join(p.steps)} training steps, {p.models_text()}, "
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

    def ordered_curves(self, table: bd.Table) -> list[Curve]:
        """The table's curves in the order of its rows (rank order, then the unfitted)."""
        by_label = {c.label: c for c in table.curves}
        return [by_label[row.label] for row in table.rows if row.label in by_label]

    def series(self, curve: Curve, metric: str) -> Series:
        stats = curve.exact_match if metric == "exact_match" else curve.token_accuracy
        band = curve.exact_match_band if metric == "exact_match" else curve.token_accuracy_band
        return Series(
            label=curve.label,
            style=self.style(curve.label),
            xs=tuple(float(x) for x in curve.lengths),
            ys=tuple(float(s.mean) for s in stats),  # drawn: floats
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

    def panels(self, table: bd.Table, metric: str = "exact_match") -> list[tuple[Row, Markup]]:
        """One small multiple per row of the table, in its order: the row's curve over the others in grey."""
        cached = self._panels.get((id(table), metric))
        if cached is not None and cached[0] is table:
            return cached[1]
        series = {c.label: self.series(c, metric) for c in sorted(table.curves, key=lambda c: c.label)}
        x_range = self._x_range(table)
        out = []
        for row in table.rows:
            others = [s for label, s in series.items() if label != row.label]
            title = f"{row.label} on {table.task}: {self.metric_title(table, metric)} · preset {table.preset}"
            mine = series.get(row.label)
            out.append((row, panel_plot(mine, others, title=title, boundary=table.train_max + 0.5, x_range=x_range)))
        self._panels[(id(table), metric)] = (table, out)
        return out

    def encoding_panels(self, encoding: str) -> list[tuple[bd.Table, Row, Markup]]:
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

    def heat_cell(self, table: bd.Table | None, task: str, row: Row | None) -> dict[str, Any]:
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
            "made": c.made,
        }

    def overview(self, preset: str) -> tuple[ov.Overview, dict[str, bd.Table]]:
        """(the preset's grid, task -> the table the grid reads)."""
        return ov.overview(self.board, preset), {t.task: t for t in ov.first_tables(self.board, preset)}

    # -- tables ---------------------------------------------------------------------------
    def fit_title(self, row: Row) -> str:
        """Each seed's exact match over the training scales (three decimals: 0.947 did not fit)."""
        values = row.per_seed.get("em_within", ())
        each = ", ".join(f"seed {s}: {counts.fixed(v, 3)}" for s, v in zip(row.seeds, values, strict=False))
        return f"EM≤N per seed ({each}); fits at ≥ {ranking.FIT_THRESHOLD:.2f}"

    def ranked_count(self, table: bd.Table) -> int:
        return sum(r.ranked for r in table.rows)

    def per_length_rows(self, table: bd.Table, metric: str) -> list[tuple[int, str, float, list[Stat | None]]]:
        """Per evaluated scale: (n, split, mean token length, each curve's Stat or None), the
        curves in the order of ``ordered_curves``."""
        rows = []
        for n in sorted({n for c in table.curves for n in c.lengths}):
            split, tokens = "", 0.0
            stats: list[Stat | None] = []
            for c in self.ordered_curves(table):
                if n in c.lengths:
                    k = c.lengths.index(n)
                    split, tokens = c.splits[k], c.token_lengths[k]
                    stats.append((c.exact_match if metric == "exact_match" else c.token_accuracy)[k])
                else:
                    stats.append(None)
            rows.append((n, split, tokens, stats))
        return rows

    def traced_runs(
        self, task: str, preset: str
    ) -> list[tuple[str, pezoo.TracePlots, list[tuple[Any, Any, list[Markup]]]]]:
        """Per encoding whose paper card says how to draw its diagnostics
        (``pezoo.PaperCard.diagnostics_plots``), the runs of (task, preset) that published
        them: (encoding, its TracePlots, [(seed, diagnostics, plots)]), by encoding and seed."""
        groups: dict[str, list[Record]] = {}
        for r in self.board.records_where(task=task, preset=preset):
            if r.run_id in self.diagnostics and pezoo.card_of(str(r.data["pe"])).diagnostics_plots is not None:
                groups.setdefault(str(r.data["pe"]), []).append(r)
        out = []
        for pe, runs in sorted(groups.items()):
            view = pezoo.card_of(pe).diagnostics_plots
            assert view is not None
            traced = []
            for rec in sorted(runs, key=lambda r: r.data["seed"]):
                diag = self.diagnostics[rec.run_id]
                try:
                    plots = [
                        trajectory_plot(lines, title=title, x_label="token index", y_label=view.y_label)
                        for title, lines in view.plots(diag["layers"])
                    ]
                except NotANumber as exc:
                    raise SiteError(f"diagnostics/{rec.run_id}.json (run {rec.run_id}): {exc}") from None
                traced.append((rec.data["seed"], diag, plots))
            out.append((pe, view, traced))
        return out


def _page(site: Site, template: str, page_dir: str, title: str, records: Sequence[Record], **context: Any) -> str:
    """A whole page: ``template`` (extending page.html.j2) with the header, banners and provenance of ``records``."""
    return (
        render_template(
            template,
            site=site,
            board=site.board,
            bd=bd,
            rw=rw,
            reach=reach,
            provisional=provisional,
            extra_input_badge=extra_input_badge,
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
            prose=prose,
            doc_html=doc_html,
            seeds_text=_seeds,
            claims=claims,
            **context,
        )
        + "\n"
    )


def lm_page(site: Site) -> str:
    """The language-modelling section as a page of the site (``lm.html``)."""
    from leaderboard import lm_board

    tables = lm_board.lm_rows(site.lm_records)
    return _page(
        site, "lm.html.j2", "", "language modelling", (), lm=lm_board, tables=tables, records_lm=site.lm_records
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
    view = pezoo.card_of(encoding).diagnostics_plots if info is not None else None
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
        traced=traced if view is not None else [],
        trace_view=view,
    )


def render_pages(
    board: bd.Board,
    results_href: str,
    repo_href: str,
    repo_root: Path,
    diagnostics: Mapping[str, Mapping[str, Any]] | None,
    lm_records: Sequence[Any] = (),
) -> dict[str, str]:
    """Site path (relative, '/'-separated) -> page text, for an assembled ``board`` (and the
    diagnostics of some of its runs, by run id; and the language-modelling section's records,
    whose page ``lm.html`` the front page links when there are any)."""
    site = Site(board, styles(board.labels), results_href, repo_href, repo_root, dict(diagnostics or {}), lm_records)
    pages = {"index.html": index_page(site)}
    if lm_records:
        pages["lm.html"] = lm_page(site)
    for names, folder, make in ((board.tasks, "tasks", task_page), (board.encodings, "encodings", encoding_page)):
        slugs: dict[str, str] = {}
        for name in names:
            s = slug(name)
            if s in slugs:
                raise BoardError(f"{folder}: {name!r} and {slugs[s]!r} would share the page {s}.html")
            slugs[s] = name
            pages[f"{folder}/{s}.html"] = make(site, name)
    return pages
