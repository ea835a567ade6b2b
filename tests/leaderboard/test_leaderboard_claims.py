"""The board tests the papers' claims by stated rules over its own numbers."""

from __future__ import annotations

from harness.ranking import Spread
from leaderboard.board import Board, Row, Table
from leaderboard.claims import CLAIMS, claim_verdicts, unanswered, verdicts


def row(label, *, em_in=1.0, em=(0.0,), reach=(10,), tok=(0.2,), fitted=True, rank=1):
    per_seed = {"em_within": (em_in,) * len(em), "em_beyond": em, "reach": reach, "tok_beyond": tok}
    scores = {k: Spread.of(v) for k, v in per_seed.items()} | {"tok_within": Spread.of([1.0])}
    seeds_fit = len(em) if fitted else 0
    return Row(rank if fitted else None, label, label.split("{")[0], tuple(range(len(em))), scores, seeds_fit, per_seed)


def board(*rows, task="copy"):
    return Board((), (Table("board", task, 10, 40, tuple(rows), ()),))


def claim(name):
    return next(c for c in CLAIMS if name in c.says)


def test_reach_over_every_tested_scale_holds_short_of_it_is_partly_none_does_not_hold():
    prism = claim("PRISM")
    held = verdicts(board(row("prism{paper}", em=(1.0, 1.0), reach=(40, 40))), prism)[0]
    assert held.outcome == "holds" and held.evidence.endswith("tested up to 4× N")  # the claim says 10×
    partly = verdicts(board(row("prism{paper}", em=(0.9, 0.6), reach=(40, 24))), prism)[0]
    assert partly.outcome == "partly" and "reaches 24 on its weakest seed" in partly.evidence
    assert verdicts(board(row("prism{paper}", reach=(10,))), prism)[0].outcome == "does not hold"
    unfit = verdicts(board(row("prism{paper}", em_in=0.5, fitted=False)), prism)[0]
    assert unfit.outcome == "does not hold" and "did not fit" in unfit.evidence


def test_a_claim_is_tested_only_on_the_rows_run_as_its_paper_runs_them():
    # PRISM's defaults and randomized PE on plain positions are nobody's proposal: no verdict
    b = board(row("prism", reach=(10,)), row("randomized:ape{randomize_eval=false}"), row("ape"))
    assert verdicts(b, claim("PRISM")) == [] and verdicts(b, claim("Randomizing")) == []
    assert verdicts(board(row("hard_alibi"), task="reverse"), claim("Hard-ALiBi")) == []  # a copy claim


def test_randomized_beats_its_base_on_every_seed_on_the_mean_or_not_at_all():
    c = claim("Randomizing")
    base = row("ape", tok=(0.2, 0.3))
    assert verdicts(board(row("randomized:ape", tok=(0.4, 0.5)), base), c)[0].outcome == "holds"
    assert verdicts(board(row("randomized:ape", tok=(0.25, 0.6)), base), c)[0].outcome == "partly"
    assert verdicts(board(row("randomized:ape", tok=(0.1, 0.2)), base), c)[0].outcome == "does not hold"


def test_ape_collapse_needs_every_seed_of_every_ape_below_the_bar():
    c = claim("Absolute")
    assert verdicts(board(row("ape"), row("learned_ape", em=(0.0, 0.03))), c)[0].outcome == "holds"
    assert verdicts(board(row("ape"), row("learned_ape", em=(0.0, 0.2))), c)[0].outcome == "partly"
    assert verdicts(board(row("ape", em=(0.3,))), c)[0].outcome == "does not hold"


def test_only_claims_with_a_verdict_are_listed():
    assert [c.says for c, _ in claim_verdicts(board(row("ape")))] == [claim("Absolute").says]


def test_a_task_page_lists_the_verdicts_on_its_own_tables_only():
    from leaderboard.claims import table_verdicts

    b = Board((), (Table("board", "copy", 10, 40, (row("ape"),), ()), Table("board", "reverse", 10, 40, (), ())))
    assert [v.task for _, v in table_verdicts(b, b.tables[0])] == ["copy"]
    assert table_verdicts(b, b.tables[1]) == []


def test_hard_alibi_state_of_the_art_is_tested_by_its_rank():
    c = claim("Hard-ALiBi")
    first = verdicts(board(row("hard_alibi", em=(0.3, 0.5), reach=(12, 14)), row("nope", rank=2)), c)[0]
    assert first.outcome == "holds" and "ranks 1 of 2" in first.evidence  # a comparative claim
    second = board(row("prism{paper}", em=(1.0,)), row("hard_alibi", em=(0.6, 0.9), reach=(13, 24), rank=2))
    partly = verdicts(second, c)[0]
    assert (
        partly.outcome == "partly"
        and "ranks 2 of 2" in partly.evidence
        and "every seed reaches at least 13" in partly.evidence
    )
    assert partly.evidence.endswith("ranked above it: prism{paper}")
    stuck = board(row("prism{paper}"), row("hard_alibi", reach=(10, 15), em=(0.0, 0.2), rank=2))
    assert verdicts(stuck, c)[0].outcome == "does not hold"  # one seed does not get past N


def test_an_ape_that_did_not_fit_is_not_counted_for_the_collapse():
    c = claim("Absolute")
    # an APE that never learned the training scales says nothing about extrapolating past them
    assert verdicts(board(row("ape", em_in=0.7, fitted=False)), c) == []
    v = verdicts(board(row("ape"), row("learned_ape", em_in=0.9, em=(0.0,), fitted=False)), c)[0]
    assert v.outcome == "holds" and "learned_ape did not fit" in v.evidence and "not counted" in v.evidence


def test_a_comparative_claim_needs_every_baseline_beaten_and_separated_by_the_seeds():
    c = claim("FIRE")
    fire = row("fire", em=(0.3, 0.4), rank=1)
    # above both, and its seeds' range (0.3-0.4) clear of theirs: holds
    clear = verdicts(board(fire, row("alibi", em=(0.1, 0.2), rank=2), row("t5", em_in=0.5, fitted=False)), c)[0]
    assert clear.outcome == "holds"
    assert clear.evidence.endswith("; above t5 (did not fit), alibi (rank 2, EM>10 0.15 (0.10–0.20))")  # claim order
    # above on the ranking, but the seeds' ranges meet: partly, naming the one not separated
    close = verdicts(board(fire, row("nope", em=(0.2, 0.3), rank=2)), c)[0]
    assert close.outcome == "partly" and close.evidence.endswith("the seeds do not separate it from nope on EM>10")
    # above one baseline and behind another: partly
    mixed = board(row("alibi", em=(0.5,), rank=1), row("fire", em=(0.3, 0.4), rank=2), row("rope", rank=3))
    v = verdicts(mixed, c)[0]
    assert v.outcome == "partly" and "above rope" in v.evidence and "not above alibi (rank 1" in v.evidence
    # behind every baseline, or not fitted: does not hold
    behind = board(row("kerple_log", em=(0.5,), rank=1), row("fire", rank=2))
    assert verdicts(behind, c)[0].outcome == "does not hold"
    unfit = verdicts(board(row("fire", em_in=0.6, fitted=False), row("t5")), c)[0]
    assert unfit.outcome == "does not hold" and "did not fit" in unfit.evidence
    # without any baseline on the table there is nothing to compare
    assert verdicts(board(fire, row("ape")), c) == []


def test_kerple_is_compared_with_its_own_baselines_and_abacus_only_on_addition():
    kerple = claim("KERPLE")
    v = verdicts(board(row("kerple_log", em=(0.3,), rank=1), row("ape", rank=2), row("nope", em=(0.9,))), kerple)[0]
    assert "above ape" in v.evidence and "nope" not in v.evidence  # NoPE is not one of KERPLE's baselines
    abacus = claim("Abacus")
    reach = row("abacus", em=(1.0, 1.0), reach=(40, 40))
    assert verdicts(board(reach, task="copy"), abacus) == []
    held = verdicts(board(reach, task="addition"), abacus)[0]
    assert held.outcome == "holds" and held.evidence.endswith("tested up to 4× N")


def test_a_did_not_fit_number_reads_as_its_table_cell_never_the_threshold():
    """learned_ape on quick addition: EM≤10 0.948 did not fit; the claim said "0.95", the
    fit threshold, beside "did not fit" (the table reads 0.948)."""
    c = claim("Absolute")
    [v] = verdicts(board(row("ape"), row("learned_ape", em_in=0.9484, fitted=False)), c)
    assert "learned_ape did not fit (EM≤10 0.948)" in v.evidence
    [v] = verdicts(board(row("prism{paper}", em_in=0.9484, fitted=False)), claim("PRISM"))
    assert v.evidence.endswith("(EM≤10 0.948)")


def test_seeds_that_read_the_same_do_not_separate_two_rows():
    """KERPLE-log (0.05-0.14) against T5 (0.00-0.05 on the table, 0.052 unrounded): the
    table shows the ranges meeting, so the seeds do not separate them."""
    c = claim("KERPLE")
    kerple = row("kerple_log", em=(0.053, 0.14), rank=1)
    t5 = row("t5", em=(0.0, 0.052), rank=2)
    [v] = verdicts(board(kerple, t5), c)
    assert v.outcome == "partly" and "the seeds do not separate it from t5" in v.evidence
    [v] = verdicts(board(kerple, row("t5", em=(0.0, 0.03), rank=2)), c)
    assert v.outcome == "holds"
    # randomized PE above its base on every seed only if the tables show it so
    rand = claim("Randomizing")
    b = board(row("randomized:ape", tok=(0.204, 0.5)), row("ape", tok=(0.1, 0.2)))
    assert verdicts(b, rand)[0].outcome == "partly"


def test_a_comparison_of_ranks_waits_for_every_seed():
    """A row short of its planned seeds has no rank: a comparative claim gives no verdict
    on it, and does not count it as "did not fit" either."""
    pending = Row(None, "hard_alibi", "hard_alibi", (0,), row("x").scores, 1, row("x").per_seed, pending=True)
    assert verdicts(board(pending, row("rope", rank=1)), claim("Hard-ALiBi")) == []
    fire = row("fire", em=(0.5, 0.6), rank=1)
    t5 = row("t5", em=(0.1, 0.2), rank=2)
    alibi = Row(None, "alibi", "alibi", (0,), row("x").scores, 1, row("x").per_seed, pending=True)
    [v] = verdicts(board(fire, t5, alibi), claim("FIRE"))
    assert v.outcome == "holds" and "not compared yet (short of their seeds): alibi" in v.evidence
    assert "did not fit" not in v.evidence


def test_claims_without_a_verdict_are_named_with_why():
    """A claim with no verdict used to vanish from the pages: Abacus's, once the board had no
    addition table, left no trace of having been considered."""
    why = dict((c.says, reason) for c, reason in unanswered(board(row("ape"))))
    assert set(why) == {c.says for c in CLAIMS} - {claim("Absolute").says}  # every claim but the one answered
    assert why[claim("Abacus").says] == "the board has no addition table of a protocol the claims are tested on"
    assert why[claim("Hard-ALiBi").says] == "no table has the rows it needs"  # copy is there, hard_alibi is not
    assert why[claim("PRISM").says] == "no table has the rows it needs"
    assert claim("Abacus") not in dict(unanswered(board(row("abacus", reach=(40,)), task="addition")))
