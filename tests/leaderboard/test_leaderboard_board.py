"""The board's numbers against hand computations on records with chosen metrics."""

from __future__ import annotations

import re
import statistics
from fractions import Fraction
from pathlib import Path

import pytest
from html_structure import parse_html
from leaderboard_fixtures import make_record

from leaderboard import board as bd
from leaderboard import notes, reach, rows
from leaderboard import overview as ov
from leaderboard import provenance as prov
from leaderboard import records as rc
from leaderboard.plans import plans_of
from leaderboard.readme import render_readme
from leaderboard.schema import Record

FIT = 0.95  # the fit threshold, as the board states it
REACH = 0.9


def rec(data: dict, line: int = 1) -> Record:
    return Record(data, Path("fixture.jsonl"), line)


# task copy, trained on 1..3, tested 4..7
ROPE0 = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.95, 5: 0.5, 6: 0.0, 7: 0.0}  # fits; reach 4
ROPE1 = {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 0.9, 6: 0.2, 7: 0.0}  # fits; reach 5 (0.9 counts)
NOPE = {1: 1.0, 2: 1.0, 3: 0.8, 4: 0.0, 5: 0.0, 6: 0.0, 7: 0.0}  # EM<=N 0.933: does not fit
ALIBI = {n: 1.0 for n in range(1, 8)}  # fits; reach 7
FIRST_FAILS = {1: 0.5, 2: 1.0, 3: 1.0, 4: 1.0, 5: 1.0, 6: 1.0, 7: 1.0}  # extrapolates, but EM<=N 0.833


def records() -> list[Record]:
    data = [
        make_record("rope", "copy", 0, ROPE0, train_max=3),
        make_record("rope", "copy", 1, ROPE1, train_max=3),
        make_record("nope", "copy", 0, NOPE, train_max=3),
        make_record("nope", "copy", 1, NOPE, train_max=3),
        make_record("alibi", "copy", 0, ALIBI, train_max=3),
        make_record("ape", "copy", 0, FIRST_FAILS, train_max=3),
    ]
    return [rec(d, i) for i, d in enumerate(data, start=1)]


def beyond(em: dict[int, float], n: int = 3) -> float:
    return statistics.mean(v for k, v in em.items() if k > n)


def within(em: dict[int, float], n: int = 3) -> float:
    return statistics.mean(v for k, v in em.items() if k <= n)


def test_scores_match_hand_computation():
    board = bd.assemble(records())
    [table] = board.tables
    assert (table.task, table.preset, table.train_max, table.test_max) == ("copy", "smoke", 3, 7)
    rows = {r.label: r for r in table.rows}
    rope = rows["rope"].scores
    assert (rope["reach"].mean, rope["reach"].lo, rope["reach"].hi, rope["reach"].n) == (4.5, 4, 5, 2)
    em_beyond = [beyond(ROPE0), beyond(ROPE1)]  # 0.3625, 0.525
    assert rope["em_beyond"].mean == pytest.approx(statistics.mean(em_beyond))
    assert (rope["em_beyond"].lo, rope["em_beyond"].hi) == pytest.approx((0.3625, 0.525))
    assert rope["em_beyond"].text() == "0.44 (0.36–0.53)"  # mean (min–max): never wider than [0, 1]
    tok = {n: min(1.0, v + 0.05) for n, v in ROPE0.items()}, {n: min(1.0, v + 0.05) for n, v in ROPE1.items()}
    assert rope["tok_beyond"].mean == pytest.approx(statistics.mean(beyond(t) for t in tok))
    assert rope["tok_within"].mean == pytest.approx(statistics.mean(within(t) for t in tok))
    assert rope["em_within"].mean == 1.0 and rope["em_within"].text() == "1.00"
    assert rows["rope"].per_seed["em_beyond"] == pytest.approx(tuple(em_beyond))  # in seed order
    assert rows["nope"].scores["reach"].text(0) == "3"  # N: nothing beyond; equal seeds: no range
    assert rows["nope"].scores["em_within"].mean == pytest.approx((1 + 1 + 0.8) / 3)
    assert rows["alibi"].scores["reach"].mean == 7 and rows["alibi"].seeds == (0,)
    assert rows["ape"].scores["reach"].mean == 7  # counted from N+1: the slip at n=1 does not matter


def test_unfitted_encodings_follow_the_ranked_ones_without_a_rank():
    [table] = bd.assemble(records()).tables
    # fitted (every seed EM<=N >= 0.95): alibi (EM>N 1.0), rope (0.44); then by EM<=N: nope 0.933, ape 0.833
    assert within(NOPE) < FIT and within(FIRST_FAILS) < FIT and beyond(FIRST_FAILS) > beyond(ROPE1)
    assert [(r.rank, r.label, r.seeds_fit, len(r.seeds)) for r in table.rows] == [
        (1, "alibi", 1, 1),
        (2, "rope", 2, 2),
        (None, "nope", 0, 2),
        (None, "ape", 0, 1),
    ]
    assert [r.fitted for r in table.rows] == [True, True, False, False]


def test_one_seed_that_does_not_fit_unranks_the_encoding():
    recs = [*records(), rec(make_record("xpos", "copy", 0, ALIBI, train_max=3), 7)]
    recs.append(rec(make_record("xpos", "copy", 1, NOPE, train_max=3), 8))
    [table] = bd.assemble(recs).tables
    xpos = next(r for r in table.rows if r.label == "xpos")
    assert xpos.rank is None and (xpos.seeds_fit, xpos.seeds) == (1, (0, 1))
    assert [r.label for r in table.rows if r.fitted] == ["alibi", "rope"]


def test_exact_ties_share_a_rank():
    recs = records()
    # t5 with exactly rope's numbers ties with it on every key; nope's twin stays unranked
    recs += [rec(make_record("t5", "copy", s, em, train_max=3), 10 + s) for s, em in ((0, ROPE0), (1, ROPE1))]
    recs += [rec(make_record("learned_ape", "copy", s, NOPE, train_max=3), 20 + s) for s in (0, 1)]
    recs += [rec(make_record("fire", "copy", 0, ROPE0, train_max=3), 30)]  # below rope: EM>N 0.3625
    [table] = bd.assemble(recs).tables
    assert [(r.rank, r.label) for r in table.rows] == [
        (1, "alibi"),
        (2, "rope"),  # tie: same rank, listed by name
        (2, "t5"),
        (4, "fire"),
        (None, "learned_ape"),  # same EM<=N as nope: by name
        (None, "nope"),
        (None, "ape"),
    ]


def test_ties_on_exact_match_beyond_training_are_broken_by_reach_then_token_accuracy():
    a = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.5, 5: 0.75, 6: 0.0}  # EM>N 1.25/3, reach 3 (0.5 < 0.9 at n=4)
    b = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.75, 5: 0.0, 6: 0.5}  # EM>N 1.25/3, reach 3; tok>N from its own table
    c = {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 0.25, 6: 0.0}  # EM>N 1.25/3, reach 4
    assert beyond(a) == beyond(b) == beyond(c)
    recs = [rec(make_record("a_pe", "copy", 0, a, {n: 0.5 for n in a}, train_max=3))]
    recs.append(rec(make_record("b_pe", "copy", 0, b, {n: 0.6 for n in b}, train_max=3)))
    recs.append(rec(make_record("c_pe", "copy", 0, c, {n: 0.1 for n in c}, train_max=3)))
    [table] = bd.assemble(recs).tables
    assert [(r.rank, r.label) for r in table.rows] == [(1, "c_pe"), (2, "b_pe"), (3, "a_pe")]


def test_a_slip_in_distribution_no_longer_outranks_what_happens_beyond():
    # the old solved<= put "collapses" (fits 1..N, nothing beyond) above "holds" (one slip at n=2, still fits)
    collapses = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.0, 5: 0.0}
    holds = {1: 1.0, 2: 0.89, 3: 1.0, 4: 0.95, 5: 0.5}  # EM<=N 0.963 >= 0.95
    assert within(holds) >= FIT
    recs = [rec(make_record(pe, "copy", 0, em, train_max=3)) for pe, em in (("collapses", collapses), ("holds", holds))]
    [table] = bd.assemble(recs).tables
    assert [(r.rank, r.label) for r in table.rows] == [(1, "holds"), (2, "collapses")]


def test_an_unfitted_row_near_the_threshold_shows_three_decimals():
    near = {1: 1.0, 2: 0.9, 3: 0.948, 4: 0.0}  # EM<=N 0.9493: would read 0.95 next to "did not fit"
    [table] = bd.assemble([rec(make_record("rope", "copy", 0, near, train_max=3))]).tables
    [row] = table.rows
    assert not row.fitted and rows.cell_text(row, "em_within") == "0.949"
    fits = {1: 1.0, 2: 1.0, 3: 0.96, 4: 0.0}
    [row] = bd.assemble([rec(make_record("rope", "copy", 0, fits, train_max=3))]).tables[0].rows
    assert row.fitted and rows.cell_text(row, "em_within") == "0.99" and rows.cell_text(row, "reach") == "3"


def test_reach_reads_its_mean_to_one_decimal_and_never_rounds_to_a_scale_no_seed_reached():
    # reaches 4, 5 and 7 over seeds (ROPE0, ROPE1, ALIBI): mean 5.33 would read "5"; 4 and 5: 4.5 rounded to even
    three = [rec(make_record("rope", "copy", s, em, train_max=3), s + 1) for s, em in enumerate((ROPE0, ROPE1, ALIBI))]
    [row] = bd.assemble(three).tables[0].rows
    assert rows.cell_text(row, "reach") == "5.3 (4–7)"
    [row] = bd.assemble(three[:2]).tables[0].rows
    assert rows.cell_text(row, "reach") == "4.5 (4–5)"
    [row] = bd.assemble([three[2], rec(make_record("rope", "copy", 1, ALIBI, train_max=3), 9)]).tables[0].rows
    assert rows.cell_text(row, "reach") == "7"


def test_curves_mean_and_band():
    board = bd.assemble(records())
    [table] = board.tables
    rope = next(c for c in table.curves if c.label == "rope")
    assert rope.lengths == tuple(range(1, 8)) and rope.splits == ("train",) * 3 + ("test",) * 4
    k = rope.lengths.index(5)
    assert rope.exact_match[k].mean == Fraction(7, 10)  # (0.5 + 0.9) / 2, exactly
    assert rope.exact_match_band[k] == (0.5, 0.9)
    assert rope.token_lengths[k] == 2 * 5 + 3 and rope.seeds == (0, 1)


def test_each_preset_and_task_is_its_own_table():
    recs = [
        *records(),
        rec(make_record("rope", "reverse", 0, ROPE0, train_max=3), 20),
        rec(make_record("rope", "copy", 0, ALIBI, preset="long", steps=40, train_max=3), 21),
    ]
    board = bd.assemble(recs)
    assert [(t.task, t.preset) for t in board.tables] == [("copy", "long"), ("copy", "smoke"), ("reverse", "smoke")]
    assert board.tables[0].rows[0].scores["reach"].mean == 7.0  # the long preset's rope, not pooled with smoke's


def test_one_preset_label_for_two_protocols_is_refused():
    recs = [rec(make_record("rope", "copy", 0, ROPE0, train_max=3), 1),
            rec(make_record("nope", "copy", 0, NOPE, train_max=3, steps=99), 2)]  # fmt: skip
    with pytest.raises(rc.BoardError, match=r"fixture.jsonl:2 and fixture.jsonl:1: .*\(train.steps\)"):
        bd.assemble(recs)


def test_records_from_before_the_evaluation_options_share_a_board_with_newer_ones():
    old = make_record("rope", "copy", 0, ROPE0, train_max=3)
    for key in ("every", "start_below_loss", "select"):  # written before EvalConfig had them
        del old["config"]["eval"][key]
    new = make_record("nope", "copy", 0, NOPE, train_max=3)
    assert len(bd.assemble([rec(old, 1), rec(new, 2)]).tables[0].rows) == 2
    periodic = make_record("alibi", "copy", 0, ALIBI, train_max=3)
    periodic["config"]["eval"]["every"] = 10
    with pytest.raises(rc.BoardError, match=r"\(eval\.every\)"):
        bd.assemble([rec(old, 1), rec(periodic, 3)])


def test_labels_keep_options_apart():
    assert rc.encoding_label("rope", {}) == "rope"
    # The spec syntax of --pe and sweep files (pezoo.spec), so a label can be pasted back.
    assert rc.encoding_label("rope", {"base": 500}) == "rope{base=500}"
    # A randomized run stored before randomize_eval existed evaluated on plain positions;
    # one stored before draw existed gave a padded row the first n of the batch's one draw.
    assert rc.encoding_label("randomized:ape", {}) == "randomized:ape{draw=per_batch,randomize_eval=false}"
    assert rc.encoding_label("randomized:ape", {"randomize_eval": True}) == "randomized:ape{draw=per_batch}"
    new = {"draw": "per_length", "randomize_eval": True}
    assert rc.encoding_label("randomized:ape", new) == "randomized:ape"
    paper = {"n_cursors": 4, "d_pe": 226, "gru_hidden": 100, "layers": [0], "copy_every": 5, "copy_key": "absolute"}
    config = {"task": "reverse", "backbone": {"d_model": 128, "n_layers": 3, "n_heads": 4}}
    assert rc.encoding_label("prism", paper, config) == "prism{paper}"
    assert rc.encoding_label("prism", {**paper, "n_cursors": 2}, config).startswith("prism{copy_every=5,")


def test_an_alias_and_its_encoding_at_one_seed_are_refused_not_merged_into_one_row():
    # `randomized` is `randomized:ape`: both show as one label, so two runs at seed 0 would
    # count as two seeds of one row.
    a = make_record("randomized", "copy", 0, NOPE, train_max=3)
    b = make_record("randomized:ape", "copy", 0, NOPE, train_max=3)
    with pytest.raises(rc.BoardError, match="two runs of 'randomized:ape"):
        bd.assemble([rec(a, 1), rec(b, 2)])


def test_provenance_flags_everything_but_a_gpu_board_on_gpus():
    cpu = prov.provenance(records())
    assert len(cpu) == 1 and cpu[0].on_cpu and not cpu[0].paper_scale
    assert cpu[0].seeds == (0, 1) and cpu[0].steps == (20,) and cpu[0].files == ("fixture.jsonl",)
    assert cpu[0].first_day == cpu[0].last_day == "2023-11-14"  # 1_700_000_000 s after the epoch, UTC
    gpu = prov.provenance(
        [rec(make_record("rope", "copy", 0, ROPE0, preset="gpu", device="cuda:NVIDIA H100", train_max=3))]
    )
    assert gpu[0].paper_scale and not gpu[0].on_cpu
    quick_on_gpu = prov.provenance(
        [rec(make_record("rope", "copy", 0, ROPE0, preset="quick", device="cuda:X", train_max=3))]
    )
    assert not quick_on_gpu[0].paper_scale


def test_stat_text_matches_the_terminal_format():
    assert rows.Stat.of([0.5]).text() == "0.50"
    assert rows.Stat.of([0.1, 0.9]).text() == "0.50 (0.10–0.90)"
    assert rows.Stat.of([4, 5]).text(0) == "5 (4–5)"  # half up on the exact 4.5 (harness.records.counts.ROUNDING_RULE)
    assert rows.Stat.of([0.501, 0.499]).text() == "0.50"  # seeds that agree to the digits shown: one number
    assert rows.Stat.of([]).text() == "-" and rows.Stat.of([]).sort_value() == ""


def test_the_trained_sentence_says_size_steps_scales_device_and_the_papers():
    [cpu] = prov.provenance(records())
    sentence = prov.trained_sentence(cpu)
    config = records()[0].data["config"]
    backbone, test_max = config["backbone"], config["eval"]["test_max"]
    assert sentence.startswith(
        f"Each run trains a {backbone['n_layers']}-layer transformer (d_model {backbone['d_model']}) "
        f"for 20 steps of batch {config['train']['batch_size']} on task instances of scale 1..3, on a CPU, "
        f"and is tested on scales up to {test_max}; the papers train"
    )
    assert "150k steps" in sentence and "2M steps" in sentence and sentence.endswith(").")
    gpu = prov.provenance([rec(make_record("rope", "copy", 0, ROPE0, preset="gpu", device="cuda:NVIDIA H100"))])
    paper_scale = prov.trained_sentence(gpu[0])
    assert paper_scale.endswith("on a GPU (NVIDIA H100), and is tested on scales up to 7.")  # no comparison


def test_the_runs_protocol_is_carried_to_the_table():
    data = make_record("rope", "copy", 0, ROPE0, train_max=3)
    data["config"]["protocol"] = "encoder"  # the harness's encoder protocol, where runs record one
    [table] = bd.assemble([rec(data)]).tables
    assert table.protocol == "encoder"
    plain = make_record("rope", "copy", 0, ROPE0, train_max=3)
    plain["config"].pop("protocol", None)
    assert bd.assemble([rec(plain)]).tables[0].protocol is None


def test_what_exact_match_scores_is_carried_to_the_table():
    data = make_record("rope", "addition_turing", 0, ROPE0, train_max=3, eval_options={"match": "answer"})
    assert bd.assemble([rec(data)]).tables[0].match == "answer"
    assert bd.assemble([rec(make_record("rope", "copy", 0, ROPE0, train_max=3))]).tables[0].match == "trace"


def test_overview_orders_by_mean_beyond_n_counting_unfitted_tasks_as_zero():
    data = [
        make_record("alibi", "copy", 0, ALIBI, train_max=3),  # fits, EM>N 1
        make_record("rope", "copy", 0, ROPE0, train_max=3),  # fits, 0.3625
        make_record("nope", "copy", 0, NOPE, train_max=3),  # does not fit: counts 0
        make_record("ape", "copy", 0, FIRST_FAILS, train_max=3),  # does not fit (EM>N 1 does not count)
        make_record("ape", "reverse", 0, NOPE, train_max=3),  # does not fit
        make_record("nope", "reverse", 0, ALIBI, train_max=3),  # fits, 1
        make_record("rope", "reverse", 0, ROPE1, train_max=3),  # fits, 0.525
        make_record("alibi", "reverse", 0, NOPE, train_max=3),  # does not fit
    ]
    board = bd.assemble([rec(d, i) for i, d in enumerate(data, start=1)])
    grid = ov.overview(board, "smoke")
    tasks, rows = grid.tasks, grid.rows
    assert tasks == grid.counted == ["copy", "reverse"] and grid.filling == []  # no plan: nothing being filled
    expected = {
        "alibi": (1.0 + 0) / 2,
        "nope": (0 + 1.0) / 2,
        "rope": (beyond(ROPE0) + beyond(ROPE1)) / 2,
        "ape": 0.0 / 2,
    }
    by_label = {r.label: r for r in rows}
    assert {k: r.score for k, r in by_label.items()} == pytest.approx(expected)
    assert {k: r.tasks_fitted for k, r in by_label.items()} == {"alibi": 1, "nope": 1, "rope": 2, "ape": 0}
    # equal scores and tasks fitted (alibi, nope: 0.5, 1) share a position, listed by name; rope, fitted
    # twice, scores 0.44
    assert [(r.position, r.label) for r in rows] == [(1, "alibi"), (1, "nope"), (3, "rope"), (4, "ape")]
    assert by_label["alibi"].cells["reverse"].rank is None and by_label["alibi"].cells["copy"].rank == 1


def test_overview_does_not_rank_a_row_on_tasks_it_was_never_run_on():
    """A row the plan puts on some tasks only (randomized:ape at another L, on copy and
    reverse) is listed after the ordered rows with neither position nor mean: counting the
    task it never ran as 0 would put it below rows it beats on every task it ran."""
    data = [
        make_record("rope", "copy", 0, ROPE0, train_max=3),  # fits, 0.3625
        make_record("rope", "reverse", 0, ROPE1, train_max=3),  # fits, 0.525
        make_record("nope", "copy", 0, NOPE, train_max=3),  # does not fit
        make_record("nope", "reverse", 0, NOPE, train_max=3),  # does not fit
        make_record("alibi", "copy", 0, ALIBI, train_max=3),  # fits, 1; never run on reverse
    ]
    board = bd.assemble([rec(d, i) for i, d in enumerate(data, start=1)])
    grid = ov.overview(board, "smoke")
    assert grid.counted == ["copy", "reverse"]
    assert [(r.position, r.label, r.score) for r in grid.rows] == [
        (1, "rope", pytest.approx((beyond(ROPE0) + beyond(ROPE1)) / 2)),
        (2, "nope", 0.0),
        (None, "alibi", None),  # its copy cell stays in the grid; no mean that counts reverse as 0
    ]
    assert grid.rows[2].cells.keys() == {"copy"} and grid.rows[2].tasks_fitted == 1
    text = render_readme(board, site_href="site/index.html")
    assert re.search(r"^\| —\s+\| alibi .*\| —\s+\| 1/2\s+\|$", text, re.M)


def _plan_row(data: dict) -> tuple:
    """A plan entry naming its row (label, test range), as ``leaderboard.plans.read_plans`` makes it."""
    from leaderboard.plans import cell
    from leaderboard.records import record_label

    d = data["config"]
    row = (record_label(data), int(d["eval"]["test_max"]))
    return (data["preset"], data["task"], data["seed"], data["run_id"], "board.toml", cell(d), row)


def test_overview_orders_the_rows_that_are_in_while_new_ones_are_filled():
    """A row whose planned runs on some counted task are not all published yet is shown,
    not ordered (marked †): the order must not depend on which runs happened to finish
    first. The rows already in keep their order over every task: the earlier rule, which
    counted only the tasks whose tables were complete, put the whole order on one task as
    soon as a new row completed it (the board's stack_manipulation, 27 November 2026)."""
    data = [
        make_record("alibi", "copy", 0, ROPE0, train_max=3),  # fits, EM>N 0.3625
        make_record("rope", "copy", 0, ROPE1, train_max=3),  # fits, 0.525
        make_record("alibi", "reverse", 0, ALIBI, train_max=3),  # fits, 1
        make_record("rope", "reverse", 0, NOPE, train_max=3),  # does not fit: 0
        make_record("fox", "copy", 0, ALIBI, train_max=3),  # a new row: fits copy (1), reverse still to come
    ]
    records = [rec(d, i) for i, d in enumerate(data, start=1)]
    done = make_record("fox", "reverse", 0, NOPE, train_max=3)  # planned; published only below
    planned = [_plan_row(d) for d in (*data, done)]
    board = bd.assemble(records, plans_of(planned))
    grid = ov.overview(board, "smoke")
    assert grid.counted == ["copy", "reverse"] and grid.filling == ["fox"]
    # alibi (0.3625 + 1) / 2 = 0.68 before rope (0.525 + 0) / 2 = 0.26, over both tasks; fox, whose
    # copy mean alone would put it first, waits for its reverse run, shown all the same
    assert [(r.position, r.label, r.filling) for r in grid.rows] == [(1, "alibi", False), (2, "rope", False),
                                                                     (None, "fox", True)]  # fmt: skip
    assert grid.rows[2].score is None and grid.rows[2].cells["copy"].scores["em_beyond"].mean == 1.0
    assert "fox (†) is still being filled" in grid.filling_text()
    text = render_readme(board, site_href="site/index.html")
    assert re.search(r"^\| —\s+\| fox†\s+\|", text, re.M) and "its position and mean wait for them" in text

    # once its run is in, it is ordered like the others
    full = bd.assemble([*records, rec(done, 9)], plans_of(planned))
    grid = ov.overview(full, "smoke")
    assert grid.filling == [] and [r.label for r in grid.rows] == ["alibi", "fox", "rope"]


def test_the_banner_counts_the_runs_that_only_evaluate_trained_weights():
    trained = make_record("rope", "copy", 0, ROPE0, train_max=3)
    variant = make_record("rope", "copy", 0, ROPE1, train_max=3)
    variant["config"]["eval_pe_options"] = {"scaling": {"rope_type": "linear", "factor": 4.0}}
    [p] = prov.provenance([rec(trained, 1), rec(variant, 2)])
    assert p.runs_text() == "2 runs (1 of them evaluate a trained run's weights, no training)"
    [p] = prov.provenance([rec(trained, 1)])
    assert p.runs_text() == "1 run"
    further = make_record("rope", "copy", 0, ROPE1, train_max=3)  # a longer test range on the kept weights
    further["provenance"]["weights_from"] = "a" * 16
    [p] = prov.provenance([rec(trained, 1), rec(variant, 2), rec(further, 3)])
    assert (p.evaluated, p.reevaluated) == (1, 1)
    assert p.runs_text() == "3 runs (2 of them evaluate a trained run's weights, no training)"
    assert "kept final weights, no training (1 run)" in prov.trained_sentence(p)
    [p] = prov.provenance([rec(trained, 1), rec(variant, 2)])
    assert "kept final weights" not in prov.trained_sentence(p)


def test_a_rank_whose_seeds_overlap_the_row_above_is_marked():
    # EM>N per seed over scales 4..7: alibi 1.0, 1.0; rope 0.3625, 0.525; nope (fits at N=2) below
    high = {n: 1.0 for n in range(1, 8)}
    near = {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 1.0, 6: 1.0, 7: 0.5}  # EM>N 0.875
    data = [
        ("alibi", 0, high),
        ("alibi", 1, high),
        ("alibi", 2, high),
        ("rope", 0, ROPE0),
        ("rope", 1, ROPE1),
        ("rope", 2, ROPE0),
        ("t5", 0, near),
        ("t5", 1, high),  # t5: 0.875..1.0, not below alibi's 1.0 on every seed by the permutation test
        ("t5", 2, high),
    ]
    recs = [rec(make_record(pe, "copy", s, em, train_max=3), i) for i, (pe, s, em) in enumerate(data, start=1)]
    [table] = bd.assemble(recs).tables
    assert [(r.label, r.rank_text()) for r in table.rows] == [("alibi", "1"), ("t5", "≈2"), ("rope", "3")]
    # two seeds against two can never reach p <= 0.05: a rank below another is then always marked
    [table] = bd.assemble([r for r in recs if r.data["seed"] < 2]).tables
    assert [r.rank_text() for r in table.rows] == ["1", "≈2", "≈3"]


def test_overview_compares_means_as_the_grid_shows_them():
    """A difference in the third decimal does not order two rows the grid shows as equal:
    the one that fitted more tasks comes first, and rows equal on both share a position."""
    lo = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.24, 5: 0.0, 6: 0.0, 7: 0.0}  # EM>N 0.06
    hi = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.25, 5: 0.0, 6: 0.0, 7: 0.0}  # EM>N 0.0625, shown 0.06
    zero = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.0, 5: 0.0, 6: 0.0, 7: 0.0}
    tiny = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.004, 5: 0.0, 6: 0.0, 7: 0.0}  # EM>N 0.001, shown 0.00
    data = [
        make_record("alibi", "copy", 0, ALIBI, train_max=3),  # extrapolates: neither task is a null one
        make_record("alibi", "reverse", 0, ALIBI, train_max=3),
        make_record("learned_prf_sh", "copy", 0, hi, train_max=3),
        make_record("learned_prf_sh", "reverse", 0, NOPE, train_max=3),  # did not fit reverse
        make_record("learned_prf", "copy", 0, lo, train_max=3),
        make_record("learned_prf", "reverse", 0, zero, train_max=3),  # fitted both
        make_record("ape", "copy", 0, zero, train_max=3),
        make_record("ape", "reverse", 0, NOPE, train_max=3),  # did not fit reverse
        make_record("rope", "copy", 0, tiny, train_max=3),
        make_record("rope", "reverse", 0, NOPE, train_max=3),
    ]
    board = bd.assemble([rec(d, i) for i, d in enumerate(data, start=1)])
    rows = ov.overview(board, "smoke").rows
    assert rows[1].score < rows[2].score  # learned_prf first on the second key, not the unshown decimals
    assert [(r.position, r.label, r.tasks_fitted) for r in rows] == [
        (1, "alibi", 2),
        (2, "learned_prf", 2),
        (3, "learned_prf_sh", 1),
        (4, "ape", 1),
        (4, "rope", 1),  # 0.0005 and 0 both read 0.00
    ]


def test_ranges_that_read_the_same_are_marked_as_not_separated():
    """odds_first: RoPE and xPos at 0.00 on every seed sat under randomized PE (0.0003-0.004
    over its seeds, also read 0.00) with a plain rank, as if the seeds separated them."""
    some = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.016, 5: 0.0, 6: 0.0, 7: 0.0}  # EM>N 0.004, shown 0.00
    few = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.004, 5: 0.0, 6: 0.0, 7: 0.0}  # EM>N 0.001, shown 0.00
    none = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.0, 5: 0.0, 6: 0.0, 7: 0.0}
    good_tok = {n: 0.9 for n in range(1, 8)}  # randomized ranks first on tok>N, the shown EM>N being equal
    data = [("randomized", 0, some, good_tok), ("randomized", 1, few, good_tok), ("rope", 0, none, None)]
    data.append(("rope", 1, none, None))
    recs = [rec(make_record(pe, "copy", s, em, tok, train_max=3), i) for i, (pe, s, em, tok) in enumerate(data, 1)]
    [table] = bd.assemble(recs).tables
    assert [(r.label, r.rank_text()) for r in table.rows] == [("randomized:ape", "1"), ("rope", "≈2")]


def test_provenance_lists_the_cpus_and_counts_runs_trained_in_segments():
    old = make_record("rope", "copy", 0, ROPE0, train_max=3)  # from before the CPU was recorded
    new = make_record("rope", "copy", 1, ROPE1, train_max=3)
    new["provenance"]["cpu"] = "AMD EPYC (torch CPU kernels: AVX2)"
    moved = make_record("alibi", "copy", 0, ROPE1, train_max=3)
    moved["provenance"]["machine_by_step"] = "steps 0-9: cpu x1 on A; steps 10-19: cpu x1 on B"
    recommitted = make_record("alibi", "copy", 1, ROPE1, train_max=3)
    recommitted["provenance"]["code_by_step"] = "steps 0-9: aaa; steps 10-19: bbb"
    [p] = prov.provenance([rec(old, 1), rec(new, 2), rec(moved, 3), rec(recommitted, 4)])
    assert p.cpus == ("AMD EPYC (torch CPU kernels: AVX2)", prov.NOT_RECORDED)
    assert p.resumed_elsewhere == 2


def test_a_row_short_of_its_planned_seeds_is_listed_after_the_ranked_rows_not_ranked():
    """odds_first, 25 November: learned_prf's one seed (EM>10 0.005, read 0.01) ranked 1st
    above encodings with three seeds' means. A row with fewer seeds than the table plans
    is now "not ranked yet", after the ranked rows and before those that did not fit."""
    good = {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 1.0, 6: 1.0, 7: 1.0}  # EM>N 1.0: would rank first
    data = [
        ("alibi", 0, ROPE0),
        ("alibi", 1, ROPE1),
        ("rope", 0, ROPE1),
        ("rope", 1, ROPE1),
        ("learned_prf", 0, good),  # one seed of two
        ("nope", 0, NOPE),  # one seed of two, and it did not fit: final whatever seed 1 does
    ]
    records = [rec(make_record(pe, "copy", s, em, train_max=3), i) for i, (pe, s, em) in enumerate(data, start=1)]
    planned = [("smoke", "copy", r.data["seed"], r.run_id, "board.toml") for r in records]
    planned += [("smoke", "copy", 1, "f" * 16, "board.toml"), ("smoke", "copy", 1, "e" * 16, "board.toml")]
    [table] = bd.assemble(records, plans_of(planned)).tables
    assert [(r.label, r.rank, r.status_text()) for r in table.rows] == [
        ("rope", 1, None),
        ("alibi", 2, None),
        ("learned_prf", None, "1 of 2 seeds: not ranked yet"),
        ("nope", None, "did not fit"),
    ]
    pending = table.rows[2]
    assert pending.fitted and not pending.ranked and pending.rank_text() == "—"
    # the grid does not count a row that is not ranked yet as fitted, even when it counts the task
    grid = ov.overview(bd.assemble(records, plans_of(planned)), "smoke")
    assert {r.label: r.tasks_fitted for r in grid.rows}["learned_prf"] == 0
    # once every planned run is in, a row the plan gave fewer seeds than the others is ranked
    complete = [p for p in planned if p[3] not in ("f" * 16, "e" * 16)]
    [table] = bd.assemble(records, plans_of(complete)).tables
    assert [(r.label, r.rank) for r in table.rows][:3] == [("learned_prf", 1), ("rope", 2), ("alibi", 3)]
    # without a plan (a user's own store) every row with all seeds fitting is ranked, as in the terminal
    [table] = bd.assemble(records).tables
    assert [(r.label, r.rank) for r in table.rows][:3] == [("learned_prf", 1), ("rope", 2), ("alibi", 3)]


def test_the_overlap_mark_looks_at_every_row_ranked_above_and_at_each_member_of_a_tie():
    """reverse, 25 November: randomized:ape (0.15-0.17) sat inside learned_prf_sh's range
    (0.06-0.46, rank 1) but clear of the row just above, and read a plain 3; on odds_first
    the second row of a tie read a plain rank under a first one marked ≈."""
    wide = {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 1.0, 6: 0.2, 7: 0.0}  # EM>N 0.55
    top = {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 1.0, 6: 1.0, 7: 1.0}  # 1.0: the wide row's range is 0.55-1.0
    mid = {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 1.0, 6: 1.0, 7: 0.0}  # 0.75
    low = {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 1.0, 6: 0.6, 7: 0.0}  # 0.65: inside the first row's range only
    data = [("alibi", 0, wide), ("alibi", 1, top), ("rope", 0, mid), ("rope", 1, mid)]
    data += [("t5", 0, low), ("t5", 1, low), ("fire", 0, low), ("fire", 1, low)]
    recs = [rec(make_record(pe, "copy", s, em, train_max=3), i) for i, (pe, s, em) in enumerate(data, start=1)]
    [table] = bd.assemble(recs).tables
    # alibi 0.775 (0.55-1.00); rope 0.75 (clear of nothing above: it meets alibi's range too)
    assert [(r.label, r.rank_text()) for r in table.rows] == [
        ("alibi", "1"),
        ("rope", "≈2"),
        ("fire", "≈3"),  # 0.65 (0.65-0.65): clear of rope's 0.75, inside alibi's 0.55-1.00
        ("t5", "≈3"),  # the same numbers: tied, and both marked
    ]


def test_a_row_that_reads_more_than_tokens_and_positions_says_so_beside_its_name():
    """learned_prf_sh reads each example's scale n: a reader comparing its row with the
    others must see that on the row, not only in a note further down."""
    data = [
        make_record("learned_prf_sh", "copy", 0, ROPE0, train_max=3),
        make_record("nope", "copy", 0, NOPE, train_max=3),
    ]
    [table] = bd.assemble([rec(d, i) for i, d in enumerate(data, start=1)]).tables
    assert {r.label: r.badges() for r in table.rows} == {"learned_prf_sh": ["reads n"], "nope": ["did not fit"]}


def test_a_row_set_up_per_task_is_listed_with_its_options_on_each_task():
    """prism{paper} runs the copy branch on reverse and not on copy, as its paper does;
    every other row runs one configuration everywhere. A reader must see that."""
    from harness.config import BackboneConfig
    from harness.config.protocols import paper_pe_options
    from pezoo.spec import format_value

    data = [make_record(pe, task, 0, ROPE0, train_max=3) for pe in ("rope", "prism") for task in ("copy", "reverse")]
    options = {}
    for d in data[2:]:
        backbone = BackboneConfig(**d["config"]["backbone"])
        options[d["task"]] = d["config"]["pe_options"] = paper_pe_options("prism", d["task"], backbone)
    assert options["copy"] != options["reverse"]  # the copy branch
    data[2]["params"], data[3]["params"] = {"pe": 82_000, "total": 1}, {"pe": 98_000, "total": 1}
    [setup] = notes.per_task_setups([rec(d, i) for i, d in enumerate(data, start=1)])
    assert (setup.label, setup.preset) == ("prism{paper}", "smoke")

    def written(o):
        return ", ".join(f"{k}={format_value(v)}" for k, v in sorted(o.items()))

    assert setup.sentence() == (
        f"copy: {written(options['copy'])} (82k positional parameters); "
        f"reverse: {written(options['reverse'])} (98k positional parameters)"
    )


T5_NONE = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.85, 5: 0.9, 6: 1.0, 7: 1.0}  # fits; reach 3: 0.85 at N+1 ends it


def test_past_n_sentence_says_how_far_each_ranked_row_holds_on_its_weakest_seed():
    """The table's answer: per ranked row, the reach of its weakest seed, grouped by reach
    (fire's seeds reach 4 and 7: it holds to 4 on every seed, not to their mean 5.5); rows
    that did not fit are counted, never listed, even where their scales past N look good
    (ape)."""
    extra = [
        make_record("t5", "copy", 0, T5_NONE, train_max=3),
        make_record("t5", "copy", 1, T5_NONE, train_max=3),
        make_record("fire", "copy", 0, ROPE0, train_max=3),
        make_record("fire", "copy", 1, ALIBI, train_max=3),
    ]
    [table] = bd.assemble(records() + [rec(d, 10 + i) for i, d in enumerate(extra)]).tables
    assert [r.label for r in table.rows if r.ranked] == ["alibi", "t5", "fire", "rope"]  # EM>N 1.0, 0.94, 0.68, 0.44
    weakest = {r.row.label: r.weakest for r in reach.reaches(table)}
    assert weakest == {"alibi": 7, "t5": 3, "fire": 4, "rope": 4}  # fitted rows only
    said = reach.past_n_sentence(table)
    # grouped by reach, farthest first, as multiples of N = 3; t5 (not past N) is counted, unfit rows too
    _in_order(said, ["alibi", reach.times_n(7, table), "(7", "fire", "rope", reach.times_n(4, table), "(4"])
    assert reach.times_n(7, table) == "≥ 2.3×" and reach.times_n(4, table) == "1.3×"
    assert "t5" not in said and "ape" not in said.replace("scale", "")  # a row not past N, or unfit: never listed
    assert reach.past_n_sentence(table, provisional=True) != said  # a provisional table's answer says so
    none = [rec(make_record("t5", "copy", s, T5_NONE, train_max=3), s) for s in (0, 1)]
    [table] = bd.assemble([*none, rec(make_record("nope", "copy", 0, NOPE, train_max=3), 5)]).tables
    assert reach.nothing_extrapolates(table)
    said = reach.past_n_sentence(table)
    assert said is not None and reach.null_text(table).lower() in said.lower() and "t5" not in said
    [table] = bd.assemble([rec(make_record("nope", "copy", 0, NOPE, train_max=3))]).tables
    assert reach.past_n_sentence(table) is None  # nothing ranked: nothing to answer with


def _in_order(text: str, parts: list[str]) -> None:
    """Each of ``parts`` occurs in ``text``, each after the one before."""
    at = 0
    for part in parts:
        found = text.find(part, at)
        assert found >= 0, (part, text[at:])
        at = found + len(part)


def test_past_n_sentence_counts_rows_not_ranked_yet_and_is_on_the_pages():
    from leaderboard import site
    from leaderboard.readme import render_readme

    plans = plans_of([("smoke", "copy", s, f"r{s}", "board.toml") for s in (0, 1)])
    runs = [("alibi", 0), ("alibi", 1), ("rope", 0)]
    records = [rec(make_record(pe, "copy", s, ALIBI, train_max=3), i) for i, (pe, s) in enumerate(runs, start=1)]
    board = bd.assemble(records, plans)
    [table] = board.tables
    assert [(r.label, r.ranked) for r in table.rows] == [("alibi", True), ("rope", False)]  # rope: 1 of 2 seeds
    answer = reach.past_n_sentence(table, provisional=True)  # the plan is not complete
    assert answer is not None and "rope" not in answer  # a row not ranked yet is counted, not listed
    assert answer in render_readme(board, site_href="site")
    pages = site.render(records, results_href="results", repo_href="..", plans=plans)
    for page in ("tasks/copy.html", "index.html"):
        [shown] = parse_html(pages[page]).find_all("p", cls="answer")
        assert shown.text == answer + ".", page


def test_the_readme_provenance_counts_results_files_and_points_to_them():
    """A preset published in 157 files is a count and a pointer, not every name in one cell
    (a table row thousands of characters wide); the site's provenance still links each file."""

    def provenance_row(named: list[Record]) -> dict[str, str]:
        lines = render_readme(bd.assemble(named), site_href="site").splitlines()
        table = lines[lines.index("## Provenance") + 2 :]
        header, row = ([c.strip() for c in line.strip("|").split("|")] for line in (table[0], table[2]))
        return dict(zip(header, row, strict=True))

    many = [
        Record(make_record("rope", "copy", seed, ROPE0, train_max=3), Path(f"smoke-20261124-{seed:012x}.jsonl"), 1)
        for seed in range(157)
    ]
    row = provenance_row(many)
    assert row["files"] == "157 (`results/smoke-*.jsonl`)"
    assert provenance_row(records())["files"] == "1 (`results/`)"  # not named as export names files


def test_an_option_sized_to_the_tasks_training_sequences_is_one_row_across_tasks():
    """FoPE's clipping length and the hybrid's window are set to each task's longest training
    sequence (24 tokens on copy, 25 on stack_manipulation at scale 10): named by their
    value they made one row per length, which the grid could never order. Named L, they are
    one row; another value keeps its number."""
    from harness.tasks.data import longest_training_tokens

    copy, stack = longest_training_tokens("copy", 3), longest_training_tokens("stack_manipulation", 3)
    assert copy != stack  # the case: one encoding, two lengths
    data = [
        make_record(f"fope{{train_length={copy}}}", "copy", 0, ALIBI, train_max=3),
        make_record(f"fope{{train_length={stack}}}", "stack_manipulation", 0, ROPE0, train_max=3),
        make_record("fope{train_length=64}", "copy", 0, ROPE1, train_max=3),
        make_record("rope", "copy", 0, ROPE1, train_max=3),
        make_record("rope", "stack_manipulation", 0, ROPE0, train_max=3),
    ]
    board = bd.assemble([rec(d, i) for i, d in enumerate(data, start=1)])
    grid = ov.overview(board, "smoke")
    by_label = {r.label: r for r in grid.rows}
    assert set(by_label) == {"fope{train_length=L}", "fope{train_length=64}", "rope"}
    assert by_label["fope{train_length=L}"].cells.keys() == {"copy", "stack_manipulation"}
    assert by_label["fope{train_length=L}"].position is not None  # ordered: run on every counted task
    key = grid.sized_key()
    assert key is not None and f"{copy} on copy" in key and f"{stack} on stack_manipulation" in key
    readme = render_readme(board, site_href="site/index.html")
    assert "L in a row's name: the task's longest training sequence" in readme
    rope_only = bd.assemble([rec(d, i) for i, d in enumerate(data[3:], start=1)])
    assert ov.overview(rope_only, "smoke").sized_key() is None  # no L on the grid: no key
