"""Bad input to the LM track (issue 65): a clear error (a message, a non-zero exit, no
traceback) before anything is written, or, where a crash could have left it, tolerated
without losing anything; a sweep keeps going past one run's trouble."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from click.testing import CliRunner
from lm_fixtures import TINY, cfg_of, tiny_corpus, use_tiny_corpus

from harness.cli import main
from harness.lm import run as lm_run
from harness.lm.config import lm_preset_config
from harness.lm.record import LmStore
from harness.lm.run import run_lm, sweep_lm
from harness.tasks.lm.data import TrainingWindows

CPU = torch.device("cpu")

SWEEP = """preset = "lm_smoke"
tasks = ["lm_en"]
seeds = [0]
pe = ["alibi"]
[overrides.train]
steps = 3
batch_size = 2
[overrides.eval]
lengths = [32, 64]
regions = 1
tail = 32
"""
"""A sweep file of one run, ``cfg_of("alibi")``: the run the ``trained`` fixture holds."""


def quiet(_: str) -> None:
    pass


@pytest.fixture
def corpus(monkeypatch):
    return use_tiny_corpus(monkeypatch)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(record, its line in runs.jsonl) of ``cfg_of("alibi")``, trained once for the module."""
    folder = tmp_path_factory.mktemp("trained")
    record = run_lm(cfg_of("alibi"), LmStore(folder), CPU, corpus=tiny_corpus("en"), notice=quiet)
    return record, (folder / "runs.jsonl").read_text().splitlines()[0]


@pytest.fixture
def sweep_file(tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text(SWEEP)
    return str(path)


def lm(*args: str):
    return CliRunner().invoke(main, ["lm", *args])


def assert_clear_error(result, code: int = 1) -> None:
    """A click error: its exit code, a message, no traceback."""
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Error" in result.output and "Traceback" not in result.output


# -- the store's runs.jsonl --------------------------------------------------------------


def test_a_torn_last_line_is_skipped_with_a_warning_and_set_aside_by_the_next_add(tmp_path, trained):
    """A crash in the middle of an append leaves a last line without its newline: the
    records before it are read (with a warning), and the next append moves the torn bytes
    to runs.jsonl.torn instead of gluing its record to them."""
    record, line = trained
    torn = line[: len(line) // 2]
    (tmp_path / "runs.jsonl").write_text(line + "\n" + torn)
    told: list[str] = []
    store = LmStore(tmp_path, notice=told.append)
    assert [r.run_id for r in store.records()] == [record.run_id]
    assert store.finished() == {record.run_id}
    assert len(told) == 1 and "runs.jsonl:2" in told[0]  # said once, not at every read
    other = dataclasses.replace(record, config=cfg_of("alibi", seed=1))
    store.add(other)
    assert [r.run_id for r in store.records()] == [record.run_id, other.run_id]
    assert (tmp_path / "runs.jsonl.torn").read_text() == torn
    assert (tmp_path / "runs.jsonl").read_text().endswith("\n")


def test_a_whole_last_record_without_its_newline_is_kept(tmp_path, trained):
    record, line = trained
    (tmp_path / "runs.jsonl").write_text(line)  # the crash came between the record and its newline
    told: list[str] = []
    store = LmStore(tmp_path, notice=told.append)
    assert [r.run_id for r in store.records()] == [record.run_id] and told == []
    other = dataclasses.replace(record, config=cfg_of("alibi", seed=1))
    store.add(other)
    assert [r.run_id for r in store.records()] == [record.run_id, other.run_id]
    assert not (tmp_path / "runs.jsonl.torn").exists()


def test_the_commands_read_past_a_torn_last_line(tmp_path, trained, corpus, sweep_file):
    _, line = trained
    store = tmp_path / "store"
    store.mkdir()
    (store / "runs.jsonl").write_text(line + "\n" + line[:40])
    plan = lm("sweep", sweep_file, "--plan", "--store", str(store))
    assert plan.exit_code == 0, plan.output
    assert plan.stdout.splitlines()[0].startswith("done") and "warning" in plan.stderr
    swept = lm("sweep", sweep_file, "--store", str(store), "--device", "cpu")
    assert swept.exit_code == 0, swept.output
    assert "1 of 1 runs finished or cached" in swept.output


def test_a_malformed_line_before_the_last_is_a_clear_error_before_anything_runs(tmp_path, trained, corpus, sweep_file):
    _, line = trained
    store = tmp_path / "store"
    store.mkdir()
    (store / "runs.jsonl").write_text("{not a record\n" + line + "\n")
    with pytest.raises(ValueError, match=r"runs\.jsonl:1"):
        LmStore(store).records()
    for args in (
        ("sweep", sweep_file, "--plan", "--store", str(store)),
        ("sweep", sweep_file, "--store", str(store), "--device", "cpu"),
        ("bench", "--pe", "rope", "--preset", "lm_smoke", "--steps", "1", "--store", str(store), "--device", "cpu"),
        ("show", "--store", str(store)),
    ):
        result = lm(*args)
        assert_clear_error(result)
        assert "runs.jsonl:1" in result.output
    assert not (store / "weights").exists() and not (store / "checkpoints").exists()  # nothing trained
    assert (store / "runs.jsonl").read_text() == "{not a record\n" + line + "\n"  # nothing lost


# -- locks and the store's folder ---------------------------------------------------------


def test_a_bad_lock_fails_its_run_only_and_the_sweep_goes_on(tmp_path, corpus):
    store = LmStore(tmp_path)
    rope, alibi = cfg_of("rope"), cfg_of("alibi")
    (tmp_path / "locks" / f"{rope.run_id()}.lock").mkdir(parents=True)  # a folder where the lock file goes
    outcomes = sweep_lm([rope, alibi], store, CPU, notice=quiet)
    assert outcomes[alibi.run_id()] == "finished"
    assert outcomes[rope.run_id()].startswith("failed") and f"{rope.run_id()}.lock" in outcomes[rope.run_id()]
    assert [r.run_id for r in store.records()] == [alibi.run_id()]


def test_a_bad_lock_in_the_commands_is_a_clear_error(tmp_path, corpus, sweep_file):
    store = tmp_path / "store"
    store.mkdir()
    (store / "locks").write_text("")  # a file where the locks folder goes
    for args in (
        ("sweep", sweep_file, "--plan", "--store", str(store)),
        ("sweep", sweep_file, "--store", str(store), "--device", "cpu"),
    ):
        result = lm(*args)
        assert_clear_error(result)
        assert "locks" in result.output


@pytest.mark.parametrize(
    "args",
    [
        ("bench", "--pe", "alibi", "--preset", "lm_smoke"),
        ("sweep", "SWEEP"),
        ("sweep", "SWEEP", "--plan"),
        ("show",),
        ("export",),
    ],
)
def test_a_store_that_is_a_file_is_a_clear_error(tmp_path, corpus, sweep_file, args):
    store = tmp_path / "store"
    store.write_text("not a folder")
    args = tuple(sweep_file if a == "SWEEP" else a for a in args)
    extra = ("--out", str(tmp_path / "out")) if args[0] == "export" else ()
    result = lm(*args, "--store", str(store), *extra)
    assert result.exit_code != 0 and isinstance(result.exception, SystemExit), repr(result.exception)
    assert str(store) in result.output and store.read_text() == "not a folder"


# -- training -------------------------------------------------------------------------------


def test_fp16_training_scales_its_loss_and_checkpoints_the_scale(tmp_path, corpus, monkeypatch):
    """As the algorithmic loop (harness.training.precision.grad_scaler): fp16's gradients are
    taken of the scaled loss, and a checkpoint keeps the scale reached."""
    monkeypatch.setattr(lm_run, "CHECKPOINT_EVERY", 2)
    scaled: list[float] = []
    scale = torch.amp.GradScaler.scale

    def counting(self, outputs):
        scaled.append(float(outputs.detach()))
        return scale(self, outputs)

    monkeypatch.setattr(torch.amp.GradScaler, "scale", counting)
    fp16 = {**TINY, "train": {**TINY["train"], "precision": "fp16"}}
    cfg = lm_preset_config("lm_smoke", pe="alibi", task="lm_en", seed=0, overrides=fp16)
    windows = TrainingWindows(lm_run.corpus_parts(cfg, corpus)[0].train, cfg.length)
    checkpoint = tmp_path / "run.pt"
    loss, _, steps = lm_run.train_steps(
        cfg, lm_run.build_lm_model(cfg), windows, CPU, steps=3, checkpoint=checkpoint, notice=quiet
    )
    assert steps == 3 and len(scaled) == 3 and math.isfinite(loss)
    assert torch.load(checkpoint, weights_only=True)["scaler"]["scale"] > 1


@pytest.mark.parametrize(
    "damage",
    [
        lambda run_id: {"run_id": run_id, "model": {"no_such_weight": torch.zeros(1)}},
        lambda run_id: {"run_id": run_id},
        lambda run_id: [run_id],
    ],
    ids=["other-weights", "no-fields", "not-a-table"],
)
def test_a_checkpoint_of_this_run_that_does_not_load_is_set_aside_and_the_run_starts_over(tmp_path, corpus, damage):
    """A checkpoint under the run's own id that fails to load failed every retry; it is set
    aside (harness.training.checkpoint.set_aside) and the run trains from the start, as if it
    had never been there."""
    cfg = cfg_of("alibi")
    windows = TrainingWindows(lm_run.corpus_parts(cfg, corpus)[0].train, cfg.length)
    whole = lm_run.build_lm_model(cfg)
    lm_run.train_steps(cfg, whole, windows, CPU, steps=3, notice=quiet)
    checkpoint = tmp_path / "run.pt"
    torch.save(damage(cfg.run_id()), checkpoint)
    told: list[str] = []
    fresh = lm_run.build_lm_model(cfg)
    lm_run.train_steps(cfg, fresh, windows, CPU, steps=3, checkpoint=checkpoint, notice=told.append)
    assert any("set aside" in t and "starts over" in t for t in told)
    assert (tmp_path / "run.pt.unreadable").is_file() and not checkpoint.exists()
    for (name, a), (_, b) in zip(whole.state_dict().items(), fresh.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


# -- export and show --------------------------------------------------------------------------


def test_export_names_a_malformed_file_in_out(tmp_path, trained):
    _, line = trained
    store, out = tmp_path / "store", tmp_path / "out"
    store.mkdir()
    out.mkdir()
    (store / "runs.jsonl").write_text(line + "\n")
    (out / "lm-bad.jsonl").write_text("{oops\n")
    result = lm("export", "--store", str(store), "--out", str(out))
    assert_clear_error(result)
    assert "lm-bad.jsonl" in result.output and [p.name for p in out.iterdir()] == ["lm-bad.jsonl"]


def test_export_refuses_a_run_out_publishes_with_other_numbers(tmp_path, trained):
    """Not "nothing new": OUT holds the run with other numbers, and the store's are not written
    beside them (nor over them)."""
    record, line = trained
    store, out = tmp_path / "store", tmp_path / "out"
    store.mkdir()
    out.mkdir()
    (store / "runs.jsonl").write_text(line + "\n")
    first = record.scores[0]
    other = dataclasses.replace(record, scores=(dataclasses.replace(first, nats=first.nats + 1), *record.scores[1:]))
    published = json.dumps(other.to_dict(), sort_keys=True) + "\n"
    (out / "lm-old.jsonl").write_text(published)
    result = lm("export", "--store", str(store), "--out", str(out))
    assert_clear_error(result)
    assert record.run_id in result.output and "lm-old.jsonl" in result.output
    assert [p.name for p in out.iterdir()] == ["lm-old.jsonl"] and (out / "lm-old.jsonl").read_text() == published
    (out / "lm-old.jsonl").write_text(line + "\n")  # the same numbers: nothing new
    same = lm("export", "--store", str(store), "--out", str(out))
    assert same.exit_code == 0 and "nothing new" in same.output


def test_show_escapes_what_a_terminal_would_act_on(tmp_path, trained):
    record, _ = trained
    odd = dataclasses.replace(record, provenance={**record.provenance, "corpus_sha256": "\x1b]0;owned\x07\x1b[2J"})
    LmStore(tmp_path).add(odd)
    result = lm("show", "--store", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output and "\\x1b" in result.output


def test_a_huge_spec_is_not_echoed_whole(tmp_path):
    spec = "alibi{" + "a=1," * 250_000 + "}"  # 1 MB, an option given 250,000 times
    result = lm("bench", "--pe", spec, "--preset", "lm_smoke", "--store", str(tmp_path))
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    assert len(result.output) < 2000 and "given twice" in result.output
