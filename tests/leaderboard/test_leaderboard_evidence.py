"""How the board holds evidence still arriving: rows planned for more seeds, a table tested
further, a new row beside an old one, and a table extended after it replaced an older one."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

from leaderboard_fixtures import make_record as _make_record

from leaderboard import board as bd
from leaderboard import reach
from leaderboard.plans import plans_of
from leaderboard.provisional import table_filling
from leaderboard.records import BoardError, record_label
from leaderboard.retired import Retirement
from leaderboard.schema import Record

FITS_FAR = {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 1.0, 6: 1.0, 7: 1.0}  # N = 3, reach 7
FITS_4 = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.95, 5: 0.2, 6: 0.0, 7: 0.0}  # reach 4
FITS_3 = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.1, 5: 0.0, 6: 0.0, 7: 0.0}  # reach 3 (none)


def make_record(*args, preset: str = "board", **kw) -> dict:
    return _make_record(*args, preset=preset, **kw)


def rec(data: dict, line: int = 1) -> Record:
    return Record(data, Path("fixture.jsonl"), line)


def _plan_row(data: dict, source: str = "board.toml") -> tuple:
    from leaderboard.plans import cell

    d = data["config"]
    return (
        data["preset"],
        data["task"],
        data["seed"],
        data["run_id"],
        source,
        cell(d),
        (record_label(data), int(d["eval"]["test_max"])),
    )


def _planned(pe: str, seed: int, em: dict, **kw) -> tuple:
    """A plan entry for a run that is not published (its record is built only for its id)."""
    return _plan_row(make_record(pe, "copy", seed, em, train_max=3, **kw))


def test_a_row_planned_for_8_seeds_is_ranked_on_its_3_and_says_how_many_are_being_run():
    published = [make_record("hard_alibi", "copy", s, FITS_4, train_max=3) for s in range(3)]
    published += [make_record("nope", "copy", s, FITS_3, train_max=3) for s in range(3)]
    plan = [_plan_row(d) for d in published] + [_planned("hard_alibi", s, FITS_4) for s in range(3, 8)]
    board = bd.assemble([rec(d, i) for i, d in enumerate(published, 1)], plans_of(plan))
    rows = {r.label: r for r in board.tables[0].rows}
    # before: every row short of the plan's 8 seeds was "not ranked yet", nope (planned for 3) included
    assert rows["hard_alibi"].ranked and rows["nope"].ranked
    assert (rows["hard_alibi"].seeds_wanted, rows["hard_alibi"].seeds_to_come) == (8, 5)
    assert rows["nope"].seeds_to_come == 0 and rows["nope"].seeds_text() is None
    assert "5 being run" in rows["hard_alibi"].badges()[0]


def test_a_row_whose_seeds_split_with_too_few_planned_is_named_with_the_seeds_to_add():
    split = [FITS_FAR, FITS_3, FITS_4]  # EM>N over seeds: 1.0, 0.025, 0.29: a range > 0.3
    published = [make_record("hard_alibi", "copy", s, em, train_max=3) for s, em in enumerate(split)]
    published += [make_record("nope", "copy", s, FITS_3, train_max=3) for s in range(3)]
    records = [rec(d, i) for i, d in enumerate(published, 1)]
    three = [_plan_row(d) for d in published]
    lines = reach.unplanned_splits(bd.assemble(records, plans_of(three)))
    # before: nothing said it; the board's rule (8 seeds for a split row) went unkept in silence
    assert len(lines) == 1 and "hard_alibi's seeds split" in lines[0]
    assert "EM>N 0.03-1.00 over 3 seeds" in lines[0] and "plan seeds 3-7" in lines[0]
    eight = three + [_planned("hard_alibi", s, FITS_4) for s in range(3, 8)]
    assert reach.unplanned_splits(bd.assemble(records, plans_of(eight))) == []
    seven = three + [_planned("hard_alibi", s, FITS_4) for s in range(3, 7)]
    assert "plan seeds 7 in" in reach.unplanned_splits(bd.assemble(records, plans_of(seven)))[0]
    assert reach.unplanned_splits(bd.assemble(records)) == []  # no plan: not the plans' to mend


def test_a_row_with_one_of_its_planned_seeds_is_still_not_ranked():
    published = [make_record("hard_alibi", "copy", 0, FITS_4, train_max=3)]
    plan = [_plan_row(published[0])] + [_planned("hard_alibi", s, FITS_4) for s in (1, 2)]
    board = bd.assemble([rec(published[0])], plans_of(plan))
    assert board.tables[0].rows[0].pending and not board.tables[0].rows[0].ranked


def test_runs_tested_further_make_a_table_of_their_own_and_one_to_come_is_announced():
    short = [make_record("alibi", "copy", s, FITS_4, train_max=3) for s in range(2)]
    longer = {**FITS_FAR, **{n: 1.0 for n in range(8, 13)}}  # the same rows, tested to 12 (4x N)
    far = [make_record("alibi", "copy", s, longer, train_max=3) for s in range(2)]
    records = [rec(d, i) for i, d in enumerate(short + far, 1)]
    board = bd.assemble(records)  # before: refused, one preset and task with two protocols
    assert [(t.task, t.tested_to, t.test_max) for t in board.tables] == [("copy", 7, 7), ("copy", 12, 12)]
    assert [r.label for r in board.tables[1].rows] == ["alibi"] and board.tables[1].multiple == 4
    # planned but not published: the page can say it is being run, with its rows and seeds
    plan = [_plan_row(d) for d in short] + [_planned("prism", s, longer) for s in range(3)]
    only_short = bd.assemble([rec(d, i) for i, d in enumerate(short, 1)], plans_of(plan))
    (to_come,) = only_short.tables_to_come("copy")
    assert (to_come.tested_to, to_come.labels, to_come.runs, to_come.seeds) == (12, ("prism",), 3, (0, 1, 2))
    assert only_short.table_filled(only_short.tables[0]).complete  # the short table's own plan is all in
    assert bd.assemble(records, plans_of(plan)).tables_to_come("copy") == []


def test_a_new_row_of_other_options_is_not_counted_as_a_re_run_of_the_old_one():
    old = [make_record("randomized:ape", "copy", s, FITS_4, train_max=3) for s in range(2)]
    from leaderboard.plans import filled, published_cells, seeds_by_run

    rows = [_plan_row(d) for d in old]  # the old row, planned and published; the new one planned
    new = ("randomized:ape{max_length=28}", 7)
    rows += [("board", "copy", s, f"new{s}", "board.toml", rows[s][5], new) for s in (0, 1)]
    plan = plans_of(rows).tables[("board", "copy")]
    records = [rec(d, i) for i, d in enumerate(old, 1)]
    got = filled(plan, seeds_by_run(records), published_cells(records))
    # before: the new row's 2 runs counted as re-runs "standing in", and the table as covered
    assert (got.done, got.planned, got.rerunning, got.covered) == (2, 4, 0, False)


def test_a_table_that_replaced_an_older_one_still_does_while_seeds_are_added_to_it():
    older = [make_record("alibi", "copy", 0, FITS_4, train_max=3, preset="quick")]
    newer = [make_record("alibi", "copy", s, FITS_4, train_max=3) for s in range(3)]
    plan = [_plan_row(d) for d in newer] + [_planned("alibi", s, FITS_4) for s in range(3, 8)]
    retired = [Retirement("quick", "copy", "board", "a shorter protocol")]
    records = [rec(d, i) for i, d in enumerate(older + newer, 1)]
    board = bd.assemble(records, plans_of(plan), retired)  # before: refused, 3 of 8 planned runs published
    assert [t.preset for t in board.tables] == ["board"]
    assert table_filling(board, board.tables[0]).startswith("provisional: 3 of 8")
    # a newer table that lacks a row the older one showed still does not replace it
    lacking = [make_record("nope", "copy", 0, FITS_4, train_max=3, preset="quick")]
    try:
        bd.assemble([rec(d, i) for i, d in enumerate(older + lacking + newer, 1)], plans_of(plan), retired)
    except BoardError as exc:
        assert "planned runs published" in str(exc)
    else:
        raise AssertionError("a retirement whose successor lacks a row was accepted")


def _far(em: dict, top: int) -> dict:
    """``em`` on 1..7, then the same as its scale 7 up to ``top``."""
    return {**em, **{n: em[7] for n in range(8, top + 1)}}


def test_runs_still_arriving_are_presented_on_the_pages():
    """The board as board.toml plans it, on synthetic records: hard_alibi planned for 8 seeds
    with 3 in, randomized PE at L set beside L = 2048, and a copy table tested to 10x N."""
    from leaderboard import site
    from leaderboard.readme import render_readme

    split = [FITS_FAR, {**FITS_4, 5: 1.0, 6: 0.95}, FITS_4]  # reaches 7, 6, 4: seeds split
    published = [make_record("hard_alibi", "copy", s, split[s], train_max=3) for s in range(3)]
    published += [make_record("ape", "copy", s, FITS_3, train_max=3, tok={n: 0.2 for n in FITS_3}) for s in range(3)]
    published += [
        make_record("randomized:ape", "copy", s, FITS_4, train_max=3, tok={n: 0.1 for n in FITS_4}) for s in range(3)
    ]
    at_ratio = []
    for s in range(3):
        d = make_record("randomized:ape", "copy", s, FITS_4, train_max=3, tok={n: 0.6 for n in FITS_4})
        options = {"max_length": 28, "draw": "per_length", "randomize_eval": True}  # as the sweep records it
        d["config"] = {**d["config"], "pe_options": options}
        d["run_id"] = f"ratio{s}"
        at_ratio.append(d)
    far = [make_record("alibi", "copy", s, _far(FITS_FAR, 30), train_max=3) for s in range(3)]
    records = [rec(d, i) for i, d in enumerate(published + at_ratio + far, 1)]
    plan = [_plan_row(d) for d in published + at_ratio + far]
    plan += [_planned("hard_alibi", s, FITS_4) for s in range(3, 8)]
    plans = plans_of(plan)
    board = bd.assemble(records, plans)
    pages = site.render(records, results_href="results", repo_href="..", plans=plans)
    readme = render_readme(board, site_href="site")
    copy, index = pages["tasks/copy.html"], pages["index.html"]
    # two copy tables, the far one headed with its multiple
    assert [t.tested_to for t in board.tables] == [7, 30]
    assert "tested to 30 (10× N)" in copy and "Tested to 30 (10× N)" in index and "tested to 30" in readme
    # the answer first: the sentences before the grid, per table the answer, then the panels, then the ranking,
    # the rules folded
    assert index.index('<h2 id="answer">') < index.index("<h2>At a glance</h2>")
    for page in (copy, index):
        assert page.index('class="how-far"') < page.index('class="panels"') < page.index('class="sortable ranking"')
        assert '<details class="note-list how-to-read">' in page
    assert readme.index("## How far past the training length") < readme.index("## At a glance")
    # hard_alibi ranked on its 3 seeds, saying 5 more are being run, and how many seeds reach each multiple
    assert "3 of 8 seeds, 5 being run" in copy and "3 of 8 seeds, 5 being run" in readme
    [hard] = [r for r in reach.reaches(board.tables[0]) if r.row.label == "hard_alibi"]
    assert (hard.weakest, dict(hard.counts)[2], hard.splits) == (4, 2, True)  # 2 of 3 seeds reach 2x N
    assert "2×: 2 of 3" in copy and "2×: 2 of 3" in readme
    # the randomized verdict uses the row at the paper's ratio, and says the other is beside it
    from leaderboard.claims import claim_verdicts

    found = {c.says.split()[0]: vs for c, vs in claim_verdicts(board)}
    [rand] = found["Randomizing"]
    assert rand.outcome == "holds", rand.evidence
    assert rand.evidence.startswith("randomized:ape{max_length=28}")
    assert "L = 2048" in rand.evidence


def test_the_grid_leaves_a_task_where_nothing_extrapolates_out_of_its_mean_and_variants_out_of_its_rows():
    from leaderboard import overview as ov

    data = [
        make_record(pe, "copy", s, em, train_max=3)
        for pe, em in (("alibi", FITS_FAR), ("nope", FITS_3))
        for s in (0, 1)
    ]
    # odds_first-like: nothing past N, but a 0.1 that the old mean counted
    data += [make_record("nope", "odds_first", s, {**FITS_3, 4: 0.8}, train_max=3) for s in (0, 1)]
    data += [make_record("alibi", "odds_first", s, FITS_3, train_max=3) for s in (0, 1)]
    variant = make_record("alibi", "copy", 0, FITS_4, train_max=3)
    variant["config"]["eval_pe_options"] = {"blockwise": 3}
    variant["run_id"] = "variant0"
    board = bd.assemble([rec(d, i) for i, d in enumerate([*data, variant], 1)])
    grid = ov.overview(board, "board")
    assert grid.null == ["odds_first"] and grid.counted == ["copy"] and "odds_first" not in grid.mean_title()
    by = {r.label: r for r in grid.rows}
    assert by["nope"].score == Fraction(1, 40)  # copy's EM>N alone; before, the mean with odds_first's 0.2: 0.1125
    assert all(not ov.is_variant(r.label) for r in grid.rows) and [ov.is_variant(r.label) for r in grid.variants] == [
        True
    ]
    cell = ov.cell(board.tables[0], "copy", by["alibi"].cells["copy"])
    assert cell.reach == "≥ 2.3×" and cell.em == "EM>N 1.00"


def test_every_departure_from_the_papers_is_declared_from_the_records():
    from leaderboard import notes

    def prism(task: str) -> dict:
        d = make_record("prism", task, 0, FITS_4, train_max=3)
        d["config"] = {**d["config"], "pe_options": {"n_cursors": 4, "d_pe": 226}}
        d["params"] = {"total": 1000, "pe": 98_000}
        return d

    said = {task: notes.protocol_departures_of(prism(task)) for task in ("copy", "reverse")}
    # reverse: trained short of the paper's 40 with no curriculum; both: lr, top-3 reporting, extra width
    assert len(said["reverse"]) == 4 and len(said["copy"]) == 3
    assert any("40" in t and "curriculum" in t for t in said["reverse"])
    assert not any("curriculum" in t for t in said["copy"])  # the paper trains copy to 10 too (Figure 6)
    width = 32 // 2 + 4 * 226  # the smoke backbone's heads, widened by 4 streams of 226
    assert any(f"{width} wide" in t and "98k" in t for t in said["copy"])
    hard = make_record("hard_alibi", "copy", 0, FITS_4, train_max=3)
    assert len(notes.protocol_departures_of(hard)) == 3  # no packing, lr, a self-only m = 1 head
    hard["config"]["train"] = {**hard["config"]["train"], "pack": 500, "lr": 7e-5}
    assert len(notes.protocol_departures_of(hard)) == 1
    rand = make_record("randomized:ape", "copy", 0, FITS_4, train_max=3)  # 17 tokens at scale 7
    [ratio, setting] = notes.protocol_departures_of(rand)
    assert "L = 2048, about 120×" in ratio and "encoder" in setting
    assert len(notes.protocol_departures_of(make_record("learned_prf_sh", "copy", 0, FITS_4, train_max=3))) == 1
    assert notes.protocol_departures_of(make_record("alibi", "copy", 0, FITS_4, train_max=3)) == []
    # on the board's notes, with its paper named, and the learning rate every row shares said once
    board_notes = notes.departures([rec(prism("reverse")), rec(hard, 2)])
    assert board_notes[0].label == "hard_alibi" and "Position as Probability" in board_notes[1].paper
    assert "0.001" in notes.common_departure([rec(prism("copy"))])


def test_the_provenance_line_says_unknown_where_records_name_no_cpu():
    from leaderboard import provenance as prov

    named = make_record("alibi", "copy", 0, FITS_4, train_max=3)
    named["provenance"] = {**named["provenance"], "cpu": "Xeon (AVX512)"}
    bare = make_record("nope", "copy", 0, FITS_4, train_max=3)  # no cpu: written before it was recorded
    [p] = prov.provenance([rec(named, 1), rec(bare, 2)])
    said = prov.trained_sentence(p)
    # before: "(more than one machine: the provenance lists their CPUs)", listing none for the unrecorded
    assert p.cpus_unknown == 1 and "1 of the 2 runs is unknown" in said and "lists their CPUs" not in said
