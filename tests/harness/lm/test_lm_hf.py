"""Your own model: a byte-level Llama saved to a folder, adapted with pezoo.hf, scored like a run."""

from __future__ import annotations

import pytest
import torch
from lm_fixtures import tiny_corpus

from harness.lm.hf import hf_scores

transformers = pytest.importorskip("transformers")


def test_a_saved_byte_level_model_gets_every_length_and_mode(tmp_path):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=260,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    transformers.LlamaForCausalLM(cfg).save_pretrained(tmp_path)
    scores = hf_scores(tmp_path, "alibi", tiny_corpus(), (32, 64), regions=1, tail=32, chunk=24)
    assert [(s.mode, s.length, s.n_bytes) for s in scores] == [
        ("windows", 32, 64),
        ("windows", 64, 64),
        ("tail", 32, 32),
        ("tail", 64, 32),
    ]
    # an untrained model is near uniform over its 260 ids: about log2(260) bits per byte
    assert all(7.0 < s.bpb < 9.5 for s in scores)
    # the tail at 32 is the region's second window of 32; fed through the cache in blocks of 24
    # or in one block of 64, the scores agree
    assert scores[2].nats < scores[0].nats
    whole = hf_scores(tmp_path, "alibi", tiny_corpus(), (32, 64), regions=1, tail=32, chunk=64)
    assert [s.nats for s in whole] == pytest.approx([s.nats for s in scores], rel=1e-5)
