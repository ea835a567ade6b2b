"""How each adapted family's attention module computes what pezoo.hf keeps of it, read from the
module itself: its q, k, v (a :data:`Projection`, before the model's own RoPE, which pezoo's
encoding replaces: fused or separate projections, q/k norms, clipping, nanochat's reversed
rotation), its score scale, its gate on the attended values, and its output (an
:data:`Output`: the projection back to the residual stream, with the family's dropout or
norm). :mod:`pezoo.hf.families` names one of each per family.

Axis letters: b batch, s new tokens, d model width, h heads, g key/value heads, e head dim.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

Projection = Callable[[Any, Tensor], tuple[Tensor, Tensor | None, Tensor | None]]
"""(attention module, x (b, s, d)) -> q (b, h, s, e), k and v (b, h|g, s, e); k and v None on a
layer that reuses an earlier layer's (Gemma 4's KV sharing)."""

Output = Callable[[Any, Tensor, tuple[Any, ...]], Tensor]
"""(attention module, attended (b, s, h*e), the forward's positional args) -> the layer's output."""


def separate_projections(self: Any, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``q_proj``, ``k_proj``, ``v_proj`` of x (b, s, d), split into heads: (b, h|g, s, e)."""
    shape = (*x.shape[:-1], -1, self.head_dim)
    q, k, v = (p(x).view(shape).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
    return q, k, v


def _per_head_norms(self: Any, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Qwen3: RMS norms of each head's q and k, after the split."""
    q, k, v = separate_projections(self, x)
    return self.q_norm(q), self.k_norm(k), v


def _gemma4(self: Any, x: Tensor) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Gemma 4: RMS norms of each head's q and k (with a scale) and v (without one); a layer
    without ``v_proj`` (``attention_k_eq_v``, its full layers) takes k's projection as its
    values, before k's norm. Each layer splits by its own ``head_dim``. A layer that reuses an
    earlier layer's keys and values (``is_kv_shared_layer``: it has no k or v projection)
    gives None for them (:func:`pezoo.hf.families.attention_forward` takes the shared ones)."""
    shape = (*x.shape[:-1], -1, self.head_dim)
    q = self.q_norm(self.q_proj(x).view(shape))
    if getattr(self, "is_kv_shared_layer", False):
        return q.transpose(1, 2), None, None
    k = self.k_proj(x).view(shape)
    v = k if self.v_proj is None else self.v_proj(x).view(shape)
    return q.transpose(1, 2), self.k_norm(k).transpose(1, 2), self.v_norm(v).transpose(1, 2)


def _nanochat(self: Any, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """nanochat: a weightless RMS norm of each head's q and k, and a RoPE turning the other way
    (its ``rotate_half`` is ``(x2, -x1)``: a rotation by -θ). The norm is a function of a
    vector's length, which a rotation keeps, so it may come first (as here, before pezoo's
    ``qk``). The rotation by -θ is F R(θ) F with F negating the second half of each head, and
    F is orthogonal: <F R(θ) F q, F R(θ) F k> = <R(θ) F q, R(θ) F k>. So negating the second
    half of q and k, then rotating the usual way, gives the model's scores; any other
    encoding sees <F q, F k> = <q, k>, the model's scores without its RoPE."""
    q, k, v = separate_projections(self, x)
    q, k = self.q_norm(q), self.k_norm(k)
    half = q.shape[-1] // 2
    sign = torch.ones(q.shape[-1], dtype=q.dtype, device=q.device)
    sign[half:] = -1
    return q * sign, k * sign, v


def _cohere(self: Any, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Cohere (Command R): where ``use_qk_norm`` is set, a layer norm of q and k whose weight is
    one per head and feature, (h, e), applied to the split heads."""
    q, k, v = separate_projections(self, x)
    if self.use_qk_norm:
        q, k = (norm(t.transpose(1, 2)).transpose(1, 2) for norm, t in ((self.q_norm, q), (self.k_norm, k)))
    return q, k, v


def _optional_rms_head_norms(self: Any, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """GLM-4 MoE: RMS norms of each head's q and k where ``use_qk_norm`` is set."""
    q, k, v = separate_projections(self, x)
    if self.use_qk_norm:
        q, k = self.q_norm(q), self.k_norm(k)
    return q, k, v


def _optional_head_norms(self: Any, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Phi, StableLM: per-head layer norms of q and k where ``qk_layernorm`` is set."""
    q, k, v = separate_projections(self, x)
    if self.qk_layernorm:
        q, k = self.q_layernorm(q), self.k_layernorm(k)
    return q, k, v


def _clipped(self: Any, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """OLMo: q, k, v clamped to ±``clip_qkv`` before the split."""
    clip = self.config.clip_qkv
    shape = (*x.shape[:-1], -1, self.head_dim)
    out = []
    for p in (self.q_proj, self.k_proj, self.v_proj):
        y = p(x)
        if clip is not None:
            y = y.clamp(min=-clip, max=clip)
        out.append(y.view(shape).transpose(1, 2))
    return out[0], out[1], out[2]


def _full_width_norms(self: Any, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """OLMo2: RMS norms of q and k over all heads, before the split."""
    shape = (*x.shape[:-1], -1, self.head_dim)
    q, k, v = self.q_norm(self.q_proj(x)), self.k_norm(self.k_proj(x)), self.v_proj(x)
    return q.view(shape).transpose(1, 2), k.view(shape).transpose(1, 2), v.view(shape).transpose(1, 2)


def _phi3(self: Any, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Phi3: one ``qkv_proj``, q's heads then k's then v's."""
    qkv = self.qkv_proj(x)
    nq, nk = self.config.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
    shape = (*x.shape[:-1], -1, self.head_dim)
    parts = (qkv[..., :nq], qkv[..., nq : nq + nk], qkv[..., nq + nk :])
    q, k, v = (t.reshape(shape).transpose(1, 2) for t in parts)
    return q, k, v


def _gpt_neox(self: Any, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """GPT-NeoX: one ``query_key_value``, each head's q, k, v side by side."""
    qkv = self.query_key_value(x).view(*x.shape[:-1], -1, 3 * self.head_size).transpose(1, 2)  # (b, h, s, 3e)
    q, k, v = qkv.chunk(3, dim=-1)
    return q, k, v


def _gpt2(self: Any, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """GPT-2: one ``c_attn``, q's heads then k's then v's."""
    shape = (*x.shape[:-1], -1, self.head_dim)
    q, k, v = (t.view(shape).transpose(1, 2) for t in self.c_attn(x).split(self.split_size, dim=2))
    return q, k, v


def _gpt_bigcode(self: Any, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """GPTBigCode (StarCoder, SantaCoder): one ``c_attn``; multi-query, q's heads then one k and
    one v head, or multi-head, each head's q, k, v side by side."""
    qkv = self.c_attn(x)
    if self.multi_query:
        q, k, v = qkv.split((self.embed_dim, self.kv_dim, self.kv_dim), dim=-1)
        shape = (*x.shape[:-1], -1, self.head_dim)
        return q.view(shape).transpose(1, 2), k.unsqueeze(1), v.unsqueeze(1)
    q, k, v = qkv.view(*x.shape[:-1], self.num_heads, 3 * self.head_dim).transpose(1, 2).split(self.head_dim, dim=-1)
    return q, k, v


def _mpt(self: Any, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """MPT: one ``Wqkv``, q's heads then k's then v's, clamped to ±``clip_qkv`` where set."""
    qkv = self.Wqkv(x)
    if self.clip_qkv:
        qkv = qkv.clamp(min=-self.clip_qkv, max=self.clip_qkv)
    shape = (*x.shape[:-1], -1, self.head_dim)
    q, k, v = (t.view(shape).transpose(1, 2) for t in qkv.chunk(3, dim=-1))
    return q, k, v


def _dbrx(self: Any, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """DBRX: one ``Wqkv``, clamped to ±``clip_qkv`` where set: q's heads, then the key/value
    heads' k, then their v."""
    qkv = self.Wqkv(x)
    if self.clip_qkv is not None:
        qkv = qkv.clamp(min=-self.clip_qkv, max=self.clip_qkv)
    kv = self.num_key_value_heads * self.head_dim
    shape = (*x.shape[:-1], -1, self.head_dim)
    q, k, v = (t.view(shape).transpose(1, 2) for t in qkv.split([self.hidden_size, kv, kv], dim=-1))
    return q, k, v


def _persimmon(self: Any, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Persimmon: its own split of ``query_key_value`` (each head's q, k, v side by side), and
    layer norms of each head's q and k where ``qk_layernorm`` is set."""
    q, k, v = self._split_heads(self.query_key_value(x))  # (b, s, h, e)
    if self.qk_layernorm:
        q, k = self.q_layernorm(q), self.k_layernorm(k)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


def _unscaled(self: Any) -> float:
    """GPT-Neo's score scale: none (its scores are q·k, not divided by √e)."""
    return 1.0


def _codegen(self: Any, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """CodeGen: one ``qkv_proj`` interleaved over the 4 model-parallel shards it was trained
    with (``mp_num``): each shard's q, v, k side by side, the heads split after."""
    local = self.embed_dim // self.mp_num
    q, v, k = self.qkv_proj(x).view(*x.shape[:-1], -1, 3 * local).split(local, dim=-1)
    shape = (*x.shape[:-1], -1, self.head_dim)
    q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
    return q, k, v


def _softmax_scale(self: Any) -> float:
    """MPT's score scale, ``softmax_scale`` (1/√e unless its config sets one)."""
    return float(self.softmax_scale)


def _bloom(self: Any, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Bloom: its own split of ``query_key_value`` (each head's q, k, v side by side)."""
    q, k, v = self._reshape(self.query_key_value(x))
    return q, k, v


def _falcon(self: Any, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Falcon: its own split of ``query_key_value`` (multi-query, grouped or plain)."""
    q, k, v = self._split_heads(self.query_key_value(x))  # (b, s, h|g, e)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


def _o_proj(self: Any, out: Tensor, args: tuple[Any, ...]) -> Tensor:
    return self.o_proj(out)


def _dense(self: Any, out: Tensor, args: tuple[Any, ...]) -> Tensor:
    return self.dense(out)


def _out_proj(self: Any, out: Tensor, args: tuple[Any, ...]) -> Tensor:
    return self.out_proj(out)


def _sigmoid_gate(self: Any, x: Tensor) -> Tensor:
    """AFMoE's output gate: σ(``gate_proj`` x), one per attended feature (b, s, h*e)."""
    return torch.sigmoid(self.gate_proj(x))


def _beam_gate(self: Any, x: Tensor) -> Tensor:
    """Beam's output gate: σ(``gate_proj`` x + ``gate_bias``), one bias per head added to each
    of its features (b, s, h*e)."""
    gate = self.gate_proj(x)
    heads = self.gate_bias.shape[0]
    gate = gate.view(*gate.shape[:-1], heads, -1) + self.gate_bias[:, None]  # (b, s, h, e)
    return torch.sigmoid(gate).flatten(-2)


def _softplus_gate(self: Any, x: Tensor) -> Tensor:
    """Laguna's output gate: softplus(``g_proj`` x) in fp32, one per head (``gating`` True or
    ``"per-head"``, spread over the head's features) or one per attended feature (b, s, h*e)."""
    gate = nn.functional.softplus(self.g_proj(x).float()).to(x.dtype)
    return gate.repeat_interleave(self.head_dim, dim=-1) if self.gate_per_head else gate


def _bitnet_output(self: Any, out: Tensor, args: tuple[Any, ...]) -> Tensor:
    """BitNet: an RMS norm of the attended values before ``o_proj``."""
    return self.o_proj(self.attn_sub_norm(out))


def _gptj_output(self: Any, out: Tensor, args: tuple[Any, ...]) -> Tensor:
    return self.resid_dropout(self.out_proj(out))


def _gpt2_output(self: Any, out: Tensor, args: tuple[Any, ...]) -> Tensor:
    return self.resid_dropout(self.c_proj(out))


def _starcoder2_output(self: Any, out: Tensor, args: tuple[Any, ...]) -> Tensor:
    return nn.functional.dropout(self.o_proj(out), p=self.residual_dropout, training=self.training)


def _bloom_output(self: Any, out: Tensor, args: tuple[Any, ...]) -> Tensor:
    """Bloom's attention adds the residual (its second positional argument) itself."""
    from transformers.models.bloom.modeling_bloom import dropout_add

    return dropout_add(self.dense(out), args[0], self.hidden_dropout, self.training)


def _scaling(self: Any) -> float:
    """The model's own score scale: ``scaling`` (Granite's ``attention_multiplier``, Gemma2's
    ``query_pre_attn_scalar``), or Bloom's and Falcon's ``inv_norm_factor``."""
    scale = getattr(self, "scaling", None)
    return float(scale if scale is not None else self.inv_norm_factor)


def _llama4(self: Any, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Llama 4: separate projections, and on its RoPE layers an L2 norm of each head's q and k
    (``use_qk_norm``). The model norms after its rotation; a rotation keeps the norm, so
    norming first (before pezoo's ``qk``) is the same up to rounding."""
    q, k, v = separate_projections(self, x)
    if hasattr(self, "qk_norm"):
        q, k = self.qk_norm(q), self.qk_norm(k)
    return q, k, v
