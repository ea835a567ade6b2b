"""The static leaderboard site, rendered from results files alone.

Layout of the output folder::

    index.html              every task: curves (exact match) and the ranked table per preset
    tasks/<task>.html       one task: format, example, PE-solvability, both curves, per-length tables
    encodings/<name>.html   one encoding: docstring (paper, formula), options, results across tasks

Every page is self-contained (inline CSS, inline JS, inline SVG; no network), carries the
provenance of the runs it shows (preset, device, commit, seeds, steps), and a warning
whenever they are not a GPU-preset board run on GPUs. Tables sort by clicking a header;
a preset selector hides the other presets. The output is deterministic: the same results
files (and the same pezoo checkout, whose docstrings and task formats the pages quote)
give the same bytes; nothing but the runs' own dates is written.
"""

from __future__ import annotations

import inspect
import os
import posixpath
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path, PurePosixPath
from typing import Any

from leaderboard import board as bd
from leaderboard.schema import read_diagnostics, read_results
from leaderboard.svg import Series, Style, line_plot, styles, swatch, trajectory_plot

MARKER = ".pezoo-leaderboard-site"
"""File that marks a folder as a generated site, so a rebuild may delete its stale pages."""
REPO_ROOT = Path(__file__).resolve().parent.parent

# --------------------------------------------------------------------------------------
# What the registries say about tasks and encodings (with fallbacks for plugins that are
# not installed here, and for task attributes that may not exist yet)
# --------------------------------------------------------------------------------------


def _prose(text: str) -> str:
    """Docstring prose as HTML: escaped, its reST ``literals`` and ``:role:`target```
    references set as <code>."""
    html = re.sub(r"``(.+?)``", r"<code>\1</code>", escape(text))
    return re.sub(r":[a-z]+:`~?([^`]+)`", r"<code>\1</code>", html)


_SECTION = re.compile(r"^(Args|Arguments|Attributes|Returns|Raises|Shapes?|Notes?):\s*$")
_ARG = re.compile(r"^(\*{0,2}[\w.]+)(\s*\([^)]*\))?:\s*(.*)$")


def _doc_html(doc: str) -> str:
    """A Google-style docstring as HTML (the encoding pages quote the class docstrings).

    Paragraphs become ``<p>``, an indented block (a formula) ``<pre>``, and a section
    such as ``Args:`` a heading over a definition list, one ``<dt>`` per argument with its
    continuation lines joined to its ``<dd>``. Nothing is dropped: a line this reader
    does not recognise is kept as prose.
    """
    blocks: list[list[str]] = [[]]
    for line in doc.strip("\n").splitlines():
        if line.strip():
            blocks[-1].append(line.rstrip())
        elif blocks[-1]:
            blocks.append([])
    out: list[str] = []
    for block in filter(None, blocks):
        section = _SECTION.match(block[0])
        if section:
            out.append(f'<h3 class="doc">{escape(section.group(1))}</h3>')
            entries: list[tuple[str, int, list[str]]] = []  # (argument, its indent, its text lines)
            for line in block[1:]:
                indent = len(line) - len(line.lstrip())
                arg = _ARG.match(line.strip())
                if arg and (not entries or indent <= entries[-1][1]):
                    entries.append((arg.group(1) + (arg.group(2) or ""), indent, [arg.group(3)]))
                elif entries:
                    entries[-1][2].append(line.strip())
                else:
                    entries.append(("", indent, [line.strip()]))
            items = "".join(
                (f"<dt><code>{escape(name)}</code></dt>" if name else "") + f"<dd>{_prose(' '.join(text))}</dd>"
                for name, _, text in entries
            )
            out.append(f'<dl class="doc">{items}</dl>')
        elif all(line.startswith((" ", "\t")) for line in block):
            width = min(len(line) - len(line.lstrip()) for line in block)
            out.append(f'<pre class="formula">{escape(chr(10).join(line[width:] for line in block))}</pre>')
        else:
            out.append(f"<p>{_prose(' '.join(line.strip() for line in block))}</p>")
    return "".join(out)


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
# Page pieces
# --------------------------------------------------------------------------------------

CSS = """
:root { --ink: #1a1a1a; --muted: #5a5a5a; --line: #d0d0d0; --warn: #8a4b00; --warn-bg: #fff4e0; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
       margin: 0 auto; max-width: 1180px; padding: 0 18px 40px; }
header.top { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; justify-content: space-between;
             border-bottom: 1px solid var(--line); padding: 10px 0; }
header.top a.home { font-weight: bold; text-decoration: none; color: var(--ink); }
h1 { font-size: 1.6em; margin: 18px 0 6px; } h2 { margin-top: 32px; border-bottom: 1px solid var(--line); }
h3 { margin: 22px 0 6px; }
a { color: #1f4e9c; }
.meta, .muted { color: var(--muted); }
.warning { background: var(--warn-bg); color: var(--warn); border-left: 4px solid var(--warn); padding: 8px 12px;
           margin: 10px 0; }
.note { background: #eef4fb; border-left: 4px solid #1f4e9c; padding: 8px 12px; margin: 10px 0; }
table { border-collapse: collapse; margin: 8px 0 16px; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 10px; text-align: right; white-space: nowrap; }
th { background: #f4f4f4; }
td.text, th.text { text-align: left; }
table.provenance td { white-space: normal; overflow-wrap: anywhere; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th::after { content: " \\2195"; color: #999; font-size: 0.8em; }
table.sortable th[aria-sort="ascending"]::after { content: " \\25B2"; color: var(--ink); }
table.sortable th[aria-sort="descending"]::after { content: " \\25BC"; color: var(--ink); }
tbody tr:nth-child(even) { background: #fafafa; }
.scroll { overflow-x: auto; }
.plots { display: flex; flex-wrap: wrap; gap: 12px; }
svg.plot { max-width: 100%; height: auto; border: 1px solid #e4e4e4; }
svg.swatch { vertical-align: middle; margin-right: 6px; }
pre, code { font-family: ui-monospace, "SF Mono", Menlo, Consolas, monospace; font-size: 0.92em; }
pre { background: #f6f6f6; padding: 10px; overflow-x: auto; white-space: pre-wrap; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; }
dl.facts dt { font-weight: bold; } dl.facts dd { margin: 0; }
dl.doc { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; margin-top: 0; }
dl.doc dd { margin: 0; } h3.doc { font-size: 1em; margin-bottom: 6px; }
ul.index { columns: 3 220px; padding-left: 18px; }
[hidden] { display: none !important; }
footer { margin-top: 40px; border-top: 1px solid var(--line); color: var(--muted); font-size: 0.9em; }
"""

JS = """
(function () {
  "use strict";
  function key(row, index) {
    var cell = row.cells[index];
    if (!cell) { return ""; }
    var v = cell.getAttribute("data-sort");
    return v === null ? cell.textContent.trim().toLowerCase() : v;
  }
  function sortBy(th) {
    var table = th.closest("table");
    var body = table.tBodies[0];
    var index = th.cellIndex;
    var numeric = th.getAttribute("data-type") === "num";
    var now = th.getAttribute("aria-sort");
    var dir = now === "descending" ? "ascending" : now === "ascending" ? "descending"
      : (th.getAttribute("data-first") || (numeric ? "descending" : "ascending"));
    Array.prototype.forEach.call(th.parentNode.cells, function (c) { c.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", dir);
    var sign = dir === "ascending" ? 1 : -1;
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var ka = key(a, index), kb = key(b, index);
      if (ka === "" || kb === "") {
        if (ka !== kb) { return ka === "" ? 1 : -1; }  /* missing values last */
      } else {
        var c = numeric ? parseFloat(ka) - parseFloat(kb) : (ka < kb ? -1 : ka > kb ? 1 : 0);
        if (c !== 0) { return sign * c; }
      }
      return Number(a.getAttribute("data-order")) - Number(b.getAttribute("data-order"));
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  document.querySelectorAll("table.sortable th").forEach(function (th) {
    th.tabIndex = 0;
    th.addEventListener("click", function () { sortBy(th); });
    th.addEventListener("keydown", function (e) { if (e.key === "Enter") { sortBy(th); } });
  });
  var select = document.getElementById("preset-filter");
  if (select) {
    var apply = function () {
      var v = select.value;
      document.querySelectorAll("[data-preset]").forEach(function (el) {
        el.hidden = v !== "" && el.getAttribute("data-preset") !== v;
      });
    };
    select.addEventListener("change", apply);
    apply();
  }
})();
"""


def slug(name: str) -> str:
    """File-name-safe form of a registry name (``randomized:rope`` -> ``randomized-rope``)."""
    return re.sub(r"[^a-z0-9_.-]+", "-", name.lower()).strip("-") or "unnamed"


def _rel(from_dir: str, to: str) -> str:
    """Relative URL from a page folder (relative to the site root) to a site path."""
    return os.path.relpath(to, from_dir or ".").replace(os.sep, "/")


@dataclass(frozen=True)
class Site:
    """What every page needs: the board, the encoding styles, and link roots."""

    board: bd.Board
    styles: Mapping[str, Style]
    results_href: str  # from the site root to the results folder
    repo_href: str  # from the site root to the repository root (for docs/)
    repo_root: Path
    diagnostics: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # run_id -> body

    def task_href(self, page_dir: str, task: str) -> str:
        return _rel(page_dir, f"tasks/{slug(task)}.html")

    def encoding_href(self, page_dir: str, encoding: str) -> str:
        return _rel(page_dir, f"encodings/{slug(encoding)}.html")

    def outside(self, page_dir: str, root_href: str, path: str) -> str:
        """Link from a page folder to ``path`` under a folder outside the site (lexical: no cwd involved)."""
        depth = len(PurePosixPath(page_dir).parts) if page_dir else 0
        return posixpath.normpath("/".join([*[".."] * depth, root_href, path]))

    def style(self, label: str) -> Style:
        return self.styles[label]


def page(site: Site, page_dir: str, title: str, body: Sequence[str], records: Sequence[bd.Record]) -> str:
    """A whole HTML page: header with the preset filter, body, provenance, footer."""
    presets = sorted({r.data["preset"] for r in records})
    options = "".join(f'<option value="{escape(p)}">{escape(p)}</option>' for p in presets)
    home = _rel(page_dir, "index.html")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<link rel="icon" href="data:,">',
        f"<title>{escape(title)} · pezoo leaderboard</title>",
        f"<style>{CSS}</style>",
        "</head>",
        "<body>",
        '<header class="top">',
        f'<a class="home" href="{home}">pezoo leaderboard</a>',
        f'<label>preset <select id="preset-filter"><option value="">all presets</option>{options}</select></label>',
        "</header>",
        "<main>",
        *banners(bd.provenance(records)),
        *body,
        *provenance_section(site, page_dir, records),
        "</main>",
        "<footer><p>Generated by <code>pezoo leaderboard build</code> from the published results files; "
        "do not edit by hand. Tables sort by clicking a column header.</p></footer>",
        f"<script>{JS}</script>",
        "</body>",
        "</html>",
    ]
    return "\n".join(parts) + "\n"


def _short_commit(commit: str) -> str:
    dirty = commit.endswith("-dirty")
    sha = commit.removesuffix("-dirty")
    return sha[:12] + (" (with uncommitted changes)" if dirty else "")


def _join(values: Iterable[Any]) -> str:
    return ", ".join(str(v) for v in values)


def _seeds(seeds: Sequence[int]) -> str:
    return ("seed " if len(seeds) == 1 else "seeds ") + _join(seeds)


def _day_range(p: bd.Provenance) -> str:
    return p.first_day if p.first_day == p.last_day else f"{p.first_day} .. {p.last_day}"


def banners(provs: Sequence[bd.Provenance]) -> list[str]:
    """One line per preset saying what kind of board this is; a warning unless paper scale."""
    out = []
    for p in provs:
        facts = (
            f"{bd.plural(p.runs, 'run')}, {_seeds(p.seeds)}, {_join(p.steps)} training steps, {_join(p.backbones)}, "
            f"on {_join(p.devices)}, commit {_join(_short_commit(c) for c in p.commits)}"
        )
        if p.paper_scale:
            out.append(
                f'<p class="note" data-preset="{escape(p.preset)}">Preset <strong>{escape(p.preset)}</strong>: '
                f"{escape(facts)}.</p>"
            )
        else:
            kind = "CPU " if p.on_cpu else ""
            out.append(
                f'<p class="warning" data-preset="{escape(p.preset)}"><strong>A {kind}{escape(p.preset)}-preset '
                f"board.</strong> {escape(facts)}. Small models and short training: these numbers are not "
                "comparable with the papers' paper-scale results.</p>"
            )
    return out


def provenance_section(site: Site, page_dir: str, records: Sequence[bd.Record]) -> list[str]:
    out = ['<section id="provenance"><h2>Provenance</h2>']
    for p in bd.provenance(records):
        files = ", ".join(
            f'<a href="{escape(site.outside(page_dir, site.results_href, name))}">{escape(name)}</a>'
            for name in p.files
        )
        rows = [
            ("preset", escape(p.preset)),
            ("runs", str(p.runs)),
            ("seeds", escape(_join(p.seeds))),
            ("tasks", escape(_join(p.tasks))),
            ("encodings", escape(_join(p.encodings))),
            ("training steps", escape(_join(p.steps))),
            ("batch size", escape(_join(p.batch_sizes))),
            ("backbone", escape(_join(p.backbones))),
            ("examples per evaluated scale", escape(_join(p.eval_samples))),
            ("device", escape(_join(p.devices))),
            ("commit", escape(_join(p.commits))),
            ("pezoo", escape(_join(p.pezoo_versions))),
            ("torch", escape(_join(p.torch_versions))),
            ("runs finished (UTC)", escape(_day_range(p))),
            ("results files", files),
        ]
        out.append(f'<div data-preset="{escape(p.preset)}"><table class="provenance"><tbody>')
        out += [f'<tr><th class="text">{k}</th><td class="text">{v}</td></tr>' for k, v in rows]
        out.append("</tbody></table></div>")
    out.append("</section>")
    return out


RULE = (
    "Ranked per task and preset by <strong>solved≤</strong>, the largest scale L such that exact match is at "
    "least 0.90 at every evaluated scale ≤ L (N, the largest training scale, means nothing beyond training); ties "
    "by <strong>EM&gt;N</strong>, the exact match averaged over the evaluated scales beyond N, then by "
    "<strong>tok&gt;N</strong>, the teacher-forced per-token accuracy beyond N. ≤N columns are the same over the "
    "training scales. Exact match is of the greedy decode, EOS included (the PRISM paper's metric); per-token "
    "accuracy is the randomized-PE paper's. Cells are " + escape(bd.CELLS_RULE)
)


def _num(th: str, title: str = "", *, low_first: bool = False) -> str:
    """A numeric column header; ``low_first`` (ranks): the first click sorts 1, 2, 3, ..."""
    t = f' title="{escape(title)}"' if title else ""
    first = ' data-first="ascending"' if low_first else ""
    return f'<th data-type="num"{first}{t}>{th}</th>'


def encoding_cell(site: Site, page_dir: str, label: str, encoding: str) -> str:
    return (
        f'<td class="text" data-sort="{escape(label.lower())}">{swatch(site.style(label))}'
        f'<a href="{escape(site.encoding_href(page_dir, encoding))}">{escape(label)}</a></td>'
    )


def ranking_table(site: Site, page_dir: str, table: bd.Table) -> list[str]:
    n = table.train_max
    head = [
        _num("rank", low_first=True),
        '<th class="text" data-type="text">encoding</th>',
        _num("seeds", "number of seeds"),
        _num("solved≤", "largest scale L with exact match ≥ 0.90 at every evaluated scale ≤ L"),
        _num(f"EM&gt;{n}", "exact match, mean over evaluated scales beyond training"),
        _num(f"tok&gt;{n}", "per-token accuracy, mean over evaluated scales beyond training"),
        _num(f"EM≤{n}", "exact match, mean over the training scales"),
        _num(f"tok≤{n}", "per-token accuracy, mean over the training scales"),
    ]
    out = [
        '<div class="scroll"><table class="sortable ranking" '
        f'data-task="{escape(table.task)}" data-preset-table="{escape(table.preset)}">',
        f"<thead><tr>{''.join(head)}</tr></thead><tbody>",
    ]
    for i, row in enumerate(table.rows):
        cells = [
            f'<td data-sort="{row.rank}">{row.rank}</td>',
            encoding_cell(site, page_dir, row.label, row.encoding),
            f'<td data-sort="{len(row.seeds)}">{len(row.seeds)}</td>',
        ]
        for score in bd.SCORES:
            stat = row.scores[score]
            cells.append(f'<td data-sort="{stat.sort_value()}">{stat.text(0 if score == "solved" else 2)}</td>')
        out.append(f'<tr data-order="{i}">{"".join(cells)}</tr>')
    out.append("</tbody></table></div>")
    return out


def plot(site: Site, table: bd.Table, metric: str, *, legend: bool = True) -> str:
    """The curves of one (preset, task) for ``metric`` (exact_match or token_accuracy)."""
    exact = "exact match of the final answer" if table.match == "answer" else "exact match (greedy, EOS incl.)"
    title_metric = exact if metric == "exact_match" else "per-token accuracy"
    series = []
    for c in table.curves:
        stats = c.exact_match if metric == "exact_match" else c.token_accuracy
        band = c.exact_match_band if metric == "exact_match" else c.token_accuracy_band
        series.append(
            Series(
                label=c.label,
                style=site.style(c.label),
                xs=tuple(float(x) for x in c.lengths),
                ys=tuple(s.mean for s in stats),
                lo=tuple(b[0] for b in band),
                hi=tuple(b[1] for b in band),
            )
        )
    return line_plot(
        series,
        title=f"{table.task}: {title_metric} · preset {table.preset}",
        x_label="scale n (task length)",
        y_label=title_metric.split(" (")[0],
        boundary=table.train_max + 0.5,
        boundary_label=f"trained on n ≤ {table.train_max}",
        legend=legend,
    )


def table_meta(table: bd.Table, info: TaskInfo | None) -> str:
    seeds = sorted({s for row in table.rows for s in row.seeds})
    parts = [
        f"preset <strong>{escape(table.preset)}</strong>",
        f"trained on scales {table.train_min}..{table.train_max}",
        f"tested up to {table.test_max}",
        *([f"protocol {escape(table.protocol)}"] if table.protocol else []),
        *(["exact match scores the final answer only"] if table.match == "answer" else []),
        bd.plural(len(table.rows), "encoding"),
        escape(_seeds(seeds)),
    ]
    if info is not None:
        parts.append(f"PE-solvability: <code>{escape(info.pe_solvability)}</code>")
    return f'<p class="meta">{" · ".join(parts)}</p>'


def per_length_table(site: Site, page_dir: str, table: bd.Table, metric: str) -> list[str]:
    """Rows: evaluated scales; columns: encodings; cells: mean ± CI over seeds."""
    labels = [c.label for c in table.curves]
    by_label = {c.label: c for c in table.curves}
    lengths = sorted({n for c in table.curves for n in c.lengths})
    head = [
        _num("n", "the task's scale"),
        '<th class="text" data-type="text">split</th>',
        _num("tokens", "mean token length"),
    ]
    head += [f'<th data-type="num">{swatch(site.style(label))}{escape(label)}</th>' for label in labels]
    out = [f'<div class="scroll"><table class="sortable per-length" data-metric="{metric}">']
    out.append(f"<thead><tr>{''.join(head)}</tr></thead><tbody>")
    for i, n in enumerate(lengths):
        split, tokens = "", 0.0
        cells = []
        for label in labels:
            c = by_label[label]
            if n in c.lengths:
                k = c.lengths.index(n)
                split, tokens = c.splits[k], c.token_lengths[k]
                stat = (c.exact_match if metric == "exact_match" else c.token_accuracy)[k]
                cells.append(f'<td data-sort="{stat.sort_value()}">{stat.text()}</td>')
            else:
                cells.append('<td data-sort="">-</td>')
        lead = [
            f'<td data-sort="{n}">{n}</td>',
            f'<td class="text">{split}</td>',
            f'<td data-sort="{tokens:.2f}">{tokens:.1f}</td>',
        ]
        out.append(f'<tr data-order="{i}">{"".join(lead + cells)}</tr>')
    out.append("</tbody></table></div>")
    return out


# --------------------------------------------------------------------------------------
# Pages
# --------------------------------------------------------------------------------------


OVERVIEW_RULE = (
    "Each cell: the encoding's rank on that task's table (1 = best) and, after it, its EM&gt;N. Rows are ordered "
    "by the mean rank over the tasks (an encoding without results on every task comes after those with), then "
    "by the mean EM&gt;N; a dash: not run on that task. The task tables below carry the intervals."
)


def overview_table(site: Site, page_dir: str, preset: str) -> list[str]:
    """The at-a-glance table of one preset: encodings × tasks, cell = rank and EM>N."""
    tasks, rows = bd.overview(site.board, preset)
    head = [
        _num("#", "position by mean rank over the tasks", low_first=True),
        '<th class="text" data-type="text">encoding</th>',
        _num("mean rank", "mean of the encoding's rank over the tasks it has results on", low_first=True),
        _num("mean EM&gt;N", "mean over the tasks of the exact match beyond training"),
        *(_num(f'<a href="#task-{slug(t)}">{escape(t)}</a>', f"rank on {t} · EM>N", low_first=True) for t in tasks),
    ]
    out = [
        f'<div class="scroll"><table class="sortable overview" data-preset-table="{escape(preset)}">',
        f"<thead><tr>{''.join(head)}</tr></thead><tbody>",
    ]
    for i, row in enumerate(rows):
        em = bd.Stat(row.mean_em_beyond, 0.0)
        cells = [
            f'<td data-sort="{row.position}">{row.position}</td>',
            encoding_cell(site, page_dir, row.label, row.encoding),
            f'<td data-sort="{row.mean_rank:.6f}">{row.mean_rank:.1f}</td>',
            f'<td data-sort="{em.sort_value()}">{em.text()}</td>',
        ]
        for task in tasks:
            cell = row.cells.get(task)
            if cell is None:
                cells.append('<td data-sort="">-</td>')
                continue
            rank = f"<strong>{cell.rank}</strong>" if cell.rank == 1 else str(cell.rank)
            cells.append(f'<td data-sort="{cell.rank}">{rank} · {cell.scores["em_beyond"].text()}</td>')
        out.append(f'<tr data-order="{i}">{"".join(cells)}</tr>')
    out.append("</tbody></table></div>")
    return out


def index_page(site: Site) -> str:
    b = site.board
    body = [
        "<h1>Length extrapolation leaderboard</h1>",
        "<p>Every encoding trains the same backbone on short instances of a task and is evaluated "
        "far beyond the training length. Curves: accuracy per scale, training region shaded.</p>",
        f'<p class="meta">{RULE}</p>',
    ]
    if not b.tables:
        body.append('<p class="warning">No results yet: publish some with <code>pezoo leaderboard export</code>.</p>')
    else:
        body.append('<h2>Tasks</h2><ul class="index">')
        body += [f'<li><a href="#task-{slug(t)}">{escape(t)}</a></li>' for t in b.tasks]
        body.append('</ul><h2>Encodings</h2><ul class="index">')
        body += [
            f'<li>{swatch(site.style(label))}<a href="{escape(site.encoding_href("", enc))}">{escape(label)}</a></li>'
            for label, enc in _labels_with_encoding(b)
        ]
        body.append("</ul>")
        body += ["<h2>At a glance</h2>", f'<p class="meta">{OVERVIEW_RULE}</p>']
        for preset in b.presets:
            body.append(
                f'<div data-preset="{escape(preset)}"><p class="meta">preset <strong>{escape(preset)}</strong></p>'
            )
            body += overview_table(site, "", preset)
            body.append("</div>")
    for task in b.tasks:
        info = task_info(task)
        href = escape(site.task_href("", task))
        body.append(f'<section id="task-{slug(task)}"><h2><a href="{href}">{escape(task)}</a></h2>')
        if info is not None and info.summary:
            body.append(f"<p>{_prose(info.summary)}</p>")
        tables = b.tables_of_task(task)
        for preset in sorted(set(b.presets) - {t.preset for t in tables}):
            body.append(f'<p class="muted" data-preset="{escape(preset)}">No {escape(preset)} runs of this task.</p>')
        for table in tables:
            body.append(f'<div data-preset="{escape(table.preset)}">')
            body.append(table_meta(table, info))
            body.append(f'<div class="plots">{plot(site, table, "exact_match")}</div>')
            body += ranking_table(site, "", table)
            body.append("</div>")
        body.append("</section>")
    return page(site, "", "leaderboard", body, b.records)


def _labels_with_encoding(b: bd.Board) -> list[tuple[str, str]]:
    return sorted({(row.label, row.encoding) for t in b.tables for row in t.rows})


def task_page(site: Site, task: str) -> str:
    d = "tasks"
    info = task_info(task)
    body = [f"<h1>Task <code>{escape(task)}</code></h1>"]
    if info is None:
        body.append(
            '<p class="warning">This task is not installed in the pezoo that built the site; '
            "only its results are shown.</p>"
        )
    else:
        docs = site.repo_root / "docs" / "tasks.md"
        facts = [
            ("what", _prose(info.summary)),
            ("source", escape(info.source)),
            ("format", f"<code>{escape(info.layout)}</code>"),
            (f"example (n = {info.example_scale})", f"<code>{escape(info.example)}</code>"),
            ("its paper's metric", f"<code>{escape(info.metric)}</code>"),
            ("PE-solvability", f"<code>{escape(info.pe_solvability)}</code>: {escape(info.pe_solvability_basis)}"),
        ]
        if docs.is_file():
            href = site.outside(d, site.repo_href, "docs/tasks.md")
            facts.append(("catalogue", f'<a href="{escape(href)}">docs/tasks.md</a>'))
        body.append('<dl class="facts">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>")
    body.append(f'<p class="meta">{RULE}</p>')
    for table in site.board.tables_of_task(task):
        body.append(f'<section data-preset="{escape(table.preset)}"><h2>Preset {escape(table.preset)}</h2>')
        body.append(table_meta(table, info))
        body.append(
            f'<div class="plots">{plot(site, table, "exact_match")}\n{plot(site, table, "token_accuracy")}</div>'
        )
        body.append("<h3>Ranking</h3>")
        body += ranking_table(site, d, table)
        body.append("<h3>Exact match per scale</h3>")
        body += per_length_table(site, d, table, "exact_match")
        body.append("<h3>Per-token accuracy per scale</h3>")
        body += per_length_table(site, d, table, "token_accuracy")
        body += prism_section(site, task, table.preset)
        body.append("</section>")
    return page(site, d, f"task {task}", body, site.board.records_where(task=task))


def prism_section(site: Site, task: str, preset: str) -> list[str]:
    """Cursor trajectories of the PRISM runs of (task, preset) that published diagnostics."""
    runs = [
        (r.data["seed"], site.diagnostics[r.run_id])
        for r in site.board.records_where(task=task, preset=preset, pe="prism")
        if r.run_id in site.diagnostics
    ]
    if not runs:
        return []
    out = [
        '<h3 id="prism-diagnostics">PRISM cursors</h3>',
        '<p class="meta">What each trained PRISM model\'s cursors do on the first evaluation example at the '
        "largest test scale (teacher-forced): the mode (most likely offset) of every query and key cursor "
        "after each token, one line per head and cursor. A cursor that counts tokens climbs one offset per "
        "token; a reset drops it back to 0.</p>",
    ]
    for seed, diag in sorted(runs, key=lambda item: item[0]):
        tokens = diag["tokens"]
        out.append(
            f"<h4>seed {seed}: scale {diag['scale']} (trained to {diag['train_max']}), {len(tokens)} tokens</h4>"
        )
        out.append(f'<p class="tokens"><code>{escape(" ".join(tokens))}</code></p>')
        plots = []
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
        out.append(f'<div class="plots">{"".join(plots)}</div>')
    return out


def encoding_page(site: Site, encoding: str) -> str:
    d = "encodings"
    info = encoding_info(encoding)
    labels = sorted({row.label for t in site.board.tables for row in t.rows if row.encoding == encoding})
    head = "".join(swatch(site.style(label)) for label in labels)
    body = [f"<h1>{head}Encoding <code>{escape(encoding)}</code></h1>"]
    if info is None:
        body.append(
            '<p class="warning">This encoding is not installed in the pezoo that built the site; '
            "only its results are shown.</p>"
        )
    else:
        body.append(f"<p>{_prose(info.summary)}</p>")
        docs = site.repo_root / "docs" / "encodings" / f"{slug(encoding)}.md"
        if docs.is_file():
            href = site.outside(d, site.repo_href, f"docs/encodings/{slug(encoding)}.md")
            body.append(f'<p>Documentation: <a href="{escape(href)}">docs/encodings/{escape(docs.name)}</a></p>')
        if info.wrapper_doc:
            body.append(f"<h2>Wrapper</h2>{_doc_html(info.wrapper_doc)}")
        rest = info.doc.partition("\n\n")[2]  # its first paragraph is the summary, shown above
        if rest.strip():
            body.append(f"<h2>Formula, paper, conventions</h2>{_doc_html(rest)}")
        if info.options:
            body.append(
                '<h2>Options</h2><table class="options"><thead><tr><th class="text">option</th>'
                '<th class="text">default</th></tr></thead><tbody>'
            )
            body += [
                f'<tr><td class="text"><code>{escape(k)}</code></td><td class="text"><code>{escape(v)}</code></td></tr>'
                for k, v in info.options
            ]
            body.append("</tbody></table>")
    body.append("<h2>Results across tasks</h2>")
    body.append(f'<p class="meta">{RULE}</p>')
    head_cells = [
        '<th class="text" data-type="text">task</th>',
        '<th class="text" data-type="text">preset</th>',
        '<th class="text" data-type="text">encoding</th>',
        _num("rank", low_first=True),
        _num("of", "encodings on this task and preset"),
        _num("seeds"),
        _num("N", "largest training scale"),
        *(_num(bd.SCORE_TITLES[s].replace(">", "&gt;")) for s in bd.SCORES),
    ]
    rows = []
    for table in site.board.tables:
        for row in table.rows:
            if row.encoding != encoding:
                continue
            cells = [
                f'<td class="text"><a href="{escape(site.task_href(d, table.task))}">{escape(table.task)}</a></td>',
                f'<td class="text">{escape(table.preset)}</td>',
                encoding_cell(site, d, row.label, row.encoding),
                f'<td data-sort="{row.rank}">{row.rank}</td>',
                f'<td data-sort="{len(table.rows)}">{len(table.rows)}</td>',
                f'<td data-sort="{len(row.seeds)}">{len(row.seeds)}</td>',
                f'<td data-sort="{table.train_max}">{table.train_max}</td>',
            ]
            for score in bd.SCORES:
                stat = row.scores[score]
                cells.append(f'<td data-sort="{stat.sort_value()}">{stat.text(0 if score == "solved" else 2)}</td>')
            rows.append(f'<tr data-order="{len(rows)}" data-preset="{escape(table.preset)}">{"".join(cells)}</tr>')
    body.append('<div class="scroll"><table class="sortable across">')
    body.append(f"<thead><tr>{''.join(head_cells)}</tr></thead><tbody>")
    body += rows
    body.append("</tbody></table></div>")
    traced = sorted({r.data["task"] for r in site.board.records_where(pe=encoding) if r.run_id in site.diagnostics})
    if traced:
        links = ", ".join(f'<a href="{escape(site.task_href(d, t))}#prism-diagnostics">{escape(t)}</a>' for t in traced)
        body.append(f"<h2>Cursor trajectories</h2><p>Published for: {links}.</p>")
    return page(site, d, f"encoding {encoding}", body, site.board.records_where(pe=encoding))


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
) -> dict[str, str]:
    """Site path (relative, '/'-separated) -> page text, for validated ``records`` (and
    the diagnostics of some of them, by run id)."""
    board = bd.assemble(records)
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


def write_pages(out_dir: Path, pages: Mapping[str, str]) -> None:
    """Write ``pages`` under ``out_dir`` and delete generated pages no longer produced.

    Refuses a non-empty folder that is not a generated site (no marker file), so a typo
    in ``--out`` never deletes someone's files.
    """
    if out_dir.exists() and any(out_dir.iterdir()) and not (out_dir / MARKER).is_file():
        raise FileExistsError(f"{out_dir} is not empty and is not a generated leaderboard site; choose another --out")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MARKER).write_text("generated by `pezoo leaderboard build`; stale pages here are deleted\n")
    for old in sorted(out_dir.rglob("*.html")):
        if old.relative_to(out_dir).as_posix() not in pages:
            old.unlink()
    for rel, text in sorted(pages.items()):
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8", newline="\n")


def build(
    results_dir: Path,
    out_dir: Path,
    *,
    readme: Path | None = None,
    results_href: str | None = None,
    repo_href: str | None = None,
) -> dict[str, str]:
    """Read and validate the results files, then write the site (and the markdown board).

    Args:
        results_dir: folder of ``*.jsonl`` results files.
        out_dir: site folder (created; generated pages in it are replaced).
        readme: where to write the markdown board; default ``out_dir/../README.md``.
        results_href, repo_href: links from the site root to the results folder and to the
            repository root; default: the relative paths on this machine.

    Returns:
        the pages written (site path -> text).
    """
    from leaderboard.readme import render_readme

    records = read_results(results_dir)
    results_href = results_href if results_href is not None else relative_href(out_dir, results_dir)
    repo_href = repo_href if repo_href is not None else relative_href(out_dir, REPO_ROOT)
    diagnostics = read_diagnostics(results_dir, (r.run_id for r in records))
    pages = render(records, results_href=results_href, repo_href=repo_href, diagnostics=diagnostics)
    write_pages(out_dir, pages)
    readme = readme if readme is not None else out_dir.parent / "README.md"
    readme.parent.mkdir(parents=True, exist_ok=True)
    readme.write_text(
        render_readme(bd.assemble(records), site_href=relative_href(readme.parent, out_dir)),
        encoding="utf-8",
        newline="\n",
    )
    return pages
