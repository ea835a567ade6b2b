"""PRISM diagnostics travel from a run to the store, the published results and the site."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from leaderboard_fixtures import TINY, run_tiny_bench

from harness.cli import main
from harness.records.store import Store

RUNS = [("smoke", "prism", "copy", 0, TINY), ("smoke", "nope", "copy", 0, TINY)]


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    root = tmp_path_factory.mktemp("diag")
    store = root / "store.sqlite"
    prism_id, nope_id = run_tiny_bench(store, RUNS)
    result = CliRunner().invoke(main, ["leaderboard", "export", "--store", str(store), "--out", str(root / "results")])
    assert result.exit_code == 0, result.output
    assert "wrote diagnostics of 1 run(s)" in result.output
    return root, store, prism_id, nope_id


def test_a_prism_run_stores_its_cursor_trajectories(published):
    _, store, prism_id, nope_id = published
    with Store(store) as s:
        diag, none = s.diagnostics(prism_id), s.diagnostics(nope_id)
    assert none is None  # only PRISM has cursors to show
    assert diag["version"] == 1 and diag["scale"] == 8 and diag["train_max"] == 5  # smoke: the largest test scale
    n_tokens = len(diag["tokens"])
    assert diag["tokens"][0] == "<bos>" and n_tokens > diag["scale"]
    (layer,) = diag["layers"]  # smoke PRISM: one PRISM layer, 2 heads, 2 cursors
    for side in ("query", "key"):
        modes = layer[f"{side}_modes"]
        assert [len(modes), len(modes[0]), len(modes[0][0])] == [2, 2, n_tokens]
        # a cursor moves at most one offset per token from 0
        assert all(abs(m) <= t + 1 for head in modes for cursor in head for t, m in enumerate(cursor))
        conf = layer[f"{side}_confidence"]
        assert all(0.0 < c <= 1.0 for head in conf for cursor in head for c in cursor)


def test_export_publishes_diagnostics_once(published):
    root, store, prism_id, _ = published
    files = sorted((root / "results" / "diagnostics").iterdir())
    assert [f.name for f in files] == [f"{prism_id}.json"]
    with Store(store) as s:
        assert json.loads(files[0].read_text()) == s.diagnostics(prism_id)
    again = CliRunner().invoke(main, ["leaderboard", "export", "--store", str(store), "--out", str(root / "results")])
    assert again.exit_code == 0 and "diagnostics" not in again.output


def test_the_task_page_draws_the_cursors_and_the_encoding_page_links_them(published, tmp_path):
    root, *_ = published
    out = tmp_path / "site"
    result = CliRunner().invoke(main, ["leaderboard", "build", "--results", str(root / "results"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    task = (out / "tasks" / "copy.html").read_text()
    assert 'id="prism-diagnostics"' in task
    assert task.count('class="plot trajectories"') == 2  # query and key cursors of the one PRISM layer
    assert "layer 0: query cursors" in task and "h1 c1" in task
    prism_page = (out / "encodings" / "prism.html").read_text()
    assert 'href="../tasks/copy.html#prism-diagnostics"' in prism_page
    assert "prism-diagnostics" not in (out / "encodings" / "nope.html").read_text()


def test_a_malformed_diagnostics_file_fails_the_build_with_its_path(published, tmp_path):
    import shutil

    root, _, prism_id, _ = published
    results = tmp_path / "results"
    shutil.copytree(root / "results", results)
    bad = results / "diagnostics" / f"{prism_id}.json"
    bad.write_text('{"version": 1, "tokens": ["a"], "layers": [{"layer": 0, "query_modes": [[[0, 1]]]}]}')
    result = CliRunner().invoke(main, ["leaderboard", "build", "--results", str(results), "--out", str(tmp_path / "s")])
    assert result.exit_code != 0
    assert str(bad) in result.output and "query_modes must be (heads, cursors, 1)" in result.output


def test_the_site_draws_diagnostics_as_the_encodings_card_says(published, tmp_path, monkeypatch):
    """The board names no encoding's trace format: heading, caption, plots and axis come from
    the card (pezoo.PaperCard.diagnostics_plots), and a card without them shows no section."""
    import dataclasses

    import pezoo
    from pezoo.registry import CARDS

    root, *_ = published

    def one_line(diagnostics):
        layer = diagnostics[0]
        return [("toy: first head's first query cursor", [("only", layer["query_modes"][0][0])])]

    view = pezoo.TracePlots(
        heading="Toy traces", caption="One line, drawn as the card says.", plots=one_line, y_label="toy axis"
    )
    monkeypatch.setitem(CARDS, "prism", dataclasses.replace(CARDS["prism"], diagnostics_plots=view))

    def build(out):
        result = CliRunner().invoke(
            main, ["leaderboard", "build", "--results", str(root / "results"), "--out", str(out)]
        )
        assert result.exit_code == 0, result.output
        return (out / "tasks" / "copy.html").read_text(), (out / "encodings" / "prism.html").read_text()

    task, prism_page = build(tmp_path / "a")
    assert '<h3 id="prism-diagnostics">Toy traces</h3>' in task and "One line, drawn as the card says." in task
    assert task.count('class="plot trajectories"') == 1 and "toy axis" in task and "PRISM cursors" not in task
    assert "<h2>Toy traces</h2>" in prism_page
    monkeypatch.setitem(CARDS, "prism", dataclasses.replace(CARDS["prism"], diagnostics_plots=None))
    task, prism_page = build(tmp_path / "b")
    assert "-diagnostics" not in task and "Toy traces" not in prism_page
