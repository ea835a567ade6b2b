"""pezoo.hf on gpt-oss: RoPE (YaRN) on every layer, every other layer windowed, and attention
sinks (a learned logit per head in softmax's denominator). pezoo's ``"hybrid"`` (R windowed, G
global, one RoPE) with the model's sinks as its normaliser reproduces the logits and greedy
continuations past the window; the sinks reach training; what cannot run with them is refused."""

from __future__ import annotations

import copy
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
if not hasattr(transformers, "GptOssForCausalLM"):
    pytest.skip(f"transformers {transformers.__version__} has no gpt_oss", allow_module_level=True)
from hf_tiny import batch, sharpened, tiny  # noqa: E402

import pezoo.hf  # noqa: E402  (needs transformers)

WINDOW = 4


def windowed(**overrides) -> transformers.PreTrainedModel:
    """A tiny gpt-oss whose window (4) is shorter than the test sequences, its q and k scaled up
    so attention is sharp enough for the window and the rotation to tell, and sinks large
    enough to take a visible share of each row."""
    torch.manual_seed(0)
    model = sharpened(tiny("gpt_oss", sliding_window=WINDOW, **overrides))
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.copy_(torch.linspace(-1.0, 2.0, layer.self_attn.sinks.numel()))
    return model


def test_hybrid_with_the_models_sinks_is_the_model_past_its_window():
    model = windowed()
    ids, mask = batch()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        ours = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid")
        enc = ours.pezoo_encoding
        assert (enc.kinds, enc.window, enc.rope.layout, enc.global_rope.base) == ("RGRG", WINDOW, "half", 150000.0)
        assert enc.rope.scaling.rope_type == enc.global_rope.scaling.rope_type == "yarn"
        got = ours(ids, attention_mask=mask).logits
        torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-5, rtol=0)
        sinkless = copy.deepcopy(ours)  # the sinks matter here: without them, other logits
        for layer in sinkless.model.layers:
            layer.self_attn.sinks.fill_(-1e4)
        assert (sinkless(ids, attention_mask=mask).logits - want)[mask.bool()].abs().max() > 1e-2
        generated = ours.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
        theirs = model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
        assert generated.tolist() == theirs.tolist()
        assert generated.shape[1] > 2 * WINDOW


def test_flex_applies_the_sinks_as_eager_does():
    from pezoo.backends import flex_compile

    model = windowed()
    ids, mask = batch()
    with torch.no_grad(), flex_compile(False):
        want = model(ids, attention_mask=mask).logits
        got = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid", backend="flex")(ids, attention_mask=mask).logits
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-5, rtol=0)


def test_a_cached_step_past_the_window_equals_the_full_pass():
    ours = pezoo.hf.use_encoding(windowed(), "hybrid")
    ids = torch.tensor([list(range(3, 16))])
    with torch.no_grad():
        full = ours(ids).logits
        cache = ours(ids[:, :9], use_cache=True).past_key_values
        for t in range(9, ids.shape[1]):
            step = ours(ids[:, t : t + 1], past_key_values=cache, use_cache=True)
            cache = step.past_key_values
            torch.testing.assert_close(step.logits[:, -1], full[:, t], atol=1e-5, rtol=0)


def test_the_sinks_train_with_any_encoding():
    ours = pezoo.hf.use_encoding(windowed(), "fire").train()
    ids, mask = batch()
    ids, mask = ids[:, -WINDOW:], mask[:, -WINDOW:]  # another encoding attends globally: within the window
    ours(ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss.backward()
    assert all(layer.self_attn.sinks.grad.abs().sum() > 0 for layer in ours.model.layers)
    assert any(p.grad is not None for p in ours.pezoo_encoding.parameters())


def test_what_cannot_run_with_sinks_is_refused():
    with pytest.raises(ValueError, match=r"sinks.*eager and flex"):
        pezoo.hf.use_encoding(windowed(), "hybrid", backend="sdpa")
    assert pezoo.hf.use_encoding(windowed(), "hybrid", backend="eager") is not None
    ids, mask = batch()
    stick = pezoo.hf.use_encoding(windowed(), "stick_breaking")  # replaces softmax too
    with pytest.raises(ValueError, match="does not compose"), torch.no_grad():
        stick(ids[:, :WINDOW], attention_mask=mask[:, :WINDOW])
    rope = pezoo.hf.use_encoding(windowed(), "rope")  # global attention: refused past the window
    with pytest.raises(ValueError, match="sliding window of 4 tokens"), torch.no_grad():
        rope(ids, attention_mask=mask)
