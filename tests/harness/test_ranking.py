"""The ranking rule shared by the terminal table and the board: fit first, then beyond N."""

from __future__ import annotations

import math

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from harness.records.ranking import FIT_THRESHOLD, Spread, fits, reach_beyond, standings


def test_reach_counts_from_the_first_scale_beyond_training():
    em = pd.Series({1: 0.5, 2: 1.0, 3: 0.95, 4: 0.9, 5: 0.89, 6: 1.0})
    assert reach_beyond(em, train_max=2) == 4  # a slip at n=1 <= N does not matter; 0.9 counts; 6 is after a gap
    assert reach_beyond(pd.Series({1: 1.0, 2: 1.0, 3: 0.2}), train_max=2) == 2  # N: nothing beyond
    assert reach_beyond(pd.Series({1: 1.0, 2: 1.0}), train_max=2) == 2  # nothing evaluated beyond
    assert reach_beyond(pd.Series({1: 1.0, 2: 1.0, 3: math.nan, 4: 1.0}), train_max=2) == 2


def test_fit_threshold():
    assert fits(FIT_THRESHOLD) and fits(1.0)
    assert not fits(0.9499) and not fits(math.nan)


def per_seed(rows):
    return pd.DataFrame(rows, columns=["pe", "seed", "in-dist", "EM>N", "reach", "tok-acc>N"])


def test_an_encoding_that_did_not_fit_is_not_ranked_however_well_it_extrapolates():
    table = standings(
        per_seed(
            [
                ("fits_then_collapses", 0, 1.0, 0.0, 10, 0.1),
                ("slips_in_distribution", 0, 0.90, 0.8, 10, 0.9),  # the old solved<= put it last, EM>N first
                ("extrapolates", 0, 0.96, 0.5, 14, 0.7),
            ]
        )
    )
    assert [(s.label, s.rank) for s in table] == [
        ("extrapolates", 1),
        ("fits_then_collapses", 2),
        ("slips_in_distribution", None),
    ]


def test_every_seed_must_fit_and_the_order_is_em_then_reach_then_tokens():
    table = standings(
        per_seed(
            [
                ("a", 0, 1.0, 0.3, 12, 0.5),
                ("a", 1, 0.97, 0.3, 12, 0.5),
                ("b", 0, 1.0, 0.3, 13, 0.1),  # same EM>N as a: reach decides
                ("c", 0, 1.0, 0.3, 13, 0.1),  # exact tie with b: shares its rank
                ("d", 0, 1.0, 0.9, 20, 0.9),
                ("d", 1, 0.5, 0.9, 20, 0.9),  # one seed did not fit: d is not ranked
                ("e", 0, 0.2, 0.0, 10, 0.0),
            ]
        )
    )
    assert [(s.label, s.rank, s.seeds_fit, s.seeds) for s in table] == [
        ("b", 1, 1, 1),
        ("c", 1, 1, 1),
        ("a", 3, 2, 2),
        ("d", None, 1, 2),  # did not fit, ordered by EM<=N: d (0.75) before e (0.2)
        ("e", None, 0, 1),
    ]


def test_differences_the_table_does_not_show_do_not_order_rows():
    """odds_first: every EM>10 reads 0.00, but 12 exact answers of 3000 on one seed used
    to rank randomized PE above encodings with higher per-token accuracy beyond N."""
    table = standings(
        per_seed(
            [
                ("randomized", 0, 1.0, 0.004, 10, 0.34),
                ("randomized", 1, 1.0, 0.0003, 10, 0.19),
                ("alibi", 0, 1.0, 0.0, 10, 0.37),
                ("kerple_power", 0, 1.0, 0.0007, 10, 0.29),
                ("nope", 0, 1.0, 0.0, 10, 0.372),  # 0.37 as shown: ties with alibi
                ("rope", 0, 1.0, 0.006, 10, 0.10),  # EM>N shows as 0.01: above the 0.00s
                ("fire", 0, 1.0, 0.0, 10.04, 0.5),  # reach's mean shows as 10.0: tok>N decides
            ]
        )
    )
    assert [(s.label, s.rank) for s in table] == [
        ("rope", 1),
        ("fire", 2),
        ("alibi", 3),
        ("nope", 3),
        ("kerple_power", 5),
        ("randomized", 6),
    ]


def test_spread_shows_what_the_seeds_did():
    assert Spread.of([0.5]).text() == "0.50"
    assert Spread.of([0.1, 0.9]).text() == "0.50 (0.10–0.90)"
    assert Spread.of([1.0, 1.0, 1.0]).text() == "1.00"
    assert Spread.of([11, 14]).text(0) == "13 (11–14)"  # 12.5: half up on the exact value (harness.records.counts)
    assert Spread.of([]).text() == "-" and Spread.of([math.nan]).text() == "-"


@given(st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=10))
def test_a_spread_never_leaves_the_metric_range(values):
    s = Spread.of(values)
    assert 0.0 <= s.lo <= s.mean + 1e-12 and s.mean <= s.hi + 1e-12 and s.hi <= 1.0


def test_an_encoding_short_of_the_seeds_wanted_is_pending_not_ranked():
    rows = [("three", s, 1.0, 0.1, 10, 0.3) for s in range(3)]
    rows += [("lucky", 0, 1.0, 0.9, 14, 0.9)]  # one seed, far above the others
    rows += [("slipped", 0, 0.5, 0.9, 14, 0.9)]  # one seed that did not fit: did not fit, not pending
    table = standings(per_seed(rows), seeds_wanted=3)
    assert [(s.label, s.rank, s.pending, s.fitted) for s in table] == [
        ("three", 1, False, True),
        ("lucky", None, True, True),
        ("slipped", None, False, False),
    ]
    # the terminal wants no number of seeds: whatever is there is ranked
    assert [(s.label, s.rank) for s in standings(per_seed(rows))][:2] == [("lucky", 1), ("three", 2)]
