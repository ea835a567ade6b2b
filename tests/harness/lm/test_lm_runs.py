"""LM configs and records, and an LM run through the one loop on a tiny corpus: a resumed run
equals the uninterrupted one, a graphed loss equals the eager one, a spoilt record is refused
(seconds, offline)."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from lm_fixtures import TINY, use_tiny_corpus

from harness.config import preset_config
from harness.execution.run import execute
from harness.lm.config import LmConfig, lm_preset_config
from harness.lm.record import LmRecord
from harness.records.store import Store
from harness.tasks.lm.data import lm_batches
from harness.training.checkpoint import load_checkpoint
from harness.training.graphs import GraphedLoss
from harness.training.loss import training_loss
from harness.training.train import Checkpointing, build_model, restore, train

CPU = torch.device("cpu")


@pytest.fixture
def corpus(monkeypatch):
    return use_tiny_corpus(monkeypatch)


def cfg_of(pe: str, seed: int = 0, **kwargs) -> LmConfig:
    return lm_preset_config("lm_smoke", pe=pe, task="lm_en", seed=seed, overrides=TINY, **kwargs)


def run_cfg(pe: str, steps: int = 3, seed: int = 0):
    overrides = {**TINY, "train": {**TINY["train"], "steps": steps}}
    return preset_config("lm_smoke", pe=pe, task="lm_en", seed=seed, overrides=overrides)


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


def test_the_same_seed_gives_the_same_scores_and_another_seed_other_ones(tmp_path, corpus):
    scores = []
    for i, seed in enumerate((0, 0, 1)):
        cfg = run_cfg("alibi", seed=seed)
        store = Store(tmp_path / f"s{i}.db")
        assert execute(cfg, store, CPU, notice=lambda m: None).status == "finished"
        scores.append(store.record(cfg.run_id()).lm.scores)
    assert scores[0] == scores[1] and scores[0] != scores[2]


def test_a_resumed_lm_training_equals_the_uninterrupted_one_and_a_bad_checkpoint_is_set_aside(tmp_path, corpus):
    cfg = run_cfg("alibi", steps=5)
    path = tmp_path / "run.pt"
    whole = build_model(cfg)
    train(cfg, whole, lm_batches("lm_en", 0, cfg.train.train_max), CPU, checkpointing=Checkpointing(path, every=2))
    assert load_checkpoint(path, cfg.run_id())["step"] == 4  # the last save before the end
    model, resume, problem = restore(cfg, path, CPU)
    assert problem is None and resume is not None and resume["step"] == 4
    result = train(cfg, model, lm_batches("lm_en", 0, cfg.train.train_max), CPU, resume=resume)
    assert result.steps == 5
    for (name, a), (_, b) in zip(whole.state_dict().items(), model.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    path.write_bytes(b"not a checkpoint")
    _, resume, problem = restore(cfg, path, CPU)
    assert resume is None and "set aside" in problem and (tmp_path / "run.pt.unreadable").is_file()


def _static_output_graphs(module, samples, num_warmup_iters=3, allow_unused_input=False):
    """``torch.cuda.make_graphed_callables`` on CPU with a real graph's output contract: every
    replay writes its output into one static buffer, the gradient still flowing."""
    buffer: list[torch.Tensor] = []

    def graphed(*args):
        out = module(*args)
        outs = out if isinstance(out, tuple) else (out,)
        if not buffer:
            buffer.extend(torch.empty_like(o) for o in outs)
        for o, b in zip(outs, buffer, strict=True):
            b.copy_(o.detach())
            o.data = b
        return out

    return graphed


@pytest.fixture
def cpu_graphs(monkeypatch):
    monkeypatch.setattr(torch.cuda, "make_graphed_callables", _static_output_graphs)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device=None: torch.get_rng_state())
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device=None: torch.set_rng_state(state))


@pytest.mark.parametrize("pe", ["alibi", "rope"])
def test_an_lm_batch_s_graphed_loss_is_the_eager_one_and_its_own_after_the_next_replay(corpus, cpu_graphs, pe):
    """The GPU loop replays an LM batch's pass as a graph over the window as it is (no padding,
    no planned positions): the same loss as the eager pass, and a kept loss survives the next replay."""
    cfg = run_cfg(pe)
    model = build_model(cfg)
    data = lm_batches("lm_en", 0, cfg.train.train_max)

    def eager(batch, host):
        return training_loss(model, batch, "fp32", padded=False)

    graphed = GraphedLoss(model, "fp32", eager, padded=False)
    first_batch, second_batch = data.batch(0, 2), data.batch(1, 2)
    first, _ = graphed(first_batch, first_batch)
    kept = first.item()
    assert kept == pytest.approx(eager(first_batch, None)[1].item(), rel=1e-6)
    graphed(second_batch, second_batch)
    assert first.item() == kept


@pytest.fixture(scope="module")
def record_line(tmp_path_factory):
    """A record of the track's earlier form (what leaderboard/results/lm/lm-*.jsonl hold), made
    from a run of the one harness."""
    with pytest.MonkeyPatch.context() as mp:
        use_tiny_corpus(mp)
        cfg = run_cfg("alibi")
        store = Store(tmp_path_factory.mktemp("store") / "results.db")
        execute(cfg, store, CPU, notice=lambda m: None)
        view = dataclasses.replace(LmRecord.of_run(store.record(cfg.run_id())), harness_ids=None)
    return json.dumps(view.to_dict())


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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize(
    "pe", ["ape", "rope", "alibi", "kerple_log", "fire", "t5", "xpos", "xpos{blockwise=32}", "randomized", "nope",
           "fox", "pope", "ssmax", "hybrid{window=32}"]
)  # fmt: skip
def test_a_graphed_lm_training_matches_the_eager_one_on_cuda(corpus, pe):
    """On a GPU the one loop records an LM window's pass as a graph (no eager fallback) and
    trains as the eager loop does: the final loss within 1e-3 relative (randomized PE draws
    other positions in each, so only finite)."""
    import warnings

    from harness.training.accel import Accel

    device = torch.device("cuda")
    cfg = run_cfg(pe, steps=12)
    losses = []
    for accel in (Accel(), Accel.for_device(device)):
        model = build_model(cfg, device)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # a failed capture warns
            result = train(cfg, model, lm_batches("lm_en", 0, cfg.train.train_max), device, accel=accel)
        losses.append(result.final_loss)
    assert Accel.for_device(device).graphs
    if pe.startswith("randomized"):
        assert all(map(math.isfinite, losses))
    else:
        assert losses[1] == pytest.approx(losses[0], rel=1e-3)
