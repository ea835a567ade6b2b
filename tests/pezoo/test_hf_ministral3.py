"""pezoo.hf on Ministral 3: RoPE (YaRN in its checkpoints) with every layer's queries scaled by
``1 + β log(1 + ⌊pos / F⌋)`` (``llama_4_scaling_beta``, F its original context). Its own
encoding is ``ssmax:rope`` of form ``ministral3``, read from ``rope_parameters``: the model's
logits, greedy continuations on a left-padded batch, and cached steps past F; without a β it
is plain ``rope``; a config it cannot be read from is refused by field."""

from __future__ import annotations

import copy
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
if "ministral3" not in transformers.models.auto.configuration_auto.CONFIG_MAPPING:
    pytest.skip(f"transformers {transformers.__version__} has no ministral3", allow_module_level=True)
from hf_tiny import MINISTRAL3_ROPE, PAD, sharpened, tiny  # noqa: E402

import pezoo.hf  # noqa: E402  (needs transformers)

NOT_ROPE = ("llama_4_scaling_beta", "max_position_embeddings")


def model(**rope) -> transformers.PreTrainedModel:
    torch.manual_seed(0)
    return sharpened(tiny("ministral3", rope_parameters={**MINISTRAL3_ROPE, **rope}))


def test_ssmax_rope_of_form_ministral3_is_the_model():
    ministral = model()
    assert pezoo.hf.families.FAMILIES["ministral3"].own_encoding(ministral.config) == "ssmax:rope"
    ids = torch.tensor([list(range(3, 15)), list(range(30, 42))])  # positions 0..11: the factor steps at 4 and 8
    with torch.no_grad():
        want = ministral(ids).logits
        ours = pezoo.hf.use_encoding(copy.deepcopy(ministral), "ssmax:rope")
        enc = ours.pezoo_encoding
        assert (enc.form, enc.attn_scale, enc.floor_scale, enc.inner.base) == ("ministral3", 0.5, 4, 1e6)
        assert enc.inner.scaling.rope_type == "yarn"
        torch.testing.assert_close(ours(ids).logits, want, atol=1e-5, rtol=0)
        rope = {k: v for k, v in MINISTRAL3_ROPE.items() if k not in NOT_ROPE}
        untempered = pezoo.hf.use_encoding(copy.deepcopy(ministral), "rope", base=1e6, scaling=rope)(ids).logits
    assert (untempered - want).abs().max() > 1e-2  # the temperature matters here
    padded = torch.tensor([[PAD] * 3 + list(range(3, 12)), list(range(30, 42))])
    mask = (padded != PAD).long()
    generated = ours.generate(padded, attention_mask=mask, max_new_tokens=6, do_sample=False)
    theirs = ministral.generate(padded, attention_mask=mask, max_new_tokens=6, do_sample=False)
    assert generated.tolist() == theirs.tolist()


def test_a_cached_step_past_the_original_context_equals_the_full_pass():
    ours = pezoo.hf.use_encoding(model(), "ssmax:rope")
    ids = torch.tensor([list(range(3, 16))])
    with torch.no_grad():
        full = ours(ids).logits
        cache = ours(ids[:, :3], use_cache=True).past_key_values
        for t in range(3, ids.shape[1]):
            step = ours(ids[:, t : t + 1], past_key_values=cache, use_cache=True)
            cache = step.past_key_values
            torch.testing.assert_close(step.logits[:, -1], full[:, t], atol=1e-5, rtol=0)


def test_without_a_beta_its_own_encoding_is_rope():
    ministral = model(llama_4_scaling_beta=0.0)
    assert pezoo.hf.families.FAMILIES["ministral3"].own_encoding(ministral.config) == "rope"
    ids = torch.tensor([list(range(3, 15))])
    with torch.no_grad():
        got = pezoo.hf.use_encoding(copy.deepcopy(ministral), "rope")(ids).logits
        torch.testing.assert_close(got, ministral(ids).logits, atol=1e-5, rtol=0)


def test_a_temperature_without_its_context_is_refused_by_field():
    ministral = model()
    ministral.config.rope_parameters = {**ministral.config.rope_parameters, "original_max_position_embeddings": None}
    with pytest.raises(ValueError, match=r"ministral3 model with ssmax:rope: .*original_max_position_embeddings"):
        pezoo.hf.use_encoding(ministral, "ssmax:rope")
    assert not hasattr(ministral, "pezoo_encoding")
