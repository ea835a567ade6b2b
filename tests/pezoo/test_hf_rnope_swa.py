"""pezoo.hf on the models whose own encoding is RNoPE-SWA (RoPE on sliding-window layers, no
position encoding on the global ones): Cohere 2 and Cohere 2 MoE (whose dense-MLP prefix layers
may rotate on global attention too), AFMoE (with a sigmoid gate on the attended values), and
EXAONE 4, EXAONE MoE and Kolibri 1 where their config has a window.
pezoo's ``"hybrid"`` reproduces the model's logits and greedy continuations past the window,
with a KV cache that keeps every key; another encoding is refused past the window, as on any
sliding-window model. EXAONE 4's (and EXAONE MoE's) own encoding is what its config makes it:
RoPE on every layer without a window."""

from __future__ import annotations

import copy
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
KNOWN = transformers.models.auto.configuration_auto.CONFIG_MAPPING
LAYOUTS = {"afmoe": "half", "cohere2": "interleaved", "cohere2_moe": "interleaved", "exaone4": "half",
           "exaone_moe": "half", "kolibri1": "half"}  # fmt: skip
FAMILIES = {t: layout for t, layout in LAYOUTS.items() if t in KNOWN}
"""The families this transformers has, by model type: its RoPE's layout."""
if not FAMILIES:
    pytest.skip(f"transformers {transformers.__version__} has none of {', '.join(LAYOUTS)}", allow_module_level=True)
from hf_tiny import batch, sharpened, tiny  # noqa: E402

import pezoo.hf  # noqa: E402  (needs transformers)

WINDOW = 4
families = pytest.mark.parametrize("model_type", list(FAMILIES))


def windowed(model_type: str, **overrides) -> transformers.PreTrainedModel:
    """A tiny model whose window (4) is shorter than the test sequences, q and k scaled up so
    attention is sharp enough for the window and the rotation to change the logits (EXAONE 4
    norms each head's q and k: through the norms' weights)."""
    torch.manual_seed(0)
    return sharpened(tiny(model_type, **{"sliding_window": WINDOW, **overrides}))


@families
def test_hybrid_is_the_models_own_past_its_window(model_type):
    model = windowed(model_type)
    ids, mask = batch()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        ours = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid")
        enc = ours.pezoo_encoding
        assert (enc.pattern, enc.window, enc.local, enc.rope.layout) == ("RRRN", WINDOW, "window", FAMILIES[model_type])
        got = ours(ids, attention_mask=mask).logits
        torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-5, rtol=0)
        # the window matters here: the same layers attending globally (RNoPE) give other logits
        unwindowed = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid", window=None)
        assert (unwindowed(ids, attention_mask=mask).logits - want)[mask.bool()].abs().max() > 1e-2
        generated = ours.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
        theirs = model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
        assert generated.tolist() == theirs.tolist()
        assert generated.shape[1] > 2 * WINDOW


@families
def test_a_cached_step_past_the_window_equals_the_full_pass(model_type):
    ours = pezoo.hf.use_encoding(windowed(model_type), "hybrid")
    ids = torch.tensor([list(range(3, 16))])
    with torch.no_grad():
        full = ours(ids).logits
        out = ours(ids[:, :9], use_cache=True)
        cache = out.past_key_values
        assert all(layer.keys.shape[-2] == 9 for layer in cache.layers)  # every key kept, window or not
        for t in range(9, ids.shape[1]):
            step = ours(ids[:, t : t + 1], past_key_values=cache, use_cache=True)
            cache = step.past_key_values
            torch.testing.assert_close(step.logits[:, -1], full[:, t], atol=1e-5, rtol=0)


@families
def test_the_layer_pattern_comes_from_the_configs_layer_types(model_type):
    kinds = ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    ours = pezoo.hf.use_encoding(windowed(model_type, layer_types=kinds), "hybrid")
    assert ours.pezoo_encoding.kinds == "NRRN"


@families
def test_another_encoding_is_refused_past_the_window_and_a_window_dropping_cache_is_refused(model_type):
    ids, mask = batch()
    rope = pezoo.hf.use_encoding(windowed(model_type), "rope")
    with pytest.raises(ValueError, match="sliding window of 4 tokens"), torch.no_grad():
        rope(ids, attention_mask=mask)
    ours = pezoo.hf.use_encoding(windowed(model_type), "hybrid")
    sliding = transformers.DynamicCache(config=ours.config)
    with pytest.raises(ValueError, match="pass DynamicCache"), torch.no_grad():
        ours(ids, attention_mask=mask, past_key_values=sliding, use_cache=True)


@families
def test_a_scaled_rope_is_reproduced_by_the_own_hybrid(model_type):
    scaled = windowed(model_type, rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})
    ids, mask = batch()
    with torch.no_grad():
        want = scaled(ids, attention_mask=mask).logits
        got = pezoo.hf.use_encoding(copy.deepcopy(scaled), "hybrid")(ids, attention_mask=mask).logits
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-5, rtol=0)
    unscaled = pezoo.hf.use_encoding(windowed(model_type), "hybrid")(ids, attention_mask=mask).logits
    assert (got - unscaled).abs().max() > 3e-4  # 30x the tolerance (Cohere 2 MoE's tiny model: 7e-4)


@families
def test_rotary_frequencies_read_differently_are_refused(model_type):
    model = windowed(model_type)
    model.model.rotary_emb.inv_freq.mul_(0.5)  # frequencies no config of pezoo's gives
    with pytest.raises(ValueError, match="differently"):
        pezoo.hf.use_encoding(model, "hybrid")


@pytest.mark.parametrize(("field", "value"), [("layer_types", ["sliding_attention", "chunked_attention"] * 2),
                                              ("layer_types", ["sliding_attention", "full_attention"]),  # 2 of 4 layers
                                              ("layer_types", None), ("sliding_window", None)])  # fmt: skip
def test_a_config_its_own_encoding_cannot_be_read_from_is_refused_by_name(field, value):  # EXAONE 4's: below
    """Refused by field before anything changes: a layer list out of step with the model's
    layers is not repeated or cut as a pattern would be."""
    model = windowed("cohere2")
    ids, _ = batch()
    before, kept = model(ids[:1]).logits, getattr(model.config, field)
    setattr(model.config, field, value)
    with pytest.raises(ValueError, match=rf"cannot adapt this cohere2 model with hybrid: .*{field}"):
        pezoo.hf.use_encoding(model, "hybrid")
    setattr(model.config, field, kept)  # the model's own forward needs it too
    assert not hasattr(model, "pezoo_encoding") and torch.equal(model(ids[:1]).logits, before)


@pytest.mark.skipif("exaone4" not in FAMILIES, reason="no exaone4 in this transformers")
@pytest.mark.parametrize(
    ("overrides", "own", "length"),
    [
        ({"sliding_window": None, "layer_types": ["full_attention"] * 4}, "rope", 12),  # no window: RoPE everywhere
        ({"layer_types": ["sliding_attention"] * 4}, "rope", WINDOW),  # every layer windowed RoPE
        ({"layer_types": ["full_attention"] * 4}, "nope", 12),  # a window no layer uses: global NoPE
    ],
    ids=["no-window", "all-sliding", "all-global"],
)
def test_exaone4s_own_encoding_is_what_its_config_makes_it(overrides, own, length):
    """EXAONE 4 rotates a layer where it has no window or the layer is a sliding one: the own
    encoding (``hybrid``, ``rope`` or ``nope``) is read from the config, and reproduces the
    model; a model with no window is not refused past 4 tokens."""
    model = windowed("exaone4", **overrides)
    ids = torch.tensor([list(range(3, 3 + length))])
    assert pezoo.hf.families.FAMILIES["exaone4"].own_encoding(model.config) == own
    with torch.no_grad():
        want = model(ids).logits
        got = pezoo.hf.use_encoding(copy.deepcopy(model), own)(ids).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    if own == "rope":  # the model's frequencies are read: another base is another model
        other = pezoo.hf.use_encoding(copy.deepcopy(model), "rope", base=500.0)(ids).logits
        assert (other - want).abs().max() > 1e-3


def test_a_config_exaone4s_own_hybrid_cannot_be_read_from_is_refused_by_name():
    if "exaone4" not in FAMILIES:
        pytest.skip("no exaone4 in this transformers")
    model = windowed("exaone4")
    model.config.layer_types = ["sliding_attention", "full_attention"]  # 2 of its 4 layers
    with pytest.raises(ValueError, match=r"cannot adapt this exaone4 model with hybrid: .*layer_types"):
        pezoo.hf.use_encoding(model, "hybrid")


@pytest.mark.skipif("cohere2_moe" not in FAMILIES, reason="no cohere2_moe in this transformers")
@pytest.mark.parametrize(("prefix_pattern", "kinds"), [(1, "GGRRRN"), (2, "RNRRRN")])
def test_cohere2_moes_dense_prefix_layers_rotate_on_global_attention(prefix_pattern, kinds):
    """Cohere 2 MoE's first dense-MLP layers (``first_k_dense_replace``) are global with RoPE
    where ``prefix_dense_sliding_window_pattern`` is 1 (G layers), and follow that pattern
    with Cohere 2's RNoPE-SWA otherwise: ``hybrid`` reads which, and gives the model's logits
    past the window."""
    model = windowed("cohere2_moe", num_hidden_layers=6, first_k_dense_replace=2,
                     prefix_dense_sliding_window_pattern=prefix_pattern)  # fmt: skip
    ids, mask = batch()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        ours = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid")
        assert ours.pezoo_encoding.kinds == kinds
        got = ours(ids, attention_mask=mask).logits
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-5, rtol=0)
    if prefix_pattern == 1:  # where the MLP kinds decide, a list out of step with the layers is refused by field
        model.config.mlp_layer_types = ["dense", "sparse"]  # 2 of its 6 layers
        with pytest.raises(ValueError, match="mlp_layer_types"):
            pezoo.hf.use_encoding(model, "hybrid")


@pytest.mark.skipif("afmoe" not in FAMILIES, reason="no afmoe in this transformers")
def test_afmoes_output_gate_stays_the_models():
    """AFMoE multiplies the attended values by σ(gate_proj x) before o_proj: the adapted model
    keeps it (under its own encoding, and it is what makes the logits the model's)."""
    model = windowed("afmoe")
    ids, mask = batch()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits[mask.bool()]
        ours = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid")
        torch.testing.assert_close(ours(ids, attention_mask=mask).logits[mask.bool()], want, atol=1e-5, rtol=0)
        for layer in ours.model.layers:  # the gate pinned at σ(0) = 1/2 everywhere: other logits
            layer.self_attn.gate_proj.weight.zero_()
        assert (ours(ids, attention_mask=mask).logits[mask.bool()] - want).abs().max() > 1e-2
