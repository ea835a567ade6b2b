"""pezoo.hf on Gemma 2 and VaultGemma (Gemma 2's attention, trained with differential privacy)
with their attention-logit soft-capping on: pezoo's ``"rope"`` reproduces
the model's own logits and greedy continuations, the cap applied as pezoo's score transform
(:class:`pezoo.scores.SoftCap`); a backend that cannot soft-cap is refused by name."""

from __future__ import annotations

import copy
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
if not hasattr(transformers, "Gemma2ForCausalLM"):
    pytest.skip(f"transformers {transformers.__version__} has no gemma2", allow_module_level=True)
from hf_tiny import PAD, tiny  # noqa: E402

import pezoo.hf  # noqa: E402  (needs transformers)
from pezoo.scores import SoftCap  # noqa: E402

CAP = 1.0


CAPPED = ["gemma2", "vaultgemma"]


def capped_gemma2(cap: float | None = CAP, model_type: str = "gemma2") -> transformers.PreTrainedModel:
    """A tiny Gemma 2 (or VaultGemma) computing soft-capping in its own (eager) attention, its q
    and k scaled up so the scores reach the cap (at the random initialisation they are far
    below any cap)."""
    torch.manual_seed(0)
    model = tiny(model_type, attn_logit_softcapping=cap, attn_implementation="eager")
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(30)
            layer.self_attn.k_proj.weight.mul_(30)
    return model


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12, 13], [PAD, PAD, PAD, 21, 22, 23, 24, 25, 26]])
    return ids, (ids != PAD).long()


@pytest.mark.parametrize("model_type", CAPPED)
def test_rope_equals_the_model_with_soft_capping_on(model_type):
    model = capped_gemma2(model_type=model_type)
    ids, mask = batch()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        ours = pezoo.hf.use_encoding(copy.deepcopy(model), "rope")
        cap = ours._pezoo_adapter.softcap
        assert isinstance(cap, SoftCap) and cap.cap == CAP
        got = ours(ids, attention_mask=mask).logits
        torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-5, rtol=0)
        assert (
            ours.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False).tolist()
            == model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False).tolist()
        )
        uncapped = capped_gemma2(cap=None, model_type=model_type)  # the same weights without the cap: other logits
        uncapped_logits = pezoo.hf.use_encoding(uncapped, "rope")(ids, attention_mask=mask).logits
    assert (uncapped_logits - want)[mask.bool()].abs().max() > 0.02  # 2000x the tolerance above


@pytest.mark.parametrize("model_type", CAPPED)
def test_the_cap_runs_with_any_encoding_and_backends_that_cannot_soft_cap_are_refused(model_type):
    model = capped_gemma2(model_type=model_type)
    ids, mask = batch()
    with torch.no_grad():
        out = pezoo.hf.use_encoding(copy.deepcopy(model), "alibi", backend="eager")(ids, attention_mask=mask)
    assert torch.isfinite(out.logits).all()
    refused = rf"cannot run this {model_type} model on the sdpa backend: it soft-caps.*eager"
    with pytest.raises(ValueError, match=refused):
        pezoo.hf.use_encoding(copy.deepcopy(model), "alibi", backend="sdpa")
    adapted = pezoo.hf.use_encoding(copy.deepcopy(model), "dape:alibi")  # a score transform of its own
    with pytest.raises(ValueError, match="does not compose"), torch.no_grad():
        adapted(ids, attention_mask=mask)
