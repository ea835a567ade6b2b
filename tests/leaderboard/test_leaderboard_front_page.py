"""The front of every page stays short on a narrow screen: the banners count a board's
commits rather than list them, and the notes on departures, extra inputs and retired tables
fold under a summary that still names every row they concern."""

from __future__ import annotations

import re
from pathlib import Path

from html_structure import parse_html
from leaderboard_fixtures import make_record, sha256_of_canonical, write_jsonl

from leaderboard.site import build

EM = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.5, 5: 0.25, 6: 0.0}


def _with_commit(record: dict, commit: str) -> dict:
    record = {**record, "provenance": {**record["provenance"], "commit": commit}}
    record["checksum"] = sha256_of_canonical(record)
    return record


def _site(tmp_path: Path, records: list[dict]) -> Path:
    results = tmp_path / "results"
    write_jsonl(results / "smoke-20261124-000000000000.jsonl", records)
    build(results, tmp_path / "site")
    return tmp_path / "site"


def _banner(page: str) -> str:
    return re.search(r'<p class="warning" data-preset="smoke">(.*?)</p>', page).group(1)


def test_a_banner_names_a_few_commits_and_counts_many(tmp_path):
    commits = [f"{i:x}" * 40 for i in range(1, 6)]
    encodings = ["nope", "ape", "rope", "alibi", "t5"]
    many = [_with_commit(make_record(pe, "copy", 0, EM), c) for pe, c in zip(encodings, commits, strict=True)]
    site = _site(tmp_path / "many", many)
    for page in [site / "index.html", site / "tasks" / "copy.html"]:
        text = page.read_text()
        banner = _banner(text)
        assert "5 commits (listed under Provenance)" in banner, banner
        assert not any(c[:12] in banner for c in commits)
        provenance = text.split('<section id="provenance">', 1)[1]
        assert all(c[:12] in provenance for c in commits)  # the full list is still on the page
    # an encoding's page tells of its own runs: rope's one commit, named
    assert "commit " + commits[2][:12] + "." in _banner((site / "encodings" / "rope.html").read_text())

    few = _site(tmp_path / "few", many[:3])
    banner = _banner((few / "index.html").read_text())
    assert "commit " + ", ".join(c[:12] for c in sorted(commits[:3])) in banner, banner
    assert "commits (listed" not in banner


def test_the_notes_fold_under_a_summary_that_names_their_rows(tmp_path):
    records = [make_record(pe, "copy", 0, EM) for pe in ["nope", "xpos", "learned_prf_sh"]]
    site = _site(tmp_path, records)
    for page in [site / "index.html", site / "tasks" / "copy.html"]:
        text = page.read_text()
        notes = {d.attrs["id"]: d for d in parse_html(text).find_all("details", cls="note-list") if "id" in d.attrs}
        assert set(notes) == {"departures", "extra-inputs"}, notes
        # each summary names its rows after its heading; learned_prf_sh's network is pezoo's own design: declared too
        named = {k: d.find("summary").own_text.split(", ") for k, d in notes.items()}
        assert named == {"departures": ["learned_prf_sh", "xpos"], "extra-inputs": ["learned_prf_sh"]}
        assert all(d.find("summary").find("strong").text for d in notes.values())
        # what each says is inside the fold, not lost
        body = notes["departures"].text
        assert "blockwise" in body and "xPos" in body
        assert not [d for d in notes.values() if "open" in d.attrs]  # folded: the ranking comes first on a phone


def _departures(site: Path) -> str:
    return (site / "index.html").read_text().split('id="departures">', 1)[1].split("</details>", 1)[0]


def test_a_departure_says_which_preset_it_was_run_under(tmp_path):
    """With several presets on one board, a departure names the preset of its tasks, so a
    departure of one preset's runs does not read as one of another's; presets that share
    the same tasks are named together."""
    records = [
        make_record("xpos", "copy", 1, EM, preset="smoke"),
        make_record("xpos", "reverse", 0, EM, preset="quick"),
        make_record("xpos", "copy", 0, EM, preset="quick"),
    ]
    body = _departures(_site(tmp_path / "two", records))
    assert "; on copy, reverse (preset quick); copy (preset smoke)</li>" in body, body

    same = _departures(_site(tmp_path / "same", [records[0], records[2]]))
    assert "; on copy (presets quick, smoke)</li>" in same, same

    # one preset: none named (the banner says which)
    one = _departures(_site(tmp_path / "one", records[:1]))
    assert "; on copy</li>" in one, one
