"""pezoo.hf on Poolside's Laguna: RoPE of its own per layer kind (base 5·10⁵ on half of each
head on its global layers, base 10⁴ on all of it on its windowed ones), q and k normed per
head, and a softplus gate on the attended values (one per head, or one per feature). Its own
encoding is what its config makes it: ``rope`` where every layer is of one kind (every layer
global, its default: the shared family tests), ``hybrid`` with R and G layers where they mix;
either reproduces the model's logits, the hybrid past the window."""

from __future__ import annotations

import copy
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
if "laguna" not in transformers.models.auto.configuration_auto.CONFIG_MAPPING:
    pytest.skip(f"transformers {transformers.__version__} has no laguna", allow_module_level=True)
from hf_tiny import batch, sharpened, tiny  # noqa: E402

import pezoo.hf  # noqa: E402  (needs transformers)

WINDOW = 4
MIXED = ["sliding_attention"] * 3 + ["full_attention"]


def laguna(**overrides) -> transformers.PreTrainedModel:
    """A tiny Laguna, q and k sharpened (through their norms' weights)."""
    torch.manual_seed(0)
    return sharpened(tiny("laguna", **overrides))


def windowed(**overrides) -> transformers.PreTrainedModel:
    """Three windowed layers (window 4, shorter than the test sequences), then a global one."""
    return laguna(num_hidden_layers=4, layer_types=MIXED, sliding_window=WINDOW, **overrides)


@pytest.mark.parametrize("gating", [True, "per-element"])
def test_the_mixed_layers_own_hybrid_is_the_model_past_the_window(gating):
    model = windowed(gating=gating)
    ids, mask = batch()
    real = mask.bool()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        ours = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid")
        enc = ours.pezoo_encoding
        assert (enc.kinds, enc.window, enc.rope.base, enc.rope.rotary_dim) == ("RRRG", WINDOW, 10000.0, 8)
        assert enc.global_rope is not None and (enc.global_rope.base, enc.global_rope.rotary_dim) == (500000.0, 4)
        torch.testing.assert_close(ours(ids, attention_mask=mask).logits[real], want[real], atol=1e-5, rtol=0)
        generated = ours.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
        theirs = model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
        assert generated.tolist() == theirs.tolist()
        for changed in ({"window": None}, {"global_rotary_fraction": None}, {"rotary_fraction": 0.5}):
            other = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid", **changed)
            assert (other(ids, attention_mask=mask).logits - want)[real].abs().max() > 1e-3, changed


def test_every_layer_windowed_is_its_windowed_rope():
    model = laguna(layer_types=["sliding_attention"] * 2, sliding_window=64)
    ids, mask = batch()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        ours = pezoo.hf.use_encoding(copy.deepcopy(model), "rope")
        assert (ours.pezoo_encoding.base, ours.pezoo_encoding.rotary_dim) == (10000.0, 8)
        torch.testing.assert_close(ours(ids, attention_mask=mask).logits[mask.bool()], want[mask.bool()],
                                   atol=1e-5, rtol=0)  # fmt: skip


def test_the_gate_is_the_model_s_under_another_encoding():
    """NoPE on a Laguna: the model's logits with its rotary frequencies zeroed (its RoPE then
    rotates by 0), the softplus gate still the model's."""
    model = laguna(gating="per-element")
    ids = torch.tensor([list(range(3, 15))])
    with torch.no_grad():
        ours = pezoo.hf.use_encoding(copy.deepcopy(model), "nope")(ids).logits
        model.model.rotary_emb.full_attention_inv_freq.zero_()
        torch.testing.assert_close(ours, model(ids).logits, atol=1e-5, rtol=0)


def test_refusals_by_field():
    with pytest.raises(ValueError, match=r"different head counts \(num_attention_heads_per_layer \[4, 2\]"):
        pezoo.hf.use_encoding(laguna(num_attention_heads_per_layer=[4, 2]), "rope")
    model = windowed()
    model.config.rope_parameters = {"sliding_attention": model.config.rope_parameters["sliding_attention"]}
    with pytest.raises(ValueError, match=r"cannot adapt this laguna model with hybrid: .*rope_parameters\['full_"):
        pezoo.hf.use_encoding(model, "hybrid")
    assert not hasattr(model, "pezoo_encoding")
    model = windowed()
    model.model.rotary_emb.full_attention_inv_freq.mul_(0.5)  # frequencies no config of pezoo's gives
    with pytest.raises(ValueError, match="differently"):
        pezoo.hf.use_encoding(model, "hybrid")
