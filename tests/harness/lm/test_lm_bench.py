"""The language-modelling tasks in the one harness: ``pezoo bench --task lm_en`` builds a
``RunConfig`` with an ``LmEvalConfig``, the one loop trains it on byte windows, the one
store keeps its scores as counts in the one record type, and its variants (zero-shot and
fine-tuned) evaluate its kept weights."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from lm_fixtures import use_tiny_corpus

from harness.config import RunConfig, preset_config
from harness.config.lm_eval import LmEvalConfig
from harness.execution.run import execute
from harness.records.record import RunRecord, record_problems
from harness.records.store import Store
from harness.tasks.lm.data import LmBatches, lm_batches, task_split
from harness.tasks.vocab import PAD_ID
from harness.training.loss import training_loss
from harness.training.train import build_model, training_task

TINY = {"train": {"steps": 3, "batch_size": 2}, "eval": {"lengths": (32, 64), "regions": 1, "tail": 32}}


@pytest.fixture
def corpus(monkeypatch):
    return use_tiny_corpus(monkeypatch)


def lm_cfg(pe: str = "rope", seed: int = 0, **sections) -> RunConfig:
    overrides = {k: dict(v) for k, v in TINY.items()}
    for section, values in sections.items():
        overrides.setdefault(section, {}).update(values)
    return preset_config("lm_smoke", pe=pe, task="lm_en", seed=seed, overrides=overrides)


def test_an_lm_task_is_a_run_config_with_an_lm_eval_section_and_its_id_round_trips():
    cfg = lm_cfg()
    assert cfg.is_lm and isinstance(cfg.eval, LmEvalConfig) and cfg.backbone.vocab_size == 257
    again = RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg and again.run_id() == cfg.run_id()
    assert cfg.train_lengths() == [32] and cfg.test_lengths() == [64]
    assert lm_cfg(seed=1).run_id() != cfg.run_id()
    with pytest.raises(TypeError, match="language-modelling"):
        cfg.decode_eval  # noqa: B018


@pytest.mark.parametrize(
    ("preset", "task", "message"),
    [
        ("smoke", "lm_en", "lm_en' is a language-modelling task: its presets are lm, lm_long, lm_smoke"),
        ("lm_smoke", "copy", "copy' is an algorithmic task"),
    ],
)
def test_a_preset_of_one_track_refuses_a_task_of_the_other(preset, task, message):
    with pytest.raises(ValueError, match=message):
        preset_config(preset, pe="rope", task=task, seed=0)


def test_an_lm_config_that_breaks_the_tracks_rules_is_refused():
    cfg = lm_cfg()
    with pytest.raises(ValueError, match="windows of one length"):
        dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, train_min=16))
    with pytest.raises(ValueError, match="fine-tunes an inference-time variant"):
        dataclasses.replace(cfg, eval=dataclasses.replace(cfg.lm_eval, finetune_steps=5, finetune_length=128))
    with pytest.raises(ValueError, match=r"eval\.test_max is an algorithmic task's setting"):
        RunConfig.from_dict({**cfg.to_dict(), "eval": {"test_max": 40}})
    with pytest.raises(ValueError, match="unknown eval config key"):
        RunConfig.from_dict({**cfg.to_dict(), "eval": {"no_such_key": 40}})


def test_the_loop_reads_byte_windows_and_scores_every_byte_pad_s_id_included(corpus):
    cfg = lm_cfg()
    data = training_task(cfg)
    assert isinstance(data, LmBatches)
    tokens, targets = task_split("lm_en").train and lm_batches("lm_en", 0, 32).windows.batch(0, 5, 2)
    batch = data.batch(5, 2)
    assert torch.equal(batch.inputs, tokens) and torch.equal(batch.labels, targets) and bool(batch.scored.all())
    # a byte with PAD's id is a byte: it is read and scored like any other
    batch.inputs[:, 5] = PAD_ID
    batch.labels[:, 5] = PAD_ID
    model = build_model(cfg)
    _, task_loss = training_loss(model, batch, padded=False)
    logits = model(batch.inputs)
    expected = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.labels.reshape(-1))
    assert torch.allclose(task_loss, expected, atol=1e-6)


def test_bench_trains_scores_and_records_an_lm_run_in_the_one_store(tmp_path, corpus):
    cfg = lm_cfg()
    store = Store(tmp_path / "results.db")
    outcome = execute(cfg, store, torch.device("cpu"), notice=lambda m: None)
    assert outcome.status == "finished"
    record = store.record(cfg.run_id())
    assert record is not None and record.lm is not None and record.metrics == ()
    body = record.to_dict()
    assert record_problems(body) == []
    assert {(m["mode"], m["length"]) for m in body["metrics"]} == {("windows", 32), ("windows", 64), ("tail", 32),
                                                                    ("tail", 64)}  # fmt: skip
    windows = record.lm.score("windows", 64)
    assert windows is not None and windows.n_bytes == 64 and math.isfinite(windows.bpb)
    assert body["provenance"]["corpus_sha256"] == task_split("lm_en").sha256
    assert len(body["passkey"]) == 0  # lm_smoke asks for the grid; no test length of 32/64 bytes has filler
    assert execute(cfg, store, torch.device("cpu"), notice=lambda m: None).status == "cached"


def test_an_lm_record_whose_numbers_were_changed_is_refused(tmp_path, corpus):
    cfg = lm_cfg()
    store = Store(tmp_path / "results.db")
    execute(cfg, store, torch.device("cpu"), notice=lambda m: None)
    body = store.record(cfg.run_id()).to_dict()
    bad = json.loads(json.dumps(body))
    bad["metrics"][0]["reached"] = False
    assert any("not reached" in p for p in record_problems(bad))
    bad = json.loads(json.dumps(body))
    del bad["positions"]
    assert any("position curves" in p for p in record_problems(bad))
    bad = json.loads(json.dumps(body))
    bad["metrics"] = bad["metrics"][1:]
    assert any("scores missing" in p for p in record_problems(bad))


def test_variants_evaluate_the_kept_weights_zero_shot_and_fine_tuned(tmp_path, corpus):
    from harness.sweeps.executors.driver import run_sweep
    from harness.sweeps.executors.in_process import InProcess

    trained = lm_cfg()
    zero = preset_config(
        "lm_smoke", pe="rope@{scaling={rope_type=linear,factor=2}}", task="lm_en", seed=0, overrides=TINY
    )
    tuned = dataclasses.replace(zero, eval=dataclasses.replace(zero.lm_eval, finetune_steps=2, finetune_length=64))
    assert zero.trained_config() == trained and tuned.trained_config() == trained
    store = Store(tmp_path / "results.db")
    outcomes = run_sweep(InProcess(torch.device("cpu")), [trained, zero, tuned], store)
    assert [o.status for o in outcomes] == ["finished"] * 3, outcomes
    first, plain, fine = (store.record(c.run_id()) for c in (trained, zero, tuned))
    assert plain.provenance["weights_from"] == trained.run_id() and plain.train_seconds == 0
    assert fine.provenance["weights_from"] == trained.run_id() and fine.train_seconds > 0
    assert fine.final_loss != first.final_loss  # fine-tuned: its own loss
    assert plain.final_loss == first.final_loss
    assert plain.lm.scores != first.lm.scores  # the variant's encoding, not the trained one's
    assert all(record_problems(r.to_dict()) == [] for r in (first, plain, fine))


def test_an_lm_run_is_exported_to_the_lm_folder_and_read_back_by_the_lm_page(tmp_path, corpus):
    from harness.sweeps.executors.driver import run_sweep
    from harness.sweeps.executors.in_process import InProcess
    from leaderboard.export import LM_FOLDER, export
    from leaderboard.lm_results import read_lm_results
    from leaderboard.schema import read_results

    trained = lm_cfg()
    zero = preset_config("lm_smoke", pe="rope@{scaling={rope_type=linear,factor=2}}", task="lm_en", seed=0,
                         overrides=TINY)  # fmt: skip
    store = Store(tmp_path / "results.db")
    run_sweep(InProcess(torch.device("cpu")), [trained, zero], store)
    out = tmp_path / "results"
    summary = export(tmp_path / "results.db", out)
    assert [p.parent.name for p, _ in summary.written] == [LM_FOLDER]
    assert read_results(out) == []  # the board's folder holds no LM run
    views = {r.run_id: r for r in read_lm_results(out / LM_FOLDER)}
    assert set(views) == {trained.run_id(), zero.run_id()}
    view = views[zero.run_id()]
    assert view.trained_run_id() == trained.run_id() and view.config.is_variant
    assert view.scores == store.record(zero.run_id()).lm.scores
    assert export(tmp_path / "results.db", out).written == []  # exported once
    from click.testing import CliRunner

    from harness.cli import main

    checked = CliRunner().invoke(main, ["leaderboard", "check", "--results", str(out)])  # an LM sweep's export alone
    assert checked.exit_code == 0 and "2 LM run(s): valid" in checked.output, checked.output


def test_published_lm_runs_are_imported_so_a_sweep_skips_them(tmp_path, corpus):
    from leaderboard.export import export, import_results

    cfg = lm_cfg()
    execute(cfg, Store(tmp_path / "a.db"), torch.device("cpu"), notice=lambda m: None)
    export(tmp_path / "a.db", tmp_path / "results")
    summary = import_results(tmp_path / "results", tmp_path / "b.db")
    assert summary.imported == 1
    store = Store(tmp_path / "b.db")
    assert store.record(cfg.run_id()).lm == Store(tmp_path / "a.db").record(cfg.run_id()).lm
    assert execute(cfg, store, torch.device("cpu"), notice=lambda m: None).status == "cached"


@pytest.fixture(scope="module")
def published_lm(tmp_path_factory):
    """A published results-file line of an LM run (``leaderboard.schema.to_published``)."""
    from leaderboard.schema import to_published

    with pytest.MonkeyPatch.context() as mp:
        use_tiny_corpus(mp)
        cfg = lm_cfg(eval={"lengths": (32, 64, 128, 256), "passkey": 2})
        store = Store(tmp_path_factory.mktemp("lm") / "results.db")
        execute(cfg, store, torch.device("cpu"), notice=lambda m: None)
        return to_published(store.record(cfg.run_id()))


def _lm_paths(value, prefix=()):
    if prefix and prefix[0] in ("metrics", "positions", "passkey"):
        yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _lm_paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _lm_paths(v, (*prefix, i))


_SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8)
_JSON = st.recursive(
    _SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=10,
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(data=st.data(), value=_JSON, delete=st.booleans())
def test_random_json_inside_an_lm_record_s_scores_gives_problems_never_exceptions(published_lm, data, value, delete):
    from leaderboard.schema import checksum, validate_record

    assert validate_record(published_lm) == []
    path = data.draw(st.sampled_from(list(_lm_paths(published_lm))))
    record = json.loads(json.dumps(published_lm))
    target = record
    for p in path[:-1]:
        target = target[p]
    if delete and isinstance(target, dict):
        del target[path[-1]]
    else:
        target[path[-1]] = value
    try:
        record["checksum"] = checksum(record)  # what a careful forger would do
    except ValueError:  # NaN: no canonical JSON, the old checksum stays
        pass
    problems = validate_record(record)
    assert isinstance(problems, list) and all(isinstance(p, str) for p in problems)
    if not problems:  # what passes is a usable run: it reads as a record and as the page's view
        RunRecord.from_dict({k: v for k, v in record.items() if k not in ("schema_version", "checksum")})


def test_an_lm_result_kept_beside_a_full_store_reads_back_whole_and_a_changed_one_is_refused(tmp_path, corpus):
    from harness.records.kept_results import KeptResultError, keep, read

    cfg = lm_cfg()
    store = Store(tmp_path / "results.db")
    execute(cfg, store, torch.device("cpu"), notice=lambda m: None)
    record = dataclasses.replace(store.record(cfg.run_id()), finished_at=None)
    key = b"k" * 32
    keep(tmp_path / "kept.json", record, key)
    back = read(tmp_path / "kept.json", cfg, key)
    assert back.lm == record.lm and back.metrics == ()
    body = json.loads((tmp_path / "kept.json").read_text())
    body["lm"]["metrics"][0]["nats"] += 1.0  # a changed number: the seal no longer holds
    (tmp_path / "bad.json").write_text(json.dumps(body))
    with pytest.raises(KeptResultError, match="not sealed"):
        read(tmp_path / "bad.json", cfg, key)


def test_pezoo_results_shows_lm_runs_in_bits_per_byte_beside_the_algorithmic_tables(tmp_path, corpus):
    from click.testing import CliRunner

    from harness.cli import main

    store = Store(tmp_path / "results.db")
    lm = lm_cfg()
    algorithmic = preset_config("smoke", pe="rope", task="copy", seed=0, overrides={"train": {"steps": 2}})
    for cfg in (lm, algorithmic):
        assert execute(cfg, store, torch.device("cpu"), notice=lambda m: None).status == "finished"
    args = ["results", "--store", str(tmp_path / "results.db")]
    table = CliRunner().invoke(main, args)
    assert table.exit_code == 0 and "lm_en (bits per byte)" in table.output and "copy" in table.output, table.output
    mixed = CliRunner().invoke(main, [*args, "--format", "csv"])
    assert mixed.exit_code != 0 and "pick one kind with --task" in mixed.output
    rows = CliRunner().invoke(main, [*args, "--format", "csv", "--task", "lm_en"])
    assert rows.exit_code == 0 and rows.output.splitlines()[0].startswith("run_id,pe,task,seed,preset,pe_label,mode")
    assert len(rows.output.splitlines()) == 1 + 4  # windows and tail at 32 and 64


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"eval": {"test_max": 100}}, "eval.test_max is an algorithmic task's setting"),
        ({"eval": {"samples": 5}}, "eval.samples is an algorithmic task's setting"),
        ({"eval": {"every": 5}}, "eval.every is an algorithmic task's setting"),
        ({"train": {"pack": 64}}, "train.pack packs an algorithmic task's examples"),
        ({"train": {"curriculum": ((0, 32),)}}, "train.curriculum raises an algorithmic task's scales"),
    ],
)
def test_an_algorithmic_setting_on_an_lm_task_is_refused_by_name(overrides, message):
    with pytest.raises(ValueError, match=message):
        preset_config("lm_smoke", pe="rope", task="lm_en", seed=0, overrides=overrides)


def test_a_training_length_for_an_lm_task_sets_its_one_window_length():
    cfg = preset_config("lm_smoke", pe="rope", task="lm_en", seed=0, overrides={"train": {"train_max": 64}})
    assert cfg.train.train_min == cfg.train.train_max == 64 and cfg.train_lengths() == [64]
    assert cfg.test_lengths() == [128]
