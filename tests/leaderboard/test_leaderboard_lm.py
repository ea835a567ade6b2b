"""The board's LM section on fixture records made here, not the published ones."""

from __future__ import annotations

import math
import re

import pytest
from click.testing import CliRunner

from harness.lm.config import lm_preset_config
from harness.lm.record import LmRecord
from harness.records.lm_metrics import LengthScore
from leaderboard.claims import DOES_NOT_HOLD, HOLDS, NO_CONTRAST, PARTLY
from leaderboard.lm_board import LM_CLAIMS, answer_sentence, curves_svg, lm_rows, reach, render_markdown, verdict

LENGTHS = (256, 512, 1024, 2048, 4096)
BEFORE_PASSKEY = {"eval": {"passkey": 0, "positions": False}}
"""The lm preset as the published records ran it: without the passkey grid (issue 64)."""


def record(pe: str, seed: int, bpbs, *, task: str = "lm_en", unreached=(), finetune_steps: int = 0) -> LmRecord:
    """A record whose bpb at each length is ``bpbs[i]`` in windows mode (8192 bytes scored)
    and in the tail mode (its target the last L bytes of each region: 16384 bytes)."""
    cfg = lm_preset_config("lm", pe=pe, task=task, seed=seed, overrides=BEFORE_PASSKEY, finetune_steps=finetune_steps)
    scores = []
    for mode, n in (("windows", 8192), ("tail", 16384)):
        for s, b in zip(LENGTHS, bpbs, strict=True):
            if s in unreached:
                scores.append(LengthScore(mode, s, None, 0, False, "positions 0..2047 only"))
            else:
                scores.append(LengthScore(mode, s, b * n * math.log(2), n))
    params = {"total": 824_192, "pe": 0}
    return LmRecord(cfg, tuple(scores), 1.5, 4000, 400.0, 30.0, params, {"corpus_sha256": "ab" * 32})


FLAT = (2.00, 1.98, 1.97, 1.99, 2.02)
BLOWS = (2.00, 2.30, 3.10, 4.00, 5.00)


def test_reach_is_the_longest_length_within_five_percent_on_counts():
    assert reach(record("alibi", 0, FLAT)) == 4096
    assert reach(record("ape", 0, BLOWS)) == 256
    # exactly 5 % above bpb(L) is within; a hair more is not
    assert reach(record("rope", 0, (2.0, 2.1, 2.1000001, 9, 9))) == 512
    # a length not reached ends the reach, later ones do not count
    assert reach(record("learned_ape", 0, FLAT, unreached=(2048,))) == 1024


def test_verdicts_follow_the_rules():
    records = [record("alibi", s, [b + 0.01 * s for b in FLAT]) for s in range(3)]
    records += [record("ape", s, BLOWS) for s in range(3)]
    records += [record("rope", s, (2.0, 2.05, 2.3, 3.0, 4.0)) for s in range(3)]
    records += [record("t5{num_buckets=32,max_distance=64}", s, (2.0, 2.0, 2.05, 2.5, 3.0)) for s in range(3)]
    rows = lm_rows(records)["lm_en"]
    by = {c.key: verdict(c, rows) for c in LM_CLAIMS}
    assert by["alibi_flat"].outcome == PARTLY and "tested 16×" in by["alibi_flat"].why
    assert by["ape_blowup"].outcome == HOLDS
    assert by["alibi_below_rope_t5"].outcome == HOLDS and "p = 0.05" in by["alibi_below_rope_t5"].why
    assert by["kerple_flat"] is None  # not on the table: "not run yet"


def test_below_claims_with_overlapping_seeds_do_not_hold_and_nothing_flat_is_no_contrast():
    below = next(c for c in LM_CLAIMS if c.key == "alibi_below_rope_t5")
    rope = [record("rope", s, (2.0, 2.0, 2.0, 2.0, 2.35)) for s in range(3)]
    higher = lm_rows([record("alibi", s, (2.0, 2.0, 2.0, 2.0, 2.5 - 0.1 * s)) for s in range(3)] + rope)["lm_en"]
    assert verdict(below, higher).outcome == DOES_NOT_HOLD  # 2.4 on the mean against 2.35
    mixed = lm_rows([record("alibi", s, (2.0, 2.0, 2.0, 2.0, 2.5 - 0.2 * s)) for s in range(3)] + rope)["lm_en"]
    assert verdict(below, mixed).outcome == PARTLY  # 2.3 on the mean, but a seed above rope's: p > 0.05
    blown = lm_rows([record("alibi", s, BLOWS) for s in range(3)])["lm_en"]
    assert verdict(next(c for c in LM_CLAIMS if c.key == "alibi_flat"), blown).outcome == NO_CONTRAST


def test_the_section_leads_with_the_answer_and_says_its_scale():
    records = [record("alibi", s, FLAT) for s in range(3)] + [record("ape", s, BLOWS) for s in range(3)]
    text = render_markdown(records)
    lines = text.splitlines()
    table = [line for line in lines if line.startswith("| ") and "|---" not in line]
    assert table[1].startswith("| alibi | 3 | 16 | 16 |") and table[2].startswith("| ape | 3 | 1 | 1 |")
    assert "0.8M parameters" in text and "sha256 abababababababab" in text
    assert render_markdown([]).startswith("## Language modelling\n\nNo language-modelling results")
    answer = "on the weakest seed (3 seeds each): **alibi** to 16× L (the longest length tested); **ape** not past L."
    assert lines[lines.index("### lm_en (corpus sha256 abababababababab)") + 4].endswith(answer)
    assert "![bits per byte against test length on lm_en, one panel per family](lm-lm_en.svg)" in lines
    assert any(line.startswith("Bits per byte by position within the window: not measured") for line in lines)
    tail = lines.index("| encoding | " + " | ".join(f"bpb S = {s}" for s in LENGTHS) + " |")  # the fixed-target mode
    assert lines[tail + 2 : tail + 4] == [
        "| alibi | 2.000 | 1.980 | 1.970 | 1.990 | 2.020 |", "| ape | 2.000 | 2.300 | 3.100 | 4.000 | 5.000 |"
    ]  # fmt: skip


def test_the_answer_groups_encodings_by_reach_and_says_uneven_seeds():
    rows = lm_rows(
        [record("alibi", s, FLAT) for s in range(3)]
        + [record("rope", 0, (2.0, 2.05, 2.3, 3.0, 4.0))]
        + [record(pe, 0, BLOWS) for pe in ("ape", "nope")]
    )["lm_en"]
    assert answer_sentence(rows) == (
        "Bits per byte within 5 % of bpb(L) on the weakest seed (1-3 seeds): **alibi** to 16× L (the longest "
        "length tested); **rope** to 2× L; **ape**, **nope** not past L."
    )


def test_curves_give_each_row_its_own_look_and_a_legend():
    rows = lm_rows([record(pe, 0, FLAT) for pe in ("rope", "rope@{scaling={rope_type=ntk,factor=16.0}}", "alibi")])
    svg = str(curves_svg("lm_en", rows["lm_en"]))
    strokes = re.findall(
        r'<g class="series"[^>]*>.*?<polyline[^>]*stroke="([^"]+)"(?: stroke-dasharray="([^"]+)")?', svg, re.S
    )
    assert len(strokes) == 3 and len(set(strokes)) == 3  # a variant never wears its encoding's look
    assert svg.count('<g class="legend">') == 3
    assert all(f"<title>{row.label}</title>" in svg for row in rows["lm_en"])  # each entry's whole label


def test_curves_draw_one_line_per_encoding_in_its_board_colour():
    rows = lm_rows([record("alibi", 0, FLAT), record("ape", 0, BLOWS)])["lm_en"]
    svg = str(curves_svg("lm_en", rows))
    assert svg.count('<g class="series"') == 2 and 'data-encoding="alibi"' in svg
    from leaderboard.styles import style_of

    assert style_of("alibi").colour in svg


def test_the_command_refuses_an_empty_results_folder_and_renders_records(tmp_path):
    import json

    from leaderboard.cli import leaderboard

    runner = CliRunner()
    empty = runner.invoke(leaderboard, ["lm", "--results", str(tmp_path / "none"), "--out", str(tmp_path / "site")])
    assert empty.exit_code != 0 and "no LM results" in empty.output
    (tmp_path / "lm").mkdir()
    lines = [json.dumps(record("alibi", s, FLAT).to_dict()) for s in range(2)]
    (tmp_path / "lm" / "lm-x.jsonl").write_text("\n".join(lines) + "\n")
    done = runner.invoke(leaderboard, ["lm", "--results", str(tmp_path / "lm"), "--out", str(tmp_path / "site")])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "site" / "lm.md").is_file() and (tmp_path / "site" / "lm-lm_en.svg").is_file()
    # --out a device or a file: a FileExistsError traceback from mkdir
    for out in ("/dev/null", str(tmp_path / "lm" / "lm-x.jsonl")):
        bad = runner.invoke(leaderboard, ["lm", "--results", str(tmp_path / "lm"), "--out", out])
        refused = "not a folder" in bad.output or "is a file" in bad.output  # a file: click's own check
        assert bad.exit_code in (1, 2) and refused and isinstance(bad.exception, SystemExit), bad.output


def test_two_records_of_one_row_and_seed_are_refused():
    a = record("alibi", 0, FLAT)
    b = record("alibi", 0, FLAT)
    with pytest.raises(ValueError, match="is already published"):  # each run once, as algorithmic runs
        lm_rows([a, b])
    longer = {"train": {"steps": 10}, **BEFORE_PASSKEY}
    other = LmRecord(lm_preset_config("lm", pe="alibi", task="lm_en", seed=0, overrides=longer),
                     a.scores, 1.0, 10, 1.0, 1.0, {}, a.provenance)  # fmt: skip
    with pytest.raises(ValueError, match="two records of alibi"):
        lm_rows([a, other])


def test_every_claim_comes_from_its_encodings_card():
    import pezoo

    on_cards = {c.key: name for name, card in pezoo.cards().items() for c in card.lm_claims}
    assert [c.key for c in LM_CLAIMS] == [
        "alibi_flat", "ape_blowup", "alibi_below_rope_t5", "kerple_flat", "kerple_power_flat",
        "kerple_below_alibi_t5", "xpos_blockwise", "xpos_plain_blowup", "pi_finetuned", "yarn_finetuned",
        "yarn_dynamic_zero_shot",
        "fire_below_others", "fox_below_transformer", "ssmax_below_softmax", "pope_below_rope", "stick_breaking_8x",
        "dape_below_static", "fope_below_rope", "rnope_swa_below_rope",
    ]  # fmt: skip
    assert on_cards["ape_blowup"] == "alibi" and on_cards["pi_finetuned"] == "rope"  # the paper's card, not the row's
    for c in LM_CLAIMS:  # every row a claim names is a registered encoding
        assert all(pezoo.is_known(s.pe) for s in (c.row, *c.against)), c.key


def test_selectors_match_options_presence_variants_and_fine_tunes():
    from leaderboard.lm_board import selects
    from pezoo import LmRowSelector

    def cfg(spec: str, finetune: int = 0):
        return lm_preset_config("lm", pe=spec, task="lm_en", seed=0, finetune_steps=finetune)

    blockwise, plain_xpos = cfg("xpos{blockwise=256}"), cfg("xpos")
    assert selects(LmRowSelector("xpos", has=("blockwise",)), blockwise)
    assert not selects(LmRowSelector("xpos", has=("blockwise",)), plain_xpos)
    assert selects(LmRowSelector("xpos", options={"blockwise": None}), plain_xpos)
    assert not selects(LmRowSelector("xpos", options={"blockwise": None}), blockwise)
    linear = "rope@{scaling={rope_type=linear,factor=4}}"
    pi = LmRowSelector("rope", variant={"scaling": {"rope_type": "linear"}}, finetuned=True)
    assert selects(pi, cfg(linear, 50)) and not selects(pi, cfg(linear))
    assert not selects(LmRowSelector("rope"), cfg(linear)) and selects(LmRowSelector("rope"), cfg("rope"))
    assert not selects(LmRowSelector("rope", variant={"scaling": {"rope_type": "dynamic"}}), cfg(linear))


def test_a_new_encodings_card_claim_is_judged_with_no_line_in_the_board():
    import dataclasses

    import pezoo
    from leaderboard.lm_board import card_lm_claims
    from pezoo import LmPaperClaim, LmRowSelector, PaperCard
    from pezoo.registry import CARDS, ENCODINGS

    claim = LmPaperClaim(10**6, "toy_lm_flat", "Toy 2026, Table 1", "toy stays flat to 8× L", "reach",
                         LmRowSelector("toy_lm"), multiple=8)  # fmt: skip

    @pezoo.register("toy_lm", card=PaperCard(lm_claims=(claim,)))
    class ToyLm(pezoo.NoPE):
        pass

    try:
        assert card_lm_claims()[-1] == claim
        configs = [
            lm_preset_config("lm", pe="toy_lm", task="lm_en", seed=s, overrides=BEFORE_PASSKEY) for s in range(2)
        ]
        toy = [dataclasses.replace(record("ape", s, FLAT), config=c) for s, c in enumerate(configs)]
        v = verdict(claim, lm_rows(toy)["lm_en"])
        assert (v.outcome, v.why) == (HOLDS, "claimed 8× L, tested to 16×: every seed within 5 % to 8× L; tail mode: "
                                      "weakest seed within 5 % to 16× L")  # fmt: skip
    finally:
        ENCODINGS._factories.pop("toy_lm")
        CARDS.pop("toy_lm")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"rule": "flat"}, "LM claim 'alibi_flat' of 'alibi': unknown rule 'flat'; rules: reach, blowup, below"),
        ({"multiple": 0}, "rule 'reach' needs a multiple of L above 0, got 0"),
        ({"rule": "below"}, "rule 'below' needs the rows it is compared with (against)"),
    ],
)
def test_a_card_claim_the_board_cannot_test_fails_in_one_line(changes, message):
    import dataclasses

    from leaderboard.lm_board import check_claim

    bad = dataclasses.replace(LM_CLAIMS[0], **changes)
    rows = lm_rows([record("alibi", 0, FLAT)])["lm_en"]
    with pytest.raises(ValueError, match=re.escape(message)):
        verdict(bad, rows)
    with pytest.raises(ValueError, match=re.escape(message)):
        check_claim(bad)


def test_two_card_claims_with_one_key_are_refused():
    import pezoo
    from leaderboard.lm_board import card_lm_claims
    from pezoo import PaperCard
    from pezoo.registry import CARDS, ENCODINGS

    @pezoo.register("toy_lm_twice", card=PaperCard(lm_claims=(LM_CLAIMS[0],)))
    class Twice(pezoo.NoPE):
        pass

    try:
        with pytest.raises(ValueError, match=r"two LM claims share a key: \['alibi_flat'\]"):
            card_lm_claims()
    finally:
        ENCODINGS._factories.pop("toy_lm_twice")
        CARDS.pop("toy_lm_twice")


def test_the_site_build_renders_the_lm_section_only_when_lm_records_exist(tmp_path):
    import json

    from leaderboard_fixtures import make_record, write_jsonl

    from harness.cli import main

    results, site = tmp_path / "results", tmp_path / "site"
    write_jsonl(results / "a.jsonl", [make_record("rope", "copy", 0, {1: 1.0, 2: 1.0, 3: 0.5}, train_max=2)])

    def build():
        return CliRunner().invoke(main, ["leaderboard", "build", "--results", str(results), "--out", str(site)])

    (results / "lm").mkdir()  # empty: no LM section, no error
    assert build().exit_code == 0 and not (site / "lm.md").exists()
    assert "## Language modelling" not in (tmp_path / "README.md").read_text()
    lines = [json.dumps(record("alibi", s, FLAT).to_dict()) for s in range(2)]
    (results / "lm" / "lm-x.jsonl").write_text("\n".join(lines) + "\n")
    done = build()
    assert done.exit_code == 0, done.output
    assert (site / "lm.md").read_text() == render_markdown([record("alibi", s, FLAT) for s in range(2)])
    readme = (tmp_path / "README.md").read_text()  # the board's README says where the section is, answer first
    assert "## Language modelling" in readme and "[`site/lm.md`](site/lm.md)" in readme
    assert "* lm_en: Bits per byte within 5 % of bpb(L) on the weakest seed (2 seeds each): **alibi** to 16×" in readme
    assert (site / "lm-lm_en.svg").is_file()
    page = (site / "lm.html").read_text()  # the site's own page, linked from the front page with the answer
    assert "Bits per byte within 5 % of bpb(L) on the weakest seed (2 seeds each):" in page
    assert "<strong>alibi</strong> to 16× L (the longest length tested)." in page and page.count("<svg") == 1
    assert "bpb S = 1024" in page and "not run yet" in page and "sha256 " + "ab" * 32 in page
    front = (site / "index.html").read_text()
    assert 'href="lm.html"' in front and "alibi to 16× L (the longest tested)." in front
    (results / "lm" / "lm-y.jsonl").write_text("{not json\n")  # an invalid LM record: one line, nothing written
    before = (site / "lm.md").read_bytes()
    bad = build()
    assert bad.exit_code == 1 and bad.output.startswith("Error: LM results in ") and bad.output.count("\n") == 1
    assert (site / "lm.md").read_bytes() == before
    for path in (results / "lm").iterdir():  # the records gone: the section's pages go with the next build
        path.unlink()
    assert build().exit_code == 0 and not (site / "lm.md").exists() and not (site / "lm-lm_en.svg").exists()
    assert not (site / "lm.html").exists() and 'href="lm.html"' not in (site / "index.html").read_text()


def test_a_variant_is_held_to_its_trained_runs_bpb_at_l():
    """Position interpolation by 16 without fine-tuning scores a flat, broken 6.2 bits per byte
    at every length: against its own bpb(L) it would read flat to 16 L beside ALiBi; held to
    the trained RoPE's 2.2 at L it reaches 0. A variant close to its run at L is judged on."""
    pi, dynamic = (
        "rope@{scaling={rope_type=linear,factor=16.0}}",
        "rope@{scaling={rope_type=dynamic,factor=16.0,original_max_position_embeddings=256}}",
    )
    trained = record("rope", 0, (2.2, 3.1, 4.3, 5.2, 5.8))
    broken, fine = record(pi, 0, (6.2, 6.25, 6.25, 6.25, 6.25)), record(dynamic, 0, (2.2, 2.3, 2.4, 3.0, 3.4))
    rows = {row.label: row for row in lm_rows([trained, broken, fine])["lm_en"]}
    assert [reach(broken), reach(broken, trained)] == [4096, 0]
    assert rows["rope"].reaches() == [256]
    assert rows[next(label for label in rows if "linear" in label)].reaches() == [0]
    assert rows[next(label for label in rows if "dynamic" in label)].reaches() == [512]
    assert "not even at L (already more than 5 % above the bpb at L of the trained run they modify)" in (
        answer_sentence(list(rows.values()))
    )
    assert reach(broken) == 4096  # against its own bpb(L): what no row may do
    with pytest.raises(ValueError, match="which is not published"):  # no trained run: no row, no verdict
        lm_rows([broken])

    pi_claim = next(c for c in LM_CLAIMS if c.row.finetuned)
    tuned = record("rope@{scaling={rope_type=linear,factor=4.0}}", 0, (2.8, 2.78, 2.76, 3.4, 4.2), finetune_steps=200)
    v = verdict(pi_claim, lm_rows([trained, tuned, record("alibi", 0, FLAT)])["lm_en"])
    assert v.outcome == DOES_NOT_HOLD and "not even at L" in v.why


def test_seconds_per_step_are_given_per_machine_never_averaged_across_them():
    import dataclasses

    from leaderboard.lm_board import seconds_text

    cpu = dataclasses.replace(
        record("alibi", 0, FLAT), provenance={"corpus_sha256": "ab" * 32, "device": "cpu:x86_64 x1 threads"}
    )
    gpu = dataclasses.replace(
        record("alibi", 1, FLAT),
        train_seconds=40.0,
        provenance={"corpus_sha256": "ab" * 32, "device": "cuda:NVIDIA H100 80GB HBM3"},
    )
    (row,) = lm_rows([cpu, gpu])["lm_en"]
    assert row.seconds_per_step() == {"CPU": 0.1, "H100 80GB HBM3": 0.01}
    assert seconds_text(row) == "0.100 CPU · 0.010 H100 80GB HBM3"


def test_tasks_come_in_the_tracks_order_english_first():
    rows = lm_rows([record("alibi", 0, FLAT, task="lm_code"), record("alibi", 0, FLAT, task="lm_en")])
    assert list(rows) == ["lm_en", "lm_code"]


def test_two_setups_of_one_encoding_get_a_verdict_each_named():
    from leaderboard.lm_board import verdicts

    toy = [record("alibi", s, FLAT) for s in range(3)]
    toy += [record("fire", s, BLOWS) for s in range(3)]
    toy += [record("fire{init_threshold=64}", s, (1.90, 1.88, 1.87, 1.86, 1.86)) for s in range(2)]
    rows = lm_rows(toy)["lm_en"]
    claim = next(c for c in LM_CLAIMS if c.key == "fire_below_others")
    found = verdicts(claim, rows)
    assert [v.why.split(":")[0] for v in found] == ["fire", "fire{init_threshold=64}"]  # most seeds first
    assert found[0].outcome == DOES_NOT_HOLD and found[1].outcome == PARTLY  # 2 seeds: p cannot reach 0.05
    assert verdict(claim, rows) == found[0]
    text = render_markdown(toy)
    assert text.count("FIRE's long-context perplexity is below") == 2


def test_the_section_names_the_model_its_records_hold_not_the_lm_preset_s():
    from leaderboard.lm_board import scale_note, training_phrase

    cfg = lm_preset_config("lm_smoke", pe="alibi", task="lm_en", seed=0)
    scores = tuple(LengthScore(mode, s, 100.0, 64) for mode in ("windows", "tail") for s in (32, 64, 128))
    small = LmRecord(cfg, scores, 5.0, 10, 1.0, 1.0, {"total": 40_000, "pe": 0}, {"corpus_sha256": "ab" * 32})
    assert training_phrase([small]) == "trained at L = 32 bytes"
    assert scale_note([small]).startswith("A byte-level decoder of about 40K parameters (d 32, 1 layers, 2 heads) "
                                          "trained at L = 32 bytes for 10 steps")  # fmt: skip
    assert scale_note([small, record("alibi", 0, FLAT)]).startswith("Byte-level decoders, each table's protocol")
