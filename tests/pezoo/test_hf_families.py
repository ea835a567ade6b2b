"""pezoo.hf on every family it adapts (tiny random models, :mod:`hf_tiny`): the model's own RoPE
reproduced, a left-padded batch generating each row's own continuation, save -> plain
``AutoModelForCausalLM`` load -> the same logits, and training steps under gradient
checkpointing; and the configurations it refuses, by reason."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
from hf_tiny import CONFIGS, EOS, PAD, ROPE_FAMILIES, tiny  # noqa: E402

import pezoo.hf  # noqa: E402  (needs transformers)

PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]  # the second row is left-padded by three


def left_padded(prompts):
    width = max(map(len, prompts))
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in prompts])
    return ids, (ids != PAD).long()


def until_eos(tokens):
    return tokens[: tokens.index(EOS) + 1] if EOS in tokens else tokens


def test_the_table_covers_the_families_of_the_issue():
    assert set(CONFIGS) == set(pezoo.hf.families.FAMILIES)


def test_the_docs_table_names_every_family_and_no_other():
    """docs/use-in-your-model.md's table of families (a row per kind, its model types first)
    is the one users read: every adapted type is in it, and nothing else is."""
    page = Path(__file__).parents[2] / "docs" / "use-in-your-model.md"
    rows = [line for line in page.read_text().splitlines() if line.startswith("| ") and "| yes" in line]
    named = {name.strip().strip("`") for row in rows for name in row.split("|")[1].split(",")}
    assert named == set(pezoo.hf.families.FAMILIES)


@pytest.mark.parametrize("model_type", ROPE_FAMILIES)
def test_rope_is_the_models_own(model_type):
    torch.manual_seed(0)
    model = tiny(model_type)
    ids, mask = left_padded([list(range(3, 20)), list(range(30, 40))])
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        ours = pezoo.hf.use_encoding(copy.deepcopy(model), "rope")
        got = ours(ids, attention_mask=mask).logits
        torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-5, rtol=0)
        assert (
            ours.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False).tolist()
            == model.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False).tolist()
        )


@pytest.mark.parametrize("model_type", ["gemma", "gemma2", "qwen3", "mistral", "phi3"])
def test_heads_of_another_width_than_hidden_size_over_heads(model_type):
    """Released Gemma (2B: 8 heads of 256 in 2304), Qwen3 (0.6B: 16 of 128 in 1024) and Mistral
    Nemo (32 of 128 in 5120) models decouple the two: the model's own RoPE is reproduced with
    heads 16 wide in a 32-wide model, and an encoding sized by both (learned PRF's key slots,
    per head; APE, per hidden unit) runs in it."""
    torch.manual_seed(0)
    model = tiny(model_type, head_dim=16, **({"query_pre_attn_scalar": 16} if "gemma" in model_type else {}))
    assert model.config.head_dim * model.config.num_attention_heads != model.config.hidden_size
    ids, mask = left_padded([list(range(3, 20)), list(range(30, 40))])
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        got = pezoo.hf.use_encoding(copy.deepcopy(model), "rope")(ids, attention_mask=mask).logits
        torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-5, rtol=0)
        for spec in ("learned_prf", "ape", "prism"):
            ours = pezoo.hf.use_encoding(copy.deepcopy(model), spec)
            assert torch.isfinite(ours(ids, attention_mask=mask).logits).all()
            if spec == "learned_prf":  # (layers, slots, heads, head width)
                assert ours.pezoo_encoding.slot_keys.shape[-2:] == (4, 16)
            if spec == "ape":  # added to the 32-wide token embeddings
                assert ours.pezoo_encoding.d_model == 32


@pytest.mark.parametrize("model_type", list(CONFIGS))
def test_a_left_padded_batch_generates_each_rows_own_continuation(model_type):
    torch.manual_seed(1)
    model = pezoo.hf.use_encoding(tiny(model_type), "alibi")
    ids, mask = left_padded(PROMPTS)
    batch = model.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False)
    for row, prompt in enumerate(PROMPTS):
        alone = model.generate(torch.tensor([prompt]), max_new_tokens=3, do_sample=False)
        assert until_eos(batch[row, ids.shape[1] :].tolist()) == until_eos(alone[0, len(prompt) :].tolist())


@pytest.mark.parametrize("model_type", list(CONFIGS))
def test_saved_it_loads_as_itself_through_the_auto_class(tmp_path, model_type):
    torch.manual_seed(2)
    model = pezoo.hf.use_encoding(tiny(model_type), "fire")
    with torch.no_grad():
        for p in model.pezoo_encoding.parameters():
            p.add_(0.1 * torch.randn_like(p))  # not the init: the load must read them
    model.save_pretrained(tmp_path)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is type(model) and loaded.config.model_type == f"pezoo_{model_type}"
    saved, read = model.state_dict(), loaded.state_dict()
    assert read.keys() == saved.keys() and all(torch.equal(read[k], v) for k, v in saved.items())  # bit for bit
    ids, mask = left_padded(PROMPTS)
    with torch.no_grad():
        # the same weights, to the float rounding of where they lie: safetensors' tensors are not
        # 64-byte aligned, and qwen2_moe's grouped matmul sums in another order there (one ulp,
        # 3e-8, on an AMD EPYC); the pezoo parameters' perturbation above moves them by 4e-4
        torch.testing.assert_close(loaded(ids, attention_mask=mask).logits, model(ids, attention_mask=mask).logits,
                                   atol=1e-6, rtol=1e-5)  # fmt: skip


@pytest.mark.parametrize("model_type", list(CONFIGS))
def test_training_under_gradient_checkpointing_recomputes_exactly(model_type):
    ids, mask = left_padded(PROMPTS)
    labels = ids.masked_fill(mask == 0, -100)
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(3)
        model = pezoo.hf.use_encoding(tiny(model_type), "t5").train()
        if checkpointing:
            model.activation_checkpointing_enable()
        model(ids, attention_mask=mask, labels=labels).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[1].keys() == grads[0].keys() and any(k.startswith("pezoo_encoding.") for k in grads[1])
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, atol=1e-6, rtol=1e-5, msg=name)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(3):  # a few steps more, still checkpointed
        optimizer.zero_grad()
        loss = model(ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]


@pytest.mark.parametrize(
    ("model_type", "config", "reason"),
    [
        ("opt", {"word_embed_proj_dim": 16}, "projected"),
    ],
)
def test_configurations_that_cannot_work_are_refused_by_reason(model_type, config, reason):
    with pytest.raises(ValueError, match=reason):
        pezoo.hf.use_encoding(tiny(model_type, **config), "alibi")


def test_alibi_is_blooms_own():
    torch.manual_seed(4)
    bloom = tiny("bloom")
    ids, mask = left_padded(PROMPTS)
    with torch.no_grad():
        want = bloom(ids, attention_mask=mask).logits
        got = pezoo.hf.use_encoding(copy.deepcopy(bloom), "alibi")(ids, attention_mask=mask).logits
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-5, rtol=0)


def test_nanochats_rope_turns_the_other_way(monkeypatch):
    """nanochat rotates by -θ (and norms q and k after): pezoo reads it as rotate-half RoPE on
    q and k with the second half of each head negated, which gives its logits; read as Qwen3
    (the same norms, RoPE turning the usual way) the logits are off by 100x the tolerance."""
    torch.manual_seed(0)
    model = tiny("nanochat")
    ids, mask = left_padded([list(range(3, 15)), list(range(30, 38))])
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits[mask.bool()]
        got = pezoo.hf.use_encoding(copy.deepcopy(model), "rope")(ids, attention_mask=mask).logits[mask.bool()]
        monkeypatch.setitem(pezoo.hf.families.FAMILIES, "nanochat", pezoo.hf.families.FAMILIES["qwen3"])
        usual = pezoo.hf.use_encoding(copy.deepcopy(model), "rope")(ids, attention_mask=mask).logits[mask.bool()]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    assert (usual - want).abs().max() > 1e-3


@pytest.mark.parametrize("heads", [4, 6, 12])
def test_alibi_is_mpts_own(heads):
    """MPT biases by key index (a row's shift of the bias by distance: the same softmax), with
    slopes from its own formula, which for head counts other than powers of two (6, 12) picks
    them as Press et al.'s: pezoo's ``alibi`` gives its logits and its greedy continuations.
    The projections are scaled so attention is sharp enough for the bias to matter (``nope``
    differs)."""
    torch.manual_seed(4)
    mpt = tiny("mpt", n_heads=heads, d_model=8 * heads)
    with torch.no_grad():
        for block in mpt.transformer.blocks:
            block.attn.Wqkv.weight.mul_(4)
    ids, mask = left_padded([list(range(3, 20)), list(range(30, 40))])
    ours = pezoo.hf.use_encoding(copy.deepcopy(mpt), "alibi")
    with torch.no_grad():
        want = mpt(ids, attention_mask=mask).logits
        got = ours(ids, attention_mask=mask).logits
        nope = pezoo.hf.use_encoding(copy.deepcopy(mpt), "nope")(ids, attention_mask=mask).logits
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-5, rtol=0)
    assert (nope[mask.bool()] - want[mask.bool()]).abs().max() > 0.05
    assert (
        ours.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False).tolist()
        == mpt.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False).tolist()
    )


TABLES = [("gpt2", {}), ("gpt_bigcode", {}), ("gpt_bigcode", {"multi_query": False}), ("gpt_neo", {})]


@pytest.mark.parametrize(("model_type", "config"), TABLES)
def test_learned_ape_holding_the_models_table_is_the_model(model_type, config):
    """A family whose own positions are a learned table (GPT-2, StarCoder's GPTBigCode, multi-
    query or not, GPT-Neo): pezoo's ``learned_ape`` given that table gives the model's logits,
    so its heads are read from the fused projection, and its scores scaled (GPT-Neo: not at
    all), as the model does."""
    torch.manual_seed(6)
    model = tiny(model_type, **config)
    ids = torch.tensor([list(range(3, 20))])
    ours = pezoo.hf.use_encoding(copy.deepcopy(model), "learned_ape", max_position=64)
    with torch.no_grad():
        ours.pezoo_encoding.table.copy_(model.transformer.wpe.weight)
        torch.testing.assert_close(ours(ids).logits, model(ids).logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("model_type", [t for t, family in pezoo.hf.families.FAMILIES.items() if family.table])
def test_nope_is_the_model_with_its_position_table_zeroed(model_type):
    """A family whose own positions are a table added to the token embeddings (GPT-2's,
    GPTBigCode's, GPT-Neo's, OPT's learned ones, XGLM's sinusoids): ``nope`` is that model with
    the table zeroed, so everything but the table is read as the model reads it."""
    torch.manual_seed(7)
    model = tiny(model_type)
    family = pezoo.hf.families.FAMILIES[model_type]
    ids = torch.tensor([list(range(3, 15))])
    with torch.no_grad():
        got = pezoo.hf.use_encoding(copy.deepcopy(model), "nope")(ids).logits
        before = model(ids).logits
        core = model.base_model
        for part in filter(None, f"{family.core}.{family.table}".split(".")):
            core = getattr(core, part)
        for tensor in [*core.parameters(), *core.buffers()]:
            tensor.zero_()
        want = model(ids).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    assert (before - want).abs().max() > 1e-3  # the table mattered


def test_gpt_neos_local_layers_window_is_refused_past_it():
    """GPT-Neo's local layers see the last ``window_size`` keys, which pezoo's global attention
    does not reproduce: a longer sequence is refused, one within it runs."""
    model = pezoo.hf.use_encoding(tiny("gpt_neo", window_size=8), "alibi")
    with torch.no_grad():
        assert torch.isfinite(model(torch.tensor([list(range(3, 11))])).logits).all()
        with pytest.raises(ValueError, match="sliding window of 8 tokens"):
            model(torch.tensor([list(range(3, 12))]))


def test_an_alibi_of_the_models_own_is_replaced():
    torch.manual_seed(4)
    falcon = tiny("falcon", alibi=True)
    ids, mask = left_padded(PROMPTS)
    with torch.no_grad():
        base = falcon(ids, attention_mask=mask).logits
        adapted = pezoo.hf.use_encoding(copy.deepcopy(falcon), "nope")(ids, attention_mask=mask).logits
    assert not torch.allclose(adapted, base)  # the model's own ALiBi (scaled by 1/sqrt(e) in Falcon) no longer runs


@pytest.mark.parametrize("model_type", ["llama", "stablelm", "bloom", "falcon"])
def test_a_recompute_after_another_forward_uses_its_own_call(model_type):
    long, short = left_padded(PROMPTS), left_padded([[5, 6, 7]])
    torch.manual_seed(5)
    model = pezoo.hf.use_encoding(tiny(model_type), "t5").train()
    model.activation_checkpointing_enable()
    model(long[0], attention_mask=long[1], labels=long[0]).loss.backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    first = model(long[0], attention_mask=long[1], labels=long[0]).loss
    model(short[0], attention_mask=short[1])  # another call before the first one's backward
    first.backward()
    for name, grad in want.items():
        torch.testing.assert_close(model.get_parameter(name).grad, grad, atol=1e-6, rtol=1e-5, msg=name)
