"""pezoo.hf on Google's Gemma 4 (text): Gemma 3's sliding-window and global layers, the global
ones with heads twice as wide and transformers' ``proportional`` RoPE (p-RoPE, a quarter of
the frequencies) at base 10⁶, the local ones plain RoPE at 10⁴; q, k and v normed per head;
on the global layers (``attention_k_eq_v``) the keys' projection is also the values'. Its own
encoding is ``hybrid`` with ``global_head_dim``: the model's logits past the window, and its
cached generation, also where its last layers reuse an earlier layer's keys and values (its
E2B and E4B models)."""

from __future__ import annotations

import copy
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
if "gemma4_text" not in transformers.models.auto.configuration_auto.CONFIG_MAPPING:
    pytest.skip(f"transformers {transformers.__version__} has no gemma4_text", allow_module_level=True)
from hf_tiny import batch, sharpened, tiny  # noqa: E402

import pezoo.hf  # noqa: E402  (needs transformers)

WINDOW = 4


def gemma4(**overrides) -> transformers.PreTrainedModel:
    """A tiny Gemma 4: three windowed layers (window 4, shorter than the test sequences), then
    a global one; q and k sharpened (through their norms' weights)."""
    torch.manual_seed(0)
    return sharpened(tiny("gemma4_text", sliding_window=WINDOW, **overrides))


@pytest.mark.parametrize("keys_are_values", [True, False])
def test_its_own_hybrid_is_the_model_past_the_window(keys_are_values):
    model = gemma4(attention_k_eq_v=keys_are_values)
    assert (model.model.layers[3].self_attn.v_proj is None) is keys_are_values
    ids, mask = batch()
    real = mask.bool()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        ours = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid")
        enc = ours.pezoo_encoding
        assert (enc.kinds, enc.window, enc.rope.head_dim, enc.rope.base) == ("RRRG", WINDOW, 8, 10000.0)
        assert enc.global_rope is not None and (enc.global_rope.head_dim, enc.global_rope.base) == (16, 1e6)
        assert (enc.global_rope.scaling.rope_type, enc.global_rope.scaling.p) == ("p_rope", 0.25)
        torch.testing.assert_close(ours(ids, attention_mask=mask).logits[real], want[real], atol=1e-5, rtol=0)
        generated = ours.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
        theirs = model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
        assert generated.tolist() == theirs.tolist()
        for changed in ({"window": None}, {"global_scaling": None}, {"global_base": 10000.0}):
            other = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid", **changed)
            assert (other(ids, attention_mask=mask).logits - want)[real].abs().max() > 1e-3, changed


def test_a_bias_runs_on_heads_of_both_widths_and_a_rotation_of_one_width_is_refused():
    """ALiBi does not care how wide a head is; RoPE is built for one width (8) and the global
    layers' heads are 16 wide: refused by use_encoding, not at the first forward. (Any other
    encoding than its own hybrid attends globally: the window is 64 here, past the batch.)"""
    torch.manual_seed(0)
    model = tiny("gemma4_text")
    ids, mask = batch()
    with torch.no_grad():
        logits = pezoo.hf.use_encoding(copy.deepcopy(model), "alibi")(ids, attention_mask=mask).logits
        assert torch.isfinite(logits).all()
        # an encoding that adds to the embeddings: Gemma 4's per-layer embeddings are looked up by the token
        # ids, which transformers would otherwise recover by reversing the (now encoded) embeddings, and fail
        logits = pezoo.hf.use_encoding(copy.deepcopy(model), "ape")(ids, attention_mask=mask).logits
        assert torch.isfinite(logits).all()
    for spec in ("rope", "pope", "hybrid{global_head_dim=8}", "ssmax:rope"):
        with pytest.raises(ValueError, match=r"split q/k into heads \[8, 16\] wide; .* built for \(8 at layer"):
            pezoo.hf.use_encoding(copy.deepcopy(model), spec)
    # a wrapper takes the widths of the encoding it holds: SSMax's factor on q fits either width
    adapted = pezoo.hf.use_encoding(copy.deepcopy(model), "ssmax:hybrid", pattern="RRRG", global_head_dim=16)
    with torch.no_grad():
        assert torch.isfinite(adapted(ids, attention_mask=mask).logits).all()


def test_layers_that_reuse_keys_and_values_take_the_encoded_ones_as_the_model_does():
    """Gemma 4's E2B/E4B layout: the last two of six layers have no keys or values of their own
    and reuse those of the last earlier layer of their kind, as that layer encoded and cached
    them; in a prompt transformers passes them only the last token. The model's logits, and
    its cached generation (through that prompt path)."""
    kinds = ["sliding_attention", "full_attention"] * 3  # the reusing layers' kinds among the first four
    model = gemma4(num_hidden_layers=6, layer_types=kinds, num_kv_shared_layers=2)
    assert model.config.kv_sharing_modes == [None, None, "store", "store", "reuse", "reuse"]
    ids, mask = batch()
    real = mask.bool()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        ours = pezoo.hf.use_encoding(copy.deepcopy(model), "hybrid")
        torch.testing.assert_close(ours(ids, attention_mask=mask).logits[real], want[real], atol=1e-5, rtol=0)
        generated = ours.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
        theirs = model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
        assert generated.tolist() == theirs.tolist()
        # an encoding that reads the tokens in order splits a left-padded batch by rows, which those
        # last-token-only layers do not take: a clear error, not a wrong continuation
        abacus = pezoo.hf.use_encoding(copy.deepcopy(model), "abacus")
        short = torch.tensor([[3, 4, 5, 6], [0, 0, 7, 8]])  # within the window of 4 (another encoding's limit)
        with pytest.raises(ValueError, match=r"see only the last tokens .* pad on the right"):
            abacus.generate(short, attention_mask=(short != 0).long(), max_new_tokens=1, do_sample=False)


def test_a_bidirectional_gemma4_is_refused():
    with pytest.raises(ValueError, match="bidirectional"):
        pezoo.hf.use_encoding(gemma4(use_bidirectional_attention="all"), "hybrid")
