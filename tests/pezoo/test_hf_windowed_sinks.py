"""pezoo.hf on the models whose own encoding is a hybrid of windowed and global layers *with
attention sinks* (a learned logit per head in softmax's denominator), besides gpt-oss
(test_hf_gpt_oss.py): Flint (RNoPE-SWA, q and k normed per head) and Granite SWA (dense and
MoE: each layer's RoPE base or none from ``layer_rope_theta``). pezoo's ``"hybrid"`` with the
model's sinks as its normaliser reproduces the logits and greedy continuations past the
window, a cached step equals the full pass, and a config whose layers ``hybrid`` cannot
express is refused by field."""

from __future__ import annotations

import copy
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
KNOWN = transformers.models.auto.configuration_auto.CONFIG_MAPPING
FAMILIES = [t for t in ("flint", "granite_swa", "granitemoe_swa") if t in KNOWN]
if not FAMILIES:
    pytest.skip(f"transformers {transformers.__version__} has none of flint, granite_swa", allow_module_level=True)
from hf_tiny import batch, sharpened, tiny  # noqa: E402

import pezoo.hf  # noqa: E402  (needs transformers)

WINDOW = 4
KINDS = {"flint": "NNRN", "granite_swa": "GRRR", "granitemoe_swa": "GRRR"}
"""Each tiny model's layers (its default pattern on four layers) as ``hybrid`` letters."""
GRANITES = [t for t in FAMILIES if t.startswith("granite")]


def windowed(model_type: str, **overrides) -> transformers.PreTrainedModel:
    """A tiny model whose window (4) is shorter than the test sequences, q and k scaled up so
    attention is sharp enough to tell, and sinks large enough to take a share of each row."""
    torch.manual_seed(0)
    model = sharpened(tiny(model_type, sliding_window=WINDOW, **overrides))
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.copy_(torch.linspace(-1.0, 2.0, layer.self_attn.sinks.numel()))
    return model


@pytest.mark.parametrize("model_type", FAMILIES)
def test_hybrid_with_the_models_sinks_is_the_model_past_its_window(model_type):
    model = windowed(model_type)
    ids, mask = batch()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        ours = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid")
        assert (ours.pezoo_encoding.kinds, ours.pezoo_encoding.window) == (KINDS[model_type], WINDOW)
        got = ours(ids, attention_mask=mask).logits
        torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-5, rtol=0)
        sinkless = copy.deepcopy(ours)
        for layer in sinkless.model.layers:
            layer.self_attn.sinks.fill_(-1e4)
        assert (sinkless(ids, attention_mask=mask).logits - want)[mask.bool()].abs().max() > 1e-2
        windowless = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid", window=None)
        assert (windowless(ids, attention_mask=mask).logits - want)[mask.bool()].abs().max() > 1e-2
        generated = ours.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
        theirs = model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
        assert generated.tolist() == theirs.tolist()


@pytest.mark.parametrize("model_type", FAMILIES)
def test_a_cached_step_past_the_window_equals_the_full_pass(model_type):
    ours = pezoo.hf.use_encoding(windowed(model_type), "hybrid")
    ids = torch.tensor([list(range(3, 16))])
    with torch.no_grad():
        full = ours(ids).logits
        cache = ours(ids[:, :7], use_cache=True).past_key_values
        for t in range(7, ids.shape[1]):
            step = ours(ids[:, t : t + 1], past_key_values=cache, use_cache=True)
            cache = step.past_key_values
            torch.testing.assert_close(step.logits[:, -1], full[:, t], atol=1e-5, rtol=0)


@pytest.mark.skipif(not GRANITES, reason="no granite_swa in this transformers")
@pytest.mark.parametrize(
    ("thetas", "kinds", "bases"),
    [
        ([0, 10000.0, 10000.0, 10000.0], "NRRR", (10000.0, None)),  # a global layer without RoPE
        ([500000.0, 10000.0, 10000.0, 10000.0], "GRRR", (10000.0, 500000.0)),  # the global one of its own base
    ],
    ids=["nope-global", "own-global-base"],
)
def test_granites_layers_are_read_from_layer_rope_theta(thetas, kinds, bases):
    model = windowed(GRANITES[0], layer_rope_theta=thetas)
    ids, mask = batch()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        ours = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid")
        enc = ours.pezoo_encoding
        global_base = enc.global_rope.base if enc.global_rope is not None else None
        assert (enc.kinds, enc.rope.base, global_base) == (kinds, *bases)
        got = ours(ids, attention_mask=mask).logits
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-5, rtol=0)


@pytest.mark.skipif(not GRANITES, reason="no granite_swa in this transformers")
@pytest.mark.parametrize(
    "thetas",
    [
        [10000.0, 0, 10000.0, 10000.0],  # a windowed layer without RoPE: not a hybrid letter
        [10000.0, 10000.0, 20000.0, 10000.0],  # windowed layers of two bases
        [10000.0, 10000.0, 10000.0],  # 3 entries for 4 layers
    ],
    ids=["windowed-nope", "two-local-bases", "out-of-step"],
)
def test_granite_layers_hybrid_cannot_express_are_refused_by_field(thetas):
    model = windowed(GRANITES[0])
    model.config.layer_rope_theta = thetas
    with pytest.raises(ValueError, match=rf"cannot adapt this {GRANITES[0]} model with hybrid: .*layer_rope_theta"):
        pezoo.hf.use_encoding(model, "hybrid")
    assert not hasattr(model, "pezoo_encoding")
