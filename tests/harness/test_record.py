"""One run record: the store's rows, a kept-result file and a results-file line are
serialisations of ``harness.records.record.RunRecord``, checked by one validator with one number
checker (``harness.config.numbers``)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from harness.config import preset_config
from harness.config.numbers import INT64_MAX, is_int, is_number, number_problem
from harness.evaluation.evaluate import LengthMetrics
from harness.records import kept_results
from harness.records.identity import evaluated_scales
from harness.records.record import RunRecord, record_problems
from harness.records.store import Store
from leaderboard.schema import Record, read_file, to_published, validate_record

REPO = Path(__file__).resolve().parents[2]


def a_record(seed: int = 0) -> RunRecord:
    cfg = preset_config("smoke", pe="rope", task="copy", seed=seed)
    samples = cfg.eval.samples
    metrics = tuple(
        (s, LengthMetrics(n, 2.0 * n + 3, samples, samples // 2, 4 * samples, 3 * samples))
        for s, n in evaluated_scales(cfg)
    )
    return RunRecord(
        run_id=cfg.run_id(),
        config=json.loads(json.dumps(cfg.to_dict())),
        provenance={"commit": "abc", "device": "cpu", "torch": "2", "pezoo": "0"},
        metrics=metrics,
        final_loss=0.25,
        train_seconds=3.0,
        eval_seconds=1.0,
        started_at=1.7e9,
        finished_at=1.7e9 + 5,
        n_params=1000,
        pe_params=0,
    )


def test_a_record_is_the_same_through_the_store_a_kept_file_and_a_results_line(tmp_path):
    record = a_record()
    assert record.problems() == []
    with Store(tmp_path / "s.sqlite") as store:
        assert store.insert_finished(record)
        stored = store.record(record.run_id)
    assert stored == record

    kept = tmp_path / f"{record.run_id}.result.json"
    kept_results.keep(kept, record, b"key")
    cfg = preset_config("smoke", pe="rope", task="copy", seed=0)
    assert kept_results.read(kept, cfg, b"key") == dataclasses.replace(record, finished_at=None)  # not yet recorded

    line = to_published(record)
    assert validate_record(line) == []
    assert Record(line, Path("x.jsonl"), 1).record == record


def test_every_committed_record_is_its_record_serialised(tmp_path):
    """The committed lines are the records' plain form, byte for byte (one file of them)."""
    path = sorted((REPO / "leaderboard" / "results").glob("*.jsonl"))[0]
    records, problems = read_file(path)
    assert problems == [] and records
    for rec in records:
        assert to_published(rec.record) == rec.data


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("final_loss", math.nan),
        ("final_loss", -0.5),
        ("train_seconds", True),
        ("started_at", 10**400),
        ("n_params", -1),
        ("pe_params", 2**63),
        ("n_params", 1.5),
    ],
)
def test_one_validator_names_the_field_of_a_bad_number(field, value):
    record = dataclasses.replace(a_record(), **{field: value})
    named = {"n_params": "params.total", "pe_params": "params.pe", "train_seconds": "timings.train_seconds",
             "started_at": "timings.started_at"}.get(field, field)  # fmt: skip
    problems = record.problems()
    assert problems and any(p.startswith(f"{named} must be") for p in problems), problems


def test_a_record_yet_to_be_recorded_has_no_finish_time_and_a_published_one_must():
    body = dataclasses.replace(a_record(), finished_at=None).to_dict()
    assert record_problems(body) == []
    assert any("finished_at" in p for p in validate_record(to_published(RunRecord.from_dict(body))))


def test_the_number_checker():
    assert is_number(1) and is_number(0.5) and not is_number(True) and not is_number("1")
    assert not is_number(math.inf) and not is_number(math.nan) and not is_number(10**400)
    assert is_number(0.5, minimum=0, maximum=1) and not is_number(1.5, maximum=1) and not is_number(0, above=0)
    assert is_int(INT64_MAX) and not is_int(INT64_MAX + 1) and not is_int(-INT64_MAX - 2) and not is_int(1.0)
    assert is_int(3, minimum=-4, maximum=4) and not is_int(5, minimum=-4, maximum=4)
    assert number_problem("x.y", 2, integer=True, maximum=1).startswith("x.y must be")
    assert number_problem("x.y", 1, integer=True, maximum=1) is None
