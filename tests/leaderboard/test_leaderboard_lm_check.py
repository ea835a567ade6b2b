"""`pezoo leaderboard check` on LM results: what the page could not show honestly is refused
(issue 65): a record of another protocol or corpus in a table, a variant without its trained
run, a run id twice, an edited or unsealed record, timings that are not finite and >= 0;
and a record's text is escaped in the markdown it reaches."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner
from leaderboard_fixtures import make_record, write_jsonl

from harness.cli import main
from harness.lm.config import lm_preset_config
from harness.lm.record import LmRecord
from harness.records.lm_metrics import LengthScore
from leaderboard.lm_board import readme_section, render_markdown
from leaderboard.lm_rows import lm_rows

CORPUS = "ab" * 32
FLAT = 2.0


def lm_record(pe: str, seed: int, *, preset: str = "lm", bpb: float = FLAT, corpus: str = CORPUS, **fields) -> LmRecord:
    """A record of ``pe`` under ``preset`` scoring ``bpb`` at every length it evaluates."""
    steps = fields.pop("finetune_steps", 0)
    before = {"eval": {"passkey": 0, "positions": False}}  # as the published records: no passkey grid, no curves
    cfg = lm_preset_config(preset, pe=pe, task="lm_en", seed=seed, overrides=before, finetune_steps=steps)
    scores = [LengthScore("windows", s, bpb * 8192 * math.log(2), 8192) for s in cfg.eval.lengths]
    scores += [LengthScore("tail", s, bpb * 1024 * math.log(2), 1024) for s in cfg.eval.tail_lengths()]
    steps = 0 if cfg.is_variant and not cfg.finetune_steps else cfg.finetune_steps or cfg.train.steps
    base = LmRecord(
        cfg, tuple(scores), 1.5, steps, 400.0 if steps else 0.0, 30.0, {"total": 1}, {"corpus_sha256": corpus}
    )
    return dataclasses.replace(base, **fields)


def line(record: LmRecord) -> str:
    return json.dumps(record.to_dict(), sort_keys=True)


def board(tmp_path: Path, *lm_files: list[str]) -> Path:
    """A results folder with one algorithmic run and ``lm/`` holding one file per list of lines."""
    results = tmp_path / "results"
    write_jsonl(results / "a.jsonl", [make_record("rope", "copy", 0, {1: 1.0, 2: 1.0, 3: 0.5}, train_max=2)])
    (results / "lm").mkdir()
    for i, lines in enumerate(lm_files):
        (results / "lm" / f"lm-{i}.jsonl").write_text("".join(f"{x}\n" for x in lines), encoding="utf-8")
    return results


def check(results: Path):
    return CliRunner().invoke(main, ["leaderboard", "check", "--results", str(results)])


ALIBI = [lm_record("alibi", s) for s in range(3)]


def test_a_consistent_lm_board_passes_check(tmp_path):
    done = check(board(tmp_path, [line(r) for r in ALIBI]))
    assert done.exit_code == 0, done.output
    assert "1 LM results file(s), 3 LM run(s): valid" in done.output


def test_a_smoke_record_is_not_a_fourth_seed(tmp_path):
    """Case 1: an lm_smoke run exported beside the lm preset's three ALiBi seeds."""
    smoke = lm_record("alibi", 3, preset="lm_smoke", bpb=9.0)
    done = check(board(tmp_path, [line(r) for r in ALIBI], [line(smoke)]))
    assert done.exit_code == 1
    assert "lm-1.jsonl:1:" in done.output and "lm_en's table holds one protocol" in done.output
    assert "'lm_smoke'" in done.output and "backbone.d_model" in done.output
    with pytest.raises(ValueError, match="one protocol"):  # leaderboard.lm_results.LmResultsError
        lm_rows([*ALIBI, smoke])  # no page pools them either


def test_a_variant_without_its_trained_run_is_refused(tmp_path):
    """Case 2: "rope → linear×16", flat at its own broken bpb, with no trained RoPE published."""
    pi = lm_record("rope@{scaling={rope_type=linear,factor=16.0}}", 0, bpb=5.84)
    done = check(board(tmp_path, [line(r) for r in ALIBI], [line(pi)]))
    assert done.exit_code == 1
    assert "lm-1.jsonl:1:" in done.output and f"its trained run {pi.config.trained_config().run_id()}" in done.output
    with pytest.raises(ValueError, match="not published"):
        render_markdown([*ALIBI, pi])  # the page never judges it against its own bpb(L)
    trained = lm_record("rope", 0, bpb=2.2)
    assert check(board(tmp_path / "with", [line(r) for r in (*ALIBI, trained, pi)])).exit_code == 0


def test_a_variant_must_carry_its_trained_runs_weights_and_loss(tmp_path):
    trained = lm_record("rope", 0)
    pi = lm_record("rope@{scaling={rope_type=linear,factor=16.0}}", 0)
    other = dataclasses.replace(pi, provenance={"corpus_sha256": CORPUS, "weights_from": "lm-0000000000000000"})
    done = check(board(tmp_path, [line(trained), line(other)]))
    assert done.exit_code == 1 and "not its trained run" in done.output
    loss = dataclasses.replace(pi, final_loss=0.5)
    done = check(board(tmp_path / "loss", [line(trained), line(loss)]))
    assert done.exit_code == 1 and "final_loss is not its trained run's" in done.output


def test_one_corpus_per_table(tmp_path):
    """Case 3: a record of another corpus hash in the table the heading names by the first's."""
    other = lm_record("ape", 0, corpus="cd" * 32)
    done = check(board(tmp_path, [line(r) for r in ALIBI], [line(other)]))
    assert done.exit_code == 1
    assert "lm-1.jsonl:1:" in done.output and "lm_en's table holds one corpus" in done.output
    assert "cdcdcdcdcdcdcdcd" in done.output


def test_a_run_id_published_twice_is_refused(tmp_path):
    """The same run id in two files with different numbers: not "the last one wins"."""
    again = lm_record("alibi", 0, bpb=1.0)
    assert again.run_id == ALIBI[0].run_id
    done = check(board(tmp_path, [line(r) for r in ALIBI], [line(again)]))
    assert done.exit_code == 1
    assert f"lm-1.jsonl:1: run {again.run_id} is already published at " in done.output
    assert "lm-0.jsonl:1" in done.output


def test_an_edited_or_unsealed_record_is_refused(tmp_path):
    """LM records carry a checksum: nats edited after the record was written are refused."""
    d = ALIBI[0].to_dict()
    assert d["checksum"].startswith("sha256:") and LmRecord.from_dict(d) == ALIBI[0]
    d["scores"][0]["nats"] /= 2
    with pytest.raises(ValueError, match="checksum mismatch"):
        LmRecord.from_dict(d)
    done = check(board(tmp_path, [json.dumps(d, sort_keys=True)]))
    assert done.exit_code == 1 and "lm-0.jsonl:1:" in done.output and "checksum mismatch" in done.output
    unsealed = {k: v for k, v in ALIBI[1].to_dict().items() if k != "checksum"} | {"schema": "pezoo-lm-run/1"}
    assert LmRecord.from_dict(unsealed) == ALIBI[1]  # a store written before records were sealed still reads
    done = check(board(tmp_path / "unsealed", [json.dumps(unsealed, sort_keys=True)]))
    assert done.exit_code == 1 and "carries no checksum" in done.output


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("train_seconds", math.nan),
        ("train_seconds", -1.0),
        ("eval_seconds", -0.5),
        ("train_steps", -4000),
        ("train_steps", 4000.5),
        ("final_loss", math.inf),
    ],
)
def test_timings_and_loss_must_be_finite_and_not_negative(tmp_path, key, value):
    d = ALIBI[0].to_dict()
    d[key] = value
    if "checksum" in d:  # sealed as written, where it can be: the value itself is refused
        from harness.lm.record import checksum

        d["checksum"] = checksum(d) if math.isfinite(value) else "sha256:" + "0" * 64
    text = json.dumps(d, sort_keys=True)  # NaN and Infinity as json.dumps writes them
    with pytest.raises(ValueError, match=f"{key} must be"):
        LmRecord.from_dict(d)
    done = check(board(tmp_path, [text]))
    assert done.exit_code == 1 and "lm-0.jsonl:1:" in done.output


def _cells(row: str) -> list[str]:
    """A markdown table row's cells, split on the ``|`` not escaped with a backslash."""
    out, cell, escaped = [], "", False
    for ch in row.strip().strip("|"):
        if ch == "|" and not escaped:
            out.append(cell)
            cell = ""
        else:
            cell += ch
        escaped = ch == "\\" and not escaped
    return [*out, cell]


def test_markup_in_an_option_value_is_escaped_in_the_markdown():
    """HTML and ``|`` in an LM option value: text in lm.md and the README, never a tag or a cell."""
    hostile = {"note": "<img src=x onerror=alert(1)>|x"}
    records = [dataclasses.replace(r, config=dataclasses.replace(r.config, pe_options=hostile)) for r in ALIBI]
    records = [LmRecord.from_dict(r.to_dict()) for r in records]  # a valid, sealed record as published
    text = render_markdown(records)
    readme = "\n".join(readme_section(records, "site"))
    for page in (text, readme):
        assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;\\|x" in page
    header = next(row for row in text.splitlines() if row.startswith("| encoding | seeds |"))
    row = next(row for row in text.splitlines() if row.startswith("| alibi"))
    assert len(_cells(row)) == len(_cells(header))
