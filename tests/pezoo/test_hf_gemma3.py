"""pezoo.hf on Gemma 3 (text), whose own encoding interleaves RoPE layers with a sliding
window (base 10⁴) and global RoPE layers of their own frequencies (base 10⁶, scaled by a
factor 8 in its larger checkpoints): pezoo's ``"hybrid"`` (R and G layers) reproduces the
model's logits and greedy continuations past the window; another encoding is refused past it."""

from __future__ import annotations

import copy
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
if not hasattr(transformers, "Gemma3ForCausalLM"):
    pytest.skip(f"transformers {transformers.__version__} has no gemma3", allow_module_level=True)
from hf_tiny import PAD, tiny  # noqa: E402

import pezoo.hf  # noqa: E402  (needs transformers)

WINDOW = 4
LOCAL = {"rope_type": "default", "rope_theta": 10000.0}
SCALED_GLOBAL = {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}


def windowed(**overrides) -> transformers.PreTrainedModel:
    """A tiny Gemma 3 whose window (4) is shorter than the test sequences, q and k scaled up
    (after its q/k norms, through their weights) so attention is sharp enough to tell."""
    torch.manual_seed(0)
    model = tiny("gemma3_text", sliding_window=WINDOW, **overrides)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_norm.weight.add_(3.0)
            layer.self_attn.k_norm.weight.add_(3.0)
    return model


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.tensor([list(range(3, 15)), [PAD] * 4 + list(range(30, 38))])
    return ids, (ids != PAD).long()


@pytest.mark.parametrize(
    "overrides",
    [{}, {"rope_parameters": {"sliding_attention": LOCAL, "full_attention": SCALED_GLOBAL}}],
    ids=["own", "scaled-global"],
)
def test_hybrid_is_the_models_own_past_its_window(overrides):
    model = windowed(**overrides)
    ids, mask = batch()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        ours = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid")
        enc = ours.pezoo_encoding
        assert (enc.kinds, enc.window, enc.rope.layout, enc.rope.base) == ("RRRRRG", WINDOW, "half", 10000.0)
        assert enc.global_rope is not None and enc.global_rope.base == 1e6
        torch.testing.assert_close(ours(ids, attention_mask=mask).logits[mask.bool()], want[mask.bool()],
                                   atol=1e-5, rtol=0)  # fmt: skip
        generated = ours.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
        theirs = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
        assert generated.tolist() == theirs.tolist()


def test_the_window_and_the_global_base_matter():
    model = windowed()
    ids, mask = batch()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        for changed in ({"window": None}, {"global_base": 10000.0}):
            other = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid", **changed)
            assert (other(ids, attention_mask=mask).logits - want)[mask.bool()].abs().max() > 1e-3, changed


def test_a_cached_step_past_the_window_equals_the_full_pass():
    ours = pezoo.hf.use_encoding(windowed(), "hybrid")
    ids = torch.tensor([list(range(3, 16))])
    with torch.no_grad():
        full = ours(ids).logits
        cache = ours(ids[:, :7], use_cache=True).past_key_values
        for t in range(7, ids.shape[1]):
            step = ours(ids[:, t : t + 1], past_key_values=cache, use_cache=True)
            cache = step.past_key_values
            torch.testing.assert_close(step.logits[:, -1], full[:, t], atol=1e-5, rtol=0)


def test_refusals_another_encoding_past_the_window_global_frequencies_read_differently_bidirectional():
    ids, mask = batch()
    with pytest.raises(ValueError, match="sliding window of 4 tokens"), torch.no_grad():
        pezoo.hf.use_encoding(windowed(), "rope")(ids, attention_mask=mask)
    model = windowed()
    model.model.rotary_emb.full_attention_inv_freq.mul_(0.5)  # frequencies no config of pezoo's gives
    with pytest.raises(ValueError, match="differently"):
        pezoo.hf.use_encoding(model, "hybrid")
    with pytest.raises(ValueError, match="bidirectionally"):
        pezoo.hf.use_encoding(windowed(use_bidirectional_attention=True), "hybrid")
