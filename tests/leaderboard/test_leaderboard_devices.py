"""Where a row's runs came from a GPU the page says so, and a row never pools runs made two
ways (``leaderboard.making``): ``check`` refuses it, as it refuses a table of two protocols."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from html_structure import parse_html
from leaderboard_fixtures import make_record, write_jsonl

from leaderboard import board as bd
from leaderboard import making
from leaderboard.cli import leaderboard
from leaderboard.records import BoardError
from leaderboard.schema import Record
from leaderboard.site import build

# copy, trained on 1..3, tested to 7
HOLDS = {n: 1.0 for n in range(1, 8)}
FADES = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.95, 5: 0.5, 6: 0.0, 7: 0.0}
H200 = "cuda:NVIDIA H200"
ON_GPU = {"exact_match_by": making.READ_OFF, "tf32": "on", "loop": "prefetch,readback,fused,graphs,forced,spawn"}
ON_CPU = {"exact_match_by": making.GREEDY, "tf32": "off", "loop": "none"}


def _gpu(pe: str, seed: int, em: dict, device: str = H200) -> dict:
    return make_record(pe, "copy", seed, em, train_max=3, device=device, provenance=ON_GPU)


def _cpu(pe: str, seed: int, em: dict, **how: str) -> dict:
    return make_record(pe, "copy", seed, em, train_max=3, provenance=how or None)


def _site(tmp_path: Path, records: list[dict]) -> Path:
    results = tmp_path / "results"
    write_jsonl(results / "smoke-20261127-000000000000.jsonl", records)
    build(results, tmp_path / "site")
    return tmp_path


def _badges(row) -> dict[str, str | None]:
    """The badges of a table row's encoding cell: text -> hover text."""
    return {b.text: b.attrs.get("title") for b in row.find_all("span", cls="badge")}


def test_a_row_trained_on_a_gpu_is_marked_and_the_table_says_on_what_card_and_how_exact_match_was_computed(tmp_path):
    records = [_gpu("alibi", s, HOLDS) for s in range(3)] + [_cpu("rope", s, FADES) for s in range(3)]
    root = _site(tmp_path, records)
    for page in (root / "site" / "index.html", root / "site" / "tasks" / "copy.html"):
        html = parse_html(page.read_text())
        table = html.find("table", cls="ranking", **{"data-task": "copy"})
        rows = {r.find("a").text: r for r in table.body_rows()}
        gpu = _badges(rows["alibi"])
        assert "GPU" in gpu
        assert "NVIDIA H200" in gpu["GPU"] and making.READ_OFF in gpu["GPU"] and "TF32" in gpu["GPU"]
        assert "GPU" not in _badges(rows["rope"])
        legend = html.find("p", cls="made", **{"data-task": "copy"}).text
        for named in ("GPU", "NVIDIA H200", making.READ_OFF, "TF32", "alibi", making.GREEDY):
            assert named in legend, (named, legend)
    grid = parse_html((root / "site" / "index.html").read_text()).find("table", cls="heatmap")
    cells = {r.find("a").text: r.find_all("td", cls="heat") for r in grid.body_rows()}
    assert [c.find("span", cls="badge").text for c in cells["alibi"]] == ["GPU"]
    assert "NVIDIA H200" in cells["alibi"][0].attrs["title"]
    assert not cells["rope"][0].find_all("span", cls="badge")

    readme = (root / "README.md").read_text()
    ranking = [line for line in readme.splitlines() if line.startswith("| 1 ") and "EM" not in line]
    assert any("alibi · *GPU*" in line for line in ranking), ranking
    assert not any("rope · *GPU*" in line for line in readme.splitlines())
    legend_lines = [line for line in readme.splitlines() if "NVIDIA H200" in line and making.READ_OFF in line]
    assert len(legend_lines) >= 1 and "alibi" in legend_lines[-1]


def test_a_board_made_on_cpus_carries_no_mark_and_no_legend(tmp_path):
    records = [_cpu("alibi", s, HOLDS) for s in range(3)] + [_cpu("rope", s, FADES, **ON_CPU) for s in range(3)]
    root = _site(tmp_path, records)
    index = parse_html((root / "site" / "index.html").read_text())
    assert not index.find_all("p", cls="made")
    assert all("GPU" not in _badges(r) for r in index.find("table", cls="ranking").body_rows())
    readme = (root / "README.md").read_text()
    assert "*GPU*" not in readme and "How the marked rows were made" not in readme


def _check(tmp_path: Path, records: list[dict]):
    results = tmp_path / "results"
    write_jsonl(results / "smoke-20261127-000000000000.jsonl", records)
    return CliRunner().invoke(leaderboard, ["check", "--results", str(results)])


def test_check_and_build_refuse_a_row_whose_seeds_were_trained_on_a_cpu_and_on_a_gpu(tmp_path):
    records = [_cpu("rope", 0, FADES), _cpu("rope", 1, FADES), _gpu("rope", 2, FADES), _cpu("alibi", 0, HOLDS)]
    result = _check(tmp_path, records)
    assert result.exit_code == 1, result.output
    assert "smoke-20261127-" in result.output and "'rope'" in result.output
    assert making.READ_OFF in result.output and "NVIDIA H200" in result.output
    recs = [Record(d, Path("fixture.jsonl"), i) for i, d in enumerate(records, start=1)]
    with pytest.raises(BoardError, match=r"fixture.jsonl:3 and fixture.jsonl:1: the row 'rope'"):
        bd.assemble(recs)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({}, {"exact_match_by": making.READ_OFF}),  # one CPU, exact match decoded for one seed, read off for another
        (ON_GPU, {**ON_GPU, "tf32": "off"}),  # one GPU, TF32 on for one seed only
    ],
)
def test_a_row_mixing_how_exact_match_or_matmuls_were_computed_on_one_kind_of_device_is_refused(
    tmp_path, first, second
):
    device = "cpu:test x2 threads" if not first else H200
    a = make_record("rope", "copy", 0, FADES, train_max=3, device=device, provenance=first or None)
    b = make_record("rope", "copy", 1, FADES, train_max=3, device=device, provenance=second)
    recs = [Record(a, Path("fixture.jsonl"), 1), Record(b, Path("fixture.jsonl"), 2)]
    with pytest.raises(BoardError, match="made two ways"):
        bd.assemble(recs)


def test_cpus_of_other_models_and_gpus_of_other_cards_are_one_kind_of_device_each(tmp_path):
    records = [
        make_record("rope", "copy", 0, FADES, train_max=3, device="cpu:x86_64 x1 threads"),
        make_record("rope", "copy", 1, FADES, train_max=3, device="cpu:arm64 x8 threads", provenance=ON_CPU),
        _gpu("alibi", 0, HOLDS, device="cuda:NVIDIA H100 80GB HBM3"),
        _gpu("alibi", 1, HOLDS, device=H200),
    ]
    assert _check(tmp_path, records).exit_code == 0
    recs = [Record(d, Path("fixture.jsonl"), i) for i, d in enumerate(records, start=1)]
    [table] = bd.assemble(recs).tables
    alibi = next(r for r in table.rows if r.label == "alibi")
    assert alibi.making is not None and alibi.making.cards == ("NVIDIA H100 80GB HBM3", "NVIDIA H200")
    legend = table.made_legend()
    assert legend is not None and "NVIDIA H100 80GB HBM3" in legend and "NVIDIA H200" in legend


def test_records_from_before_the_fields_were_decoded_without_tf32():
    old = make_record("rope", "copy", 0, FADES, train_max=3)
    assert "exact_match_by" not in old["provenance"]
    made = making.making_of(old)
    assert (made.kind, made.exact_match_by, made.tf32, made.plain, made.mark) == ("CPU", making.GREEDY, "off", True, "")
    encoder = make_record("rope", "copy", 0, FADES, train_max=3)
    encoder["config"]["protocol"] = "encoder"
    assert making.making_of(encoder).exact_match_by == making.ENCODER_PASS
    gpu = making.making_of(_gpu("rope", 0, FADES))
    assert (gpu.kind, gpu.cards, gpu.plain, gpu.mark) == ("GPU", ("NVIDIA H200",), False, "GPU")


def test_the_backbone_text_names_an_untied_output_layer_and_reads_old_records_as_tied():
    from leaderboard.provenance import _backbone_text

    shape = {"d_model": 128, "n_layers": 3, "n_heads": 4}
    assert _backbone_text({"config": {"backbone": shape}}) == "d_model 128, 3 layers, 4 heads"
    assert _backbone_text({"config": {"backbone": {**shape, "head": "tied"}}}) == "d_model 128, 3 layers, 4 heads"
    untied = {"config": {"backbone": {**shape, "head": "untied"}}}
    assert _backbone_text(untied) == "d_model 128, 3 layers, 4 heads, untied output layer"


def test_a_page_of_two_models_keeps_each_model_s_words_together():
    """Before, two models read as one run-on list: "4 heads, d_model 128, 3 layers, 4 heads, untied output layer"."""
    import dataclasses

    from leaderboard.provenance import Provenance

    tied, untied = "d_model 128, 3 layers, 4 heads", "d_model 128, 3 layers, 4 heads, untied output layer"
    fields = {f.name: () for f in dataclasses.fields(Provenance) if f.default is dataclasses.MISSING}
    one = Provenance(**{**fields, "preset": "board", "backbones": (tied,)})
    assert one.models_text() == tied
    two = dataclasses.replace(one, backbones=(tied, untied))
    assert two.models_text() == f"2 models ({tied}; {untied})"
