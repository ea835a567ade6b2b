"""pezoo.hf: any registered encoding in a tiny transformers Llama, Qwen2 and GPT-2 (built here,
no downloads): generate on a left-padded batch, the model's own RoPE, save/load, the hooks."""

from __future__ import annotations

import copy
import json
import math
import os
import pickle
import shutil
import sys

import pytest
import torch

import pezoo

transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import pezoo.hf  # noqa: E402  (needs transformers)

PAD, EOS = 0, 2
PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]  # the second row is left-padded by three
NEW = 3


def tiny(kind: str, **config):
    """A hidden-64, 2-layer, 4-head model of ``kind`` with a 32-token vocabulary, random weights.
    ``llama-wide-heads``: a Llama whose 4 heads are 32 wide (128 of q/k per token in a 64-wide
    model), as released Gemma, Qwen3 and Mistral Nemo models decouple head width and hidden size."""
    if kind == "llama-wide-heads":
        return tiny("llama", **{"head_dim": 32, **config})
    ids = {"vocab_size": 32, "pad_token_id": PAD, "bos_token_id": 1, "eos_token_id": EOS}
    if kind == "gpt2":
        cfg = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=64, **ids, **config)
        return transformers.GPT2LMHeadModel(cfg).eval()
    classes = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    }[kind]
    cfg = classes[0](hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, max_position_embeddings=64, **ids, **config)  # fmt: skip
    return classes[1](cfg).eval()


def left_padded(prompts):
    width = max(map(len, prompts))
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in prompts])
    return ids, (ids != PAD).long()


def until_eos(tokens: list[int]) -> list[int]:
    return tokens[: tokens.index(EOS) + 1] if EOS in tokens else tokens


def adapted(kind: str, name: str, seed: int = 1):
    torch.manual_seed(seed)
    # randomized PE draws its positions at evaluation too; plain positions make rows comparable
    options = {"randomize_eval": False} if name.startswith("randomized") else {}
    model = pezoo.hf.use_encoding(tiny(kind), name, **options)
    return model


def hint_for(model, name, prompts):
    if "learned_prf_sh" in name:  # the instance scale it reads: here each prompt's length
        pezoo.hf.set_scale_hint(model, torch.tensor([float(len(p)) for p in prompts]))


@pytest.mark.parametrize("kind", ["llama", "qwen2", "gpt2", "llama-wide-heads"])
@pytest.mark.parametrize("name", pezoo.available())
def test_generate_on_a_left_padded_batch_equals_each_row_alone(kind, name):
    model = adapted(kind, name)
    ids, mask = left_padded(PROMPTS)
    hint_for(model, name, PROMPTS)
    batch = model.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False)
    for row, prompt in enumerate(PROMPTS):
        hint_for(model, name, [prompt])
        alone = model.generate(torch.tensor([prompt]), max_new_tokens=NEW, do_sample=False)
        assert until_eos(batch[row, ids.shape[1] :].tolist()) == until_eos(alone[0, len(prompt) :].tolist())
    hint_for(model, name, PROMPTS)
    sampled = []
    for use_cache in (True, False):  # sampling with the KV cache draws what full passes draw
        torch.manual_seed(0)
        sampled.append(model.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=True, top_k=0,
                                      use_cache=use_cache))  # fmt: skip
    assert sampled[0].shape == (len(PROMPTS), ids.shape[1] + NEW)
    assert sampled[0].tolist() == sampled[1].tolist()


@pytest.mark.parametrize("kind", ["llama", "qwen2", "mistral", "llama-wide-heads"])
@pytest.mark.parametrize(
    "rope_parameters",
    [
        None,
        {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0},
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "rope_theta": 10000.0},
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
            "rope_theta": 10000.0,
        },
        # Gemma 4's global layers' type: p-RoPE (the highest quarter/half of the frequencies)
        {"rope_type": "proportional", "partial_rotary_factor": 0.5, "rope_theta": 10000.0},
    ],
)
def test_rope_as_the_models_own_gives_its_logits(kind, rope_parameters):
    torch.manual_seed(0)
    model = tiny(kind, **({} if rope_parameters is None else {"rope_parameters": rope_parameters}))
    ids, mask = left_padded([list(range(3, 30)), list(range(5, 20))])
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        ours = pezoo.hf.use_encoding(copy.deepcopy(model), "rope")
        got = ours(ids, attention_mask=mask).logits
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], atol=1e-4, rtol=0)
    assert ours.pezoo_encoding.layout == "half"
    with torch.no_grad():  # and the untouched model's generation
        assert (
            ours.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False).tolist()
            == model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False).tolist()
        )


def test_proportional_rope_that_also_divides_its_frequencies_is_refused():
    """transformers' proportional RoPE divides every frequency by its ``factor``, which p-RoPE
    does not: read as p-RoPE it would not be the model, so pezoo says so instead."""
    params = {"rope_type": "proportional", "partial_rotary_factor": 0.5, "factor": 2.0, "rope_theta": 10000.0}
    with pytest.raises(ValueError, match=r"proportional RoPE with factor 2\.0 .*pezoo's p_rope divides none"):
        pezoo.hf.use_encoding(tiny("llama", rope_parameters=params), "rope")


@pytest.mark.parametrize(("kind", "spec"), [("llama", "fire"), ("qwen2", "prism{paper}"), ("gpt2", "learned_ape"),
                                             ("llama", "abacus+fire"), ("gpt2", "alibi{n_biased=2}")])  # fmt: skip
def test_save_and_load_give_the_same_model(tmp_path, kind, spec):
    model = adapted(kind, spec)
    model.save_pretrained(tmp_path)
    assert transformers.AutoConfig.from_pretrained(tmp_path).pezoo["spec"] == spec
    loaded = pezoo.hf.from_pretrained(tmp_path).eval()
    want_state, got_state = model.state_dict(), loaded.state_dict()
    assert set(got_state) == set(want_state)
    assert {k for k in got_state if k.startswith("pezoo_encoding.")} == {
        f"pezoo_encoding.{k}" for k in model.pezoo_encoding.state_dict()
    }
    for key, value in want_state.items():
        assert torch.equal(got_state[key], value), key
    ids, mask = left_padded(PROMPTS)
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids, attention_mask=mask).logits, model(ids, attention_mask=mask).logits,
                                   atol=1e-6, rtol=0)  # fmt: skip


def test_the_encodings_parameters_belong_to_the_model():
    model = adapted("llama", "fire")
    own = {id(p) for p in model.pezoo_encoding.parameters()}
    assert own and own <= {id(p) for p in model.parameters()}
    ids = torch.tensor([PROMPTS[0]])
    model.train()
    assert model.pezoo_encoding.training
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.pezoo_encoding.parameters()]
    model(ids, labels=ids).loss.backward()
    opt.step()
    assert any(not torch.equal(a, p) for a, p in zip(before, model.pezoo_encoding.parameters(), strict=True))
    model.to(torch.float64).eval()
    assert {p.dtype for p in model.pezoo_encoding.parameters()} == {torch.float64}
    assert model(ids).logits.dtype == torch.float64


def test_gpt2s_learned_table_is_removed():
    model = adapted("gpt2", "nope")
    assert not any(k.startswith("transformer.wpe") for k in model.state_dict())
    ids = torch.tensor([PROMPTS[0]])
    with torch.no_grad():  # NoPE: nothing tells positions apart but the causal mask
        assert torch.isfinite(model(ids).logits).all()


class Probe(pezoo.PositionalEncoding):
    """Records what each hook sees (a plugin-like encoding, registered for one test)."""

    name = "hf_probe"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple] = []

    def embed(self, x, pos):
        self.seen.append(("embed", pos.tolist()))
        return x

    def embed_tokens(self, x, tokens, ctx):
        self.seen.append(("embed_tokens", tokens.tolist()))
        return x

    def observe(self, layer, x, ctx):
        self.seen.append(("observe", layer, tuple(x.shape)))

    def qk(self, layer, q, k, ctx):
        self.seen.append(("qk", layer, tuple(q.shape), ctx.q_pos.tolist()))
        return q, k

    def bias(self, layer, q, k, ctx):
        self.seen.append(("bias", layer, tuple(k.shape), ctx.k_pos.tolist()))
        return []


def test_every_hook_sees_the_real_tokens_with_positions_from_zero(monkeypatch):
    from pezoo.base import ENCODINGS

    monkeypatch.setitem(ENCODINGS._factories, "hf_probe", Probe)
    model = pezoo.hf.use_encoding(tiny("llama"), "hf_probe")
    ids, mask = left_padded(PROMPTS)
    model.generate(ids, attention_mask=mask, max_new_tokens=2, do_sample=False)
    seen = model.pezoo_encoding.seen
    # the probe reads tokens in order (embed_tokens, observe): each row group alone, real tokens only
    embeds = [s[1] for s in seen if s[0] == "embed"]
    # the prompt (the full row, then the row padded by three), then the first new token of each
    assert embeds == [[[0, 1, 2, 3, 4, 5]], [[0, 1, 2]], [[6]], [[3]]]
    tokens = [s[1] for s in seen if s[0] == "embed_tokens"]
    assert tokens[:2] == [[PROMPTS[0]], [PROMPTS[1]]]
    assert [s[1:] for s in seen if s[0] == "observe"][:4] == [(0, (1, 6, 64)), (0, (1, 3, 64)), (1, (1, 6, 64)),
                                                               (1, (1, 3, 64))]  # fmt: skip
    assert [s[2:] for s in seen if s[0] == "qk"][-1] == ((1, 4, 1, 16), [[3]])
    # the bias of the last step: every key of the row's real tokens, cached ones included
    assert [s[2:] for s in seen if s[0] == "bias"][-2:] == [((1, 4, 7, 16), [[0, 1, 2, 3, 4, 5, 6]]),
                                                             ((1, 4, 4, 16), [[0, 1, 2, 3]])]  # fmt: skip


def test_bad_uses_are_errors(tmp_path):
    bert = transformers.BertConfig(
        hidden_size=64, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64, vocab_size=32
    )
    with pytest.raises(ValueError, match="model type"):
        pezoo.hf.use_encoding(transformers.BertLMHeadModel(bert), "alibi")
    model = adapted("llama", "alibi")
    with pytest.raises(ValueError, match="already"):
        pezoo.hf.use_encoding(model, "rope")
    with pytest.raises(TypeError, match="unknown option"):
        pezoo.hf.use_encoding(tiny("llama"), "alibi", slope=2)
    with pytest.raises(TypeError, match="unknown option"):
        pezoo.hf.use_encoding(tiny("llama"), "alibi{slope=2}")
    untouched = tiny("llama")
    with pytest.raises(TypeError, match="JSON"):  # save_pretrained could not record it
        pezoo.hf.use_encoding(untouched, "abacus", digit_ids=range(3, 13))
    assert not hasattr(untouched, "pezoo_encoding") and "pezoo" not in untouched.config.to_dict()
    with pytest.raises(ValueError, match="inference-time"):
        pezoo.hf.use_encoding(tiny("llama"), "rope@{scaling={rope_type=linear,factor=2.0}}")
    tiny("llama").save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="no pezoo encoding"):
        pezoo.hf.from_pretrained(tmp_path)


def test_importing_pezoo_does_not_import_transformers():
    import subprocess
    import sys

    code = "import pezoo, sys; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


class PositionProbe(pezoo.PositionalEncoding):
    """Records the positions qk sees; reads no tokens, so the batch runs as one."""

    name = "hf_position_probe"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple] = []

    def qk(self, layer, q, k, ctx):
        self.seen.append((tuple(q.shape), ctx.q_pos.tolist(), ctx.key_padding_mask))
        return q, k


def test_a_padded_batch_gets_positions_from_each_rows_first_real_token(monkeypatch):
    from pezoo.base import ENCODINGS

    monkeypatch.setitem(ENCODINGS._factories, "hf_position_probe", PositionProbe)
    model = pezoo.hf.use_encoding(tiny("qwen2"), "hf_position_probe")
    ids, mask = left_padded(PROMPTS)
    model.generate(ids, attention_mask=mask, max_new_tokens=2, do_sample=False)
    (shape, pos, padding), *_, (_, step, _) = model.pezoo_encoding.seen
    assert shape == (2, 4, 6, 16) and pos[0] == [0, 1, 2, 3, 4, 5] and pos[1][3:] == [0, 1, 2]
    assert padding.tolist() == mask.bool().tolist()  # the padding is masked, whatever HF passes as its mask
    assert step == [[6], [3]]


def test_a_decoding_loop_of_ones_own_equals_the_full_pass():
    model = adapted("llama", "xpos")
    ids = torch.tensor([PROMPTS[0]])
    with torch.no_grad():
        full = model(ids).logits
        first = model(ids[:, :4], use_cache=True)
        cache = first.past_key_values
        steps = [first.logits]
        for t in range(4, ids.shape[1]):
            out = model(ids[:, t : t + 1], cache=cache, use_cache=True)
            steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)


def test_positions_that_depend_on_the_length_must_be_planned():
    torch.manual_seed(0)
    model = pezoo.hf.use_encoding(tiny("llama"), "randomized:rope")  # random positions at evaluation too
    ids = torch.tensor([PROMPTS[0]])
    with torch.no_grad():
        cache = model(ids[:, :3], use_cache=True).past_key_values
        with pytest.raises(ValueError, match=r"pezoo\.hf\.plan.*continues from a returned cache"):
            model(ids[:, 3:4], cache=cache, use_cache=True)  # a continuation's plan cannot grow: said so
        pezoo.hf.plan(model, ids.shape[1])
        cache = model(ids[:, :3], use_cache=True).past_key_values
        assert model(ids[:, 3:4], cache=cache, use_cache=True).logits.shape == (1, 1, 32)
    out = model.generate(ids, max_new_tokens=3, do_sample=False)  # generate plans by itself
    assert out.shape == (1, ids.shape[1] + 3)
    # a plan holds for one sequence batch: the next one (training, say) is drawn for its own length
    model.train()
    pezoo.hf.plan(model, 48)
    model(ids[:, :2])
    assert model._pezoo_adapter.call.ctx.state["positions"].shape[-1] == 48
    model(ids[:, :2])
    assert model._pezoo_adapter.call.ctx.state["positions"].shape[-1] == 2


def test_a_deep_copy_runs_its_own_encoding():
    model = adapted("llama", "fire")
    twin = copy.deepcopy(model)
    ids = torch.tensor([PROMPTS[0]])
    with torch.no_grad():
        torch.testing.assert_close(twin(ids).logits, model(ids).logits, atol=0, rtol=0)
        for p in twin.pezoo_encoding.parameters():
            p.add_(1.0)
        assert not torch.equal(twin(ids).logits, model(ids).logits)
        assert twin._pezoo_adapter.encoding is twin.pezoo_encoding


def test_gpt2_in_bfloat16_stays_in_bfloat16():
    model = adapted("gpt2", "alibi").to(torch.bfloat16)
    out = model(torch.tensor([PROMPTS[0]]), output_hidden_states=True)
    assert {h.dtype for h in out.hidden_states} == {torch.bfloat16}


def test_a_sliding_window_model_refuses_sequences_past_its_window():
    model = pezoo.hf.use_encoding(tiny("mistral", sliding_window=4), "alibi")
    assert model(torch.tensor([PROMPTS[1]])).logits.shape == (1, 3, 32)
    with pytest.raises(ValueError, match="sliding window"):
        model(torch.tensor([PROMPTS[0]]))


def test_a_head_width_the_layers_do_not_project_is_refused_before_anything_changes():
    """The config's head_dim sizes the encoding; layers that split q and k otherwise (a config
    edited out of step with the model) would fail at the first forward: refused at once."""
    model = tiny("llama-wide-heads")
    model.config.head_dim = 16  # the layers project 32-wide heads
    with pytest.raises(ValueError, match=r"config gives heads 16 wide and the attention layers .* heads \[32\]"):
        pezoo.hf.use_encoding(model, "rope")
    assert not hasattr(model, "pezoo_encoding") and getattr(model, "_pezoo_adapter", None) is None


def test_a_window_no_layer_uses_is_no_window():
    """Qwen2 windows only its layers from ``max_window_layers`` on: with every layer below it,
    its attention is global (``layer_types`` has no sliding layer) and the adapted model is
    not refused past the window, where one with a sliding layer is."""
    ids = torch.tensor([PROMPTS[0]])
    for max_window_layers, refused in ((0, True), (1, True), (2, False)):  # of 2 layers
        config = {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": max_window_layers}
        model = tiny("qwen2", **config)
        assert ("sliding_attention" in model.config.layer_types) is refused
        model = pezoo.hf.use_encoding(copy.deepcopy(model), "alibi")
        if refused:
            with pytest.raises(ValueError, match="sliding window of 4 tokens"):
                model(ids)
        else:
            assert model(ids).logits.shape[:2] == (1, len(PROMPTS[0]))


def test_loading_reports_nothing_about_the_encodings_weights(tmp_path, capfd, caplog):
    adapted("gpt2", "fire").save_pretrained(tmp_path)
    capfd.readouterr()
    pezoo.hf.from_pretrained(tmp_path)
    logged = capfd.readouterr().err + caplog.text
    assert "UNEXPECTED" not in logged and "MISSING" not in logged and "not sharded" not in logged


def test_beam_search_works_by_positions_and_is_refused_for_per_row_state():
    ids, mask = left_padded(PROMPTS)
    alibi = adapted("llama", "alibi")
    assert alibi.generate(ids, attention_mask=mask, max_new_tokens=2, num_beams=2, do_sample=False).shape == (2, 8)
    with pytest.raises(ValueError, match="beam"):
        adapted("llama", "prism").generate(ids, attention_mask=mask, max_new_tokens=2, num_beams=2)


@pytest.mark.parametrize("spec", ["prism", "abacus+fire"])
def test_training_on_a_left_padded_batch_reaches_the_encoding(spec):
    model = adapted("gpt2", spec).train()
    ids, mask = left_padded(PROMPTS)
    model(ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss.backward()
    grads = [p.grad for p in model.pezoo_encoding.parameters()]
    assert any(g is not None and g.abs().sum() > 0 for g in grads)
    assert all(torch.isfinite(g).all() for g in grads if g is not None)


def test_gradient_checkpointing_is_refused_at_enable_for_an_encoding_that_observes():
    model = adapted("llama", "prism").train()
    with pytest.raises(ValueError, match="checkpointing"):
        model.activation_checkpointing_enable()
    plain = tiny("llama").train()
    plain.activation_checkpointing_enable()
    with pytest.raises(ValueError, match="checkpointing"):
        pezoo.hf.use_encoding(plain, "prism")


# --- loading as itself (issue 54 item 1; issue 51's third probe) ---------------------------------


def saved(tmp_path, kind="llama", spec="fire", seed=1, name="model"):
    model = adapted(kind, spec, seed)
    with torch.no_grad():
        for p in model.pezoo_encoding.parameters():
            p.add_(0.1 * torch.randn_like(p))  # off the init: a load must read them
    folder = tmp_path / name
    model.save_pretrained(folder)
    return model, folder


def same_logits(a, b):
    ids, mask = left_padded(PROMPTS)
    with torch.no_grad():
        return torch.equal(a.eval()(ids, attention_mask=mask).logits, b.eval()(ids, attention_mask=mask).logits)


def test_a_plain_auto_load_gives_the_adapted_model(tmp_path):
    model, folder = saved(tmp_path, "gpt2", "alibi{n_biased=2}")
    config = transformers.AutoConfig.from_pretrained(folder)
    assert config.model_type == "pezoo_gpt2" and config.auto_map["AutoModelForCausalLM"].startswith("pezoo_model.")
    loaded = transformers.AutoModelForCausalLM.from_pretrained(folder)
    assert isinstance(loaded, transformers.GPT2LMHeadModel) and loaded.pezoo_encoding.n_biased == 2
    assert same_logits(loaded, model)


def test_a_plain_auto_load_where_pezoo_hf_is_not_imported_fails_loudly_or_loads_by_remote_code(tmp_path, monkeypatch):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    model, folder = saved(tmp_path)
    monkeypatch.delitem(CONFIG_MAPPING._extra_content, "pezoo_llama")  # as in a process that never imported it
    with pytest.raises(ValueError, match="trust_remote_code"):
        transformers.AutoModelForCausalLM.from_pretrained(folder)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
    assert same_logits(loaded, model)


def test_the_saved_loader_names_pezoo_where_it_is_not_installed(tmp_path, monkeypatch):
    from transformers.dynamic_module_utils import check_imports

    _, folder = saved(tmp_path)
    monkeypatch.setitem(sys.modules, "pezoo", None)  # `import pezoo` fails, as where it is not installed
    with pytest.raises(ImportError, match="pezoo"):
        check_imports(str(folder / "pezoo_model.py"))


def test_a_folder_saved_before_model_types_loads_through_pezoo_hf(tmp_path):
    model, folder = saved(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "llama"  # as written before adapted models had a type of their own
    config.pop("auto_map")
    (folder / "config.json").write_text(json.dumps(config))
    assert same_logits(pezoo.hf.from_pretrained(folder), model)


def test_a_stray_weights_file_in_the_folder_is_not_read(tmp_path):
    model, folder = saved(tmp_path, seed=1)
    _, other = saved(tmp_path, seed=2, name="other")
    shutil.copy(other / "model.safetensors", folder / "model_old.safetensors")
    assert same_logits(pezoo.hf.from_pretrained(folder), model)
    assert same_logits(transformers.AutoModelForCausalLM.from_pretrained(folder), model)


def test_a_subfolder_gives_its_own_spec_and_weights(tmp_path):
    model, _ = saved(tmp_path, spec="fire", name="top/sub")
    adapted("llama", "t5", seed=3).save_pretrained(tmp_path / "top")  # another model above it
    loaded = pezoo.hf.from_pretrained(tmp_path / "top", subfolder="sub")
    assert loaded.config.pezoo["spec"] == "fire" and same_logits(loaded, model)


# --- a save over another model's files (issue 65, case 4) ----------------------------------------

SHARDED = "10KB"  # the tiny llama in several shards


def weight_files(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(("model", "pytorch_model")))


def test_a_sharded_save_over_another_models_single_file_loads_the_new_model(tmp_path):
    _, folder = saved(tmp_path, seed=2)  # another model: model.safetensors
    model = adapted("llama", "fire", seed=1)
    model.save_pretrained(folder, max_shard_size=SHARDED)
    assert same_logits(pezoo.hf.from_pretrained(folder), model)
    assert same_logits(transformers.AutoModelForCausalLM.from_pretrained(folder), model)
    files = weight_files(folder)
    assert "model.safetensors" not in files and "model.safetensors.index.json" in files


def test_a_single_file_save_over_another_models_shards_leaves_no_index(tmp_path):
    folder = tmp_path / "model"
    adapted("llama", "fire", seed=2).save_pretrained(folder, max_shard_size=SHARDED)
    model = adapted("llama", "fire", seed=1)
    model.save_pretrained(folder)
    assert weight_files(folder) == ["model.safetensors"]
    assert same_logits(pezoo.hf.from_pretrained(folder), model)


def test_a_save_removes_another_models_pickled_weights(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    other = adapted("llama", "fire", seed=2)
    torch.save(other.state_dict(), folder / "pytorch_model.bin")
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": {}}))
    model = adapted("llama", "fire", seed=1)
    model.save_pretrained(folder)
    assert weight_files(folder) == ["model.safetensors"]
    assert same_logits(transformers.AutoModelForCausalLM.from_pretrained(folder, use_safetensors=None), model)


def test_a_folder_holding_both_layouts_is_refused_at_load(tmp_path):
    _, folder = saved(tmp_path, seed=2)  # model.safetensors
    _, sharded = saved(tmp_path, seed=1, name="sharded")
    adapted("llama", "fire", seed=1).save_pretrained(sharded, max_shard_size=SHARDED)
    for name in weight_files(sharded):
        if name != "model.safetensors":
            shutil.copy(sharded / name, folder / name)  # as an older save left the folder
    with pytest.raises(ValueError, match=r"model\.safetensors\.index\.json"):
        pezoo.hf.from_pretrained(folder)
    with pytest.raises(ValueError, match=r"model\.safetensors\.index\.json"):
        transformers.AutoModelForCausalLM.from_pretrained(folder)


def test_a_save_that_fails_midway_keeps_the_model_that_was_there(tmp_path, monkeypatch):
    import transformers.modeling_utils

    before, folder = saved(tmp_path, seed=2)

    def torn(tensors, filename, metadata=None):
        with open(filename, "wb") as f:
            f.write(b"torn")
        raise OSError("disk full")

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", torn)
    with pytest.raises(OSError, match="disk full"):
        adapted("llama", "fire", seed=1).save_pretrained(folder, max_shard_size=SHARDED)
    monkeypatch.undo()
    assert weight_files(folder) == ["model.safetensors"]
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]
    assert same_logits(pezoo.hf.from_pretrained(folder), before)


@pytest.mark.parametrize(
    ("spec", "options"),
    [
        ("randomized:ape{max_length=300000000}", {}),
        ("randomized:ape", {"max_length": 10**12}),
        ("learned_ape", {"max_position": 10**8}),
        ("prism", {"d_pe": 10**6}),
    ],
)
def test_size_options_past_the_bounds_are_refused_before_allocating(tmp_path, spec, options):
    with pytest.raises(ValueError, match="bound"):
        pezoo.hf.use_encoding(tiny("llama"), spec, **options)
    _, folder = saved(tmp_path)  # and in a saved config's record
    config = json.loads((folder / "config.json").read_text())
    config["pezoo"].update(spec=spec, options=options)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="bound"):
        pezoo.hf.from_pretrained(folder)


def test_the_bounds_are_the_harnesss():
    limits = pytest.importorskip("harness.config.limits")
    from pezoo.hf import limits as ours

    assert (ours.MAX_POSITIONS, ours.MAX_WIDTH) == (limits.MAX_POSITIONS, limits.MAX_WIDTH)
    assert (ours.POSITION_OPTIONS, ours.WIDTH_OPTIONS) == (limits.POSITION_OPTIONS, limits.WIDTH_OPTIONS)
    assert ours.option_bound is limits.option_bound  # one table (pezoo.limits), not two copies


def test_an_unknown_backend_fails_at_load_not_at_the_first_forward(tmp_path):
    with pytest.raises(ValueError, match="backend"):
        pezoo.hf.use_encoding(tiny("llama"), "alibi", backend="fused-ish")
    _, folder = saved(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["pezoo"]["backend"] = "fused-ish"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="backend"):
        transformers.AutoModelForCausalLM.from_pretrained(folder)


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [("spec", 7, "spec"), ("spec", None, "spec"), ("options", ["n_heads", 4], "options"), ("backend", 3, "backend")],
)
def test_a_saved_record_of_the_wrong_types_fails_at_load_in_one_line(tmp_path, key, value, words):
    """Issue 51's third probe: a spec of 7 or null, or options given as a list, gave Python's own
    messages from deep inside the load."""
    _, folder = saved(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["pezoo"][key] = value
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=f"pezoo {words}"):
        transformers.AutoModelForCausalLM.from_pretrained(folder)


def test_use_encoding_refuses_a_spec_that_is_no_string():
    with pytest.raises(TypeError, match="string"):
        pezoo.hf.use_encoding(tiny("llama"), 7)  # type: ignore[arg-type]


# --- the paths around training and generation (issue 54 item 5) ----------------------------------


def test_a_static_cache_is_refused_up_front():
    model = adapted("llama", "alibi")
    ids, mask = left_padded(PROMPTS)
    with pytest.raises(ValueError, match="dynamic KV cache"):
        model.generate(ids, attention_mask=mask, max_new_tokens=2, cache_implementation="static")
    cache = transformers.StaticCache(config=model.config, max_cache_len=16)
    with pytest.raises(ValueError, match="dynamic KV cache"):
        model(ids, attention_mask=mask, past_key_values=cache)


@pytest.mark.parametrize("spec", ["t5", "prism"])
def test_deep_copy_and_pickle_after_a_training_step(spec):
    model = adapted("llama", spec).train()
    ids, mask = left_padded(PROMPTS)
    model(ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss.backward()
    for twin in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert type(twin) is type(model) and twin._pezoo_adapter.encoding is twin.pezoo_encoding
        assert same_logits(twin, model)
        model.train()


def test_llama_ignores_partial_rotary_factor_and_so_does_rope():
    torch.manual_seed(0)
    params = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
    model = tiny("llama", rope_parameters=params)
    ids, mask = left_padded([list(range(3, 20)), list(range(5, 12))])
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        ours = pezoo.hf.use_encoding(copy.deepcopy(model), "rope")
        torch.testing.assert_close(ours(ids, attention_mask=mask).logits[mask.bool()], want[mask.bool()],
                                   atol=1e-5, rtol=0)  # fmt: skip
    assert ours.pezoo_encoding.rotary_dim == 16


def test_a_rope_config_read_differently_is_refused():
    model = tiny("llama")
    model.model.rotary_emb.inv_freq.mul_(0.5)  # frequencies no config of pezoo's gives
    with pytest.raises(ValueError, match="differently"):
        pezoo.hf.use_encoding(model, "rope")


def test_a_rope_base_the_caller_gives_is_the_callers():
    """Before, the frequency check compared a given base with the model's and refused it."""
    model = tiny("llama")
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        want = model(ids).logits
        other = pezoo.hf.use_encoding(copy.deepcopy(model), "rope", base=500.0)
        assert other.pezoo_encoding.base == 500.0
        assert (other(ids).logits - want).abs().max() > 0


def test_output_attentions_gives_the_probabilities():
    model = adapted("llama", "alibi")
    ids, mask = left_padded(PROMPTS)
    with torch.no_grad():
        out = model(ids, attention_mask=mask, output_attentions=True)
    assert len(out.attentions) == 2
    probs = out.attentions[0]
    assert probs.shape == (2, 4, ids.shape[1], ids.shape[1])
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 4, ids.shape[1]))
    assert probs[1, :, 3:, :3].abs().max() == 0  # the padding gets no attention
    assert torch.triu(probs[0], diagonal=1).abs().max() == 0  # nor the future


def test_attention_dropout_warns_that_it_is_not_applied():
    model = adapted("gpt2", "alibi").train()  # GPT-2's attn_pdrop is 0.1
    with pytest.warns(UserWarning, match="dropout"):
        model(torch.tensor([PROMPTS[0]]))


@pytest.mark.parametrize("option", [{"n_heads": 8}, {"head_dim": 32}, {"d_model": 128}])
def test_options_that_contradict_the_models_shape_are_refused(option):
    with pytest.raises(ValueError, match="contradicts"):
        pezoo.hf.use_encoding(tiny("llama"), "alibi", **option)


def test_a_trainer_fine_tunes_an_adapted_model(tmp_path):
    pytest.importorskip("accelerate")
    from torch.utils.data import Dataset

    class Rows(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            ids = torch.tensor([3 + (i + j) % 20 for j in range(8)])
            return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}

    model = adapted("llama", "fire").train()
    before = {n: p.detach().clone() for n, p in model.pezoo_encoding.named_parameters()}
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4,
                                          max_steps=3, learning_rate=1e-2, report_to=[], save_strategy="no",
                                          logging_steps=1, use_cpu=True, activation_checkpointing=True)  # fmt: skip
    result = transformers.Trainer(model=model, args=args, train_dataset=Rows()).train()
    assert result.global_step == 3 and math.isfinite(result.training_loss)
    assert any(not torch.equal(p, before[n]) for n, p in model.pezoo_encoding.named_parameters())


# --- cost at length (issue 54 item 6; numbers: benchmarks/hf_cost_at_length.py) -----------------


@pytest.mark.parametrize("n_cached", [0, 5])
def test_a_per_layer_function_bias_is_built_on_the_causal_pairs_only(monkeypatch, n_cached):
    from pezoo.context import AttentionContext
    from pezoo.hf import families

    monkeypatch.setattr(families, "DENSE_CHUNK_PAIRS", 40)  # blocks of 2-3 query rows
    fire = pezoo.create("fire", n_heads=4, n_layers=1)
    with torch.no_grad():
        for p in fire.parameters():
            p.add_(torch.randn_like(p))
    s, j = 9, 9 + n_cached
    ctx = AttentionContext(q_pos=torch.arange(n_cached, j)[None], k_pos=torch.arange(j)[None])
    q = k = torch.zeros(1, 4, s, 8)
    (bias,) = fire.bias(0, q, k, ctx)
    dense = families.causal_dense(bias, ctx, 4)
    want = bias.materialize(ctx, 4, torch.float32)  # (1, h, s, j)
    got = dense.materialize(ctx, 4, torch.float32)
    seen = torch.arange(j)[None, :] <= torch.arange(n_cached, j)[:, None]  # (s, j)
    torch.testing.assert_close(got[..., seen], want[..., seen], atol=1e-6, rtol=0)
    qkv = torch.randn(3, 1, 4, s, 8)
    kv = torch.randn(2, 1, 4, j, 8)
    out = [pezoo.attend(qkv[0], kv[0], kv[1], ctx, [b], backend="sdpa")[0] for b in (bias, dense)]
    torch.testing.assert_close(out[1], out[0], atol=1e-5, rtol=0)  # the future's values are masked either way


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["alibi", "fire"])
def test_a_compiled_forward_has_no_graph_break(spec):
    model = adapted("llama", spec)
    ids, mask = left_padded(PROMPTS)
    with torch.no_grad():
        explained = torch._dynamo.explain(model)(ids, attention_mask=mask, use_cache=False)
    assert explained.graph_break_count == 0, [str(r.reason)[:200] for r in explained.break_reasons]


def test_the_adapted_classes_live_where_forward_looks_for_them():
    """forward.py finds an adapted class's original by the module the classes are made in,
    named there (auto imports forward, so forward does not import auto back)."""
    assert pezoo.hf.forward.ADAPTED_MODULE == pezoo.hf.auto.__name__
    made = pezoo.hf.auto.part_class(torch.nn.Linear, torch.nn.Linear.forward)
    assert pezoo.hf.forward._original(made) is torch.nn.Linear


def test_an_unknown_backend_lists_each_valid_one_once():
    with pytest.raises(ValueError) as caught:
        pezoo.hf.use_encoding(tiny("llama"), "alibi", backend="fused-ish")
    listed = str(caught.value).split("Valid attention backends: ")[1].split(", ")
    assert len(listed) == len(set(listed)) and "auto" in listed  # 'auto, auto, eager, ...' before


@pytest.mark.parametrize(
    "hint", [torch.tensor([float("nan"), 3.0]), torch.tensor([0.0, 3.0]), torch.tensor([-5, 3]), [3, 3]]
)
def test_a_scale_hint_that_is_not_finite_positive_numbers_is_refused(hint):
    """A nan hint made every logit nan; 0, -5 and a list were taken as well."""
    model = adapted("llama", "learned_prf_sh")
    with pytest.raises(ValueError, match="set_scale_hint"):
        pezoo.hf.set_scale_hint(model, hint)
    pezoo.hf.set_scale_hint(model, torch.tensor([2, 3]))  # what it takes
    pezoo.hf.set_scale_hint(model, None)


def test_model_dims_of_a_config_dict_says_to_make_a_config():
    with pytest.raises(ValueError, match="wants a transformers config object"):  # an AttributeError before
        pezoo.hf.model_dims({"hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2})


# --- hostile inputs: the model given, caches, positions, the prompt's name -------------------------


@pytest.mark.parametrize("head", ["LlamaModel", "LlamaForSequenceClassification"])
def test_a_model_that_is_no_causal_lm_is_refused_before_anything_changes(head):
    """A base model (AutoModel) or a classifier became PezooLlamaForCausalLM, then failed at the
    first forward with "has no attribute 'model'" / "'lm_head'"."""
    model = getattr(transformers, head)(tiny("llama").config).eval()
    with pytest.raises(
        ValueError, match=f"must be a LlamaForCausalLM .* got a {head}; load it with AutoModelForCausalLM"
    ):
        pezoo.hf.use_encoding(model, "alibi")
    assert type(model) is getattr(transformers, head) and not hasattr(model, "pezoo_encoding")


def test_a_backend_that_is_no_string_is_named():
    """backend=None gave "'NoneType' object is not iterable"."""
    with pytest.raises(TypeError, match=r"backend is an attention backend's name, one of auto, .*; got None"):
        pezoo.hf.use_encoding(tiny("llama"), "alibi", backend=None)  # type: ignore[arg-type]


@pytest.mark.parametrize("implementation", ["dynamic", "hybrid"])
@pytest.mark.parametrize("where", ["keyword", "model", "given"])
def test_the_dynamic_cache_by_name_generates_as_the_default(implementation, where):
    """``"dynamic"`` (the cache pezoo.hf keeps) failed in transformers with "Passing both
    cache_implementation and cache", and ``"hybrid"`` (in Gemma 2's and 3's hub generation
    configs, which transformers unsets itself) was refused: neither asked for another cache."""
    model = adapted("llama", "alibi")
    ids, mask = left_padded(PROMPTS)
    options = {"max_new_tokens": NEW, "do_sample": False}
    want = model.generate(ids, attention_mask=mask, **options)
    kwargs = {**options, "cache_implementation": implementation} if where == "keyword" else options
    if where == "model":
        model.generation_config.cache_implementation = implementation
    if where == "given":
        given = transformers.GenerationConfig(cache_implementation=implementation, **options)
        kwargs = {"generation_config": given}
    got = model.generate(ids, attention_mask=mask, **kwargs)
    assert got.tolist() == want.tolist()
    if where == "given":
        assert given.cache_implementation == implementation  # the caller's config is left as it was
    if where == "model":
        assert model.generation_config.cache_implementation == implementation


def test_a_static_cache_in_the_models_generation_config_is_refused_naming_it():
    model = adapted("llama", "alibi")
    model.generation_config.cache_implementation = "static"
    with pytest.raises(ValueError, match=r"dynamic KV cache; cache_implementation='static' .* model.generation_config"):
        model.generate(torch.tensor([PROMPTS[0]]), max_new_tokens=2)


@pytest.mark.parametrize(
    ("positions", "mask"),
    [
        ([[0, 1, 2, 0, 1, 2]], None),  # two sequences packed in a row (DataCollatorWithFlattening's position_ids)
        ([[10, 11, 12, 13, 14, 15]], None),  # an offset
        ([[0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5]], "left-padded"),  # counting the pads of the second row
    ],
)
def test_position_ids_pezoo_would_ignore_are_refused(positions, mask):
    """pezoo.hf takes the positions from the mask; position_ids that said otherwise were ignored
    silently (the untouched model keeps packed sequences apart by them)."""
    model = adapted("llama", "rope")
    ids, padding = left_padded(PROMPTS) if mask else (torch.tensor([PROMPTS[0]]), None)
    with pytest.raises(ValueError, match=r"reads no position_ids: row \d's are .* Packed sequences"):
        model(ids, attention_mask=padding, position_ids=torch.tensor(positions))


def test_position_ids_equal_to_pezoos_are_taken_in_a_decoding_loop_and_in_generate():
    model = adapted("llama", "rope")
    ids, mask = left_padded(PROMPTS)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # as generate derives them: from each row's first real token
    with torch.no_grad():
        full = model(ids, attention_mask=mask).logits
        first = model(ids[:, :4], attention_mask=mask[:, :4], position_ids=positions[:, :4], use_cache=True)
        rest = model(ids[:, 4:], attention_mask=mask, position_ids=positions[:, 4:], cache=first.past_key_values)
    real = mask.bool()
    torch.testing.assert_close(torch.cat([first.logits, rest.logits], 1)[real], full[real], atol=1e-5, rtol=0)
    want = model.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False)
    got = model.generate(ids, attention_mask=mask, position_ids=positions, max_new_tokens=NEW, do_sample=False)
    assert got.tolist() == want.tolist()
    with pytest.raises(ValueError, match="reads no position_ids"):
        model.generate(ids, attention_mask=mask, position_ids=torch.arange(6).expand(2, -1), max_new_tokens=NEW)


@pytest.mark.parametrize("prompt", ["inputs", "inputs_embeds"])
def test_generate_plans_the_positions_for_a_prompt_by_any_name(prompt):
    """``generate(inputs=ids)`` (transformers' name) and ``inputs_embeds`` planned no positions:
    randomized PE then stopped at the first new token, saying to give max_new_tokens, which was given."""
    torch.manual_seed(0)
    model = pezoo.hf.use_encoding(tiny("llama"), "randomized:rope")
    ids, mask = left_padded(PROMPTS)
    given = ids if prompt == "inputs" else model.get_input_embeddings()(ids).detach()
    out = model.generate(**{prompt: given}, attention_mask=mask, max_new_tokens=NEW, do_sample=False)
    assert out.shape[1] == (ids.shape[1] if prompt == "inputs" else 0) + NEW


def test_a_forward_on_the_meta_device_says_to_materialise_the_model():
    """The untouched model runs on meta tensors (shape inference); the adapted one failed deep in
    the position plan with "Tensor.item() cannot be called on meta tensors"."""
    model = adapted("llama", "alibi").to(device="meta")
    with pytest.raises(ValueError, match=r"meta device: .* materialise the model first"):
        model(torch.tensor([PROMPTS[0]]))
