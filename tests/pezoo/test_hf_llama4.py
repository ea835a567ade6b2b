"""pezoo.hf on Llama 4 (text), whose own encoding is iRoPE: RoPE layers that attend within
chunks, NoPE global layers whose queries take the attention temperature. pezoo's ``"hybrid"``
reproduces the model's logits and greedy continuations past a chunk, with its q/k L2 norm
and a Llama 3-scaled RoPE; another encoding is refused past the chunk size."""

from __future__ import annotations

import copy
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
if not hasattr(transformers, "Llama4ForCausalLM"):
    pytest.skip(f"transformers {transformers.__version__} has no llama4", allow_module_level=True)
from hf_tiny import PAD, sharpened, tiny  # noqa: E402

import pezoo.hf  # noqa: E402  (needs transformers)

CHUNK = 4


def chunked(**overrides) -> transformers.PreTrainedModel:
    """A tiny Llama 4 whose chunks (4) are shorter than the test sequences and whose temperature
    grows within them (F = 3, β = 0.5; the model's own 8192 and 0.1 would leave it at 1), its q
    and k scaled up so attention is sharp enough for chunks and rotation to change the logits."""
    torch.manual_seed(0)
    return sharpened(tiny("llama4_text", attention_chunk_size=CHUNK, floor_scale=3, attn_scale=0.5, **overrides))


IDS = torch.tensor([list(range(3, 16))])
LLAMA3_SCALED = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8,
}


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"use_qk_norm": False},
        {"attn_temperature_tuning": False},
        {"no_rope_layers": [0, 1, 1, 0]},
        {"rope_parameters": LLAMA3_SCALED},
    ],
    ids=["own", "no-qk-norm", "no-temperature", "pattern", "llama3-scaled"],
)
def test_hybrid_is_the_models_own_past_a_chunk(overrides):
    model = chunked(**overrides)
    with torch.no_grad():
        want = model(IDS).logits
        ours = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid")
        torch.testing.assert_close(ours(IDS).logits, want, atol=1e-5, rtol=0)
        generated = ours.generate(IDS, max_new_tokens=6, do_sample=False)
        assert generated.tolist() == model.generate(IDS, max_new_tokens=6, do_sample=False).tolist()


def test_the_model_s_settings_become_the_encoding_s_and_matter():
    model = chunked()
    enc = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid").pezoo_encoding
    assert (enc.kinds, enc.window, enc.local, enc.nope_temperature) == ("RRRN", CHUNK, "chunk", "llama4")
    assert (enc.floor_scale, enc.attn_scale, enc.rope.layout, enc.rope.base) == (3, 0.5, "interleaved", 500000.0)
    with torch.no_grad():
        want = model(IDS).logits
        for changed in ({"window": None}, {"nope_temperature": None}):
            other = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid", **changed)
            assert (other(IDS).logits - want).abs().max() > 1e-3, changed


def test_a_cached_step_past_a_chunk_equals_the_full_pass():
    ours = pezoo.hf.use_encoding(chunked(), "hybrid")
    with torch.no_grad():
        full = ours(IDS).logits
        cache = ours(IDS[:, :6], use_cache=True).past_key_values
        for t in range(6, IDS.shape[1]):
            step = ours(IDS[:, t : t + 1], past_key_values=cache, use_cache=True)
            cache = step.past_key_values
            torch.testing.assert_close(step.logits[:, -1], full[:, t], atol=1e-5, rtol=0)


def test_a_left_padded_row_gets_the_chunks_and_temperature_of_the_row_alone():
    """pezoo counts positions from each row's first real token, so a padded row is the row alone."""
    ours = pezoo.hf.use_encoding(chunked(), "hybrid")
    short = list(range(30, 39))
    ids = torch.tensor([list(range(3, 16)), [PAD] * 4 + short])
    with torch.no_grad():
        batch = ours(ids, attention_mask=(ids != PAD).long()).logits
        alone = ours(torch.tensor([short])).logits
    torch.testing.assert_close(batch[1, 4:], alone[0], atol=1e-5, rtol=0)


def test_another_encoding_is_refused_past_the_chunk_size():
    rope = pezoo.hf.use_encoding(chunked(), "rope")
    with pytest.raises(ValueError, match="window of 4 tokens"), torch.no_grad():
        rope(IDS)


def test_rotary_frequencies_read_differently_are_refused():
    model = chunked()
    model.model.rotary_emb.inv_freq.mul_(0.5)  # frequencies no config of pezoo's gives
    with pytest.raises(ValueError, match="differently"):
        pezoo.hf.use_encoding(model, "hybrid")


@pytest.mark.parametrize(("field", "value"), [("no_rope_layers", [1, 2, 1, 0]), ("no_rope_layers", [1, 0]),
                                              ("attention_chunk_size", 0)])  # fmt: skip
def test_a_config_its_own_encoding_cannot_be_read_from_is_refused_by_name(field, value):
    model = chunked()
    setattr(model.config, field, value)
    with pytest.raises(ValueError, match=rf"cannot adapt this llama4_text model with hybrid: .*{field}"):
        pezoo.hf.use_encoding(model, "hybrid")
