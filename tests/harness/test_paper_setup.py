"""Encodings as their papers run them: PRISM's per-task setup (Lee 2025 §6.0.1, §6.2),
sized to the backbone, asked for with ``prism{paper}`` and applied by the prism preset."""

from __future__ import annotations

import pytest

from harness.config import preset_config
from harness.config.protocols import paper_pe_options
from harness.training.backbone import BackboneConfig
from harness.training.train import build_model
from pezoo.encodings.prism.paper import prism_d_pe, prism_layers

PAPER = BackboneConfig(d_model=192, n_layers=5, n_heads=8)
QUICK = BackboneConfig(d_model=128, n_layers=3, n_heads=4)


def test_copy_branch_on_the_papers_copy_tasks_only():
    for task in ("reverse", "scan_cot", "dyn_str_cpy"):
        options = paper_pe_options("prism", task, PAPER)
        assert options["copy_every"] == 5 and options["copy_key"] == "absolute"  # one in five query cursors
    for task in ("copy", "addition", "odds_first", "stack_manipulation", "multiplication_cot"):
        assert "copy_every" not in paper_pe_options("prism", task, PAPER)


def test_two_prism_layers_before_layers_1_and_4_on_odds_first_and_stack():
    for task in ("odds_first", "stack_manipulation"):
        assert paper_pe_options("prism", task, PAPER)["layers"] == [0, 3]  # "before layer 1 and layer 4" of 5
    assert paper_pe_options("prism", "reverse", PAPER)["layers"] == [0]
    # other depths keep the second layer's relative height, round(3/5 * n), within 1..n-1
    assert [prism_layers("odds_first", n) for n in (1, 2, 3, 4, 5, 6, 10)] == [
        [0], [0, 1], [0, 2], [0, 2], [0, 3], [0, 4], [0, 6]
    ]  # fmt: skip
    assert prism_layers("copy", 5) == [0]


def test_sizes_are_the_papers_at_its_width_and_scaled_below():
    assert paper_pe_options("prism", "copy", PAPER) == {"n_cursors": 4, "d_pe": 340, "gru_hidden": 100, "layers": [0]}
    # 340 * d / 192, rounded to an even number: 226.7 -> 226, 113.3 -> 114, 56.7 -> 56
    assert [prism_d_pe(d) for d in (512, 192, 128, 64, 32, 1)] == [340, 340, 226, 114, 56, 2]
    assert paper_pe_options("prism", "copy", QUICK)["n_cursors"] == 4  # cursors are kept


@pytest.mark.parametrize("task", ["reverse", "odds_first", "copy"])
def test_the_paper_setup_builds_what_it_says(task):
    cfg = preset_config("quick", pe="prism{paper}", task=task, seed=0)
    pe = build_model(cfg).pe
    c = pe.config
    assert (c.n_cursors, c.d_pe, c.gru_hidden) == (4, 226, 100)
    assert c.layers == ((0, 2) if task == "odds_first" else (0,))
    copying = int(c.copy_mask().sum())
    assert copying == (4 if task == "reverse" else 0)  # 16 query cursors, every fifth: 0, 5, 10, 15


def test_the_prism_preset_runs_the_paper_setup_unless_told_otherwise():
    cfg = preset_config("prism", pe="prism", task="stack_manipulation", seed=0)
    assert cfg.pe_options == {"d_pe": 340, "gru_hidden": 100, "layers": [0, 3], "n_cursors": 4}
    assert preset_config("prism", pe="prism{default}", task="stack_manipulation", seed=0).pe_options == {}
    tweaked = preset_config("prism", pe="prism{n_cursors=2}", task="reverse", seed=0).pe_options
    assert tweaked["n_cursors"] == 2 and tweaked["copy_every"] == 5
    assert preset_config("quick", pe="prism", task="reverse", seed=0).pe_options == {}  # quick: the defaults
    assert preset_config("prism", pe="rope", task="reverse", seed=0).pe_options == {}
