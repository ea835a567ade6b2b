"""pezoo.hf on Reflection AI's Beam: RoPE layers with a sliding window, NoPE global layers
whose queries take Beam's temperature (1 + (pos + 1)/2048)^0.1, q and k normed per head, and a
sigmoid gate with a bias per head on the attended values. pezoo's ``"hybrid"`` reproduces the
model's logits and greedy continuations past the window; the window, the temperature and the
gate's bias each change the logits, so agreement is not an accident of the tiny model."""

from __future__ import annotations

import copy
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
if "beam" not in transformers.models.auto.configuration_auto.CONFIG_MAPPING:
    pytest.skip(f"transformers {transformers.__version__} has no beam", allow_module_level=True)
from hf_tiny import batch, sharpened, tiny  # noqa: E402
from transformers.models.beam import modeling_beam  # noqa: E402

import pezoo.hf  # noqa: E402  (needs transformers)

WINDOW = 4
F, BETA = 3, 0.5
"""A temperature that grows within the test's 12 positions (Beam's own 2048 and 0.1 move it by
6e-4 there), patched into the model and given to pezoo's encoding alike."""


def beam(**overrides) -> transformers.PreTrainedModel:
    """A tiny Beam whose window (4) is shorter than the test sequences, q and k sharpened, its
    gate's per-head bias random (Beam starts it at zero, where a bias read wrongly would pass)."""
    torch.manual_seed(0)
    model = sharpened(tiny("beam", sliding_window=WINDOW, **overrides))
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.gate_bias.normal_(0.0, 2.0)
    return model


def steep_temperature(position_ids):
    """Beam's temperature at F = 3, β = 0.5, written out: (1 + (pos + 1)/F)^β, (b, 1, s, 1)."""
    return ((1 + (position_ids.float() + 1) / F) ** BETA)[:, None, :, None]


def positions(mask: torch.Tensor) -> torch.Tensor:
    """Each token's position counted from its row's first real token, as ``generate`` gives them
    and pezoo counts (a left-padded row as the row alone); Beam's plain forward without
    ``position_ids`` would count from the pads, which its temperature, absolute, would see."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def test_the_own_encoding_is_read_from_the_model():
    enc = pezoo.hf.use_encoding(beam(), "hybrid").pezoo_encoding
    assert (enc.kinds, enc.window, enc.local, enc.rope.layout) == ("RRRN", WINDOW, "window", "half")
    assert (enc.nope_temperature, enc.attn_scale, enc.floor_scale) == ("beam", 0.1, 2048)


def test_hybrid_is_the_models_own_with_its_temperature_past_the_window(monkeypatch):
    monkeypatch.setattr(modeling_beam, "compute_attention_scaling", steep_temperature)
    model = beam()
    ids, mask = batch()
    real = mask.bool()
    with torch.no_grad():
        want = model(ids, attention_mask=mask, position_ids=positions(mask)).logits
        ours = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid", attn_scale=BETA, floor_scale=F)
        torch.testing.assert_close(ours(ids, attention_mask=mask).logits[real], want[real], atol=1e-5, rtol=0)
        generated = ours.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
        theirs = model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
        assert generated.tolist() == theirs.tolist()
        assert generated.shape[1] > 2 * WINDOW
        for changed in ({"nope_temperature": None}, {"floor_scale": 2048, "attn_scale": 0.1}, {"window": None}):
            options = {"attn_scale": BETA, "floor_scale": F, **changed}
            other = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid", **options)
            assert (other(ids, attention_mask=mask).logits - want)[real].abs().max() > 1e-3, changed
        unbiased = copy.deepcopy(model)
        for layer in unbiased.model.layers:
            layer.self_attn.gate_bias.zero_()
        got = pezoo.hf.use_encoding(unbiased, "hybrid", attn_scale=BETA, floor_scale=F)(ids, attention_mask=mask)
        assert (got.logits - want)[real].abs().max() > 1e-3  # the gate's bias read


def test_beam_s_own_temperature_is_reproduced():
    model = beam()
    ids, mask = batch()
    with torch.no_grad():
        want = model(ids, attention_mask=mask, position_ids=positions(mask)).logits
        got = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid")(ids, attention_mask=mask).logits
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-5, rtol=0)


def test_a_cached_step_equals_the_full_pass():
    ours = pezoo.hf.use_encoding(beam(), "hybrid", attn_scale=BETA, floor_scale=F)
    ids = torch.tensor([list(range(3, 16))])
    with torch.no_grad():
        full = ours(ids).logits
        cache = ours(ids[:, :7], use_cache=True).past_key_values
        for t in range(7, ids.shape[1]):
            step = ours(ids[:, t : t + 1], past_key_values=cache, use_cache=True)
            cache = step.past_key_values
            torch.testing.assert_close(step.logits[:, -1], full[:, t], atol=1e-5, rtol=0)


UNSCALED = {"rope_type": "default", "rope_theta": 10000.0}
LOCAL_SCALED = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}


@pytest.mark.parametrize(
    ("rope_parameters", "kinds"),
    [
        ({"sliding_attention": LOCAL_SCALED, "full_attention": None}, "RRRN"),
        ({"sliding_attention": UNSCALED, "full_attention": {**UNSCALED, "rope_theta": 1e6}}, "RRRG"),
    ],
    ids=["scaled-local", "rotating-global"],
)
def test_each_layer_kind_s_rope_is_read_from_its_entry(rope_parameters, kinds):
    """A scaled RoPE on the sliding layers; full layers with a RoPE of their own rotate (G) and
    take no temperature (Beam scales only the layers without RoPE)."""
    model = beam(rope_parameters=rope_parameters)
    ids, mask = batch()
    with torch.no_grad():
        want = model(ids, attention_mask=mask, position_ids=positions(mask)).logits
        ours = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid")
        assert ours.pezoo_encoding.kinds == kinds
        got = ours(ids, attention_mask=mask).logits
    # pezoo rotates in fp32 whatever the dtype (docs/encodings/rope.md), Beam in the model's: the
    # scaled case differs by 7e-6 even in float64, and in float32 by 1.03e-5 on an AMD EPYC (under
    # 1e-5 on a Xeon); the scaling itself moves these logits by 0.38
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=3e-5, rtol=0)


def test_refusals_another_encoding_past_the_window_frequencies_read_differently_and_an_unread_config():
    ids, mask = batch()
    with pytest.raises(ValueError, match="sliding window of 4 tokens"), torch.no_grad():
        pezoo.hf.use_encoding(beam(), "rope")(ids, attention_mask=mask)
    model = beam()
    model.model.rotary_emb.sliding_attention_inv_freq.mul_(0.5)  # frequencies no config of pezoo's gives
    with pytest.raises(ValueError, match="differently"):
        pezoo.hf.use_encoding(model, "hybrid")
    model = beam()
    model.config.rope_parameters = {"sliding_attention": None, "full_attention": None}
    with pytest.raises(ValueError, match=r"cannot adapt this beam model with hybrid: .*rope_parameters"):
        pezoo.hf.use_encoding(model, "hybrid")
    assert not hasattr(model, "pezoo_encoding")
