"""Inference-time variants: one trained RoPE run evaluated under several context-extension
methods (``rope@{scaling={...}}``) without training again, each its own run and row."""

from __future__ import annotations

import hashlib
import math
from dataclasses import replace

import pytest
import torch
from click.testing import CliRunner

import harness.execution.run
from harness.cli import main
from harness.commands.report import leaderboard_tables
from harness.config import preset_config
from harness.execution.kept_weights import weights_path
from harness.records.frames import load
from harness.records.store import Store
from harness.training.train import build_model
from pezoo.spec import parse_pe

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 5}
SPECS = [
    "rope",
    "rope@{scaling={rope_type=default}}",  # as trained, written out: must reproduce the run's numbers
    "rope@{scaling={rope_type=linear,factor=4.0}}",
    "rope@{scaling={rope_type=yarn,factor=4.0,original_max_position_embeddings=5}}",
]
ARGS = ["bench", "--task", "copy", "--preset", "smoke", "--device", "cpu", "--workers", "1", "--steps", "12"]


@pytest.fixture(scope="module")
def variant_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("variants") / "store.sqlite"
    trained = []
    real_train = harness.execution.run.train

    def counting_train(cfg, *args, **kwargs):
        trained.append(cfg.run_id())
        return real_train(cfg, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(harness.execution.run, "train", counting_train)
        first = CliRunner().invoke(main, [*ARGS, "--pe", ",".join(SPECS), "--store", str(path)])
        assert first.exit_code == 0, first.output
        again = CliRunner().invoke(main, [*ARGS, "--pe", ",".join(SPECS), "--store", str(path)])
        assert again.exit_code == 0, again.output
    return path, trained, first.output, again.output


def _configs():
    overrides = {"train": {"steps": 12}}
    return [preset_config("smoke", pe=s, task="copy", seed=0, overrides=overrides) for s in SPECS]


def test_variants_train_once_and_reference_the_trained_run(variant_store):
    path, trained, _, again = variant_store
    base, *variants = _configs()
    assert trained == [base.run_id()]  # one training, in the first bench; none in the second
    assert again.count("already in the store, skipped") == 4
    assert weights_path(path.parent / "checkpoints", base.run_id()).is_file()
    ids = {c.run_id() for c in variants}
    assert len(ids) == 3 and base.run_id() not in ids
    with Store(path, readonly=True) as store:
        base_run = store.run(base.run_id())
        assert "eval_pe_options" not in base_run["config"] and "weights_from" not in base_run["provenance"]
        scalings = [{"rope_type": "default"}, {"rope_type": "linear", "factor": 4.0}, YARN]
        for cfg, options in zip(variants, scalings, strict=True):
            run = store.run(cfg.run_id())
            assert run["status"] == "finished"
            assert run["config"]["eval_pe_options"] == {"scaling": options}
            assert run["config"]["pe_options"] == base_run["config"]["pe_options"]
            assert run["provenance"]["weights_from"] == base.run_id()
            assert run["train_seconds"] == 0.0 and run["final_loss"] == base_run["final_loss"]


def test_as_trained_variant_reproduces_the_trained_run(variant_store):
    path, *_ = variant_store
    base, as_trained, linear, _ = _configs()
    with Store(path, readonly=True) as store:
        expected = store.metrics(base.run_id())
        got = store.metrics(as_trained.run_id())
        scaled = store.metrics(linear.run_id())
    assert len(expected) == 8  # scales 1..5 and 6..8
    strip = lambda rows: [{k: v for k, v in r.items() if k != "run_id"} for r in rows]  # noqa: E731
    assert strip(got) == strip(expected)
    # PI x4 divides every angle by 4: the same weights, evaluated differently
    assert [r["length"] for r in scaled] == [r["length"] for r in expected]


def test_the_variant_model_uses_the_variant_frequencies():
    _, _, linear, yarn = _configs()
    model = build_model(replace(linear.trained_config(), pe_options=linear.eval_options()))
    e = 32 // 2  # smoke: d_model 32, 2 heads
    theta = 10000.0 ** (-torch.arange(0, e, 2, dtype=torch.float64) / e)
    inv_freq, scale = model.pe.frequencies()
    torch.testing.assert_close(inv_freq.double(), theta / 4, rtol=1e-6, atol=0)
    assert scale == 1.0
    _, yarn_scale = build_model(replace(yarn.trained_config(), pe_options=yarn.eval_options())).pe.frequencies()
    assert yarn_scale == pytest.approx(0.1 * math.log(4.0) + 1)  # YaRN §3.4: sqrt(1/t) = 0.1 ln s + 1


def test_variants_are_rows_named_as_the_same_weights(variant_store):
    path, *_ = variant_store
    df = load(path)
    assert set(df["pe_label"]) == {
        "rope",
        "rope → default (same weights)",
        "rope → linear×4 (same weights)",
        "rope → yarn×4 L=5 (same weights)",
    }
    table = leaderboard_tables(df)["copy"]
    assert "rope → linear×4 (same weights)" in table and "rope → yarn×4 L=5 (same weights)" in table


def test_the_kept_weights_load_into_the_variant_model_and_change_its_output(variant_store):
    path, *_ = variant_store
    base, as_trained, linear, _ = _configs()
    payload = torch.load(weights_path(path.parent / "checkpoints", base.run_id()), weights_only=True)
    assert payload["run_id"] == base.run_id() and payload["format"] == "pezoo-weights"
    tokens = torch.randint(0, 64, (2, 12))
    logits = []
    for cfg in (base, as_trained, linear):
        model = build_model(replace(base, pe_options=cfg.eval_options()))
        model.load_state_dict(payload["model"])
        model.eval()
        with torch.no_grad():
            logits.append(model(tokens))
    torch.testing.assert_close(logits[1], logits[0], rtol=0, atol=0)
    assert not torch.allclose(logits[2], logits[0])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("rope@{base=500}", "may not change base"),
        ("rope@{layout=half}", "may not change layout"),
        ("alibi@{scaling={rope_type=linear,factor=2.0}}", "may change at evaluation: none"),
        ("rope@{scaling={rope_type=linear}}", "needs 'factor'"),
    ],
)
def test_variants_that_would_change_the_model_are_refused_before_anything_runs(tmp_path, spec, message):
    path = tmp_path / "store.sqlite"
    result = CliRunner().invoke(main, [*ARGS, "--pe", f"rope,{spec}", "--store", str(path)])
    assert result.exit_code != 0 and message in result.output
    assert not path.exists()


def test_a_variant_needs_final_weights_select():
    with pytest.raises(ValueError, match=r"variants need eval\.select='final'"):
        preset_config(
            "smoke",
            pe="rope@{scaling={rope_type=linear,factor=2.0}}",
            task="copy",
            seed=0,
            overrides={"eval": {"every": 5, "select": "top3"}},
        )


def test_variant_spec_round_trips_and_plans_its_trained_run_first():
    spec = parse_pe(SPECS[3])
    assert parse_pe(str(spec)) == spec and spec.trained == parse_pe("rope")
    from harness.sweeps.sweep import Grid

    runs = Grid(preset="smoke", pe=(SPECS[2],), task=("copy",), steps=(12,)).configs()
    assert [r.is_variant for r in runs] == [False, True]
    assert runs[0].run_id() == runs[1].trained_config().run_id() == _configs()[0].run_id()


def test_variants_export_as_valid_records_and_are_board_rows(variant_store, tmp_path):
    from leaderboard.board import assemble
    from leaderboard.export import export
    from leaderboard.schema import read_results

    path, *_ = variant_store
    export(path, tmp_path / "results")
    records = read_results(tmp_path / "results")  # validated: run ids, schema
    assert len(records) == 4
    base = _configs()[0].run_id()
    variants = [r for r in records if r.data["run_id"] != base]
    assert all(r.data["provenance"]["weights_from"] == base for r in variants)
    (table,) = assemble(records).tables
    labels = {row.label for row in table.rows}
    assert "rope → yarn×4 L=5 (same weights)" in labels and "rope" in labels and len(labels) == 4
    # the fit gate applies to each row's own EM≤N: a smoke run fits nothing, so no row is ranked
    assert all(row.rank is None for row in table.rows)


class _RunsCode:
    def __reduce__(self):
        return (print, ("this ran code",))


@pytest.mark.parametrize("content", ["missing", "garbage", "code", "other run"])
def test_a_variant_without_usable_weights_fails_saying_why(tmp_path, content, capfd):
    from harness.execution.run import evaluate_kept
    from harness.training.checkpoint import save_weights

    _, _, linear, _ = _configs()
    trained = linear.trained_config()
    path = weights_path(tmp_path, trained.run_id())
    if content == "garbage":
        path.write_bytes(b"not a torch file")
    elif content == "code":
        torch.save({"format": "pezoo-weights", "model": _RunsCode()}, path)
    elif content == "other run":
        other = replace(trained, seed=1)
        save_weights(path, other, build_model(other), 1.0)
    trained_id = linear.trained_config().run_id()
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None  # as if its record held it
    result = evaluate_kept(
        linear, trained_id, digest, torch.device("cpu"), tmp_path / f"{linear.run_id()}.pt", notice=lambda _m: None
    )
    assert result.status == "failed" and not result.metrics
    expected = {
        "missing": "no final weights of run",
        "garbage": "readable without running code (a pickle of something else, or a damaged file)",
        "code": "readable without running code (it asks for ",
        "other run": f"is not run {trained.run_id()}'s",
    }[content]
    assert expected in result.error and "keeps when it trains in a sweep that lists the variant" in result.error
    assert not result.retryable  # another attempt would read the same file
    assert "this ran code" not in capfd.readouterr().out


def test_a_variant_of_a_run_finished_without_weights_fails_and_trains_nothing(tmp_path, monkeypatch):
    path = tmp_path / "store.sqlite"
    assert CliRunner().invoke(main, [*ARGS, "--pe", "rope", "--store", str(path)]).exit_code == 0
    trained = []
    real_train = harness.execution.run.train
    monkeypatch.setattr(
        harness.execution.run, "train", lambda cfg, *a, **k: trained.append(cfg) or real_train(cfg, *a, **k)
    )
    result = CliRunner().invoke(main, [*ARGS, "--pe", f"rope,{SPECS[2]}", "--store", str(path)])
    assert result.exit_code == 1 and "no final weights of run" in result.output
    assert trained == []
    assert "retrying" not in result.output  # the default 2 retries would read the same missing file


def test_a_variant_waits_while_another_process_trains_its_run(tmp_path):
    """Two bench processes on one board: the one that skips a run another process trains
    must skip that run's variants too, not fail them for want of weights."""
    from harness.records.store import Owner

    path = tmp_path / "store.sqlite"
    base, _, linear, _ = _configs()
    them = Owner("some-other-host.example", 4242, 123, "their-boot", "pid:[1]")
    with Store(path) as store:
        assert store.claim(base, {"commit": "them"}, them).taken
    result = CliRunner().invoke(main, [*ARGS, "--pe", f"rope,{SPECS[2]}", "--store", str(path)])
    assert result.exit_code == 0, result.output
    assert f"waits for the weights of run {base.run_id()}: claimed by some-other-host.example:4242" in result.output
    assert "no final weights" not in result.output and "failed" not in result.output.replace("failed 0", "")
    with Store(path) as store:
        assert store.status(linear.run_id()) is None  # nothing recorded: it runs once the weights exist
        assert store.status(base.run_id()) == "running"  # theirs, untouched


def test_xpos_blockwise_causal_attention_is_a_variant_of_the_trained_run(tmp_path):
    """xPos's paper evaluates it with blockwise causal attention: the trained xpos run's
    weights, evaluated again with each query seeing its own block and the one before. On
    sequences longer than the block it changes the output; on shorter ones it cannot."""
    path = tmp_path / "store.sqlite"
    specs = "xpos,xpos@{blockwise=4}"
    result = CliRunner().invoke(main, [*ARGS, "--pe", specs, "--store", str(path)])
    assert result.exit_code == 0, result.output
    df = load(path)
    assert set(df["pe_label"]) == {"xpos", "xpos → blockwise L=4 (same weights)"}
    base, variant = (
        preset_config("smoke", pe=s, task="copy", seed=0, overrides={"train": {"steps": 12}}) for s in specs.split(",")
    )
    assert variant.trained_config().run_id() == base.run_id()
    payload = torch.load(weights_path(path.parent / "checkpoints", base.run_id()), weights_only=True)
    tokens = torch.randint(0, 32, (2, 10))
    outputs = []
    for cfg in (base, variant):
        model = build_model(replace(base, pe_options=cfg.eval_options()))
        model.load_state_dict(payload["model"])
        model.eval()
        with torch.no_grad():
            outputs.append(model(tokens))
    plain, blocked = outputs
    torch.testing.assert_close(blocked[:, :4], plain[:, :4], rtol=0, atol=0)  # within the first block: the same
    assert not torch.allclose(blocked[:, 8:], plain[:, 8:])  # two blocks on: the first is out of sight


def test_keep_weights_keeps_a_plain_runs_final_weights_for_a_later_variant(tmp_path, monkeypatch):
    """`--keep-weights` (board runs): a run finished with no variant in its sweep keeps its
    final weights, so a variant asked for in a later bench evaluates them without training."""
    path = tmp_path / "store.sqlite"
    first = CliRunner().invoke(main, [*ARGS, "--pe", "rope", "--store", str(path), "--keep-weights"])
    assert first.exit_code == 0, first.output
    base = _configs()[0]
    assert weights_path(tmp_path / "checkpoints", base.run_id()).is_file()
    trained = []
    real_train = harness.execution.run.train
    monkeypatch.setattr(
        harness.execution.run, "train", lambda cfg, *a, **k: trained.append(cfg) or real_train(cfg, *a, **k)
    )
    later = CliRunner().invoke(main, [*ARGS, "--pe", f"rope,{SPECS[2]}", "--store", str(path)])
    assert later.exit_code == 0, later.output
    assert trained == []


def test_a_variant_refuses_weights_its_trained_runs_record_does_not_vouch_for(tmp_path):
    """The third probe: a weights file with the trained run's header and other tensors was
    evaluated as that run's. A variant cannot train, so it fails, saying the file is not
    the one its run kept (the SHA-256 its record holds)."""
    path = tmp_path / "store.sqlite"
    first = CliRunner().invoke(main, [*ARGS, "--pe", "rope", "--store", str(path), "--keep-weights"])
    assert first.exit_code == 0, first.output
    base = _configs()[0]
    weights = weights_path(tmp_path / "checkpoints", base.run_id())
    payload = torch.load(weights, weights_only=True)
    payload["model"] = build_model(replace(base, seed=1)).state_dict()  # the header is the run's, the model not
    torch.save(payload, weights)
    later = CliRunner().invoke(main, [*ARGS, "--pe", f"rope,{SPECS[2]}", "--store", str(path)])
    assert later.exit_code == 1 and "is not the file run" in later.output and "SHA-256" in later.output
    with Store(path, readonly=True) as store:
        assert store.status(_configs()[2].run_id()) == "failed"
