"""The board tests the papers' claims by stated rules over its own numbers."""

from __future__ import annotations

import pytest

from harness.records.ranking import Spread
from leaderboard import permutation as pt
from leaderboard.board import Board, Table
from leaderboard.claims import CLAIMS, NO_CONTRAST, OUTCOMES, claim_verdicts, unanswered, verdicts
from leaderboard.rows import Row


def row(label, *, em_in=1.0, em=(0.0,), reach=(10,), tok=(0.2,), fitted=True, rank=1):
    per_seed = {"em_within": (em_in,) * len(em), "em_beyond": em, "reach": reach, "tok_beyond": tok}
    scores = {k: Spread.of(v) for k, v in per_seed.items()} | {"tok_within": Spread.of([1.0])}
    seeds_fit = len(em) if fitted else 0
    return Row(rank if fitted else None, label, label.split("{")[0], tuple(range(len(em))), scores, seeds_fit, per_seed)


EXTRAPOLATES = row("learned_prf", em=(0.1, 0.1, 0.1), reach=(12, 12, 12), rank=99)
"""A row no claim names whose seeds all get past N: the table is not a null one."""


def board(*rows, task="copy", test_max=40, null=False):
    rows = rows if null else (*rows, EXTRAPOLATES)
    return Board((), (Table("board", task, 10, test_max, tuple(rows), ()),))


def claim(name):
    return next(c for c in CLAIMS if name in c.says)


def test_a_multiple_holds_only_where_it_was_tested_and_partly_needs_its_thresholds():
    prism = claim("PRISM")
    every = row("prism{paper}", em=(1.0, 1.0, 1.0), reach=(40, 40, 40))
    # before: "holds" on a table tested to 4x, for a claim of 10x
    at_4 = verdicts(board(every), prism)[0]
    assert at_4.outcome == "partly" and "4×" in at_4.shown and "10×" in at_4.shown and at_4.shown != "partly"
    at_10 = verdicts(board(row("prism{paper}", em=(1.0,) * 3, reach=(100,) * 3), test_max=100), prism)[0]
    assert at_10.outcome == "holds" and at_10.shown == "holds"
    # partly: the weakest seed reaches at least 2x N (20) and is not below NoPE
    assert verdicts(board(row("prism{paper}", em=(0.9, 0.6), reach=(40, 24))), prism)[0].outcome == "partly"
    # past N but short of 2x N: before, "partly" (reverse: 13, stack: 11)
    assert verdicts(board(row("prism{paper}", em=(0.3, 0.3), reach=(13, 15))), prism)[0].outcome == "does not hold"


def test_a_table_tested_less_far_points_to_the_table_that_tests_the_claimed_multiple():
    """Copy tested to 40 and to 100: once PRISM's row to 100 is in, the 40 table's verdict no
    longer calls 10x untested (before: "claimed 10×: untested" beside the 100 table's verdict)."""
    prism = claim("PRISM")
    at_40 = Table("board", "copy", 10, 40, (row("prism{paper}", em=(1.0,) * 3, reach=(40,) * 3), EXTRAPOLATES), ())
    far = row("prism{paper}", em=(0.99, 1.0, 1.0), reach=(92, 100, 100))
    at_100 = Table("board", "copy", 10, 100, (far, EXTRAPOLATES), ())
    short, tested = verdicts(Board((), (at_40, at_100)), prism)
    assert short.outcome == "partly" and short.shown.endswith("claimed 10×: see the table tested to 100")
    assert (tested.outcome, tested.tested_to) == ("partly", 100)  # weakest seed 9.2x: short of 10x
    # a row still short of its seeds on the far table has no verdict there: the 40 table says untested
    pending = Row(None, "prism{paper}", "prism", (0, 1), far.scores, 2, far.per_seed, pending=True)
    waiting = Table("board", "copy", 10, 100, (pending, EXTRAPOLATES), ())
    short_alone, *rest = verdicts(Board((), (at_40, waiting)), prism)
    assert short_alone.shown.endswith("claimed 10×: untested") and rest == []
    # only a table of the same task counts
    elsewhere = Table("board", "reverse", 10, 100, (far, EXTRAPOLATES), ())
    assert verdicts(Board((), (at_40, elsewhere)), prism)[0].shown.endswith("untested")


def test_a_reach_claim_below_nope_by_the_permutation_test_does_not_hold():
    """PRISM on stack_manipulation: reach 11 on its weakest seed, EM>10 below NoPE's on every seed."""
    prism = claim("PRISM")
    low = row("prism{paper}", em=(0.12, 0.14, 0.15), reach=(20, 22, 24))  # 2x N on its weakest seed
    nope = row("nope", em=(0.19, 0.21, 0.23), reach=(11, 11, 12), rank=1)
    v = verdicts(board(low, nope), prism)[0]
    assert v.outcome == "does not hold" and "p = 0.05" in v.evidence
    # the same numbers with the seeds mixed: the test does not put NoPE above, so the 2x reach stands
    mixed = row("nope", em=(0.10, 0.13, 0.16), reach=(11, 11, 12), rank=1)
    assert verdicts(board(low, mixed), prism)[0].outcome == "partly"


def test_a_tested_row_that_did_not_fit_is_no_contrast():
    for name, says in (("prism{paper}", "PRISM"), ("hard_alibi", "Hard-ALiBi"), ("fire", "FIRE")):
        b = board(row(name, em_in=0.6, fitted=False), row("nope", reach=(12,), rank=1))
        v = verdicts(b, claim(says))[0]
        assert v.outcome == NO_CONTRAST and "did not fit" in v.evidence  # before: "does not hold"


def test_a_table_where_nothing_extrapolates_gives_no_contrast_to_every_claim():
    """odds_first at N = 10: no seed of any fitted row keeps EM >= 0.9 at 11; before, KERPLE
    'partly' on 0.01 and randomized 'holds' on ranges 0.003 apart."""
    rows = (
        row("kerple_log", em=(0.0, 0.01, 0.01), rank=1),
        row("alibi", em=(0.0, 0.0, 0.0), rank=2),
        row("randomized:ape", tok=(0.3, 0.32, 0.34), rank=3),
        row("ape", tok=(0.1, 0.12, 0.14), rank=4),
        row("prism{paper}", rank=5),
        row("fire", em_in=0.9, fitted=False),
    )
    found = {c.says: [v.outcome for v in vs] for c, vs in claim_verdicts(board(*rows, null=True))}
    assert set(found) >= {claim(n).says for n in ("PRISM", "KERPLE", "Randomizing", "Absolute", "FIRE")}
    assert all(outcomes == [NO_CONTRAST] for outcomes in found.values())
    # one seed of one fitted row past N is enough for a contrast
    found = claim_verdicts(board(*rows, row("nope", reach=(10, 11), em=(0.0, 0.1), rank=6), null=True))
    assert any(v.outcome != NO_CONTRAST for _, vs in found for v in vs)


def test_randomized_beats_its_base_by_the_permutation_test_on_the_mean_or_not_at_all():
    c = claim("Randomizing")
    base = row("ape", tok=(0.2, 0.25, 0.3))
    assert verdicts(board(row("randomized:ape", tok=(0.4, 0.45, 0.5)), base), c)[0].outcome == "holds"  # p = 0.05
    assert verdicts(board(row("randomized:ape", tok=(0.25, 0.3, 0.6)), base), c)[0].outcome == "partly"
    assert verdicts(board(row("randomized:ape", tok=(0.1, 0.2, 0.2)), base), c)[0].outcome == "does not hold"
    # 2 seeds against 2 can never reach p <= 0.05: above on every seed is "partly", and says the seeds are too few
    two = verdicts(board(row("randomized:ape", tok=(0.4, 0.5)), row("ape", tok=(0.2, 0.3))), c)[0]
    assert two.outcome == "partly" and "too few seeds" in two.evidence


def test_randomized_uses_the_row_at_its_papers_ratio_where_the_table_has_it():
    c = claim("Randomizing")
    base = row("ape", tok=(0.2, 0.25, 0.3))
    at_2048 = row("randomized:ape", tok=(0.1, 0.15, 0.2))  # below APE
    at_ratio = row("randomized:ape{max_length=336}", tok=(0.4, 0.45, 0.5))
    v = verdicts(board(at_2048, at_ratio, base), c)[0]
    assert v.outcome == "holds" and v.evidence.startswith("randomized:ape{max_length=336}")
    assert "L = 2048" in v.evidence  # the other row is shown beside it
    alone = verdicts(board(at_2048, base), c)[0]
    assert alone.outcome == "does not hold" and "L = 2048" in alone.evidence


def test_ape_collapse_needs_every_seed_of_every_ape_below_the_bar():
    c = claim("Absolute")
    assert verdicts(board(row("ape"), row("learned_ape", em=(0.0, 0.03))), c)[0].outcome == "holds"
    assert verdicts(board(row("ape"), row("learned_ape", em=(0.0, 0.2))), c)[0].outcome == "partly"
    assert verdicts(board(row("ape", em=(0.3,))), c)[0].outcome == "does not hold"


def test_an_ape_that_did_not_fit_is_not_counted_for_the_collapse():
    c = claim("Absolute")
    assert verdicts(board(row("ape", em_in=0.7, fitted=False)), c)[0].outcome == NO_CONTRAST
    v = verdicts(board(row("ape"), row("learned_ape", em_in=0.9, em=(0.0,), fitted=False)), c)[0]
    assert v.outcome == "holds" and "learned_ape did not fit" in v.evidence and "not counted" in v.evidence


def test_hard_alibi_is_judged_against_the_strongest_other_row_by_the_permutation_test():
    c = claim("Hard-ALiBi")
    first = board(row("hard_alibi", em=(0.5, 0.6, 0.7), reach=(14, 15, 16)), row("nope", em=(0.1, 0.2, 0.3), rank=2))
    assert verdicts(first, c)[0].outcome == "holds"
    close = board(row("hard_alibi", em=(0.2, 0.6, 0.9), reach=(14, 15, 16)), row("nope", em=(0.3, 0.4, 0.5), rank=2))
    assert verdicts(close, c)[0].outcome == "partly"
    # the copy table: prism{paper} 1.00 on every seed, hard_alibi 0.20-0.91: before, "partly"
    second = board(
        row("prism{paper}", em=(1.0,) * 3), row("hard_alibi", em=(0.2, 0.87, 0.91), reach=(13, 24, 24), rank=2)
    )
    v = verdicts(second, c)[0]
    assert v.outcome == "does not hold" and "prism{paper}" in v.evidence and "p = 0.05" in v.evidence


def test_a_better_than_claim_is_judged_against_the_strongest_named_competitor():
    c = claim("FIRE")
    fire = row("fire", em=(0.3, 0.35, 0.4), rank=2)
    rope = row("rope", em=(0.0, 0.0, 0.0), rank=5)
    # above the collapsing rope by far, tied with nope: before, "partly" for beating rope; now judged against nope
    tied = verdicts(board(row("nope", em=(0.3, 0.38, 0.41), rank=1), fire, rope), c)[0]
    assert tied.outcome == "does not hold" and "nope" in tied.evidence
    ahead = verdicts(board(fire, row("nope", em=(0.2, 0.25, 0.3), rank=3), rope), c)[0]
    assert ahead.outcome == "does not hold" and "p = " in ahead.evidence  # ranked above, tied by the test: not shown
    clear = verdicts(board(fire, row("nope", em=(0.1, 0.15, 0.2), rank=3), rope), c)[0]
    assert clear.outcome == "holds"
    unfit = verdicts(board(fire, row("t5", em_in=0.5, fitted=False)), c)[0]
    assert unfit.outcome == NO_CONTRAST  # the only named competitor did not fit
    assert verdicts(board(fire, row("ape")), c) == []  # none named on the table


def test_kerple_is_compared_with_its_own_baselines_and_abacus_only_on_addition():
    kerple = claim("KERPLE")
    v = verdicts(board(row("kerple_log", em=(0.3,), rank=1), row("ape", rank=2), row("nope", em=(0.9,))), kerple)[0]
    assert "ape" in v.evidence and "nope" not in v.evidence  # NoPE is not one of KERPLE's baselines
    abacus = claim("Abacus")
    reach = row("abacus", em=(1.0, 1.0), reach=(40, 40))
    assert verdicts(board(reach, task="copy"), abacus) == []
    held = verdicts(board(reach, task="addition"), abacus)[0]
    assert held.outcome == "partly" and "4×" in held.shown and "5×" in held.shown  # tested to 4x of a 5x claim


def test_a_did_not_fit_number_reads_as_its_table_cell_never_the_threshold():
    c = claim("Absolute")
    [v] = verdicts(board(row("ape"), row("learned_ape", em_in=0.9484, fitted=False)), c)
    assert "learned_ape did not fit (EM≤10 0.948)" in v.evidence
    [v] = verdicts(board(row("prism{paper}", em_in=0.9484, fitted=False)), claim("PRISM"))
    assert "(EM≤10 0.948)" in v.evidence


def test_a_comparison_waits_for_every_seed():
    pending = Row(None, "hard_alibi", "hard_alibi", (0,), row("x").scores, 1, row("x").per_seed, pending=True)
    assert verdicts(board(pending, row("rope", rank=1)), claim("Hard-ALiBi")) == []
    fire = Row(None, "fire", "fire", (0,), row("x").scores, 1, row("x").per_seed, pending=True)
    assert verdicts(board(fire, row("t5", rank=1)), claim("FIRE")) == []


def test_every_verdict_is_one_of_the_four_outcomes():
    b = board(row("prism{paper}", em=(1.0, 1.0), reach=(40, 40)), row("ape"), row("fire", rank=2), row("nope"))
    assert {v.outcome for _, vs in claim_verdicts(b) for v in vs} <= set(OUTCOMES)


@pytest.mark.parametrize(
    ("a", "b", "p"),
    [
        ((3, 4, 5), (0, 1, 2), 1 / 20),  # every seed above: the smallest p of 3 against 3
        ((0, 1, 2), (3, 4, 5), 1.0),
        ((1, 2), (0,), 1 / 3),
        ((5, 6, 7), (0, 1, 2, 3, 4, 5, 6, 7), None),  # checked below against brute force
    ],
)
def test_the_permutation_test_is_exact(a, b, p):
    import itertools

    pooled = [*a, *b]
    observed = sum(a) / len(a) - sum(b) / len(b)
    splits = list(itertools.combinations(range(len(pooled)), len(a)))
    brute = sum(
        sum(pooled[i] for i in g) / len(a) - sum(pooled[i] for i in range(len(pooled)) if i not in g) / len(b)
        >= observed - 1e-12
        for g in splits
    ) / len(splits)
    assert pt.p_above(a, b) == pytest.approx(brute)
    if p is not None:
        assert pt.p_above(a, b) == pytest.approx(p)
    assert pt.smallest_p(3, 3) == pytest.approx(0.05) and not pt.too_few(3, 3) and pt.too_few(2, 3)


def test_claims_without_a_verdict_are_named_with_why():
    """A claim with no verdict used to vanish from the pages: Abacus's, once the board had no
    addition table, left no trace of having been considered."""
    why = dict((c.says, reason) for c, reason in unanswered(board(row("ape"))))
    assert set(why) == {c.says for c in CLAIMS} - {claim("Absolute").says}  # every claim but the one answered
    assert why[claim("Abacus").says] == "the board has no addition table of a protocol the claims are tested on"
    assert why[claim("Hard-ALiBi").says] == "no table has the rows it needs"  # copy is there, hard_alibi is not
    assert why[claim("PRISM").says] == "no table has the rows it needs"
    assert claim("Abacus") not in dict(unanswered(board(row("abacus", reach=(40,)), task="addition")))


def test_a_better_than_claims_stated_test_names_the_outcomes_its_rule_gives():
    """A card's ``test`` sentence is the rule the board states: an above-the-strongest claim
    tied by the permutation test does not hold (since 25 November), and the FIRE and KERPLE
    cards still said "partly" for it until 27 November."""
    import re

    import pezoo

    stated = [c for card in pezoo.cards().values() for c in card.claims if c.rule == "above_strongest"]
    assert stated
    for c in stated:
        outcomes = set(re.findall(r"\((holds|partly|does not hold)\)", c.test))
        assert outcomes == {"holds", "does not hold"}, c.test
        fire_like = claim(c.says[:30])
        ahead = row(c.row, em=(0.3, 0.35, 0.4), rank=1)
        other = row(c.against[0], em=(0.2, 0.25, 0.3), rank=2)
        assert verdicts(board(ahead, other), fire_like)[0].outcome == "does not hold"  # above, tied: not shown
