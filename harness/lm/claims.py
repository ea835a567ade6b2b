"""Which language-modelling runs the papers' claims name.

Each encoding's paper card lists its LM claims (``pezoo.LmPaperClaim``), each naming rows as
data (``pezoo.LmRowSelector``): the row it is about and the rows it is compared with.
:func:`selects` matches a selector against a run's config (the board judges the claims on
the rows it selects: ``leaderboard.lm_board``), and :func:`claimed` says whether any claim
names a run: the track's sweep (``leaderboard/lm/sweep.toml``) gives those rows :data:`CLAIM_SEEDS`
seeds, and a test holds it to them (``tests/harness/lm/test_lm_claims.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

import pezoo
from harness.config import RunConfig
from harness.lm.config import LmConfig
from pezoo import LmPaperClaim, LmRowSelector

__all__ = ["CLAIM_SEEDS", "claimed", "lm_claims", "selects"]

CLAIM_SEEDS = 5
"""Seeds of every row a claim names: KERPLE's paper ran 5 (its Table 3, a paired t-test over
them). With 5 against 5 the exact permutation test can reach p = 1/252 ≈ 0.004; with 3
against 3 its smallest p is 1/20 = 0.05, the threshold itself."""


def _includes(actual: object, wanted: object) -> bool:
    """``actual`` has ``wanted``'s value; a mapping: each of its keys, as deep as given."""
    if isinstance(wanted, Mapping):
        return isinstance(actual, Mapping) and all(_includes(actual.get(k), v) for k, v in wanted.items())
    return actual == wanted


def selects(selector: LmRowSelector, cfg: LmConfig | RunConfig) -> bool:
    """Whether a row's config (a run of the one harness, or an earlier ``LmConfig``) is the one
    a card's selector names (:class:`pezoo.LmRowSelector`)."""
    if cfg.pe != selector.pe or not _includes(cfg.pe_options, selector.options):
        return False
    if any(cfg.pe_options.get(k) is None for k in selector.has):
        return False
    if selector.variant is None:
        return not cfg.is_variant
    finetuned = cfg.lm_eval.finetune_steps if isinstance(cfg, RunConfig) else cfg.finetune_steps
    return _includes(cfg.eval_pe_options, selector.variant) and bool(finetuned) == selector.finetuned


def lm_claims() -> tuple[LmPaperClaim, ...]:
    """Every registered encoding's LM claims (its card's ``lm_claims``), in their ``order``."""
    found = [c for card in pezoo.cards().values() for c in card.lm_claims]
    return tuple(sorted(found, key=lambda c: (c.order, c.key)))


def claimed(cfg: LmConfig | RunConfig, claims: tuple[LmPaperClaim, ...] | None = None) -> bool:
    """Whether a claim names the row of ``cfg``: as the row it is about or one it is compared with."""
    return any(selects(s, cfg) for c in (lm_claims() if claims is None else claims) for s in (c.row, *c.against))
