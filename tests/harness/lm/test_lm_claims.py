"""The LM sweep (leaderboard/lm/sweep.toml, a sweep of the one harness) gives every row a
paper's claim names five seeds (KERPLE's paper ran 5), the others three, each variant its
trained run at every seed it is planned at, and the rows the claims are judged on."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from harness.lm.claims import CLAIM_SEEDS, claimed, lm_claims, selects
from harness.sweeps.sweep import load_sweep

SWEEP = Path(__file__).resolve().parents[3] / "leaderboard" / "lm" / "sweep.toml"


def _row(cfg) -> tuple:
    """A board row: task, encoding and options, evaluation options, fine-tune (every seed alike)."""
    tune = cfg.lm_eval.finetune_steps
    return cfg.task, cfg.pe, repr(sorted(cfg.pe_options.items())), repr(cfg.eval_pe_options), tune


def test_every_row_a_claim_names_has_five_seeds_in_the_sweep_plan_and_the_others_three():
    plan = load_sweep(SWEEP).configs(None)
    seeds: dict[tuple, list[int]] = defaultdict(list)
    for cfg in plan:
        seeds[_row(cfg)].append(cfg.seed)
    ids = {cfg.run_id() for cfg in plan}
    assert len(ids) == len(plan)
    for cfg in plan:
        wanted = list(range(CLAIM_SEEDS if claimed(cfg) else 3))
        assert sorted(seeds[_row(cfg)]) == wanted, (cfg.pe, dict(cfg.pe_options), dict(cfg.eval_pe_options))
        assert cfg.trained_config().run_id() in ids  # a variant's trained run is planned at its seed
    judged = [c for c in plan if any(selects(claim.row, c) for claim in lm_claims())]
    assert {c.pe for c in judged} >= {"alibi", "ape", "kerple_log", "kerple_power", "xpos", "fire", "rope"}
    assert all(sorted(seeds[_row(c)]) == [0, 1, 2, 3, 4] for c in judged)
    assert {c.task for c in judged} == {"lm_en", "lm_code"}


def test_the_sweep_has_yarns_dynamic_scaling_and_xpos_at_its_papers_ratio():
    plan = [c for c in load_sweep(SWEEP).configs(None) if c.task == "lm_en"]
    scalings = {
        c.eval_pe_options["scaling"]["rope_type"] for c in plan if c.is_variant and not c.lm_eval.finetune_steps
    }
    assert {"dynamic_yarn", "dynamic"} <= scalings  # YaRN's own, and transformers' dynamic NTK as its own row
    assert {c.pe_options.get("scale_base") for c in plan if c.pe == "xpos"} == {128.0, None}  # declared, departure


def test_every_fine_tuned_variant_fine_tunes_at_4_l():
    tuned = [c for c in load_sweep(SWEEP).configs(None) if c.lm_eval.finetune_steps]
    assert tuned and all(c.is_variant and c.lm_eval.finetune_length == 4 * c.train.train_max for c in tuned)
