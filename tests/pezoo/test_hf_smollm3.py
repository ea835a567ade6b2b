"""pezoo.hf on SmolLM3, whose own encoding is a hybrid of global layers: RoPE on the layers
``no_rope_layers`` marks 1, none on the others (every fourth). pezoo's ``"hybrid"`` reads the
pattern and reproduces the model's logits and greedy continuations; a config of one kind of
layer is ``"rope"`` or ``"nope"``; the sliding-window variant, which windows the NoPE layers,
is refused by field."""

from __future__ import annotations

import copy
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
if "smollm3" not in transformers.models.auto.configuration_auto.CONFIG_MAPPING:
    pytest.skip(f"transformers {transformers.__version__} has no smollm3", allow_module_level=True)
from hf_tiny import PAD, sharpened, tiny  # noqa: E402

import pezoo.hf  # noqa: E402  (needs transformers)


def sharp(**overrides) -> transformers.PreTrainedModel:
    """A tiny SmolLM3 (RRRN), q and k scaled up so the rotation changes the logits."""
    torch.manual_seed(0)
    return sharpened(tiny("smollm3", **overrides))


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.tensor([list(range(3, 15)), [PAD] * 4 + list(range(30, 38))])
    return ids, (ids != PAD).long()


def test_hybrid_is_the_models_own():
    model = sharp()
    ids, mask = batch()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        ours = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid")
        assert (ours.pezoo_encoding.kinds, ours.pezoo_encoding.window) == ("RRRN", None)
        got = ours(ids, attention_mask=mask).logits
        torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-5, rtol=0)
        # the NoPE layer matters here: RoPE on every layer gives other logits
        everywhere = pezoo.hf.use_encoding(copy.deepcopy(model), "rope")(ids, attention_mask=mask).logits
        assert (everywhere - want)[mask.bool()].abs().max() > 1e-2
        generated = ours.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
        theirs = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
        assert generated.tolist() == theirs.tolist()


def test_a_cached_step_equals_the_full_pass():
    ours = pezoo.hf.use_encoding(sharp(), "hybrid")
    ids = torch.tensor([list(range(3, 14))])
    with torch.no_grad():
        full = ours(ids).logits
        cache = ours(ids[:, :6], use_cache=True).past_key_values
        for t in range(6, ids.shape[1]):
            step = ours(ids[:, t : t + 1], past_key_values=cache, use_cache=True)
            cache = step.past_key_values
            torch.testing.assert_close(step.logits[:, -1], full[:, t], atol=1e-5, rtol=0)


@pytest.mark.parametrize(("flags", "own"), [([1, 1, 1, 1], "rope"), ([0, 0, 0, 0], "nope"), ([0, 1, 1, 0], "hybrid")])
def test_the_own_encoding_is_what_no_rope_layers_makes_it(flags, own):
    model = sharp(no_rope_layers=flags)
    assert pezoo.hf.families.FAMILIES["smollm3"].own_encoding(model.config) == own
    ids, mask = batch()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        got = pezoo.hf.use_encoding(copy.deepcopy(model), own)(ids, attention_mask=mask).logits
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-5, rtol=0)


def test_what_hybrid_cannot_express_is_refused_by_field():
    windowed = sharp(use_sliding_window=True, sliding_window=4)  # windows the NoPE layer
    assert "sliding_attention" in windowed.config.layer_types
    with pytest.raises(ValueError, match=r"cannot adapt this smollm3 model with hybrid: .*use_sliding_window"):
        pezoo.hf.use_encoding(windowed, "hybrid")
    model = sharp()
    model.config.no_rope_layers = [1, 0]  # 2 of its 4 layers
    with pytest.raises(ValueError, match=r"cannot adapt this smollm3 model with hybrid: .*no_rope_layers"):
        pezoo.hf.use_encoding(model, "hybrid")
