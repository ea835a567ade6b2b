"""LM configs, records and runs end to end on a tiny corpus (seconds, offline)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from lm_fixtures import tiny_corpus

from harness.lm import run as lm_run
from harness.lm.config import LmConfig, lm_preset_config
from harness.lm.record import LmRecord, LmStore
from harness.lm.run import run_lm, sweep_lm
from harness.tasks.lm import corpora
from harness.tasks.lm.data import TrainingWindows
from harness.tasks.lm.split import split

CPU = torch.device("cpu")
TINY = {"train": {"steps": 3, "batch_size": 2}, "eval": {"lengths": (32, 64), "regions": 1, "tail": 32}}


@pytest.fixture
def corpus(monkeypatch):
    """The tiny corpus standing in for ``en`` during the test (the real one is never fetched)."""
    c = tiny_corpus("en")
    monkeypatch.setitem(corpora.CORPORA, "en", lambda **_: c)
    monkeypatch.setitem(corpora._LOADED, "en", c)
    return c


def cfg_of(pe: str, seed: int = 0, **kwargs) -> LmConfig:
    return lm_preset_config("lm_smoke", pe=pe, task="lm_en", seed=seed, overrides=TINY, **kwargs)


def test_config_round_trips_and_its_id_follows_what_matters():
    cfg = cfg_of("alibi")
    assert LmConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert cfg.run_id() == cfg_of("alibi").run_id() != cfg_of("alibi", seed=1).run_id()
    assert cfg.run_id() != cfg_of("rope").run_id()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: cfg_of("no_such_pe"), "unknown encoding"),
        (lambda: lm_preset_config("lm_smoke", pe="alibi", task="lm_fr", seed=0), "unknown language-modelling task"),
        (
            lambda: lm_preset_config(
                "lm_smoke", pe="alibi", task="lm_en", seed=0, overrides={"eval": {"lengths": (32, 48)}}
            ),
            "do not divide",
        ),
        (
            lambda: lm_preset_config(
                "lm_smoke", pe="alibi", task="lm_en", seed=0, overrides={"eval": {"lengths": (64, 32)}}
            ),
            "must increase",
        ),
        (lambda: cfg_of("alibi", finetune_steps=5), "fine-tune is for an inference-time variant"),
        (
            lambda: lm_preset_config("lm", pe="alibi", task="lm_en", seed=0, overrides={"eval": {"regionz": 2}}),
            "unknown eval config key",
        ),
    ],
)
def test_bad_configs_are_refused_in_one_line(make, message):
    with pytest.raises(ValueError, match=message) as info:
        make()
    assert "\n" not in str(info.value)


def test_a_run_records_counts_and_the_corpus_hash_and_a_sweep_skips_it(tmp_path, corpus):
    store = LmStore(tmp_path)
    cfg = cfg_of("alibi")
    record = run_lm(cfg, store, CPU, corpus=corpus, notice=lambda _: None)
    assert record.provenance["corpus_sha256"] == split(corpus).sha256 != corpus.sha256  # the documents and split
    assert record.provenance["corpus_documents_sha256"] == corpus.sha256
    assert {(s.mode, s.length) for s in record.scores} == {("windows", 32), ("windows", 64), ("tail", 32), ("tail", 64)}
    assert all(isinstance(s.n_bytes, int) and s.n_bytes > 0 for s in record.scores)
    assert [r.run_id for r in store.records()] == [cfg.run_id()]
    assert store.weights(cfg.run_id()).is_file() and not store.checkpoint(cfg.run_id()).exists()
    assert sweep_lm([cfg], store, CPU, notice=lambda _: None) == {cfg.run_id(): "cached"}


def test_sweeps_side_by_side_on_one_store_leave_each_run_to_one_of_them(tmp_path, corpus, monkeypatch):
    """A run another process holds (LmStore.hold: a flock, here a second open file in this
    process) is skipped as busy, and so is a variant whose trained run is held; once the
    holder lets go, the run is free, and a run finished meanwhile is read as cached."""
    monkeypatch.setattr(lm_run, "load_corpus", lambda _name: corpus)
    store = LmStore(tmp_path)
    rope, pi = cfg_of("rope"), cfg_of("rope@{scaling={rope_type=linear,factor=2.0}}")
    with store.hold(rope.run_id()) as taken:
        assert taken and store.held(rope.run_id())
        outcomes = sweep_lm([rope, pi], store, CPU, notice=lambda _: None)
    assert all(why.startswith("busy") for why in outcomes.values()) and store.records() == []
    assert not store.held(rope.run_id())
    run_lm(rope, store, CPU, corpus=corpus, notice=lambda _: None)  # "the other sweep" finishes it
    assert sweep_lm([rope, pi], store, CPU, notice=lambda _: None) == {rope.run_id(): "cached", pi.run_id(): "finished"}


def test_the_same_seed_gives_the_same_record(tmp_path, corpus):
    a = run_lm(cfg_of("rope"), LmStore(tmp_path / "a"), CPU, corpus=corpus, notice=lambda _: None)
    b = run_lm(cfg_of("rope"), LmStore(tmp_path / "b"), CPU, corpus=corpus, notice=lambda _: None)
    assert [s.nats for s in a.scores] == [s.nats for s in b.scores]


def test_variants_evaluate_the_trained_weights_and_need_them(tmp_path, corpus):
    store = LmStore(tmp_path)
    pi = "rope@{scaling={rope_type=linear,factor=2.0}}"
    with pytest.raises(ValueError, match="does not hold: run it first"):
        run_lm(cfg_of(pi), store, CPU, corpus=corpus, notice=lambda _: None)
    outcomes = sweep_lm([cfg_of(pi), cfg_of(pi, finetune_steps=2), cfg_of("rope")], store, CPU, notice=lambda _: None)
    assert set(outcomes.values()) == {"finished"}
    zero_shot, tuned = (r for r in store.records() if r.config.is_variant)
    assert zero_shot.train_steps == 0 and zero_shot.provenance["weights_from"] == cfg_of("rope").run_id()
    assert tuned.train_steps == 2 and tuned.config.finetune_length == 4 * tuned.config.length


def test_a_variant_refuses_weights_its_trained_runs_record_does_not_vouch_for(tmp_path, corpus):
    """The third probe's High, on the LM track: a weights file with another seed's tensors
    (or edited) in the store's folder must not be evaluated as the trained run's."""
    store, other = LmStore(tmp_path / "a"), LmStore(tmp_path / "b")
    run_lm(cfg_of("rope"), store, CPU, corpus=corpus, notice=lambda _: None)
    run_lm(cfg_of("rope", seed=1), other, CPU, corpus=corpus, notice=lambda _: None)
    pi = cfg_of("rope@{scaling={rope_type=linear,factor=2.0}}")
    kept = store.weights(cfg_of("rope").run_id())
    swapped = torch.load(other.weights(cfg_of("rope", seed=1).run_id()), weights_only=True)
    swapped["run_id"] = cfg_of("rope").run_id()  # the right header, another seed's tensors
    torch.save(swapped, kept)
    with pytest.raises(ValueError, match="not the file that run's record vouches for"):
        run_lm(pi, store, CPU, corpus=corpus, notice=lambda _: None)
    assert [r.run_id for r in store.records()] == [cfg_of("rope").run_id()]  # nothing recorded


def test_a_resumed_training_equals_the_uninterrupted_one_and_a_bad_checkpoint_is_set_aside(
    tmp_path, corpus, monkeypatch
):
    monkeypatch.setattr(lm_run, "CHECKPOINT_EVERY", 2)
    cfg = cfg_of("alibi")
    windows = TrainingWindows(lm_run.corpus_parts(cfg, corpus)[0].train, cfg.length)
    checkpoint = tmp_path / "run.ckpt"
    whole = lm_run.build_lm_model(cfg)
    lm_run.train_steps(cfg, whole, windows, CPU, steps=3, checkpoint=checkpoint, notice=lambda _: None)
    assert checkpoint.is_file()  # written at step 2, kept (the caller removes it when the run is recorded)
    told: list[str] = []
    resumed = lm_run.build_lm_model(cfg)
    _, seconds, steps = lm_run.train_steps(
        cfg, resumed, windows, CPU, steps=3, checkpoint=checkpoint, notice=told.append
    )
    assert any("resumed from step 2" in t for t in told)
    # the whole training's steps beside the whole training's seconds (the checkpoint's included):
    # a resumed record once said 1 step in all the seconds, 3x its real seconds per step
    assert steps == 3 and seconds >= torch.load(checkpoint, weights_only=True)["seconds"]
    for (name, a), (_, b) in zip(whole.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    checkpoint.write_bytes(b"not a checkpoint")
    told.clear()
    fresh = lm_run.build_lm_model(cfg)
    lm_run.train_steps(cfg, fresh, windows, CPU, steps=3, checkpoint=checkpoint, notice=told.append)
    assert any("set aside" in t for t in told) and (tmp_path / "run.ckpt.unreadable").is_file()
    for (name, a), (_, b) in zip(whole.state_dict().items(), fresh.state_dict().items(), strict=True):
        assert torch.equal(a, b), name  # started over: the same training


def _static_output_graphs(module, samples, num_warmup_iters=3, allow_unused_input=False):
    """``torch.cuda.make_graphed_callables`` on CPU with a real graph's output contract: every
    replay writes its output into one static buffer, the gradient still flowing."""
    buffer: list[torch.Tensor] = []

    def graphed(*args):
        out = module(*args)
        if not buffer:
            buffer.append(torch.empty_like(out))
        buffer[0].copy_(out.detach())
        out.data = buffer[0]
        return out

    return graphed


@pytest.fixture
def cpu_graphs(monkeypatch):
    monkeypatch.setattr(torch.cuda, "make_graphed_callables", _static_output_graphs)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device=None: torch.get_rng_state())
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device=None: torch.set_rng_state(state))


def test_a_graphed_training_with_late_read_backs_trains_as_the_eager_one(corpus, cpu_graphs):
    """The GPU loop (the pass replayed as a graph, losses read back every few steps) computes
    what the CPU loop does: the same final loss and weights."""
    from harness.training.train import Accel

    longer = {**TINY, "train": {"steps": 7, "batch_size": 2}}
    cfg = lm_preset_config("lm_smoke", pe="alibi", task="lm_en", seed=0, overrides=longer)
    windows = TrainingWindows(lm_run.corpus_parts(cfg, corpus)[0].train, cfg.length)
    models, losses = [], []
    for accel in (Accel(), Accel(graphs=True, readback=3)):
        model = lm_run.build_lm_model(cfg)
        loss, _, steps = lm_run.train_steps(cfg, model, windows, CPU, steps=7, notice=lambda _: None, accel=accel)
        models.append(model)
        losses.append(loss)
        assert steps == 7
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)
    for (name, a), (_, b) in zip(models[0].state_dict().items(), models[1].state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def test_a_graphed_loss_is_its_own_after_the_next_replay(corpus, cpu_graphs):
    """A graph's output buffer is overwritten by its next replay; the losses the loop keeps for
    a later read-back must not change with it."""
    from harness.training.train import Accel

    cfg = cfg_of("nope")
    model = lm_run.build_lm_model(cfg)
    windows = TrainingWindows(lm_run.corpus_parts(cfg, corpus)[0].train, cfg.length)
    compute = lm_run.step_loss(model, "fp32", Accel(graphs=True))
    first = compute(*windows.batch(0, 0, 2))
    kept = first.item()
    compute(*windows.batch(0, 1, 2))
    assert first.item() == kept


def test_a_late_read_back_names_the_step_that_diverged():
    from harness.training.train import DivergedError

    pending = [(4, torch.tensor(1.0)), (5, torch.tensor(float("nan"))), (6, torch.tensor(2.0))]
    with pytest.raises(DivergedError, match="nan at step 5"):
        lm_run._read_back(pending)
    assert pending == []
    assert lm_run._read_back([(7, torch.tensor(3.0))]) == 3.0


@pytest.fixture(scope="module")
def record_line(tmp_path_factory):
    corpus = tiny_corpus("en")
    folder = tmp_path_factory.mktemp("store")
    run_lm(cfg_of("alibi"), LmStore(folder), CPU, corpus=corpus, notice=lambda _: None)
    return (folder / "runs.jsonl").read_text().splitlines()[0]


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (lambda d: d["provenance"].pop("corpus_sha256"), "corpus_sha256"),
        (lambda d: d["scores"].pop(), "scores missing"),
        (lambda d: d["scores"][0].update(bytes=0), "bytes > 0"),
        (lambda d: d["scores"][0].update(reached=False), "not reached has no nats"),
        (lambda d: d["config"].update(seed=9), "its config's run id"),
        (lambda d: d.update(schema="pezoo-lm-run/0"), "not an LM record"),
    ],
)
def test_a_spoilt_record_is_refused(record_line, spoil, message):
    d = json.loads(record_line)
    assert LmRecord.from_dict(d).run_id == d["run_id"]
    spoil(d)
    with pytest.raises(ValueError, match=message):
        LmRecord.from_dict(d)


def test_the_lm_sweep_file_runs_seed_major_with_variants_after_the_trained_runs():
    from pathlib import Path

    from harness.lm.sweep import load_lm_sweep

    configs = load_lm_sweep(Path(__file__).parents[3] / "leaderboard" / "lm" / "sweep.toml", tasks=["lm_en"])
    trained = [c for c in configs if not c.is_variant]
    assert configs[: len(trained)] == trained  # every trained run before any variant
    assert [c.seed for c in trained] == sorted(c.seed for c in trained)
    assert {c.task for c in configs} == {"lm_en"} and len({c.run_id() for c in configs}) == len(configs)
    assert all(c.finetune_length == 4 * c.length for c in configs if c.finetune_steps)
    randomized = next(c for c in trained if c.pe == "randomized")
    assert randomized.pe_options["max_length"] >= 4 * randomized.eval.lengths[-1]


def test_an_unknown_sweep_key_is_refused():
    from harness.lm.sweep import sweep_configs

    with pytest.raises(ValueError, match="unknown LM sweep key"):
        sweep_configs({"pes": ["alibi"]})


def test_the_lm_command_trains_shows_and_exports(tmp_path, corpus):
    from click.testing import CliRunner

    from harness.cli import main

    runner = CliRunner()
    store, out = str(tmp_path / "store"), str(tmp_path / "results")
    args = ["lm", "bench", "--pe", "alibi", "--preset", "lm_smoke", "--steps", "2", "--store", store, "--device", "cpu"]
    done = runner.invoke(main, args)
    assert done.exit_code == 0, done.output
    shown = runner.invoke(main, ["lm", "show", "--store", store])
    assert shown.exit_code == 0 and shown.output.startswith("lm_en alibi seed 0: 32: ")
    exported = runner.invoke(main, ["lm", "export", "--store", store, "--out", out])
    assert exported.exit_code == 0 and len(list((tmp_path / "results").glob("*.jsonl"))) == 1
    again = runner.invoke(main, ["lm", "export", "--store", store, "--out", out])
    assert "nothing new" in again.output
    bad = runner.invoke(main, ["lm", "bench", "--pe", "alibi{slopes=3}", "--preset", "lm_smoke", "--store", store])
    assert bad.exit_code == 2 and "alibi" in bad.output


def test_the_plan_says_which_runs_are_done_training_elsewhere_or_to_do(tmp_path, corpus):
    from click.testing import CliRunner

    from harness.cli import main

    plan = tmp_path / "sweep.toml"
    plan.write_text('preset = "lm_smoke"\ntasks = ["lm_en"]\nseeds = [0]\npe = ["alibi", "rope", "nope"]\n')
    store = LmStore(tmp_path / "store")
    alibi, rope = (lm_preset_config("lm_smoke", pe=pe, task="lm_en", seed=0) for pe in ("alibi", "rope"))
    run_lm(alibi, store, CPU, corpus=corpus, notice=lambda _: None)
    with store.hold(rope.run_id()):
        out = CliRunner().invoke(main, ["lm", "sweep", str(plan), "--plan", "--store", str(store.folder)])
    assert out.exit_code == 0, out.output
    marks = [line.split()[0] for line in out.output.splitlines()[:3]]
    assert marks == ["done", "busy", "todo"] and "1 of 3 done, 1 training in another sweep" in out.output


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize(
    "pe", ["ape", "rope", "alibi", "kerple_log", "fire", "t5", "xpos", "xpos{blockwise=32}", "randomized", "nope"]
)
def test_a_graphed_lm_training_matches_the_eager_one_on_cuda(corpus, pe):
    """On a GPU every LM encoding's pass is recorded as a graph (no eager fallback) and
    trains as the eager loop does: the final loss within 1e-3 relative (randomized PE draws
    other positions in each, so only finite)."""
    import warnings

    from harness.training.train import Accel

    device = torch.device("cuda")
    longer = {**TINY, "train": {"steps": 12, "batch_size": 4}}
    cfg = lm_preset_config("lm_smoke", pe=pe, task="lm_en", seed=0, overrides=longer)
    windows = TrainingWindows(lm_run.corpus_parts(cfg, corpus)[0].train, cfg.length)
    losses = []
    for accel in (Accel(), Accel.for_device(device)):
        model = lm_run.build_lm_model(cfg, device=device)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # a failed capture warns
            losses.append(lm_run.train_steps(cfg, model, windows, device, steps=12, notice=str, accel=accel)[0])
    assert Accel.for_device(device).graphs
    if pe.startswith("randomized"):
        assert all(map(math.isfinite, losses))
    else:
        assert losses[1] == pytest.approx(losses[0], rel=1e-3)
