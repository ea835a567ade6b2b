"""The LM section judges each claim as made (issue 63): split seeds read partly (k of n) by every
rule, every verdict says the claimed and the tested multiple, a below claim is judged at its
claimed multiple, reach is read in both modes, a row departing from its paper's setup says
so, and each table says which corpus hash, split and protocol its numbers come from, the
smallest p its seeds allow and that no correction is made. Fixture records made here."""

from __future__ import annotations

import math

from harness.lm.config import lm_preset_config
from harness.lm.record import LmRecord
from harness.records.lm_metrics import LengthScore
from leaderboard.claims import DOES_NOT_HOLD, HOLDS, PARTLY
from leaderboard.lm_board import (
    LM_CLAIMS,
    departures,
    lm_rows,
    protocol_note,
    render_markdown,
    tail_cell,
    verdict,
    verdict_note,
    verdicts,
)
from leaderboard.lm_rows import reach_in

LENGTHS = (256, 512, 1024, 2048, 4096)
FLAT = (2.00, 1.98, 1.97, 1.99, 2.02)
BLOWS = (2.00, 2.30, 3.10, 4.00, 5.00)
NEW = {"corpus_sha256": "cd" * 32, "corpus": "en", "corpus_split": "pezoo-lm-split/2", "corpus_documents": 201}
OLD = {"corpus_sha256": "ab" * 32, "corpus": "en", "corpus_documents": 201}
# the protocol the published records were made under
OLD_EVAL = {"eval": {"regions": 8, "tail": 1024, "passkey": 0, "positions": False}}
NEW_EVAL = {"eval": {"passkey": 0, "positions": False}}  # issue 63's, before the passkey grid (issue 64)


def record(pe: str, seed: int, bpbs, tails=None, *, old: bool = False, finetune_steps: int = 0) -> LmRecord:
    """A record of the lm preset with windows-mode bpb ``bpbs`` and tail-mode bpb ``tails``
    (default the same) at every tail length; ``old``: the protocol before issue 63."""
    cfg = lm_preset_config(
        "lm", pe=pe, task="lm_en", seed=seed, overrides=OLD_EVAL if old else NEW_EVAL, finetune_steps=finetune_steps
    )
    scores = [LengthScore("windows", s, b * 8192 * math.log(2), 8192) for s, b in zip(LENGTHS, bpbs, strict=True)]
    for s, b in zip(LENGTHS, tails or bpbs, strict=True):
        if s >= cfg.eval.tail:
            scores.append(LengthScore("tail", s, b * 4096 * math.log(2), 4096))
    return LmRecord(cfg, tuple(scores), 1.5, 4000, 400.0, 30.0, {"total": 1}, OLD if old else NEW)


def claim(key: str):
    return next(c for c in LM_CLAIMS if c.key == key)


def test_split_seeds_read_partly_k_of_n_by_the_reach_and_blowup_rules_alike():
    # xPos blockwise reaching 16x, 1x, 16x over three seeds read "does not hold" before issue 63
    split = [record("xpos{scale_base=128,blockwise=256}", s, FLAT if s != 1 else BLOWS) for s in range(3)]
    split += [record("xpos{scale_base=128}", s, BLOWS if s != 2 else FLAT) for s in range(3)]
    rows = lm_rows(split + [record("alibi", s, FLAT) for s in range(3)])["lm_en"]
    reach_v = verdict(claim("xpos_blockwise"), rows)
    assert (reach_v.outcome, reach_v.seeds, reach_v.shown) == (PARTLY, (2, 3), "partly (2 of 3)")
    blowup_v = verdict(claim("xpos_plain_blowup"), rows)
    assert (blowup_v.outcome, blowup_v.seeds, blowup_v.shown) == (PARTLY, (2, 3), "partly (2 of 3)")
    assert "2 of 3 seeds" in reach_v.why and "2 of 3 seeds" in blowup_v.why
    assert "| partly (2 of 3) |" in render_markdown(split + [record("alibi", s, FLAT) for s in range(3)])
    whole = lm_rows([record("xpos{scale_base=128,blockwise=256}", s, FLAT) for s in range(3)])["lm_en"]
    assert verdict(claim("xpos_blockwise"), whole).outcome == HOLDS


def test_every_verdict_says_the_claimed_and_the_tested_multiple():
    toy = [record(pe, s, FLAT) for pe in ("alibi", "kerple_log", "kerple_power") for s in range(3)]
    toy += [record(pe, s, BLOWS) for pe in ("ape", "rope", "t5{num_buckets=32,max_distance=64}") for s in range(3)]
    toy += [record("fire", s, (2.0, 2.0, 2.02, 2.3, 2.6)) for s in range(3)]
    rows = lm_rows(toy)["lm_en"]
    judged = [v for c in LM_CLAIMS for v in verdicts(c, rows)]
    assert len(judged) >= 6
    for v in judged:
        assert "claimed" in v.why and "tested to 16×" in v.why, v.why
    assert "claimed 30× L, tested to 16×" in verdict(claim("alibi_flat"), rows).why  # untested 30x: partly
    assert verdict(claim("alibi_flat"), rows).outcome == PARTLY
    assert "claimed at 32× L, judged at 4096 = 16× L" in verdict(claim("kerple_below_alibi_t5"), rows).why


def test_a_below_claim_is_judged_at_its_claimed_multiple():
    """FIRE's paper tests to 4× its training length: judged at 4 L, not at the table's 16 L."""
    fire = [record("fire", s, (1.90, 1.88, 1.87, 2.6, 3.0)) for s in range(3)]  # best at 4 L, worst at 16 L
    others = [record(pe, s, FLAT) for pe in ("alibi", "kerple_log") for s in range(3)]
    v = verdict(claim("fire_below_others"), lm_rows(fire + others)["lm_en"])
    assert v.outcome == HOLDS and "judged at 1024 = 4× L" in v.why


def test_reach_is_read_in_the_tail_mode_too_where_the_tail_is_scored_at_l():
    kerple = record("kerple_log", 0, FLAT, tails=(1.6, 1.55, 1.62, 1.75, 1.9))  # flat windows, rising tail
    assert reach_in(kerple, None, "windows") == 4096 and reach_in(kerple, None, "tail") == 1024
    (row,) = lm_rows([kerple])["lm_en"]
    assert tail_cell(row) == "4"
    old = record("kerple_log", 0, FLAT, old=True)  # tail target 1024 > L: no reference at L
    assert reach_in(old, None, "tail") is None and tail_cell(lm_rows([old])["lm_en"][0]) == "–"
    v = verdict(claim("kerple_flat"), lm_rows([kerple, *(record("alibi", s, FLAT) for s in range(2))])["lm_en"])
    assert "tail mode: weakest seed within 5 % to 4× L" in v.why


def test_xpos_at_another_ratio_of_scale_base_to_l_is_a_departure_said_so():
    plain = lm_rows([record("xpos", 0, BLOWS)])["lm_en"][0]
    scaled = lm_rows([record("xpos{scale_base=128}", 0, BLOWS)])["lm_en"][0]
    assert departures(scaled) == []
    (said,) = departures(plain)
    assert "scale_base = 512" in said and "gives 128 at L = 256" in said
    rows = lm_rows([record(pe, 0, BLOWS) for pe in ("xpos", "xpos{scale_base=128}")] + [record("alibi", 0, FLAT)])
    found = {v.why.split(":")[0]: v for v in verdicts(claim("xpos_plain_blowup"), rows["lm_en"])}
    assert "departs from the paper's setup" in found["xpos"].why
    assert "departs" not in found["xpos{scale_base=128}"].why
    assert "Departures from the papers' setups" in render_markdown(
        [record(pe, 0, BLOWS) for pe in ("xpos", "xpos{scale_base=128}")]
    )


def test_yarns_dynamic_scaling_is_judged_as_a_reach_claim_on_its_own_row():
    dynamic_yarn = "rope@{scaling={rope_type=dynamic_yarn,original_max_position_embeddings=256}}"
    dynamic_ntk = "rope@{scaling={rope_type=dynamic,factor=16.0,original_max_position_embeddings=256}}"
    rope = [record("rope", s, (2.0, 2.6, 3.5, 4.4, 5.0)) for s in range(3)]
    yarn = [record(dynamic_yarn, s, (2.0, 2.05, 2.08, 2.3, 2.6)) for s in range(3)]
    ntk = [record(dynamic_ntk, s, (2.0, 2.02, 2.03, 2.04, 2.05)) for s in range(3)]
    rows = lm_rows(rope + yarn + ntk + [record("alibi", s, FLAT) for s in range(3)])["lm_en"]
    (v,) = verdicts(claim("yarn_dynamic_zero_shot"), rows)  # transformers' dynamic NTK is not the claim's row
    assert claim("yarn_dynamic_zero_shot").rule == "reach" and v.outcome == HOLDS
    assert v.why.startswith("claimed 2× L, tested to 16×: every seed within 5 % to 2× L")
    rising = [record(dynamic_yarn, s, (2.0, 2.3, 2.5, 3.0, 3.0)) for s in range(3)]
    rows = lm_rows(rope + rising + [record("alibi", s, FLAT) for s in range(3)])["lm_en"]
    assert verdict(claim("yarn_dynamic_zero_shot"), rows).outcome == DOES_NOT_HOLD


def test_each_table_says_its_corpus_hash_split_and_protocol():
    new = lm_rows([record("alibi", s, FLAT) for s in range(3)])["lm_en"]
    text = protocol_note(new)
    assert "cd" * 32 in text and "Split pezoo-lm-split/2" in text
    assert "64 held-out regions of 4,096 bytes, 262,144 bytes scored" in text and "reference at L" in text
    old = lm_rows([record("alibi", s, FLAT, old=True) for s in range(3)])["lm_en"]
    text = protocol_note(old)
    assert "ab" * 32 in text and "8 held-out regions of 4,096 bytes, 32,768 bytes scored" in text
    assert "pezoo-lm-split/1" in text and "3.3 %" in text and "8.2 %" in text and "no reference at L" in text
    assert text in render_markdown([record("alibi", s, FLAT, old=True) for s in range(3)]).replace("\\", "")


def test_the_page_states_the_smallest_p_and_that_no_correction_is_made():
    rows = lm_rows([record(pe, s, FLAT) for pe in ("alibi", "kerple_log") for s in range(3)])["lm_en"]
    note = verdict_note(rows)
    assert "3 against 3: 0.05" in note and "5 against 5: 1/252 ≈ 0.00397" in note
    assert "No correction is made for the" in note and "verdicts of this table" in note
    assert "2^(0.05 · bpb(L))" in note and "×1.072" in note  # bpb(L) = 2: 2^0.1
