"""The board says how a method was run unlike its paper (harness.config.protocols.departures)."""

from __future__ import annotations

import pezoo
from harness.config.pe_spec import model_options
from harness.config.protocols import departure_paper, departures, extra_input, paper_pe_options
from harness.training.backbone import BackboneConfig

QUICK = BackboneConfig(d_model=128, n_layers=3, n_heads=4)


def test_prism_defaults_depart_from_the_paper_in_cursors_width_layers_and_copy_branch():
    # The defaults: C = 2, d_pe = 32, one PRISM layer, no copy branch. The paper (§6.2,
    # §6.0.1): C = 4, d_pe = 340 at width 192 (226 at 128), two layers on odds_first,
    # the copy branch on reverse.
    copy = departures("prism", "copy", {}, QUICK)
    assert len(copy) == 2
    assert "C = 2" in copy[0] and "4" in copy[0]
    assert "d_pe = 32" in copy[1] and "226" in copy[1]
    reverse = departures("prism", "reverse", {}, QUICK)
    assert any("no copy branch" in t for t in reverse)
    odds = departures("prism", "odds_first", {}, QUICK)
    assert any("one PRISM layer" in t and "1 and 3" in t for t in odds)


def test_a_run_with_the_paper_setup_departs_in_nothing():
    for task in ("copy", "reverse", "odds_first", "stack_manipulation"):
        assert departures("prism", task, paper_pe_options("prism", task, QUICK), QUICK) == []


def test_a_copy_branch_where_the_paper_has_none_is_said():
    options = {**paper_pe_options("prism", "copy", QUICK), "copy_every": 5}
    assert departures("prism", "copy", options, QUICK) == [
        "the copy branch on every 5th query cursor (the paper: not on this task, §6.0.1)"
    ]


def test_randomized_evaluated_on_plain_positions_says_so_and_the_paper_procedure_does_not():
    stored = model_options("randomized:ape", {"draw": "per_length"})  # before randomize_eval existed
    (text,) = departures("randomized:ape", "copy", stored, QUICK)
    assert "plain positions 0..n-1" in text and "§3" in text
    new = model_options("randomized:rope", {"draw": "per_length", "randomize_eval": True})
    assert departures("randomized:rope", "copy", new, QUICK) == []


def test_randomized_trained_on_one_draw_per_padded_batch_says_so():
    """Runs stored before ``draw`` existed gave a padded row of n tokens the first n
    positions of the batch's one draw; the board says how that departs from the paper."""
    published = model_options("randomized:ape", {"randomize_eval": True})
    (text,) = departures("randomized:ape", "copy", published, QUICK)
    assert "one position draw per batch" in text and "first n positions" in text and "§3" in text
    # An encoder's batches hold one length (no padding), where both draws are the paper's.
    encoder = BackboneConfig(d_model=32, n_layers=2, n_heads=4, causal=False)
    assert departures("randomized:ape", "copy", published, encoder) == []


def test_encodings_without_a_paper_setup_have_no_departures():
    assert departures("rope", "copy", {}, QUICK) == []
    assert departures("fire", "reverse", {}, QUICK) == []


def test_hard_alibi_says_how_its_heads_differ_from_the_papers_16():
    # 4 heads: M = min(6, 4 - 1) = 3 windows and one NoPE head, against 6 windows and 10 NoPE
    (text,) = departures("hard_alibi", "copy", {}, QUICK)
    assert text.startswith("4 heads per layer: 3 windowed (windows 1..3) and 1 NoPE head, where the paper's")
    assert "6 windowed" in text and "10 NoPE" in text and "not Jelassi et al.'s own copy experiments" in text
    (text,) = departures("hard_alibi", "copy", {"n_masked": 2}, QUICK)
    assert "2 windowed (windows 1..2) and 2 NoPE heads" in text
    paper = BackboneConfig(d_model=1024, n_layers=12, n_heads=16)
    assert departures("hard_alibi", "copy", {}, paper) == []  # M = 6 of 16: the paper's split
    assert "Turing Programs" in departure_paper("hard_alibi")


def test_xpos_says_it_runs_without_blockwise_causal_attention():
    (text,) = departures("xpos", "copy", {}, QUICK)
    assert "blockwise causal attention" in text
    assert departure_paper("xpos") == pezoo.card_of("xpos").paper and "Length-Extrapolatable" in departure_paper("xpos")
    # switched on for evaluation of the trained weights (xpos@{blockwise=24}) it follows its paper;
    # trained with it, it does not: the paper trains with full attention
    assert departures("xpos", "copy", {}, QUICK, eval_options={"blockwise": 24}) == []
    (trained,) = departures("xpos", "copy", {"blockwise": 24}, QUICK)
    assert trained.startswith("trained with blockwise attention as well")


def test_rope_extensions_whose_papers_fine_tune_say_they_were_not_fine_tuned():
    linear = {"scaling": {"rope_type": "linear", "factor": 4.0}}
    yarn = {"scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 22}}
    dynamic = {"scaling": {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 22}}
    (pi,) = departures("rope", "copy", {}, QUICK, linear)
    assert "fine-tunes" in pi and "Positional Interpolation" in departure_paper("rope", linear)
    (y,) = departures("rope", "copy", {}, QUICK, yarn)
    assert "fine-tunes" in y and "YaRN" in departure_paper("rope", yarn)
    assert departures("rope", "copy", {}, QUICK, dynamic) == []  # zero-shot by design
    assert departures("rope", "copy", {}, QUICK) == []  # rope as trained follows its paper


def test_an_encoding_that_reads_the_instance_scale_is_disclosed():
    assert "instance scale n" in extra_input("learned_prf_sh")
    assert extra_input("randomized:learned_prf_sh") == extra_input("learned_prf_sh")
    assert extra_input("learned_prf") is None and extra_input("rope") is None
