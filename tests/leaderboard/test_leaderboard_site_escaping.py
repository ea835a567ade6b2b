"""No script from a results or diagnostics file: hostile strings reach the site and the
README only as text (the pages are parsed: no injected element, attribute or URL)."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner
from hostile_inputs import (
    PAYLOADS,
    all_payloads_in,
    hostile_board,
    hostile_diagnostics,
    hostile_record,
    injected,
    page_text,
)
from leaderboard_fixtures import write_jsonl

from harness.cli import main
from leaderboard import board as bd
from leaderboard.readme import render_readme
from leaderboard.site import render


def test_hostile_records_and_diagnostics_appear_only_as_text():
    records, diagnostics = hostile_board()
    # results_href "." puts a results file named "javascript:..." right at the site root
    pages = render(records, results_href=".", repo_href="..", diagnostics=diagnostics)
    assert {"index.html", "tasks/copy.html", "encodings/prism.html"} <= set(pages)
    for name, html in pages.items():
        assert injected(html) == [], name
    seen = "".join(page_text(html) for html in pages.values())
    assert all_payloads_in(seen) == []  # every payload is on the site, as text
    task = pages["tasks/copy.html"]
    assert 'id="prism-diagnostics"' in task and page_text(task).count(PAYLOADS[0]) >= 2  # the scale and a token


def _table_pipes(markdown: str) -> list[list[int]]:
    """Per markdown table, the number of unescaped pipes on each of its lines."""
    tables, current = [], []
    for line in [*markdown.splitlines(), ""]:
        if line.startswith("|"):
            current.append(len(re.findall(r"(?<!\\)\|", line)))
        elif current:
            tables.append(current)
            current = []
    return tables


def assert_safe_markdown(readme: str, site_href: str) -> None:
    lowered = readme.lower()
    for tag in ("<script", "<img", "<svg", "</title", "</style"):  # as text (&lt;img ...) they are harmless
        assert tag not in lowered, tag
    tables = _table_pipes(readme)
    assert tables and all(len(set(counts)) == 1 for counts in tables), tables  # no cell split by a '|'
    targets = re.findall(r"(?<!\\)\]\(([^)]*)\)", readme)
    assert targets and all(t.startswith(f"{site_href}/") for t in targets), targets  # only the README's own links
    assert "&lt;img src=x onerror=" in readme  # escaped, not dropped


def test_readme_escapes_markup_and_pipes_in_record_fields():
    records, _ = hostile_board()
    assert_safe_markdown(render_readme(bd.assemble(records), site_href="site"), "site")


def test_a_hostile_results_file_builds_to_an_escaped_site_and_readme(tmp_path):
    """Through the CLI: fields the schema accepts as free text (preset, provenance, tokens,
    the file's name) carry the payloads; `check` accepts them, `build` writes them as text."""
    records = [hostile_record(0, pe="rope"), hostile_record(1, pe="nope"), hostile_record(2, pe="prism")]
    results = tmp_path / "board" / "results"
    records = [{**r, "preset": records[0]["preset"], "config": {**r["config"], "preset": records[0]["preset"]}}
               for r in records]  # fmt: skip
    from hostile_inputs import _reseal

    records = [_reseal(r) for r in records]
    write_jsonl(results / "javascript:window.__pwned=5;<img src=x onerror=alert(1)>.jsonl", records)
    diag = results / "diagnostics" / f"{records[2]['run_id']}.json"
    diag.parent.mkdir()
    diag.write_text(json.dumps(hostile_diagnostics()))
    check = CliRunner().invoke(main, ["leaderboard", "check", "--results", str(results)])
    assert check.exit_code == 0, check.output
    site = tmp_path / "board" / "site"
    result = CliRunner().invoke(main, ["leaderboard", "build", "--results", str(results), "--out", str(site)])
    assert result.exit_code == 0, result.output
    pages = sorted(site.rglob("*.html"))
    assert len(pages) == 1 + 1 + 3  # index, copy, three encodings
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert injected(html) == [], page
    task = page_text((site / "tasks" / "copy.html").read_text(encoding="utf-8"))
    assert all_payloads_in(task, [PAYLOADS[0], PAYLOADS[1], PAYLOADS[3], "javascript:window.__pwned=5;"]) == []
    assert_safe_markdown((tmp_path / "board" / "README.md").read_text(encoding="utf-8"), "site")


def test_a_diagnostics_value_that_is_not_a_number_fails_the_build_with_its_file(tmp_path):
    """A cursor position that is a string (here markup) is refused with the file's name,
    before anything is written; it is never drawn, and never a TypeError traceback."""
    record = hostile_record(0, pe="prism")
    results = tmp_path / "results"
    write_jsonl(results / "prism.jsonl", [record])
    body = hostile_diagnostics()
    body["layers"][0]["query_modes"][0][0][3] = PAYLOADS[0]
    diag = results / "diagnostics" / f"{record['run_id']}.json"
    diag.parent.mkdir()
    diag.write_text(json.dumps(body))
    result = CliRunner().invoke(main, ["leaderboard", "build", "--results", str(results), "--out", str(tmp_path / "s")])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert f"{record['run_id']}.json" in result.output
    assert not (tmp_path / "s").exists() and not (tmp_path / "README.md").exists()
