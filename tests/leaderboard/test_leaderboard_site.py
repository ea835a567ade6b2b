"""`pezoo leaderboard build`: the site from results files alone: complete, linked, deterministic."""

from __future__ import annotations

import html
import inspect
import json
import re
import shutil
import statistics
from fractions import Fraction
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from click.testing import CliRunner
from html_structure import parse_html
from leaderboard_fixtures import RUNS, make_record, write_jsonl

from harness.cli import main
from harness.records.counts import fixed
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
    linked = {a.text for a in parse_html((smoke_site / "index.html").read_text()).find_all("a")}
    assert tasks | encodings <= linked


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
    per_seed = [
        statistics.mean(Fraction(m["tokens_right"], m["tokens"]) for m in r["metrics"] if m["split"] == "test")
        for r in recs
    ]
    mean, lo, hi = statistics.mean(per_seed), min(per_seed), max(per_seed)
    two = [fixed(v, 2) for v in (mean, lo, hi)]  # rounded half up on the exact value
    expected = two[0] + (f" ({two[1]}–{two[2]})" if two[1] != two[2] else "")  # mean (min–max)
    page = parse_html((smoke_site / "tasks" / "copy.html").read_text())
    ranking = page.find("table", cls="ranking", data_preset_table="smoke")
    row = next(tr for tr in ranking.body_rows() if tr.find("a").text == "rope")
    cells = row.cells()  # rank, encoding, EM<=N, EM>N, reach, tok>N, tok<=N, seeds
    assert cells[5] == expected
    assert row.find_all("td")[5].attrs["data-sort"] == fixed(mean, 6)
    assert cells[-1] == f"{sum(fits(r) for r in recs)}/{len(recs)} fit"


def fits(record: dict) -> bool:
    """The fit rule, written out: mean exact match over the training scales at least 0.95."""
    train = [Fraction(m["exact"], m["n"]) for m in record["metrics"] if m["split"] == "train"]
    return statistics.mean(train) >= Fraction(95, 100)


def test_task_page_has_curves_table_format_and_label(smoke_site):
    text = (smoke_site / "tasks" / "copy.html").read_text()
    page = parse_html(text)
    for preset in ("smoke", "smoke-2step"):
        section = page.find("section", data_preset=preset)
        plots = [svg for svg in section.find_all("svg", cls="plot") if "panel" not in svg.classes]
        assert len(plots) == 2  # exact match and per-token accuracy
        n_encodings = len({e for p, e, t, _, _ in RUNS if (p, t) == (preset, "copy")})
        assert len(section.find_all("svg", cls="panel")) == n_encodings  # one small multiple each
        assert len(plots[0].find_all("g", cls="series")) == n_encodings
        plots[0].find("line", cls="train-boundary")
        assert re.search(r"\b5\b", plots[0].find("text", cls="train-label").text)  # labelled with N = 5
        order = [tr.find("a").text for tr in section.find("table", cls="ranking").body_rows()]
        legend = [li.own_text for li in section.find("ul", cls="legend").find_all("li")]  # in the ranking's order
        assert legend == order and len(order) == n_encodings
        per_length = section.find("table", data_metric="exact_match")
        assert [tr.find("td").attrs["data-sort"] for tr in per_length.body_rows()] == [str(n) for n in range(1, 9)]
    assert "pe_solvable_with_scale_hint" in text  # the task's PE-solvability label
    assert "x₁…xₙ = x₁…xₙ ." in text  # its format
    terms = page.find("dl").find_all("dt")
    example = next(dt for dt in terms if dt.text.startswith("example"))
    assert re.fullmatch(r"example \(n = \d+\)", example.text)
    assert re.fullmatch(r"\d+=\d+\.", page.find("dl").find_all("dd")[terms.index(example)].text)


def test_provenance_on_every_page(smoke_site):
    recs = _published(smoke_site)
    commit = recs[0]["provenance"]["commit"][:12]
    device = recs[0]["provenance"]["device"]
    cpu = html.escape(recs[0]["provenance"]["cpu"])  # the device string names no CPU model
    for path in pages(smoke_site):
        page = parse_html(path.read_text())
        [banner] = [p for p in page.find_all("p", cls="warning", data_preset="smoke")]  # not a paper-scale board
        assert "smoke" in banner.find("strong").text and commit in banner.text and device in banner.text, path
        table = page.find("section", id="provenance").find("table")
        facts = {row[0]: row[1] for row in table.rows() if len(row) == 2}
        assert facts["CPU"] == html.unescape(cpu) and commit in facts["commit"] and facts["device"] == device, path
    readme = (smoke_site.parent / "README.md").read_text()
    assert "CPU smoke-preset board" in readme and "| rank | encoding" in readme.replace("   ", " ").replace("  ", " ")


def test_encoding_page_quotes_the_registry(smoke_site):
    text = (smoke_site / "encodings" / "rope.html").read_text()
    assert "Su et al. 2021" in text  # from RoPE's docstring
    page = parse_html(text)
    options = dict(row for row in page.find("table", cls="options").rows()[1:])
    assert options["base"] == "10000.0"  # an option and its default
    across = page.find("table", cls="across")
    runs = [(tr.find("a").text, tr.cells()[1]) for tr in across.body_rows()]  # the task's link, the preset
    assert sorted(runs) == sorted({(t, p) for p, e, t, _, _ in RUNS if e == "rope"})  # one row per (task, preset)
    assert all(tr.find("a").attrs["href"] == f"../tasks/{tr.find('a').text}.html" for tr in across.body_rows())
    nope = parse_html((smoke_site / "encodings" / "nope.html").read_text())
    tables = {(p, t) for p, e, t, _, _ in RUNS if e == "nope"}
    assert len(nope.find_all("svg", cls="panel")) == len(tables)  # a small multiple per table it is on


def test_a_malformed_results_file_fails_the_build_with_path_and_reason(smoke_site, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(smoke_site.parent / "results", results)
    victim = sorted(results.glob("*.jsonl"))[-1]
    victim.write_text(victim.read_text() + '{"schema_version": 2, "pe": "rope"}\n')
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
    for p in results.glob("*.jsonl"):  # keep only the smoke-2step file: no reverse runs left
        if not p.name.startswith("smoke-2step-"):
            p.unlink()
    build(results, tmp_path / "site")
    assert not (tmp_path / "site" / "tasks" / "reverse.html").exists()
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.html").write_text("keep me")
    result = CliRunner().invoke(main, ["leaderboard", "build", "--results", str(results), "--out", str(foreign)])
    assert result.exit_code == 1 and "is not a generated leaderboard site" in result.output
    assert (foreign / "notes.html").read_text() == "keep me"


def test_no_records_render_an_empty_board(tmp_path):
    """The renderer copes with no records; `build` refuses a results folder without any
    (test_leaderboard_site_writes.py), so a typo in --results never publishes this."""
    from leaderboard.board import assemble
    from leaderboard.readme import render_readme
    from leaderboard.site import render

    assert "No results yet" in render([], results_href="../results", repo_href="../..")["index.html"]
    assert "No results yet" in render_readme(assemble([]), site_href="site")


def test_committed_board_is_regenerated_identically(tmp_path):
    """leaderboard/site and leaderboard/README.md are generated: rebuilding them changes nothing."""
    results, site = ROOT / "leaderboard" / "results", ROOT / "leaderboard" / "site"
    if not any(results.glob("*.jsonl")) or not (site / "index.html").is_file():
        pytest.skip("no committed board yet (leaderboard/results and leaderboard/site)")
    build(results, tmp_path / "site", readme=tmp_path / "README.md", results_href="../results", repo_href="../..")
    built = {p.relative_to(tmp_path / "site"): p.read_bytes() for p in (tmp_path / "site").rglob("*") if p.is_file()}
    committed = {p.relative_to(site): p.read_bytes() for p in site.rglob("*") if p.is_file()}
    assert built.keys() == committed.keys()
    stale = sorted(str(k) for k in built if built[k] != committed[k])
    assert not stale, f"rebuild with `pezoo leaderboard build`: {stale}"
    assert (tmp_path / "README.md").read_bytes() == (ROOT / "leaderboard" / "README.md").read_bytes()


def test_every_registered_encoding_gets_a_page_and_unknown_names_still_render(tmp_path):
    """Hand-made records for every encoding in the registry, plus a plugin that is not installed."""
    import pezoo

    em = {1: 1.0, 2: 1.0, 3: 0.5, 4: 0.0}
    # randomized:ape is what bare `randomized` is (shown under one label, so one of them).
    names = [*(n for n in pezoo.available() if n != "randomized:ape"), "plugin_pe"]
    records = [make_record(pe, "copy", 0, em, train_max=2) for pe in names]
    records.append(make_record("rope", "plugin_task", 0, em, train_max=2))
    write_jsonl(tmp_path / "results" / "all.jsonl", records)
    build(tmp_path / "results", tmp_path / "site")
    for pe in names:
        page = (tmp_path / "site" / "encodings" / f"{pe.replace(':', '-')}.html").read_text()
        assert parse_html(page).find("h1").find("code").text == pe and " at 0x" not in page
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
    em = {2: 1.0, 3: 0.5}  # train_min 2: the run evaluates scales 2 and 3 only
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


def test_index_at_a_glance_shows_each_tasks_ranking_measure(smoke_site):
    index = parse_html((smoke_site / "index.html").read_text())
    assert "At a glance" in [h.text for h in index.find_all("h2")]
    for preset in ("smoke", "smoke-2step"):
        grid = index.find("table", cls="heatmap", data_preset_table=preset)
        tasks = sorted({t for p, _, t, _, _ in RUNS if p == preset})
        head = grid.find("thead")
        assert not head.find_all("a")  # headers sort; the task list below the grid links to each task
        headers = [th.text for th in head.find_all("th")]
        assert [h for h in headers if h in tasks] == tasks  # one column per task, in order
        for task in tasks:  # the cell carries the task table's EM>N where ranked, "did not fit" where not
            ranking = index.find("table", cls="ranking", data_task=task, data_preset_table=preset)
            shown = {}
            for tr in ranking.body_rows():
                cells = tr.cells()
                fit = cells[-1].replace(" fit", "")  # the seeds column: "0/2 fit"
                shown[tr.find("a").text] = f"did not fit ({fit})" if cells[0] == "—" else "EM>N " + cells[3]
            column = tasks.index(task)
            for tr in grid.body_rows():
                cell = tr.find_all("td", cls="heat")[column]
                em = [sub.text for sub in cell.find_all("span", cls="sub") if sub.text.startswith("EM>N")]
                assert (em[0] if em else cell.text) == shown.get(tr.find("a").text, ""), (preset, task)
            assert shown  # the ranking table was read


def test_site_and_terminal_rank_alike(smoke_site):
    """The order and ranks of every task table on the site are those of `pezoo bench`'s table."""
    from harness.commands.report import leaderboard_tables
    from leaderboard.records import frame
    from leaderboard.schema import read_results

    records = read_results(smoke_site.parent / "results")
    df = frame(records)
    for preset, g in df.groupby("preset"):
        terminal = leaderboard_tables(g)
        page = (smoke_site / "index.html").read_text()
        for task, text in terminal.items():
            lines = text.splitlines()[3:]
            expected = [(line.split("|")[1].strip(), line.split("|")[2].strip()) for line in lines]
            ranking = page.split(f'data-task="{task}" data-preset-table="{preset}">')[1].split("</table>")[0]
            shown = [
                (re.findall(r"<td[^>]*>([^<]*)</td>", tr)[0].replace("—", "-"), re.search(r">([^<]+)</a>", tr).group(1))
                for tr in ranking.split("<tr")[2:]
            ]
            assert shown == expected, (preset, task)


def test_no_interval_leaves_the_metrics_range(smoke_site):
    for path in [*pages(smoke_site), smoke_site.parent / "README.md"]:
        text = path.read_text()
        assert "±" not in text, path
        for lo, hi in re.findall(r"\((-?\d+\.\d+)–(-?\d+\.\d+)\)", text):
            assert 0 <= float(lo) <= float(hi) <= 1, (path, lo, hi)


def test_docstring_literals_become_code_and_stay_escaped():
    from leaderboard.pages import prose as _prose

    assert _prose("``a < b`` then ``→``, the sum") == "<code>a &lt; b</code> then <code>→</code>, the sum"
    assert _prose("no literals & more") == "no literals &amp; more"
    assert _prose("see :class:`PRISMConfig` and :func:`~pezoo.alibi_slopes`") == (
        "see <code>PRISMConfig</code> and <code>pezoo.alibi_slopes</code>"
    )


def test_docstrings_render_as_paragraphs_formulas_and_argument_lists():
    from leaderboard.pages import doc_html as _doc_html

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
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r" \1 ", text).replace("``", " ")  # the page sets it as <code>
    return " ".join(text.replace(":", " ").split())


def test_encoding_pages_keep_every_word_of_the_docstring(smoke_site):
    """The docstring is restructured, never cut: its words are on the page, in order."""
    from leaderboard.descriptions import encoding_info

    for page in sorted((smoke_site / "encodings").glob("*.html")):
        info = encoding_info(page.stem)
        if info is None:
            continue
        text = _plain(page.read_text())
        for doc in (info.doc, info.wrapper_doc):
            for paragraph in filter(None, (_plain(p) for p in re.split(r"\n\s*\n", doc))):
                assert paragraph in text, (page.name, paragraph)


def test_fitted_encodings_are_ranked_and_the_others_marked_on_site_and_readme(tmp_path):
    """Hand-made numbers: on copy, alibi and rope fit (alibi holds beyond N), nope slips
    in distribution (EM<=2 0.9) however well it extrapolates; hard_alibi only ran reverse."""
    fit_hold, fit_drop = {1: 1.0, 2: 1.0, 3: 0.9, 4: 0.6}, {1: 1.0, 2: 1.0, 3: 0.2, 4: 0.0}
    slip = {1: 0.8, 2: 1.0, 3: 1.0, 4: 1.0}
    records = [
        make_record("rope", "copy", 0, fit_drop, train_max=2),
        make_record("rope", "copy", 1, fit_drop, train_max=2),
        make_record("alibi", "copy", 0, fit_hold, train_max=2),
        make_record("nope", "copy", 0, slip, train_max=2),
        make_record("rope", "reverse", 0, fit_hold, train_max=2),
        make_record("hard_alibi", "reverse", 0, slip, train_max=2),
    ]
    write_jsonl(tmp_path / "results" / "all.jsonl", records)
    build(tmp_path / "results", tmp_path / "site", readme=tmp_path / "README.md")
    page = (tmp_path / "site" / "tasks" / "copy.html").read_text()
    rows = parse_html(page).find("table", cls="ranking").body_rows()
    assert [tr.find("a").text for tr in rows] == ["alibi", "rope", "nope"]
    # rope's 2 seeds against alibi's 1: too few for the permutation test to separate them (≈)
    assert [tr.cells()[0] for tr in rows] == ["1", "≈2", "—"]
    assert "unfit" in rows[2].classes and [b.text for b in rows[2].find_all("span", cls="badge")] == ["did not fit"]
    assert rows[2].cells()[2] == "0.90"  # its in-distribution number is shown
    assert [tr.cells()[-1] for tr in rows] == ["1/1 fit", "2/2 fit", "0/1 fit"]
    index = (tmp_path / "site" / "index.html").read_text()
    grid = parse_html(index).find("table", cls="heatmap")
    cells = {
        tr.find("a").text: [
            (next(iter(td.classes - {"heat"})), " ".join(td.parts())) for td in tr.find_all("td", cls="heat")
        ]
        for tr in grid.body_rows()
    }
    # reach as a multiple of N = 2 on its weakest seed ("—": below 0.9 at 3), and EM>N: alibi holds to 3 and
    # reads 0.75 on copy; rope 0.10 on copy and 0.75 on reverse
    assert cells == {
        "alibi": [("value", "1.5× EM>N 0.75"), ("none", "")],
        "rope": [("value", "— EM>N 0.10"), ("value", "1.5× EM>N 0.75")],
        "nope": [("unfit", "did not fit (0/1)"), ("none", "")],  # with how many of its seeds fit
        "hard_alibi": [("none", ""), ("unfit", "did not fit (0/1)")],
    }
    assert list(cells) == ["rope", "alibi", "hard_alibi", "nope"]  # means (0.10 + 0.75) / 2, 0.75 / 2, 0, 0
    assert "Each run trains a " in index.split("<h2>At a glance</h2>")[0]  # the sentence on top
    readme = (tmp_path / "README.md").read_text()
    head = readme.split("## At a glance")[0]
    assert "Each run trains a " in head and "the papers train" in head
    glance = readme.split("## At a glance")[1].split("## Ranking")[0]
    assert "| rope " in glance and "*did not fit (0/1)*" in glance and "EM&gt;N 0.75" in glance
    copy = readme.split("## copy")[1].split("## ")[0]
    ranking = copy[copy.rindex("\n", 0, copy.index("EM≤2")) :]  # the ranking table, after the answer's
    lines = [line for line in ranking.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [line.split("|")[1].strip() for line in lines] == ["1", "≈2", "—"]
    assert "nope · *did not fit*" in lines[2] and lines[2].rstrip(" |").endswith("0/1 fit")
    assert "±" not in readme and "±" not in index and "±" not in page


def test_docstring_markup_is_escaped_by_the_template_in_every_part():
    """A plugin's docstring is outside text: its argument names, literals, references and
    formulas reach the page only through _doc.j2's autoescape (nothing in Python builds HTML)."""
    from leaderboard.pages import doc_html as _doc_html
    from leaderboard.text import doc_blocks, inline

    assert inline("a ``<b>`` and :func:`~x.<i>` & c") == [(False, "a "), (True, "<b>"), (False, " and "),
                                                       (True, "x.<i>"), (False, " & c")]  # fmt: skip
    doc = "Lead <p>.\n\n    <script>s()</script>\n\nArgs:\n    n (<img src=x>): ``<u>``\n        more <em>."
    assert [b.kind for b in doc_blocks(doc)] == ["p", "pre", "section"]
    html = _doc_html(doc)
    assert "<script>" not in html and "<img" not in html and "<u>" not in html and "<em>" not in html
    assert "<p>Lead &lt;p&gt;.</p>" in html and "&lt;script&gt;s()&lt;/script&gt;</pre>" in html
    assert "<dt><code>n (&lt;img src=x&gt;)</code></dt><dd><code>&lt;u&gt;</code> more &lt;em&gt;.</dd>" in html
