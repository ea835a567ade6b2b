"""Tiny random models of every family pezoo.hf adapts (hidden 32, 2 layers, 4 heads, 100-token
vocabulary): built here, no downloads. Shared by the pezoo.hf tests."""

from __future__ import annotations

from typing import Any

import torch
import transformers

PAD, BOS, EOS = 0, 1, 2
VOCAB = 100
_IDS = {"vocab_size": VOCAB, "pad_token_id": PAD, "bos_token_id": BOS, "eos_token_id": EOS}
_LLAMA_LIKE = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}

_GPT_OSS_YARN = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                 "original_max_position_embeddings": 2, "rope_theta": 150000.0}  # fmt: skip
"""gpt-oss's RoPE, its factor 32 the ratio of the tiny model's 64 positions to the original 2."""

MINISTRAL3_ROPE = {"rope_type": "yarn", "rope_theta": 1e6, "factor": 16.0, "original_max_position_embeddings": 4,
                   "max_position_embeddings": 64, "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
                   "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.5}  # fmt: skip
"""Ministral 3's rope_parameters (its checkpoints': YaRN, mscale 1, β 0.1) at the tiny model's scale."""

_TWO_EXPERTS = {"num_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 32}

CONFIGS: dict[str, dict[str, Any]] = {
    "llama": _LLAMA_LIKE,
    "mistral": _LLAMA_LIKE,
    "mixtral": {**_LLAMA_LIKE, "num_local_experts": 2, "num_experts_per_tok": 1},
    "qwen2": _LLAMA_LIKE,
    "qwen3": {**_LLAMA_LIKE, "head_dim": 8},
    "granite": {**_LLAMA_LIKE, "attention_multiplier": 0.3, "embedding_multiplier": 2.0},
    "gemma": {**_LLAMA_LIKE, "head_dim": 8},
    "gemma2": {**_LLAMA_LIKE, "head_dim": 8, "query_pre_attn_scalar": 8, "attn_logit_softcapping": None},
    # four layers: RoPE windowed, three of them, then a NoPE global one (its default 3:1 pattern)
    "cohere2": {**_LLAMA_LIKE, "num_hidden_layers": 4, "sliding_window": 64},
    # as Cohere 2's, with a mixture of two experts on every layer (no dense prefix)
    "cohere2_moe": {**_LLAMA_LIKE, "num_hidden_layers": 4, "sliding_window": 64, **_TWO_EXPERTS},
    # Laguna: every layer global (its default), RoPE on half of each head, a softplus gate per head
    "laguna": {**_LLAMA_LIKE, "head_dim": 8, **_TWO_EXPERTS, "shared_expert_intermediate_size": 32},
    # Beam: as AFMoE's, its gate biased per head, its NoPE layer's queries under its temperature;
    # three dense MLP layers, then a mixture of two experts
    "beam": {
        **_LLAMA_LIKE, "num_hidden_layers": 4, "sliding_window": 64, "head_dim": 8, **_TWO_EXPERTS,
        "n_group": 1, "topk_group": 1,
    },
    # as Cohere 2's (rotate-half), q and k normed per head, a sigmoid gate on the attended values
    "afmoe": {**_LLAMA_LIKE, "num_hidden_layers": 4, "sliding_window": 64, "head_dim": 8, **_TWO_EXPERTS},
    # as Cohere 2's, with q and k normed per head (without a window, RoPE everywhere)
    "exaone4": {**_LLAMA_LIKE, "num_hidden_layers": 4, "sliding_window": 64},
    # three sliding-window RoPE layers, then a global one (one base, 5·10⁵)
    "olmo3": {**_LLAMA_LIKE, "num_hidden_layers": 4, "sliding_window": 64},
    # five sliding-window RoPE layers (base 10⁴), then a global RoPE one (base 10⁶)
    "gemma3_text": {
        **_LLAMA_LIKE,
        "num_hidden_layers": 6,
        "head_dim": 8,
        "query_pre_attn_scalar": 8,
        "sliding_window": 64,
    },
    # Gemma 4: three sliding-window RoPE layers (heads 8 wide, base 10⁴), then a global one (heads 16 wide,
    # p-RoPE with p = 1/4 at base 10⁶, its keys its values); per-layer input embeddings 4 wide
    "gemma4_text": {
        **_LLAMA_LIKE,
        "num_hidden_layers": 4,
        "head_dim": 8,
        "global_head_dim": 16,
        "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
        "num_global_key_value_heads": 1,
        "attention_k_eq_v": True,
        "sliding_window": 64,
        "vocab_size_per_layer_input": VOCAB,
        "hidden_size_per_layer_input": 4,
    },
    # iRoPE: three chunked RoPE layers, then a NoPE global one; a mixture of two experts
    "llama4_text": {
        **_LLAMA_LIKE,
        "num_hidden_layers": 4,
        "head_dim": 8,
        "intermediate_size_mlp": 64,
        "attention_chunk_size": 64,
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
    },
    # alternating sliding-window and global RoPE layers (one YaRN RoPE), sinks, 16-wide heads in a
    # 32-wide model (as gpt-oss's 64 heads of 64 in 2880), a mixture of two experts
    "gpt_oss": {
        **_LLAMA_LIKE,
        "num_hidden_layers": 4,
        "head_dim": 16,
        "sliding_window": 64,
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
        "rope_parameters": _GPT_OSS_YARN,
    },
    "qwen3_moe": {**_LLAMA_LIKE, **_TWO_EXPERTS, "head_dim": 8},
    "qwen2_moe": {**_LLAMA_LIKE, **_TWO_EXPERTS, "shared_expert_intermediate_size": 32},
    "olmoe": {**_LLAMA_LIKE, **_TWO_EXPERTS},
    "granitemoe": {**_LLAMA_LIKE, "num_local_experts": 2, "num_experts_per_tok": 1, "attention_multiplier": 0.3},
    "phimoe": {**_LLAMA_LIKE, "num_local_experts": 2, "num_experts_per_tok": 1},
    "arcee": _LLAMA_LIKE,
    "seed_oss": _LLAMA_LIKE,
    "apertus": _LLAMA_LIKE,
    # four layers: three RoPE, then a NoPE one (its no_rope_layer_interval 4), all global
    "smollm3": {**_LLAMA_LIKE, "num_hidden_layers": 4},
    "cohere": {**_LLAMA_LIKE, "use_qk_norm": True},
    "ernie4_5": _LLAMA_LIKE,
    "ernie4_5_moe": {**_LLAMA_LIKE, "moe_num_experts": 2, "moe_k": 1, "moe_intermediate_size": 32},
    "glm": _LLAMA_LIKE,  # RoPE on half of each head (partial_rotary_factor 0.5), interleaved
    "glm4": _LLAMA_LIKE,
    "nemotron": _LLAMA_LIKE,  # RoPE on half of each head, rotate-half
    "glm4_moe": {**_LLAMA_LIKE, **_TWO_EXPERTS, "head_dim": 8, "n_routed_experts": 2, "use_qk_norm": True},
    "ministral": {**_LLAMA_LIKE, "head_dim": 8},
    "helium": {**_LLAMA_LIKE, "head_dim": 8},  # interleaved pairs
    # as exaone4's, its MLP a mixture of experts after the first layer
    "exaone_moe": {**_LLAMA_LIKE, **_TWO_EXPERTS, "num_hidden_layers": 4, "sliding_window": 64},
    "olmo": {**_LLAMA_LIKE, "clip_qkv": 5.0},
    "olmo2": _LLAMA_LIKE,
    "starcoder2": _LLAMA_LIKE,
    "phi": {**_LLAMA_LIKE, "qk_layernorm": True},
    "phi3": _LLAMA_LIKE,
    "stablelm": _LLAMA_LIKE,
    "gpt_neox": {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "max_position_embeddings": 64,
    },
    # each head's q, k, v side by side in one projection, q and k layer-normed, half of each head rotated
    "persimmon": {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "max_position_embeddings": 64,
    },
    # GPT-J's interleaved partial RoPE; q, k, v fused over 4 model-parallel shards
    "codegen": {"n_embd": 32, "n_layer": 2, "n_head": 4, "rotary_dim": 4, "n_positions": 64},
    "gptj": {"n_embd": 32, "n_layer": 2, "n_head": 4, "rotary_dim": 4, "n_positions": 64},
    "falcon": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4},
    "bloom": {"hidden_size": 32, "n_layer": 2, "n_head": 4},
    "opt": {
        "hidden_size": 32,
        "ffn_dim": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "word_embed_proj_dim": 32,
        "max_position_embeddings": 64,
    },
    "xglm": {"d_model": 32, "num_layers": 2, "attention_heads": 4, "ffn_dim": 64, "max_position_embeddings": 64},
    "biogpt": {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
    },
    "gpt2": {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64},
    "aria_text": _LLAMA_LIKE,
    # heads 16 wide: its weightless q/k norms fix |q| = |k| = sqrt(16), so the scores reach ±4
    "nanochat": {**_LLAMA_LIKE, "head_dim": 16},
    "granitemoeshared": {
        **_LLAMA_LIKE,
        "attention_multiplier": 0.3,
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
        "shared_intermediate_size": 32,
    },
    "hyperclovax": {**_LLAMA_LIKE, "attention_multiplier": 0.3},
    "jais2": _LLAMA_LIKE,
    "solar_open": {**_LLAMA_LIKE, **_TWO_EXPERTS, "head_dim": 8, "n_routed_experts": 2},
    "apertus1p5_text": {**_LLAMA_LIKE, "head_dim": 8},
    "hy_v3": {**_LLAMA_LIKE, **_TWO_EXPERTS, "head_dim": 8},
    "flex_olmo": {**_LLAMA_LIKE, "num_experts": 2, "num_experts_per_tok": 1},
    # MiniMax-M2 rotates half of each head (its checkpoints' legacy rotary_dim), q/k normed full-width
    "minimax_m2": {**_LLAMA_LIKE, "head_dim": 8, "rotary_dim": 4, "num_local_experts": 2, "num_experts_per_tok": 1},
    "vaultgemma": {**_LLAMA_LIKE, "head_dim": 8, "query_pre_attn_scalar": 8, "attn_logit_softcapping": None},
    # a global layer, then three sliding-window ones (its default pattern), one Llama 3-scaled RoPE
    "cwm": {**_LLAMA_LIKE, "num_hidden_layers": 4, "sliding_window": 64, "head_dim": 8},
    # as exaone4's: three sliding-window RoPE layers, then a global NoPE one
    "kolibri1": {
        **_LLAMA_LIKE,
        "num_hidden_layers": 4,
        "sliding_window": 64,
        "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
        "head_dim": 8,
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 32,
    },
    "bitnet": _LLAMA_LIKE,
    # fused Wqkv (grouped: 2 key/value heads), clamped at ±8; a mixture of two experts
    "dbrx": {
        "d_model": 32,
        "n_heads": 4,
        "n_layers": 2,
        "max_seq_len": 64,
        "attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0},
        "ffn_config": {"ffn_hidden_size": 64, "moe_num_experts": 2, "moe_top_k": 1},
    },
    # YaRN by 16 from an original context of 4, and the temperature 1 + β log(1 + ⌊pos / 4⌋) (β 0.5)
    "ministral3": {**_LLAMA_LIKE, "head_dim": 8, "rope_parameters": MINISTRAL3_ROPE},
    # three sliding-window RoPE layers (base 10⁴), then a global RoPE one (base 5·10⁵); two experts
    "mellum": {
        **_LLAMA_LIKE,
        "num_hidden_layers": 4,
        "sliding_window": 64,
        "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
        "head_dim": 8,
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
        "moe_intermediate_size": 32,
    },
    # its default pattern on four layers: global NoPE, global NoPE, windowed RoPE, global NoPE; sinks
    "flint": {
        **_LLAMA_LIKE,
        "num_hidden_layers": 4,
        "sliding_window": 64,
        "head_dim": 8,
        **_TWO_EXPERTS,
        "shared_expert_intermediate_size": 32,
    },
    # a global RoPE layer, then three windowed ones (its default pattern, one base); sinks
    "granite_swa": {**_LLAMA_LIKE, "num_hidden_layers": 4, "sliding_window": 64},
    "granitemoe_swa": {
        **_LLAMA_LIKE,
        "num_hidden_layers": 4,
        "sliding_window": 64,
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
    },
    # a global layer, then a local one (window 64); scores not scaled
    "gpt_neo": {
        "hidden_size": 32,
        "num_layers": 2,
        "num_heads": 4,
        "max_position_embeddings": 64,
        "attention_types": [[["global", "local"], 1]],
        "window_size": 64,
    },
    "gpt_bigcode": {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64},  # multi-query, as StarCoder
    "mpt": {"d_model": 32, "n_layers": 2, "n_heads": 4, "max_seq_len": 64, "expansion_ratio": 2},
}
"""A tiny configuration of each adapted family."""

HYBRID_FAMILIES = (
    "afmoe", "beam", "cohere2", "cohere2_moe", "cwm", "exaone4", "exaone_moe", "flint", "gemma3_text", "gemma4_text",
    "gpt_oss",
    "granite_swa", "granitemoe_swa", "kolibri1", "llama4_text", "mellum", "olmo3", "smollm3",
)  # fmt: skip
"""Families whose own encoding is ``hybrid`` in :data:`CONFIGS` (tests/pezoo/test_hf_rnope_swa.py,
test_hf_local_global.py, test_hf_llama4.py, test_hf_gpt_oss.py, test_hf_smollm3.py)."""

TABLE_FAMILIES = ("opt", "gpt2", "gpt_bigcode", "gpt_neo", "xglm", "biogpt")
"""Families whose own positions are a table added to the token embeddings (learned or sinusoidal)."""

ROPE_FAMILIES = [
    t for t in CONFIGS if t not in ("bloom", "mpt", "ministral3", *TABLE_FAMILIES, *HYBRID_FAMILIES)
]  # fmt: skip
"""Families whose own encoding is RoPE."""


def tiny(model_type: str, **overrides: Any) -> transformers.PreTrainedModel:
    """A tiny random causal LM of ``model_type``, in eval mode, without dropout."""
    config = transformers.AutoConfig.for_model(model_type, **{**_IDS, **CONFIGS[model_type], **overrides})
    for key in (
        "attention_dropout",
        "attn_pdrop",
        "resid_pdrop",
        "embd_pdrop",
        "hidden_dropout",
        "dropout",
        "residual_dropout",
        "embedding_dropout",
    ):
        if hasattr(config, key) and key not in overrides:
            setattr(config, key, 0.0)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of 12 tokens, the second left-padded by four, and their mask: longer than the
    windowed tests' window of 4, shared by them."""
    ids = torch.tensor([list(range(3, 15)), [PAD] * 4 + list(range(30, 38))])
    return ids, (ids != PAD).long()


def sharpened(model: transformers.PreTrainedModel) -> transformers.PreTrainedModel:
    """``model`` with every layer's q and k scaled up, so attention is sharp enough for a
    window, a chunk, a rotation or a NoPE layer to change the logits (a tiny random model's
    attention is nearly uniform): through the q/k norms' weights (+3) where the model norms
    them with weights (which would undo a scaled projection), else the projections (×4)."""
    with torch.no_grad():
        for layer in model.model.layers:
            attention = layer.self_attn
            norms = [getattr(attention, name, None) for name in ("q_norm", "k_norm")]
            if getattr(attention, "is_kv_shared_layer", False):  # Gemma 4's: no keys of its own, its q normed
                attention.q_norm.weight.add_(3.0)
            elif all(getattr(norm, "weight", None) is not None for norm in norms):
                for norm in norms:
                    norm.weight.add_(3.0)
            else:
                attention.q_proj.weight.mul_(4)
                attention.k_proj.weight.mul_(4)
    return model
