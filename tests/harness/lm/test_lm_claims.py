"""The LM sweep plan gives every row a paper's claim names five seeds (KERPLE's paper ran 5),
the others three, and each variant its trained run for every seed it is planned at."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from harness.lm import sweep as lm_sweep
from harness.lm.claims import CLAIM_SEEDS, claimed, lm_claims, selects
from harness.lm.config import lm_preset_config
from harness.lm.sweep import load_lm_sweep, sweep_configs

SWEEP = Path(__file__).resolve().parents[3] / "leaderboard" / "lm" / "sweep.toml"


def _row(cfg) -> tuple:
    """A board row: task, encoding and options, evaluation options, fine-tune (every seed alike)."""
    return cfg.task, cfg.pe, repr(sorted(cfg.pe_options.items())), repr(cfg.eval_pe_options), cfg.finetune_steps


def test_every_row_a_claim_names_has_five_seeds_in_the_sweep_plan_and_the_others_three():
    plan = load_lm_sweep(SWEEP)
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
    plan = load_lm_sweep(SWEEP, tasks=["lm_en"])
    scalings = {c.eval_pe_options["scaling"]["rope_type"] for c in plan if c.is_variant and not c.finetune_steps}
    assert {"dynamic_yarn", "dynamic"} <= scalings  # YaRN's own, and transformers' dynamic NTK as its own row
    assert {c.pe_options.get("scale_base") for c in plan if c.pe == "xpos"} == {128.0, None}  # declared, departure


def test_a_claim_seed_plans_the_named_rows_and_the_runs_their_variants_evaluate(monkeypatch):
    variant = "rope@{scaling={rope_type=linear,factor=4.0}}"
    named = lm_preset_config("lm", pe=variant, task="lm_en", seed=0).eval_pe_options
    monkeypatch.setattr(lm_sweep, "claimed", lambda cfg: cfg.pe == "alibi" or cfg.eval_pe_options == named)
    table = {"seeds": [0], "claim_seeds": [0, 1], "pe": ["alibi", "rope", "nope"], "variants": [variant]}
    plan = [(c.seed, c.pe, bool(c.is_variant)) for c in sweep_configs(table)]
    assert plan == [
        (0, "alibi", False), (0, "rope", False), (0, "nope", False),
        (1, "alibi", False), (1, "rope", False),  # rope: the trained run the named variant evaluates
        (0, "rope", True), (1, "rope", True),
    ]  # fmt: skip
