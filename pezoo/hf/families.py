"""The model families pezoo.hf adapts, one table entry each, and the attention forward they share.

Axis letters: b batch, s new tokens, j all keys, h heads, g key/value heads, e head dim.

An entry says where a family keeps its decoder layers and their attention, how its attention
projects q, k, v (:data:`Family.project`: before its own RoPE, which pezoo's encoding replaces)
and how it turns the attention's output into the layer's (:data:`Family.output`), what its own
position encoding is, and which configurations it refuses (by name and reason). Adding a family
is one entry; the projections, scales, gates and outputs it names live in
:mod:`pezoo.hf.layouts` (most reuse ``separate_projections`` and ``o_proj``), what its config
says of its own encoding in :mod:`pezoo.hf.own`.

The shared forward (:func:`attention_forward`) projects q/k/v as the model does, applies the
encoding's ``qk`` to the *new* queries and keys (before they enter the KV cache, so a key is
transformed once), updates the cache, then calls the registered ``"pezoo"`` attention
function, which adds the encoding's structured biases and runs :func:`pezoo.attend`. The
model's own RoPE (``position_embeddings``), ALiBi tensor and attention mask are not used:
positions and the key padding come from the call's context (:mod:`pezoo.hf.calls`), which is
also what makes a left-padded batch right however transformers prepared its mask (it passes
``attention_mask=None`` to a custom attention function on some paths).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from pezoo.attention import attend, repeat_heads
from pezoo.backends.auto import pick_backend
from pezoo.biases import AttentionBias, DenseBias, RelativeFunctionBias
from pezoo.context import AttentionContext
from pezoo.hf import calls
from pezoo.hf.layouts import (
    Output,
    Projection,
    _beam_gate,
    _bitnet_output,
    _bloom,
    _bloom_output,
    _clipped,
    _codegen,
    _cohere,
    _dbrx,
    _dense,
    _falcon,
    _full_width_norms,
    _gemma4,
    _gpt2,
    _gpt2_output,
    _gpt_bigcode,
    _gpt_neox,
    _gptj_output,
    _llama4,
    _mpt,
    _nanochat,
    _o_proj,
    _optional_head_norms,
    _optional_rms_head_norms,
    _out_proj,
    _per_head_norms,
    _persimmon,
    _phi3,
    _scaling,
    _sigmoid_gate,
    _softmax_scale,
    _softplus_gate,
    _starcoder2_output,
    _unscaled,
    separate_projections,
)
from pezoo.hf.own import (
    _beam_hybrid,
    _bidirectional_refusal,
    _cohere2_moe_hybrid,
    _exaone4_options,
    _exaone4_own,
    _gemma2_softcap,
    _gemma4_hybrid,
    _granite_swa_hybrid,
    _laguna_options,
    _laguna_own,
    _laguna_refusal,
    _llama4_hybrid,
    _local_global_hybrid,
    _ministral3_options,
    _ministral3_own,
    _opt_refusal,
    _rnope_swa,
    _smollm3_options,
    _smollm3_own,
)
from pezoo.scores import Normaliser, ScoreTransform, Sinks

if TYPE_CHECKING:
    from pezoo.hf.adapter import Adapter

ATTENTION_NAME = "pezoo"
"""The key of pezoo's attention function in transformers' ``AttentionInterface``."""


def pezoo_attention(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """transformers' attention-function signature: q (b, h, s, e'), k (b, h|g, j, e'), v (b, h|g, j, f)
    -> (out (b, s, h, f), probs (b, h, s, j) when the call asks for them, else None).
    ``attention_mask`` is ignored: the padding and causality come from the pezoo context the
    adapted model passes as ``pezoo_call`` (with ``pezoo_adapter`` and ``pezoo_layer``).
    Attention-probability dropout is not applied (``pezoo.attend`` has none; ``use_encoding``
    warns when the model's is on)."""
    adapter: Adapter | None = kwargs.get("pezoo_adapter")
    call: calls.Call | None = kwargs.get("pezoo_call")
    if adapter is None or call is None:
        raise ValueError(
            "the 'pezoo' attention function runs inside a model adapted with pezoo.hf.use_encoding only "
            "(it needs the call's positions and padding)"
        )
    h = query.shape[1]
    key, value = repeat_heads(key, h), repeat_heads(value, h)
    layer = kwargs["pezoo_layer"]
    found = calls.biases(adapter.encoding, call, layer, query, key)
    transform = score_transform(adapter, call, layer)
    normaliser = _normaliser(module, adapter, call, layer)
    backend = "eager" if call.probs else adapter.backend  # only eager returns probabilities
    if backend == "auto":
        backend = pick_backend(query, call.ctx, found, transform=transform, normaliser=normaliser)
    if backend in ("eager", "sdpa"):
        found = [causal_dense(bias, call.ctx, h) for bias in found]
    out, probs = attend(
        query,
        key,
        value,
        call.ctx,
        found,
        scale=scaling,
        backend=backend,
        return_probs=call.probs,
        transform=transform,
        normaliser=normaliser,
    )  # (b, h, s, f)
    return out.transpose(1, 2).to(value.dtype), probs


def score_transform(adapter: Adapter, call: calls.Call, layer: int) -> ScoreTransform | None:
    """The layer's score transform: the model's own logit soft-capping (Gemma 2), or the
    encoding's (DAPE); a ValueError where both would have to compose."""
    own = adapter.encoding.score_transform(layer, call.ctx)
    if adapter.softcap is None:
        return own
    if own is not None:
        raise ValueError(
            f"this model soft-caps its attention logits (cap {adapter.softcap.cap:g}) and {adapter.encoding.name} "
            "transforms the scores too; pezoo.hf does not compose the two"
        )
    return adapter.softcap


def _normaliser(module: nn.Module, adapter: Adapter, call: calls.Call, layer: int) -> Normaliser | None:
    """The layer's normaliser: the model's own attention sinks (gpt-oss: a logit per head in
    each row's denominator, :class:`pezoo.scores.Sinks`), or the encoding's (stick-breaking);
    a ValueError where both would have to compose."""
    own = adapter.encoding.normaliser(layer, call.ctx)
    attribute = FAMILIES[module._pezoo_family].sinks  # type: ignore[index]
    if attribute is None:
        return own
    if own is not None:
        raise ValueError(
            f"this model's attention has sinks (a learned logit per head in softmax's denominator) and "
            f"{adapter.encoding.name} replaces softmax; pezoo.hf does not compose the two"
        )
    return Sinks(getattr(module, attribute))


DENSE_CHUNK_PAIRS = 1 << 18
"""Query-key pairs per block of :func:`causal_dense`: FIRE's MLP holds (pairs x its width)
hidden values, 32 MiB at 2^18 pairs and width 32, instead of 512 MiB for all 2048 x 2048
pairs at once."""


def causal_dense(bias: AttentionBias, ctx: AttentionContext, n_heads: int) -> AttentionBias:
    """A per-layer ``RelativeFunctionBias`` (FIRE's MLP) as the dense bias a materialising
    backend would build, evaluated on the causally visible pairs only, by blocks of query rows
    (about ``DENSE_CHUNK_PAIRS`` pairs each): the block's last row, query a of this call, sees
    keys up to ``n_cached + a``; keys past that, which the causal mask sets to -inf whatever
    they hold, are left 0. About half the pairs at length. Other biases, and a memoised one (T5's table, built
    once per call for every layer), are returned as they are."""
    if not isinstance(bias, RelativeFunctionBias) or bias.dense_fn is None or bias.memo is not None or not ctx.causal:
        return bias
    bias.check_heads(n_heads)
    q = ctx.q_pos.to(torch.float32)[:, None, :, None]  # (b|1, 1, i, 1)
    k = ctx.k_pos.to(torch.float32)[:, None, None, :]  # (b|1, 1, 1, j)
    i, j = q.shape[2], k.shape[3]
    offset = j - i  # keys already cached
    rows = max(1, DENSE_CHUNK_PAIRS // max(1, j))
    out: Tensor | None = None
    for r in range(0, i, rows):
        seen = min(j, offset + r + rows)  # the last query row of the block sees keys [0, seen)
        part = bias.dense_fn(q[:, :, r : r + rows], k[..., :seen], *bias.params)  # (b|1, h, rows, seen)
        if out is None:
            out = part.new_zeros(part.shape[0], part.shape[1], i, j)
        out[:, :, r : r + rows, :seen] = part
    assert out is not None
    return DenseBias(out)


def attention_forward(self: Any, hidden_states: Tensor, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor | None]:
    """Every adapted family's attention forward: the family's projections, pezoo's ``qk`` on
    the new q/k, the KV cache, the registered attention, the family's output."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    adapter: Adapter = self._pezoo_adapter
    family = FAMILIES[self._pezoo_family]
    call: calls.Call | None = kwargs.get("pezoo_call") or adapter.call  # the kwarg survives a checkpoint's recompute
    if call is None:
        raise ValueError("pezoo.hf: an attention layer ran outside the adapted model's forward")
    if kwargs.get("encoder_hidden_states") is not None:
        raise ValueError("pezoo.hf adapts self-attention; cross-attention is not supported")
    cache = None  # a loop: dynamo in torch 2.7 breaks the graph at next(generator, default)
    for name in ("cache", "past_key_values", "layer_past"):
        if kwargs.get(name) is not None:
            cache = kwargs[name]
            break
    layer = self._pezoo_layer
    call.start_layer()
    shared = kwargs.get("shared_kv_states")  # Gemma 4: later layers reuse an earlier one's keys and values
    q, k, v = family.project(self, hidden_states)  # (b, h, s, e), (b, g, s, e), (b, g, s, e); k, v None: reused
    h = q.shape[1]
    if k is None or v is None:  # the keys and values (encoded, cached) of the last layer of its kind that has its own
        if shared is None or self.layer_type not in shared:
            raise ValueError("pezoo.hf: a layer that reuses another's keys and values ran without them")
        k, v = shared[self.layer_type]  # (b, h, j, e)
        call = call.last(q.shape[2])  # in a prompt, transformers passes these layers only the tokens it keeps
        q, _ = calls.qk(adapter.encoding, call, layer, q, q)  # the queries as this layer's encoding takes them
    else:
        k, v = repeat_heads(k, h), repeat_heads(v, h)  # (b, h, s, e): the encoding sees every head
        q, k = calls.qk(adapter.encoding, call, layer, q, k)
        if cache is not None:
            k, v = cache.update(k, v, getattr(self, "layer_idx", layer))  # GPT-Neo's has none: its place in the stack
        if shared is not None and getattr(self, "store_full_length_kv", False):
            shared[self.layer_type] = k, v
    fn = ALL_ATTENTION_FUNCTIONS[ATTENTION_NAME]
    scale = family.scale(self)
    out, probs = fn(self, q, k, v, None, scaling=scale, pezoo_adapter=adapter, pezoo_call=call, pezoo_layer=layer)
    out = out.reshape(*out.shape[:2], -1).contiguous()  # (b, s, h*f)
    if family.gate is not None:
        out = out * family.gate(self, hidden_states)
    return family.output(self, out, args), probs


@dataclass(frozen=True)
class Family:
    """How pezoo.hf adapts one ``config.model_type``.

    Attributes:
        layers: the decoder layers' ModuleList, a dotted path from the core model.
        attention: the attention submodule of each layer, a dotted path from the layer.
        project: the attention's q/k/v projections (:data:`Projection`).
        output: the attention's output from the attended values (:data:`Output`).
        own: the model's own position encoding, as a pezoo name: ``"rope"`` (reproduced from
            the model's rotary embedding by ``use_encoding(model, "rope")``), ``"hybrid"``
            (Cohere 2's RoPE windowed layers and NoPE global ones, Llama 4's chunked ones,
            Gemma 3's and OLMo 3's windowed and global RoPE layers, reproduced from the rotary
            embedding and ``own_options``), ``"alibi"``, or None
            (GPT-2's and OPT's learned tables); or, where the config decides it (EXAONE 4,
            SmolLM3, Ministral 3: ``"ssmax:rope"`` with its temperature), a function of the config
            giving the name (:meth:`own_encoding`).
        own_options: the own encoding's options read from the config beyond RoPE's (Cohere 2:
            its layer pattern and window; Llama 4: pattern, chunk and temperature; Gemma 3 and
            OLMo 3: pattern, window and each layer kind's RoPE). Where the own encoding is
            ``"hybrid"``, the model's local attention belongs to it: the window comes with
            the encoding, so an adapted model running any ``hybrid`` is not refused past it
            (another encoding is).
        rope_layout: the own RoPE's feature layout (``"half"``: rotate-half; GPT-J interleaves).
        applies_partial_rotary: whether the model rotates only ``partial_rotary_factor`` of each
            head (GPT-NeoX, Phi, StableLM, Phi3 do; Llama and its kin ignore the key).
        table: a learned absolute position table to remove, a dotted path from the core model.
        core: the module whose forward embeds the tokens and runs the layers, a dotted path from
            the base model ("": the base model itself; OPT's causal LM calls its ``decoder``).
        scale: the attention's score scale, read from the module.
        refuse: a configuration this family cannot be adapted in, with the reason (or None).
        softcap: the cap of the model's attention-logit soft-capping, from its config (Gemma 2's
            ``attn_logit_softcapping``), or None: pezoo applies it as a score transform
            (:class:`pezoo.scores.SoftCap`), before the encoding's biases and the masks.
        sinks: the attention module's attribute holding its sink logits, one per head (gpt-oss's
            ``sinks``), or None: pezoo normalises with them (:class:`pezoo.scores.Sinks`).
        gate: the model's gate on the attended values, a function of the attention's input
            (AFMoE's σ(``gate_proj`` x), Beam's with a bias per head; (b, s, h*e)) multiplying them
            before ``output``; or None.
    """

    layers: str
    attention: str
    project: Projection = separate_projections
    output: Output = _o_proj
    own: str | Callable[[Any], str | None] | None = "rope"
    rope_layout: str = "half"
    applies_partial_rotary: bool = False
    table: str | None = None
    scale: Callable[[Any], float] = _scaling
    refuse: Callable[[Any], str | None] = field(default=lambda config: None)
    core: str = ""
    softcap: Callable[[Any], float | None] = field(default=lambda config: None)
    sinks: str | None = None
    gate: Callable[[Any, Tensor], Tensor] | None = None
    own_options: Callable[[Any], dict[str, Any]] = field(default=lambda config: {})

    def own_encoding(self, config: Any) -> str | None:
        """The pezoo name of the own encoding of a model with ``config`` (``own``)."""
        return self.own(config) if callable(self.own) else self.own


_LLAMA = Family("layers", "self_attn")
FAMILIES: dict[str, Family] = {
    "llama": _LLAMA,
    "mistral": _LLAMA,
    "mixtral": _LLAMA,
    "qwen2": _LLAMA,
    "granite": _LLAMA,
    "gemma": _LLAMA,
    "gemma2": Family("layers", "self_attn", softcap=_gemma2_softcap),
    "cohere2": Family("layers", "self_attn", own="hybrid", rope_layout="interleaved", own_options=_rnope_swa),
    "cohere2_moe": Family(
        "layers", "self_attn", own="hybrid", rope_layout="interleaved", own_options=_cohere2_moe_hybrid
    ),
    "exaone4": Family("layers", "self_attn", _per_head_norms, own=_exaone4_own, own_options=_exaone4_options),
    "exaone_moe": Family("layers", "self_attn", _per_head_norms, own=_exaone4_own, own_options=_exaone4_options),
    "olmo3": Family("layers", "self_attn", _full_width_norms, own="hybrid", own_options=_local_global_hybrid),
    "gemma3_text": Family(
        "layers",
        "self_attn",
        _per_head_norms,
        own="hybrid",
        softcap=_gemma2_softcap,
        own_options=_local_global_hybrid,
        refuse=_bidirectional_refusal,
    ),
    # Gemma 4: Gemma 3's local and global layers, the global ones with heads of their own width and p-RoPE
    # (transformers' proportional type), q, k and v normed per head, keys as values on the global layers
    "gemma4_text": Family(
        "layers", "self_attn", _gemma4, own="hybrid", own_options=_gemma4_hybrid, refuse=_bidirectional_refusal
    ),
    "llama4_text": Family(
        "layers",
        "self_attn",
        _llama4,
        own="hybrid",
        rope_layout="interleaved",
        own_options=_llama4_hybrid,
        core="model",  # its base_model_prefix names the multimodal model's text part, so base_model is the LM
    ),
    # Meta's CWM: RoPE (Llama 3-scaled) on every layer, three windowed layers to a global one
    "cwm": Family("layers", "self_attn", own="hybrid", own_options=_local_global_hybrid),
    # Kolibri 1: EXAONE 4's reading (RNoPE-SWA with a window, RoPE everywhere without), q/k normed per head
    "kolibri1": Family("layers", "self_attn", _per_head_norms, own=_exaone4_own, own_options=_exaone4_options),
    # Mellum: Gemma 3's local/global layers (a RoPE per kind), q and k normed per head
    "mellum": Family("layers", "self_attn", _per_head_norms, own="hybrid", own_options=_local_global_hybrid),
    # AFMoE (Arcee's Trinity): RNoPE-SWA, q and k normed per head, a sigmoid gate on the attended values
    "afmoe": Family("layers", "self_attn", _per_head_norms, own="hybrid", own_options=_rnope_swa, gate=_sigmoid_gate),
    # Laguna (Poolside): RoPE of its own per layer kind (half of each head on the global layers), windowed
    # layers mixed in by layer_types; q and k normed per head; a softplus gate per head or per feature
    "laguna": Family(
        "layers",
        "self_attn",
        _per_head_norms,
        own=_laguna_own,
        own_options=_laguna_options,
        gate=_softplus_gate,
        refuse=_laguna_refusal,
    ),
    # Beam (Reflection AI): RNoPE-SWA, its NoPE layers' queries under a temperature, q and k normed per head,
    # a sigmoid gate with a bias per head on the attended values
    "beam": Family("layers", "self_attn", _per_head_norms, own="hybrid", own_options=_beam_hybrid, gate=_beam_gate),
    # Flint: RNoPE-SWA, q and k normed per head, attention sinks
    "flint": Family("layers", "self_attn", _per_head_norms, own="hybrid", own_options=_rnope_swa, sinks="sinks"),
    # Granite SWA: windowed and global layers, each with its RoPE base or none, and attention sinks
    "granite_swa": Family("layers", "self_attn", own="hybrid", own_options=_granite_swa_hybrid, sinks="sinks"),
    "granitemoe_swa": Family("layers", "self_attn", own="hybrid", own_options=_granite_swa_hybrid, sinks="sinks"),
    "gpt_oss": Family("layers", "self_attn", own="hybrid", own_options=_local_global_hybrid, sinks="sinks"),
    "qwen3": Family("layers", "self_attn", _per_head_norms),
    "qwen3_moe": Family("layers", "self_attn", _per_head_norms),
    "qwen2_moe": _LLAMA,
    "olmoe": Family("layers", "self_attn", _full_width_norms),
    "granitemoe": _LLAMA,
    "phimoe": _LLAMA,
    "arcee": _LLAMA,
    "seed_oss": _LLAMA,
    "apertus": Family("layers", "self_attn", _per_head_norms),
    "smollm3": Family("layers", "self_attn", own=_smollm3_own, own_options=_smollm3_options),
    "cohere": Family("layers", "self_attn", _cohere, rope_layout="interleaved"),
    "ernie4_5": Family("layers", "self_attn", rope_layout="interleaved"),
    "ernie4_5_moe": Family("layers", "self_attn", rope_layout="interleaved"),
    "glm": Family("layers", "self_attn", applies_partial_rotary=True, rope_layout="interleaved"),
    "glm4": Family("layers", "self_attn", applies_partial_rotary=True, rope_layout="interleaved"),
    "nemotron": Family("layers", "self_attn", applies_partial_rotary=True),
    "glm4_moe": Family("layers", "self_attn", _optional_rms_head_norms, applies_partial_rotary=True),
    "ministral": _LLAMA,
    # Ministral 3: RoPE (YaRN in its checkpoints), queries scaled by a temperature of the position
    "ministral3": Family("layers", "self_attn", own=_ministral3_own, own_options=_ministral3_options),
    "bitnet": Family("layers", "self_attn", output=_bitnet_output),
    "nanochat": Family("layers", "self_attn", _nanochat),
    "aria_text": _LLAMA,
    "granitemoeshared": _LLAMA,
    "hyperclovax": _LLAMA,
    "jais2": _LLAMA,
    "solar_open": _LLAMA,
    "apertus1p5_text": Family("layers", "self_attn", _per_head_norms),
    "hy_v3": Family("layers", "self_attn", _per_head_norms),
    "flex_olmo": Family("layers", "self_attn", _full_width_norms),
    "minimax_m2": Family("layers", "self_attn", _full_width_norms, applies_partial_rotary=True),
    "vaultgemma": Family("layers", "self_attn", softcap=_gemma2_softcap),
    "helium": Family("layers", "self_attn", rope_layout="interleaved"),
    "olmo": Family("layers", "self_attn", _clipped),
    "olmo2": Family("layers", "self_attn", _full_width_norms),
    "starcoder2": Family("layers", "self_attn", output=_starcoder2_output),
    "phi": Family("layers", "self_attn", _optional_head_norms, _dense, applies_partial_rotary=True),
    "stablelm": Family("layers", "self_attn", _optional_head_norms, applies_partial_rotary=True),
    "phi3": Family("layers", "self_attn", _phi3, applies_partial_rotary=True),
    "dbrx": Family("blocks", "norm_attn_norm.attn", _dbrx, _out_proj),
    "persimmon": Family("layers", "self_attn", _persimmon, _dense, applies_partial_rotary=True),
    "gpt_neox": Family("layers", "attention", _gpt_neox, _dense, applies_partial_rotary=True),
    "gptj": Family("h", "attn", output=_gptj_output, rope_layout="interleaved"),
    "codegen": Family("h", "attn", _codegen, _gptj_output, rope_layout="interleaved"),
    "falcon": Family("h", "self_attention", _falcon, _dense),
    "bloom": Family("h", "self_attention", _bloom, _bloom_output, own="alibi"),
    # MPT's ALiBi (its slopes Press et al.'s for any head count; a bias by key index, equal
    # under softmax to the bias by distance) is pezoo's "alibi"
    "mpt": Family("blocks", "attn", _mpt, _out_proj, own="alibi", scale=_softmax_scale),
    "opt": Family(
        "layers", "self_attn", output=_out_proj, own=None, table="embed_positions", refuse=_opt_refusal, core="decoder"
    ),
    # XGLM: fairseq's sinusoidal table (a module added to the scaled token embeddings), removed
    "xglm": Family("layers", "self_attn", output=_out_proj, own=None, table="embed_positions"),
    "biogpt": Family("layers", "self_attn", output=_out_proj, own=None, table="embed_positions"),
    "gpt2": Family("h", "attn", _gpt2, _gpt2_output, own=None, table="wpe"),
    # GPT-Neo: a learned table, local (windowed) and global layers, scores not scaled
    "gpt_neo": Family("h", "attn.attention", output=_gptj_output, own=None, table="wpe", scale=_unscaled),
    "gpt_bigcode": Family("h", "attn", _gpt_bigcode, _gpt2_output, own=None, table="wpe"),
}
"""The model families pezoo.hf adapts, by ``config.model_type``."""


class NoPositionTable(nn.Module):
    """Stands in for a learned absolute table (GPT-2's ``wpe``, OPT's ``embed_positions``) when
    pezoo's encoding replaces it: a zero the model adds to its token embeddings, no parameters
    or buffers (so nothing in the state dict, nothing a loader leaves uninitialised). A 0-dim
    CPU float32 zero adds to embeddings of any dtype and device without changing them."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width

    def forward(self, *args: Any, **kwargs: Any) -> Tensor:
        return torch.zeros(())

    def extra_repr(self) -> str:
        return f"width={self.width} (the model's learned positions, removed by pezoo.hf)"


def dropout_probability(module: Any, config: Any) -> float:
    """The model's attention-probability dropout p (0 when off)."""
    for name in ("attention_dropout", "attn_dropout", "attn_dropout_p", "dropout"):
        value = getattr(module, name, None)
        if isinstance(value, nn.Dropout):
            return float(value.p)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return float(getattr(config, "attention_dropout", 0.0) or 0.0)
