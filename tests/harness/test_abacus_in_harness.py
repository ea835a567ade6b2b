"""The harness gives Abacus its own vocabulary's digit ids, without recording them."""

from __future__ import annotations

import torch

import harness.tasks as tasks
from harness.config import preset_config
from harness.config.pe_spec import display_name, vocabulary_options
from harness.tasks.vocab import TOKEN_ID, encode
from harness.training.train import build_model, train


def _cfg(steps=3):
    return preset_config("smoke", pe="abacus", task="addition", seed=0, overrides={"train": {"steps": steps}})


def test_the_model_gets_the_shared_vocabularys_digits_and_the_run_records_none():
    cfg = _cfg()
    assert cfg.pe_options == {}  # token ids are the harness's, not the run's
    assert display_name(cfg.pe, cfg.pe_options) == "abacus"
    pe = build_model(cfg).pe
    assert list(pe.digit_ids) == [TOKEN_ID[str(d)] for d in range(10)]
    assert vocabulary_options("rope") == {}


def test_the_backbone_numbers_the_digits_of_an_addition_example():
    model = build_model(_cfg()).eval()
    text = "8 2 9 + 0 3 = 8 0 0 8 ,".split()
    tokens = torch.tensor([encode(text)])
    seen = {}
    real = model.pe.embed_tokens

    def spy(x, ids, ctx):
        out = real(x, ids, ctx)
        seen["added"] = out - x
        return out

    model.pe.embed_tokens = spy
    with torch.no_grad():
        model(tokens)
    want = model.pe.table[torch.tensor([[1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 4, 0]])]
    torch.testing.assert_close(seen["added"], want)


def test_it_trains_on_addition():
    cfg = _cfg(steps=3)
    result = train(cfg, build_model(cfg), tasks.create(cfg.task))
    assert result.steps == 3 and torch.isfinite(torch.tensor(result.final_loss))
