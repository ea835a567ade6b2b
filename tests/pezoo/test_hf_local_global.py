"""pezoo.hf on the models whose own encoding interleaves RoPE layers with a sliding window and
global RoPE layers of their own frequencies: Gemma 3 (text; bases 10⁴ and 10⁶, the global
ones scaled by a factor 8 in its larger checkpoints), OLMo 3 (one base), CWM (one Llama
3-scaled RoPE, a global layer then three windowed ones) and Mellum (bases 10⁴ and 5·10⁵). pezoo's
``"hybrid"`` (R and G layers) reproduces the model's logits and greedy continuations past
the window; another encoding is refused past it."""

from __future__ import annotations

import copy
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
for _needed in ("Gemma3ForCausalLM", "Olmo3ForCausalLM"):
    if not hasattr(transformers, _needed):
        pytest.skip(f"transformers {transformers.__version__} has no {_needed}", allow_module_level=True)
from hf_tiny import batch, sharpened, tiny  # noqa: E402

import pezoo.hf  # noqa: E402  (needs transformers)

WINDOW = 4
LOCAL = {"rope_type": "default", "rope_theta": 10000.0}
SCALED_GLOBAL = {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}
FAMILIES = {  # model type: (its layers' kinds, the R layers' base, the G layers' base)
    "gemma3_text": ("RRRRRG", 10000.0, 1e6),
    "olmo3": ("RRRG", 500000.0, 500000.0),
    "cwm": ("GRRR", 1e6, 1e6),  # one Llama 3-scaled RoPE on both kinds
    "mellum": ("RRRG", 10000.0, 500000.0),  # q and k normed per head
}


def windowed(model_type: str, **overrides) -> transformers.PreTrainedModel:
    """A tiny model whose window (4) is shorter than the test sequences, q and k scaled up
    (through the weights of their norms) so attention is sharp enough to tell."""
    torch.manual_seed(0)
    return sharpened(tiny(model_type, sliding_window=WINDOW, **overrides))


@pytest.mark.parametrize(
    ("model_type", "overrides"),
    [
        ("gemma3_text", {}),
        ("gemma3_text", {"rope_parameters": {"sliding_attention": LOCAL, "full_attention": SCALED_GLOBAL}}),
        ("olmo3", {}),
        ("cwm", {}),
        ("mellum", {}),
    ],
    ids=["gemma3", "gemma3-scaled-global", "olmo3", "cwm", "mellum"],
)
def test_hybrid_is_the_models_own_past_its_window(model_type, overrides):
    model = windowed(model_type, **overrides)
    kinds, local_base, global_base = FAMILIES[model_type]
    ids, mask = batch()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        ours = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid")
        enc = ours.pezoo_encoding
        assert (enc.kinds, enc.window, enc.rope.layout, enc.rope.base) == (kinds, WINDOW, "half", local_base)
        assert enc.global_rope is not None and enc.global_rope.base == global_base
        torch.testing.assert_close(ours(ids, attention_mask=mask).logits[mask.bool()], want[mask.bool()],
                                   atol=1e-5, rtol=0)  # fmt: skip
        generated = ours.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
        theirs = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
        assert generated.tolist() == theirs.tolist()


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_the_window_and_the_global_base_matter(model_type):
    model = windowed(model_type)
    ids, mask = batch()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        read = pezoo.hf.families.FAMILIES[model_type].own_options(model.config)
        other_base: dict = {"global_base": 500.0}
        if "global_scaling" in read:  # a scaled RoPE names its base too (CWM's Llama 3 scaling)
            other_base["global_scaling"] = {**read["global_scaling"], "rope_theta": 500.0}
        for changed in ({"window": None}, other_base):
            other = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid", **changed)
            assert (other(ids, attention_mask=mask).logits - want)[mask.bool()].abs().max() > 1e-3, changed


@pytest.mark.parametrize("model_type", list(FAMILIES))
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


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_refusals_another_encoding_past_the_window_and_frequencies_read_differently(model_type):
    ids, mask = batch()
    with pytest.raises(ValueError, match="sliding window of 4 tokens"), torch.no_grad():
        pezoo.hf.use_encoding(windowed(model_type), "rope")(ids, attention_mask=mask)
    rotary = windowed(model_type).model.rotary_emb
    kinds = ("sliding_attention", "full_attention")
    kept = [f"{kind}_inv_freq" for kind in kinds if hasattr(rotary, f"{kind}_inv_freq")]
    for buffer in kept or ["inv_freq"]:  # one per layer kind (Gemma 3, OLMo 3), or one for both (CWM)
        model = windowed(model_type)
        getattr(model.model.rotary_emb, buffer).mul_(0.5)  # frequencies no config of pezoo's gives
        with pytest.raises(ValueError, match="differently"):
            pezoo.hf.use_encoding(model, "hybrid")


def test_a_bidirectional_gemma3_is_refused():
    with pytest.raises(ValueError, match="bidirectionally"):
        pezoo.hf.use_encoding(windowed("gemma3_text", use_bidirectional_attention=True), "hybrid")


def test_a_config_its_own_encoding_cannot_be_read_from_is_refused_by_name():
    model = windowed("olmo3")
    model.config.layer_types = ["sliding_attention", "chunked_attention"] * 2
    with pytest.raises(ValueError, match=r"cannot adapt this olmo3 model with hybrid: .*layer_types"):
        pezoo.hf.use_encoding(model, "hybrid")
