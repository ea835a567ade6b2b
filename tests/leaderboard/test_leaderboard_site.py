"""`pezoo leaderboard build`: the site from results files alone: complete, linked, deterministic."""

from __future__ import annotations

import html
import inspect
import json
import re
import shutil
import statistics
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from click.testing import CliRunner
from leaderboard_fixtures import RUNS, make_record, write_jsonl

from harness.cli import main
from leaderboard.site import build

pytestmark = pytest.mark.slow  # built from the real tiny bench (a few seconds, once per session)

ROOT = Path(__file__).resolve().parents[2]
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
SVG_SELF_CLOSING = {"line", "circle", "rect", "polyline", "polygon", "path"}


class PageParser(HTMLParser):
    """Collects links, ids, and checks that every opened element is closed in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.ids: set[str] = set()
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        for key in ("href", "src"):
            if a.get(key) is not None:
                self.links.append(a[key])
        if a.get("id"):
            if a["id"] in self.ids:
                self.problems.append(f"duplicate id {a['id']}")
            self.ids.add(a["id"])
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
        else:
            self.stack.pop()


def parse(path: Path) -> PageParser:
    p = PageParser()
    p.feed(path.read_text(encoding="utf-8"))
    p.close()
    return p


def pages(site: Path) -> list[Path]:
    return sorted(site.rglob("*.html"))


def test_every_task_and_encoding_has_a_page(smoke_site):
    names = {p.relative_to(smoke_site).as_posix() for p in pages(smoke_site)}
    tasks = {t for _, _, t, _, _ in RUNS}
    encodings = {e for _, e, _, _, _ in RUNS}
    assert names == {"index.html"} | {f"tasks/{t}.html" for t in tasks} | {f"encodings/{e}.html" for e in encodings}
    index = (smoke_site / "index.html").read_text()
    for name in tasks | encodings:
        assert f">{name}</a>" in index


def test_pages_are_well_formed_and_every_link_resolves(smoke_site):
    parsed = {p: parse(p) for p in pages(smoke_site)}
    for path, p in parsed.items():
        assert p.problems == [] and p.stack == [], (path, p.problems, p.stack)
        for link in p.links:
            if link == "data:,":  # the empty favicon (no request)
                continue
            parts = urlsplit(link)
            assert not parts.scheme and not parts.netloc, f"{path}: external link {link}"
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            assert target.is_file(), f"{path}: {link} -> {target} does not exist"
            if parts.fragment:
                assert target.suffix == ".html" and parts.fragment in parsed[target].ids, f"{path}: {link}"


def test_pages_are_self_contained(smoke_site):
    for path in pages(smoke_site):
        text = path.read_text()
        assert set(re.findall(r"https?://[^\s\"'<>]+", text)) <= {"http://www.w3.org/2000/svg"}, path
        tags = parse(path).tags
        assert not [a for t, a in tags if t == "script" and a.get("src")], path
        assert not [a for t, a in tags if t == "link" and a.get("rel") == "stylesheet"], path


def test_same_input_same_bytes(smoke_site, tmp_path):
    """A second build of the same results (into a folder at the same depth) is byte-identical."""
    results = smoke_site.parent / "results"
    other = tmp_path / "results"
    shutil.copytree(results, other)
    build(other, tmp_path / "site")
    first = {p.relative_to(smoke_site): p.read_bytes() for p in smoke_site.rglob("*") if p.is_file()}
    second = {p.relative_to(tmp_path / "site"): p.read_bytes() for p in (tmp_path / "site").rglob("*") if p.is_file()}
    assert first == second
    assert (smoke_site.parent / "README.md").read_bytes() == (tmp_path / "README.md").read_bytes()
    build(other, tmp_path / "site")  # and rebuilding in place changes nothing
    third = {p.relative_to(tmp_path / "site"): p.read_bytes() for p in (tmp_path / "site").rglob("*") if p.is_file()}
    assert third == second


def _published(smoke_site: Path) -> list[dict]:
    return [json.loads(line) for p in sorted((smoke_site.parent / "results").glob("*.jsonl")) for line in p.open()]


def test_numbers_on_the_page_are_the_published_ones(smoke_site):
    """rope on copy (preset smoke): the per-token accuracy beyond training, computed here from the JSON."""
    recs = [r for r in _published(smoke_site) if (r["pe"], r["task"], r["preset"]) == ("rope", "copy", "smoke")]
    per_seed = [statistics.mean(m["token_accuracy"] for m in r["metrics"] if m["split"] == "test") for r in recs]
    mean = statistics.mean(per_seed)
    half = 12.71 * statistics.stdev(per_seed) / len(per_seed) ** 0.5  # t(0.975, 1 dof) = 12.71, two seeds
    expected = f"{mean:.2f}" + (f" ± {half:.2f}" if half else "")
    page = (smoke_site / "tasks" / "copy.html").read_text()
    ranking = page.split('data-preset-table="smoke"')[1].split("</table>")[0]
    row = next(r for r in ranking.split("<tr") if ">rope</a>" in r)
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", row)
    assert cells[4] == expected  # rank, seeds, solved<=, EM>N, tok>N
    assert f'data-sort="{mean:.6f}"' in row


def test_task_page_has_curves_table_format_and_label(smoke_site):
    page = (smoke_site / "tasks" / "copy.html").read_text()
    for preset in ("smoke", "smoke-2step"):
        section = page.split(f'<section data-preset="{preset}">')[1].split("</section>")[0]
        assert section.count('<svg class="plot"') == 2  # exact match and per-token accuracy
        n_encodings = len({e for p, e, t, _, _ in RUNS if (p, t) == (preset, "copy")})
        first_plot = section.split("</svg>")[0]
        assert first_plot.count('<g class="series"') == n_encodings
        assert 'class="train-boundary"' in first_plot and "trained on n ≤ 5" in first_plot
        per_length = section.split('data-metric="exact_match"')[1].split("</table>")[0]
        assert re.findall(r'<tr data-order="\d+"><td data-sort="(\d+)"', per_length) == [str(n) for n in range(1, 9)]
    assert "pe_solvable_with_scale_hint" in page  # the task's PE-solvability label
    assert "x₁…xₙ = x₁…xₙ ." in page  # its format
    assert re.search(r"example \(n = \d+\)</dt><dd><code>\d+=\d+\.</code>", page)


def test_provenance_on_every_page(smoke_site):
    recs = _published(smoke_site)
    commit = recs[0]["provenance"]["commit"][:12]
    device = recs[0]["provenance"]["device"]
    for path in pages(smoke_site):
        text = path.read_text()
        assert "smoke-preset board.</strong>" in text and "not comparable with the papers" in text, path
        assert commit in text and device in text and "training steps" in text, path
        assert '<section id="provenance">' in text, path
    readme = (smoke_site.parent / "README.md").read_text()
    assert "CPU smoke-preset board" in readme and "| rank | encoding" in readme.replace("   ", " ").replace("  ", " ")


def test_encoding_page_quotes_the_registry(smoke_site):
    page = (smoke_site / "encodings" / "rope.html").read_text()
    assert "Su et al. 2021" in page  # from RoPE's docstring
    assert "<code>base</code>" in page and "<code>10000.0</code>" in page  # an option and its default
    assert page.count('<a href="../tasks/copy.html">copy</a>') == 1  # one row per (task, preset) it ran


def test_a_malformed_results_file_fails_the_build_with_path_and_reason(smoke_site, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(smoke_site.parent / "results", results)
    victim = sorted(results.glob("*.jsonl"))[-1]
    victim.write_text(victim.read_text() + '{"schema_version": 1, "pe": "rope"}\n')
    result = CliRunner().invoke(main, ["leaderboard", "build", "--results", str(results), "--out", str(tmp_path / "s")])
    assert result.exit_code == 1
    line = len(victim.read_text().splitlines())
    assert f"{victim}:{line}: record: missing key(s) checksum, config" in result.output
    assert not (tmp_path / "s").exists()
    check = CliRunner().invoke(main, ["leaderboard", "check", "--results", str(results)])
    assert check.exit_code == 1 and f"{victim}:{line}:" in check.output


def test_check_command_on_valid_results(smoke_site):
    result = CliRunner().invoke(main, ["leaderboard", "check", "--results", str(smoke_site.parent / "results")])
    assert result.exit_code == 0 and f"{len(RUNS)} run(s): valid" in result.output


def test_rebuild_deletes_stale_pages_but_never_foreign_folders(smoke_site, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(smoke_site.parent / "results", results)
    build(results, tmp_path / "site")
    assert (tmp_path / "site" / "tasks" / "reverse.html").is_file()
    for p in results.glob("smoke-2*"):  # keep only the smoke-2step file: no reverse runs left
        p.unlink()
    build(results, tmp_path / "site")
    assert not (tmp_path / "site" / "tasks" / "reverse.html").exists()
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.html").write_text("keep me")
    result = CliRunner().invoke(main, ["leaderboard", "build", "--results", str(results), "--out", str(foreign)])
    assert result.exit_code == 1 and "is not a generated leaderboard site" in result.output
    assert (foreign / "notes.html").read_text() == "keep me"


def test_empty_results_give_an_empty_board(tmp_path):
    build(tmp_path / "none", tmp_path / "site")
    assert "No results yet" in (tmp_path / "site" / "index.html").read_text()
    assert "No results yet" in (tmp_path / "README.md").read_text()


def test_committed_board_is_regenerated_identically(tmp_path):
    """leaderboard/site and leaderboard/README.md are generated: rebuilding them changes nothing."""
    results, site = ROOT / "leaderboard" / "results", ROOT / "leaderboard" / "site"
    if not any(results.glob("*.jsonl")) or not (site / "index.html").is_file():
        pytest.skip("no committed board yet (leaderboard/results and leaderboard/site)")
    build(results, tmp_path / "site", readme=tmp_path / "README.md", results_href="../results", repo_href="../..")
    built = {p.relative_to(tmp_path / "site"): p.read_bytes() for p in (tmp_path / "site").rglob("*.html")}
    committed = {p.relative_to(site): p.read_bytes() for p in site.rglob("*.html")}
    assert built.keys() == committed.keys()
    stale = sorted(str(k) for k in built if built[k] != committed[k])
    assert not stale, f"rebuild with `pezoo leaderboard build`: {stale}"
    assert (tmp_path / "README.md").read_bytes() == (ROOT / "leaderboard" / "README.md").read_bytes()


def test_every_registered_encoding_gets_a_page_and_unknown_names_still_render(tmp_path):
    """Hand-made records for every encoding in the registry, plus a plugin that is not installed."""
    import pezoo

    em = {1: 1.0, 2: 1.0, 3: 0.5, 4: 0.0}
    names = [*pezoo.available(), "plugin_pe"]
    records = [make_record(pe, "copy", 0, em, train_max=2) for pe in names]
    records.append(make_record("rope", "plugin_task", 0, em, train_max=2))
    write_jsonl(tmp_path / "results" / "all.jsonl", records)
    build(tmp_path / "results", tmp_path / "site")
    for pe in names:
        page = (tmp_path / "site" / "encodings" / f"{pe.replace(':', '-')}.html").read_text()
        assert f"Encoding <code>{pe}</code>" in page and " at 0x" not in page
        if pe == "plugin_pe":
            assert "not installed in the pezoo that built the site" in page
        else:
            doc = inspect.getdoc(pezoo.get(pe.split(":")[-1])).split("\n")[0]
            assert _plain(doc) in _plain(page), pe
    task_page = (tmp_path / "site" / "tasks" / "plugin_task.html").read_text()
    assert "This task is not installed" in task_page
    index = (tmp_path / "site" / "index.html").read_text()
    copy_section = index.split('<section id="task-copy">')[1].split("</section>")[0]
    assert copy_section.count('<g class="series"') == len(names)  # every encoding on the copy plot


def test_a_board_scoring_the_final_answer_says_so(tmp_path):
    em = {1: 1.0, 2: 1.0, 3: 0.5}
    record = make_record(
        "rope", "addition_turing", 0, em, train_max=2, eval_options={"match": "answer"}, train_options={"train_min": 2}
    )
    write_jsonl(tmp_path / "results" / "all.jsonl", [record])
    build(tmp_path / "results", tmp_path / "site", readme=tmp_path / "README.md")
    page = (tmp_path / "site" / "tasks" / "addition_turing.html").read_text()
    assert "exact match of the final answer" in page and "exact match scores the final answer only" in page
    readme = (tmp_path / "README.md").read_text()
    assert "trained on scales 2..2" in page and "trained on scales 2..2" in readme and "final answer only" in readme
    assert "EOS incl." not in page.split("<svg")[1]  # the plot is titled by what it scores


def test_index_at_a_glance_gives_each_encoding_its_rank_on_every_task(smoke_site):
    index = (smoke_site / "index.html").read_text()
    assert "<h2>At a glance</h2>" in index
    for preset in ("smoke", "smoke-2step"):
        start = f'<table class="sortable overview" data-preset-table="{preset}">'
        overview = index.split(start)[1].split("</table>")[0]
        tasks = sorted({t for p, _, t, _, _ in RUNS if p == preset})
        assert re.findall(r'<a href="#task-([^"]+)">', overview.split("</thead>")[0]) == tasks
        for task in tasks:  # the rank in the overview is the rank on the task's own table
            ranking = index.split(f'data-task="{task}" data-preset-table="{preset}">')[1].split("</table>")[0]
            found = re.findall(r'<td data-sort="(\d+)">\d+</td><td class="text"[^>]*>.*?>([^<]+)</a>', ranking)
            rank_of = {name: rank for rank, name in found}
            column = tasks.index(task)
            for row in overview.split("<tr")[2:]:
                label = re.search(r">([^<]+)</a></td>", row).group(1)
                cell = re.findall(r'<td data-sort="([^"]*)">', row)[3 + column]
                assert cell == rank_of.get(label, ""), (preset, task, label)
            assert found  # the ranking table was read


def test_docstring_literals_become_code_and_stay_escaped():
    from leaderboard.site import _prose

    assert _prose("``a < b`` then ``→``, the sum") == "<code>a &lt; b</code> then <code>→</code>, the sum"
    assert _prose("no literals & more") == "no literals &amp; more"
    assert _prose("see :class:`PRISMConfig` and :func:`~pezoo.alibi_slopes`") == (
        "see <code>PRISMConfig</code> and <code>pezoo.alibi_slopes</code>"
    )


def test_docstrings_render_as_paragraphs_formulas_and_argument_lists():
    from leaderboard.site import _doc_html

    doc = """Summary line with ``x < y``.

    Second paragraph, wrapped
    over two lines:

        s = q·k / √e

    Args:
        n_heads: heads H.
        n_masked (int): windowed heads M. Default ``min(6, H - 1)``,
            continued here.
        base: 10000.
    """
    import inspect

    assert _doc_html(inspect.cleandoc(doc)) == (
        "<p>Summary line with <code>x &lt; y</code>.</p>"
        "<p>Second paragraph, wrapped over two lines:</p>"
        '<pre class="formula">s = q·k / √e</pre>'
        '<h3 class="doc">Args</h3><dl class="doc">'
        "<dt><code>n_heads</code></dt><dd>heads H.</dd>"
        "<dt><code>n_masked (int)</code></dt>"
        "<dd>windowed heads M. Default <code>min(6, H - 1)</code>, continued here.</dd>"
        "<dt><code>base</code></dt><dd>10000.</dd></dl>"
    )


def _plain(text: str) -> str:
    """Text as a reader sees it: tags and reST markup (``literals``, :role:`refs`, the colons
    of sections and argument lists) removed, entities decoded, whitespace collapsed."""
    text = html.unescape(re.sub(r"<[^>]+>", " ", text))
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text).replace("``", " ")
    return " ".join(text.replace(":", " ").split())


def test_encoding_pages_keep_every_word_of_the_docstring(smoke_site):
    """The docstring is restructured, never cut: its words are on the page, in order."""
    from leaderboard.site import encoding_info

    for page in sorted((smoke_site / "encodings").glob("*.html")):
        info = encoding_info(page.stem)
        if info is None:
            continue
        text = _plain(page.read_text())
        for doc in (info.doc, info.wrapper_doc):
            for paragraph in filter(None, (_plain(p) for p in re.split(r"\n\s*\n", doc))):
                assert paragraph in text, (page.name, paragraph)
