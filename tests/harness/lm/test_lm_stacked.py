"""A language-modelling run stacks as an algorithmic one does (harness.training.stacked): whole
windows, no padding, every label scored; runs of one shape end where they end alone, to the
stated tolerance (seconds, offline, on the tiny corpus)."""

from __future__ import annotations

import threading

import pytest
import torch
from lm_fixtures import TINY, use_tiny_corpus

import harness.training.stacked as stacked
from harness.config import preset_config
from harness.training.accel import Accel
from harness.training.train import build_model, train, training_task


@pytest.fixture
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("pe", ["alibi", "rope"])
def test_lm_runs_trained_in_a_stack_end_where_they_end_alone(monkeypatch, one_torch_thread, pe):
    use_tiny_corpus(monkeypatch)
    overrides = {**TINY, "train": {**TINY["train"], "steps": 8}}
    cfgs = [preset_config("lm_smoke", pe=pe, task="lm_en", seed=seed, overrides=overrides) for seed in (0, 1)]
    alone = [train(cfg, build_model(cfg), training_task(cfg), "cpu").final_loss for cfg in cfgs]
    stacks = stacked.Stacks()
    together: dict[int, object] = {}

    def run(i, cfg):
        with stacked.installed(stacks):
            together[i] = train(cfg, build_model(cfg), training_task(cfg), "cpu", accel=Accel(stack=True))

    threads = [threading.Thread(target=run, args=(i, cfg)) for i, cfg in enumerate(cfgs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    (stack,) = stacks.all()
    assert stack.dissolved is None and stack.member_steps == 16
    for i, loss in enumerate(alone):
        assert together[i].final_loss == pytest.approx(loss, rel=1e-4)
        assert together[i].stacked[0] == 8
