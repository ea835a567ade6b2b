"""The papers' language-modelling claims judged on the LM section's rows: the rules, and what
each verdict says.

The claims are the encodings' own: each paper card's ``lm_claims`` (:class:`pezoo.LmPaperClaim`,
declared beside the encoding's class), whose rows are data (:class:`pezoo.LmRowSelector`,
matched by ``harness.lm.claims.selects``) and whose ``rule`` names one of :data:`RULES`; this
module names no encoding. Verdicts use the board's four outcomes (``leaderboard.claims``) and
its one test, the exact permutation test over seeds (``leaderboard.permutation``). Every rule
reads the non-overlapping windows (the papers' default evaluation: ALiBi's and KERPLE's
tables are of it), and every verdict's ``why`` says the multiple of L the paper claims and
the one this table tests:

* a *reach* claim ("X stays within 5 % of bpb(L) to m × L"): holds when every seed reaches
  m × L; partly (k of n) when k seeds do; does not hold when none does. On a table tested
  short of m, every seed reaching the longest tested length is "partly: holds to the tested
  k×; claimed m×: untested". A row's tail-mode reach is given beside it where its records
  have a tail score at L.
* a *blow-up* claim ("X leaves 5 % within m × L"): holds when every seed leaves before
  m × L, does not hold when none does, partly (k of n) when k seeds do.
* a *below* claim ("X's bits per byte at long lengths are below Y's"): at the claimed multiple
  of L (or, on a table tested shorter, the longest length) both rows reached on every seed,
  against the strongest of the rows named (lowest mean): holds when the permutation test puts
  the other above X (p <= 0.05), partly (k of n: X's seeds below the other's mean) when X is
  lower on the mean only, otherwise does not hold.

A row that departs from its paper's LM setup (its card's ``lm_departures``: xPos's
``scale_base`` at another ratio to L) is judged too, its ``why`` saying how it departs.

No contrast: nothing on the corpus's table keeps within 5 % to 2 × L on its weakest seed.
A claim whose rows are not on the table is listed as not yet run; one whose row matches two
setups of the encoding (FIRE's threshold as its reference code sets it, and scaled to L) gets
a verdict for each, named.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pezoo
from harness.lm.claims import lm_claims, selects
from leaderboard.claims import DOES_NOT_HOLD, HOLDS, NO_CONTRAST, PARTLY
from leaderboard.lm_rows import LmRow, weakest_tail
from leaderboard.permutation import ALPHA, p_above, p_text
from pezoo import LmPaperClaim, RunFacts

__all__ = [
    "AT_L_NOTE",
    "LM_CLAIMS",
    "RULES",
    "LmVerdict",
    "card_lm_claims",
    "check_claim",
    "departures",
    "verdict",
    "verdicts",
]

AT_L_NOTE = "already more than 5 % above the bpb at L of the trained run they modify"


@dataclass(frozen=True)
class LmVerdict:
    """A claim's verdict on one row.

    Attributes:
        claim: the claim judged.
        outcome: one of the board's outcomes (``leaderboard.claims``).
        why: what the table shows: the claimed and tested multiples, the seeds, the test.
        seeds: (k, n) where the row's n seeds split, k bearing the claim out; None otherwise.
    """

    claim: LmPaperClaim
    outcome: str
    why: str
    seeds: tuple[int, int] | None = None

    @property
    def shown(self) -> str:
        """The outcome as the page shows it: ``partly (2 of 3)`` where the seeds split."""
        if self.outcome == PARTLY and self.seeds is not None:
            return f"{PARTLY} ({self.seeds[0]} of {self.seeds[1]})"
        return self.outcome


def departures(row: LmRow) -> list[str]:
    """How the row's run departs from its paper's LM setup (its card's ``lm_departures``)."""
    cfg = row.config
    card = pezoo.card_of(cfg.pe)
    if card.lm_departures is None:
        return []
    dims = pezoo.ModelDims(d_model=cfg.backbone.d_model, n_heads=cfg.backbone.n_heads, n_layers=cfg.backbone.n_layers)
    facts = RunFacts(
        pe=cfg.pe,
        task=cfg.task,
        options=dict(cfg.pe_options),
        dims=dims,
        eval_options=dict(cfg.eval_pe_options),
        recorded_options=dict(cfg.pe_options),
        lr=cfg.train.lr,
        train_max=cfg.length,
        test_max=cfg.eval.lengths[-1],
    )
    return card.lm_departures(facts)


def _tested(row: LmRow) -> float:
    return row.lengths[-1] / row.length


def _tail(row: LmRow) -> str:
    got = weakest_tail(row)
    return "" if got is None else f"; tail mode: weakest seed within 5 % to {got:g}× L"


def _common_longest(a: LmRow, b: LmRow, limit: int | None = None) -> int | None:
    """The longest length (at most ``limit``) both rows reached on every seed."""
    for s in sorted(set(a.lengths) & set(b.lengths), reverse=True):
        if limit is not None and s > limit:
            continue
        if all(x is not None for x in a.bpb(s) + b.bpb(s)):
            return s
    return None


def _reach(claim: LmPaperClaim, row: LmRow, rows: Sequence[LmRow]) -> LmVerdict | None:
    """Holds when every seed reaches ``multiple`` × L; partly (k of n) when k do; on a table
    tested short of the multiple, partly when every seed reaches the longest tested length."""
    reaches = [s / row.length for s in row.reaches()]
    n, tested, claimed = len(reaches), _tested(row), claim.multiple
    goal = min(claimed, tested)
    k = sum(r >= goal for r in reaches)
    scope = f"claimed {claimed:g}× L, tested to {tested:g}×"
    weakest = f"weakest seed {min(reaches):g}×" if min(reaches) else f"weakest seed not even at L, {AT_L_NOTE}"
    if k == n and claimed <= tested:
        return LmVerdict(claim, HOLDS, f"{scope}: every seed within 5 % to {goal:g}× L{_tail(row)}")
    if k == n:
        why = f"{scope}: every seed within 5 % to the tested {tested:g}×; {claimed:g}× untested{_tail(row)}"
        return LmVerdict(claim, PARTLY, why)
    if k == 0:
        return LmVerdict(claim, DOES_NOT_HOLD, f"{scope}: no seed within 5 % to {goal:g}× L; {weakest}{_tail(row)}")
    why = f"{scope}: {k} of {n} seeds within 5 % to {goal:g}× L; {weakest}{_tail(row)}"
    return LmVerdict(claim, PARTLY, why, (k, n))


def _blowup(claim: LmPaperClaim, row: LmRow, rows: Sequence[LmRow]) -> LmVerdict | None:
    """Holds when every seed leaves 5 % before ``multiple`` × L, does not hold when none does,
    partly (k of n) when k do."""
    reaches = [s / row.length for s in row.reaches()]
    n, below = len(reaches), sum(r < claim.multiple for r in reaches)
    why = (
        f"claimed within {claim.multiple:g}× L, tested to {_tested(row):g}×: {below} of {n} seeds leave 5 % "
        f"before {claim.multiple:g}× L{_tail(row)}"
    )
    if below == n:
        return LmVerdict(claim, HOLDS, why)
    return LmVerdict(claim, DOES_NOT_HOLD, why) if below == 0 else LmVerdict(claim, PARTLY, why, (below, n))


def _below(claim: LmPaperClaim, row: LmRow, rows: Sequence[LmRow]) -> LmVerdict | None:
    """At the claimed multiple of L (the longest length both rows reached on every seed, up
    to it), against the strongest of the ``against`` rows (lowest mean): holds when the
    permutation test puts it above ``row`` (p <= 0.05), partly (k of n: ``row``'s seeds below
    its mean) when ``row`` is lower on the mean only, otherwise does not hold. None when none
    of the ``against`` rows is on the table."""
    others = [r for r in (_find(rows, m) for m in claim.against) if r is not None and r is not row]
    if not others:
        return None
    limit = round(claim.multiple * row.length) if claim.multiple else None
    scope = f"claimed at {claim.multiple:g}× L" if claim.multiple else "claimed at long lengths (no multiple named)"
    compared = []
    for other in others:
        at = _common_longest(row, other, limit)
        if at is None:
            continue
        mine = [x for x in row.bpb(at) if x is not None]
        theirs = [x for x in other.bpb(at) if x is not None]
        compared.append((sum(theirs) / len(theirs), at, other, mine, theirs))
    if not compared:
        return LmVerdict(claim, DOES_NOT_HOLD, f"{scope}: no length up to it that both rows reached on every seed")
    mean_other, at, other, mine, theirs = min(compared, key=lambda c: c[0])  # the strongest: lowest bpb
    p = p_above(theirs, mine)
    mean_mine = sum(mine) / len(mine)
    text = (
        f"{scope}, judged at {at} = {at / row.length:g}× L (tested to {_tested(row):g}×): {mean_mine:.3f} against "
        f"{other.shown} {mean_other:.3f} bpb, {p_text(p, len(theirs), len(mine))}"
    )
    if p is not None and p <= ALPHA:
        return LmVerdict(claim, HOLDS, text)
    if mean_mine < mean_other:
        return LmVerdict(claim, PARTLY, text, (sum(x < mean_other for x in mine), len(mine)))
    return LmVerdict(claim, DOES_NOT_HOLD, text)


def _find(rows: Sequence[LmRow], selector: pezoo.LmRowSelector) -> LmRow | None:
    found = [r for r in rows if selects(selector, r.config)]
    return max(found, key=lambda r: len(r.records)) if found else None


Rule = Callable[[LmPaperClaim, LmRow, Sequence[LmRow]], "LmVerdict | None"]

RULES: dict[str, Rule] = {"reach": _reach, "blowup": _blowup, "below": _below}
"""The rules an encoding card's LM claim names (:attr:`pezoo.LmPaperClaim.rule`), each
given the claim, its row and the corpus's rows (module docstring words each)."""


def check_claim(claim: LmPaperClaim) -> LmPaperClaim:
    """``claim`` when the board can test it; a one-line ValueError naming what is wrong otherwise."""
    where = f"LM claim {claim.key!r} of {claim.row.pe!r}"
    if claim.rule not in RULES:
        raise ValueError(f"{where}: unknown rule {claim.rule!r}; rules: {', '.join(RULES)}")
    if claim.rule in ("reach", "blowup") and not claim.multiple > 0:
        raise ValueError(f"{where}: rule {claim.rule!r} needs a multiple of L above 0, got {claim.multiple!r}")
    if claim.rule == "below" and not claim.against:
        raise ValueError(f"{where}: rule 'below' needs the rows it is compared with (against)")
    return claim


def card_lm_claims() -> tuple[LmPaperClaim, ...]:
    """Every registered encoding's LM claims (its card's ``lm_claims``), in their order in the section."""
    found = lm_claims()
    keys = [c.key for c in found]
    if len(set(keys)) != len(keys):
        raise ValueError(f"two LM claims share a key: {sorted(k for k in set(keys) if keys.count(k) > 1)}")
    return tuple(check_claim(c) for c in found)


LM_CLAIMS: tuple[LmPaperClaim, ...] = card_lm_claims()
"""The papers' LM claims the section judges, read from the encodings' cards (issue 52's list)."""


def verdicts(claim: LmPaperClaim, rows: Sequence[LmRow]) -> list[LmVerdict]:
    """The claim's verdicts on one task's rows: one per row its selector matches (two setups
    of one encoding, e.g. FIRE's threshold as its reference code sets it and scaled to L,
    each judged, most seeds first, its ``why`` naming the row and any departure from its
    paper's setup); none when its row (or, for ``below``, every row it is compared with) is
    not on the table."""
    rule = RULES[check_claim(claim).rule]
    found = sorted((r for r in rows if selects(claim.row, r.config)), key=lambda r: (-len(r.records), r.label))
    if not found:
        return []
    if not any(min(r.reaches()) >= 2 * r.length for r in rows):
        why = "nothing on this table keeps within 5 % of bpb(L) to 2× L on its weakest seed"
        return [LmVerdict(claim, NO_CONTRAST, why)]
    out = []
    for row in found:
        v = rule(claim, row, rows)
        if v is None:
            continue
        departs = "; ".join(departures(row))
        why = f"departs from the paper's setup ({departs}): {v.why}" if departs else v.why
        out.append(dataclasses.replace(v, why=why if len(found) == 1 else f"{row.shown}: {why}"))
    return out


def verdict(claim: LmPaperClaim, rows: Sequence[LmRow]) -> LmVerdict | None:
    """The first of :func:`verdicts` (the matched row with the most seeds), or None."""
    found = verdicts(claim, rows)
    return found[0] if found else None
