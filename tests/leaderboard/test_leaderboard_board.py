"""The board's numbers against hand computations on records with chosen metrics."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest
from leaderboard_fixtures import make_record

from leaderboard import board as bd
from leaderboard.schema import Record

T95_1DOF = 12.71  # two-sided 95% Student-t quantile, 1 degree of freedom (12.706), as tabulated


def rec(data: dict, line: int = 1) -> Record:
    return Record(data, Path("fixture.jsonl"), line)


# task copy, trained on 1..3, tested 4..7
ROPE0 = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.95, 5: 0.5, 6: 0.0, 7: 0.0}  # solved<= 4
ROPE1 = {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 0.9, 6: 0.2, 7: 0.0}  # solved<= 5 (0.9 counts)
NOPE = {1: 1.0, 2: 1.0, 3: 0.8, 4: 0.0, 5: 0.0, 6: 0.0, 7: 0.0}  # solved<= 2
ALIBI = {n: 1.0 for n in range(1, 8)}  # solved<= 7
FIRST_FAILS = {1: 0.5, 2: 1.0, 3: 1.0, 4: 1.0, 5: 1.0, 6: 1.0, 7: 1.0}  # solved<= 0


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


def test_scores_match_hand_computation():
    board = bd.assemble(records())
    [table] = board.tables
    assert (table.task, table.preset, table.train_max, table.test_max) == ("copy", "smoke", 3, 7)
    rows = {r.label: r for r in table.rows}
    rope = rows["rope"].scores
    assert rope["solved"].mean == 4.5
    assert rope["solved"].half == pytest.approx(T95_1DOF * statistics.stdev([4, 5]) / math.sqrt(2), rel=1e-9)
    em_beyond = [statistics.mean([ROPE0[n] for n in (4, 5, 6, 7)]), statistics.mean([ROPE1[n] for n in (4, 5, 6, 7)])]
    assert rope["em_beyond"].mean == pytest.approx(statistics.mean(em_beyond))
    assert rope["em_beyond"].half == pytest.approx(T95_1DOF * statistics.stdev(em_beyond) / math.sqrt(2))
    tok = {n: min(1.0, v + 0.05) for n, v in ROPE0.items()}, {n: min(1.0, v + 0.05) for n, v in ROPE1.items()}
    assert rope["tok_beyond"].mean == pytest.approx(
        statistics.mean(statistics.mean(t[n] for n in (4, 5, 6, 7)) for t in tok)
    )
    assert rope["tok_within"].mean == pytest.approx(
        statistics.mean(statistics.mean(t[n] for n in (1, 2, 3)) for t in tok)
    )
    assert rope["em_within"].mean == 1.0 and rope["em_within"].half == 0.0
    assert rows["nope"].scores["solved"] == bd.Stat(2.0, 0.0)  # equal seeds: no spread
    assert rows["nope"].scores["em_within"].mean == pytest.approx((1 + 1 + 0.8) / 3)
    assert rows["alibi"].scores["solved"] == bd.Stat(7.0, 0.0) and rows["alibi"].seeds == (0,)
    assert rows["ape"].scores["solved"].mean == 0.0


def test_ranking_order_and_shared_ranks():
    recs = records()
    # a second encoding with exactly nope's numbers ties with it
    recs += [rec(make_record("learned_ape", "copy", s, NOPE, train_max=3), 10 + s) for s in (0, 1)]
    [table] = bd.assemble(recs).tables
    assert [(r.rank, r.label) for r in table.rows] == [
        (1, "alibi"),
        (2, "rope"),
        (3, "learned_ape"),  # tie on every key: same rank, then by name
        (3, "nope"),
        (5, "ape"),
    ]


def test_ties_on_solved_are_broken_by_exact_match_beyond_training():
    a = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.5, 5: 0.1}
    b = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.6, 5: 0.0}  # same solved<= 3, EM>N 0.3 vs 0.3 -> then tok>N
    c = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.8, 5: 0.4}  # EM>N 0.6
    recs = [rec(make_record(pe, "copy", 0, em, train_max=3)) for pe, em in (("a_pe", a), ("b_pe", b), ("c_pe", c))]
    recs[1] = rec(make_record("b_pe", "copy", 0, b, {n: 1.0 for n in b}, train_max=3))  # higher tok>N than a
    [table] = bd.assemble(recs).tables
    assert [r.label for r in table.rows] == ["c_pe", "b_pe", "a_pe"]
    assert [r.rank for r in table.rows] == [1, 2, 3]


def test_curves_mean_and_band():
    board = bd.assemble(records())
    [table] = board.tables
    rope = next(c for c in table.curves if c.label == "rope")
    assert rope.lengths == tuple(range(1, 8)) and rope.splits == ("train",) * 3 + ("test",) * 4
    k = rope.lengths.index(5)
    assert rope.exact_match[k].mean == pytest.approx((0.5 + 0.9) / 2)
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
    assert board.tables[0].rows[0].scores["solved"].mean == 7.0  # the long preset's rope, not pooled with smoke's


def test_one_preset_label_for_two_protocols_is_refused():
    recs = [rec(make_record("rope", "copy", 0, ROPE0, train_max=3), 1),
            rec(make_record("nope", "copy", 0, NOPE, train_max=3, steps=99), 2)]  # fmt: skip
    with pytest.raises(bd.BoardError, match=r"fixture.jsonl:2 and fixture.jsonl:1: .*\(train.steps\)"):
        bd.assemble(recs)


def test_records_from_before_the_evaluation_options_share_a_board_with_newer_ones():
    old = make_record("rope", "copy", 0, ROPE0, train_max=3)
    for key in ("every", "start_below_loss", "select"):  # written before EvalConfig had them
        del old["config"]["eval"][key]
    new = make_record("nope", "copy", 0, NOPE, train_max=3)
    assert len(bd.assemble([rec(old, 1), rec(new, 2)]).tables[0].rows) == 2
    periodic = make_record("alibi", "copy", 0, ALIBI, train_max=3)
    periodic["config"]["eval"]["every"] = 10
    with pytest.raises(bd.BoardError, match=r"\(eval\.every\)"):
        bd.assemble([rec(old, 1), rec(periodic, 3)])


def test_labels_keep_options_apart():
    assert bd.encoding_label("rope", {}) == "rope"
    assert bd.encoding_label("rope", {"base": 500}) == 'rope {"base": 500}'


def test_provenance_flags_everything_but_a_gpu_board_on_gpus():
    cpu = bd.provenance(records())
    assert len(cpu) == 1 and cpu[0].on_cpu and not cpu[0].paper_scale
    assert cpu[0].seeds == (0, 1) and cpu[0].steps == (20,) and cpu[0].files == ("fixture.jsonl",)
    assert cpu[0].first_day == cpu[0].last_day == "2023-11-14"  # 1_700_000_000 s after the epoch, UTC
    gpu = bd.provenance(
        [rec(make_record("rope", "copy", 0, ROPE0, preset="gpu", device="cuda:NVIDIA H100", train_max=3))]
    )
    assert gpu[0].paper_scale and not gpu[0].on_cpu
    quick_on_gpu = bd.provenance(
        [rec(make_record("rope", "copy", 0, ROPE0, preset="quick", device="cuda:X", train_max=3))]
    )
    assert not quick_on_gpu[0].paper_scale


def test_stat_text_matches_the_terminal_format():
    assert bd.Stat(0.5, 0.0).text() == "0.50"
    assert bd.Stat(0.5, 0.123).text() == "0.50 ± 0.12"
    assert bd.Stat(4.5, 6.4).text(0) == "4 ± 6"  # round half to even, like the terminal's f-strings
    assert bd.Stat(math.nan, 0.0).text() == "-" and bd.Stat(math.nan, 0.0).sort_value() == ""


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


def test_overview_orders_by_mean_rank_over_tasks_and_lists_partial_encodings_last():
    # copy ranks (solved<=): alibi 7 -> 1, rope 4 -> 2, nope 2 -> 3; reverse: nope 7 -> 1, rope 5 -> 2,
    # alibi 4 -> 3; ape only on copy (solved<= 0 -> 4)
    data = [
        make_record("alibi", "copy", 0, ALIBI, train_max=3),
        make_record("rope", "copy", 0, ROPE0, train_max=3),
        make_record("nope", "copy", 0, NOPE, train_max=3),
        make_record("ape", "copy", 0, FIRST_FAILS, train_max=3),
        make_record("nope", "reverse", 0, ALIBI, train_max=3),
        make_record("rope", "reverse", 0, ROPE1, train_max=3),
        make_record("alibi", "reverse", 0, ROPE0, train_max=3),
    ]
    board = bd.assemble([rec(d, i) for i, d in enumerate(data, start=1)])
    tasks, rows = bd.overview(board, "smoke")
    assert tasks == ["copy", "reverse"]
    by_label = {r.label: r for r in rows}
    assert {k: (r.cells["copy"].rank, r.mean_rank) for k, r in by_label.items() if k != "ape"} == {
        "alibi": (1, 2.0),
        "nope": (3, 2.0),
        "rope": (2, 2.0),
    }
    # equal mean ranks: the mean EM>N over the tasks decides (alibi (1 + 0.3625)/2, nope (0 + 1)/2, rope ...)
    em = {k: statistics.mean(statistics.mean(m[n] for n in (4, 5, 6, 7)) for m in ms)
          for k, ms in {"alibi": (ALIBI, ROPE0), "nope": (NOPE, ALIBI), "rope": (ROPE0, ROPE1)}.items()}  # fmt: skip
    assert [r.label for r in rows] == [*sorted(em, key=lambda k: -em[k]), "ape"]
    assert by_label["ape"].cells.keys() == {"copy"} and by_label["ape"].position == 4
    for label, r in by_label.items():
        if label != "ape":
            assert r.mean_em_beyond == pytest.approx(em[label])
