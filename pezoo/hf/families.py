"""The attention forwards pezoo puts into a Hugging Face model, one per model family, and the
attention function they call through transformers' registry (``AttentionInterface``).

Axis letters: b batch, s new tokens, j all keys, h heads, g key/value heads, e head dim.

Each forward projects q/k/v as the model's own does, applies the encoding's ``qk`` to the
*new* queries and keys (before they enter the KV cache, so a key is transformed once), updates
the cache, then calls the registered ``"pezoo"`` attention function, which adds the
encoding's structured biases and runs :func:`pezoo.attend`. The model's own RoPE
(``position_embeddings``) and attention mask are not used: positions and the key padding
come from the call's context (:mod:`pezoo.hf.calls`), which is also what makes a left-padded
batch right however transformers prepared its mask (it passes ``attention_mask=None`` to a
custom attention function on some paths).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from pezoo.attention import attend
from pezoo.hf import calls

if TYPE_CHECKING:
    from pezoo.hf import Adapter

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
) -> tuple[Tensor, None]:
    """transformers' attention-function signature: q (b, h, s, e'), k (b, h|g, j, e'), v (b, h|g, j, f)
    -> (out (b, s, h, f), None). ``attention_mask`` is ignored: the padding and causality come
    from the pezoo context the adapted model passes as ``pezoo_call`` (with ``pezoo_adapter``
    and ``pezoo_layer``). Attention-probability dropout is not applied (``pezoo.attend`` has
    none)."""
    adapter: Adapter | None = kwargs.get("pezoo_adapter")
    call: calls.Call | None = kwargs.get("pezoo_call")
    if adapter is None or call is None:
        raise ValueError(
            "the 'pezoo' attention function runs inside a model adapted with pezoo.hf.use_encoding only "
            "(it needs the call's positions and padding)"
        )
    h = query.shape[1]
    key, value = _repeat_heads(key, h), _repeat_heads(value, h)
    found = calls.biases(adapter.encoding, call, kwargs["pezoo_layer"], query, key)
    out, _ = attend(query, key, value, call.ctx, found, scale=scaling, backend=adapter.backend)  # (b, h, s, f)
    return out.transpose(1, 2).to(value.dtype), None


def _repeat_heads(x: Tensor, heads: int) -> Tensor:
    """(b, g, j, e) -> (b, h, j, e), each key/value head repeated for its h/g query heads (GQA)."""
    if x.shape[1] == heads:
        return x
    return x.repeat_interleave(heads // x.shape[1], dim=1)


def _attend(module: Any, q: Tensor, k: Tensor, v: Tensor, cache: Any) -> Tensor:
    """qk hook on the new q/k, cache update, registered attention: -> (b, s, h*f)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    adapter: Adapter = module._pezoo_adapter
    call, layer = adapter.call, module._pezoo_layer
    if call is None:
        raise ValueError("pezoo.hf: an attention layer ran outside the adapted model's forward")
    h = q.shape[1]
    k, v = _repeat_heads(k, h), _repeat_heads(v, h)  # (b, h, s, e): the encoding sees every head
    q, k = calls.qk(adapter.encoding, call, layer, q, k)
    if cache is not None:
        k, v = cache.update(k, v, module.layer_idx)
    fn = ALL_ATTENTION_FUNCTIONS[ATTENTION_NAME]
    out, _ = fn(
        module, q, k, v, None, scaling=module.scaling, pezoo_adapter=adapter, pezoo_call=call, pezoo_layer=layer
    )
    return out.reshape(*out.shape[:2], -1).contiguous()  # (b, s, h*f)


def llama_attention_forward(
    self: Any,
    hidden_states: Tensor,
    position_embeddings: Any = None,
    attention_mask: Tensor | None = None,
    cache: Any = None,
    past_key_values: Any = None,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """``LlamaAttention.forward`` (also Mistral's, Qwen2's) with pezoo's hooks in place of RoPE."""
    cache = cache if cache is not None else past_key_values
    shape = (*hidden_states.shape[:-1], -1, self.head_dim)
    q = self.q_proj(hidden_states).view(shape).transpose(1, 2)  # (b, h, s, e)
    k = self.k_proj(hidden_states).view(shape).transpose(1, 2)  # (b, g, s, e)
    v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
    if getattr(self, "q_norm", None) is not None:  # Qwen3-style per-head norms, where present
        q, k = self.q_norm(q), self.k_norm(k)
    out = _attend(self, q, k, v, cache)
    return self.o_proj(out), None


def gpt2_attention_forward(
    self: Any,
    hidden_states: Tensor,
    cache: Any = None,
    attention_mask: Tensor | None = None,
    encoder_hidden_states: Tensor | None = None,
    encoder_attention_mask: Tensor | None = None,
    output_attentions: bool | None = False,
    past_key_values: Any = None,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """``GPT2Attention.forward`` (self-attention) with pezoo's hooks."""
    if encoder_hidden_states is not None:
        raise ValueError("pezoo.hf adapts GPT-2's self-attention; cross-attention is not supported")
    cache = cache if cache is not None else past_key_values
    q, k, v = self.c_attn(hidden_states).split(self.split_size, dim=2)
    shape = (*hidden_states.shape[:-1], -1, self.head_dim)
    q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))  # (b, h, s, e)
    out = _attend(self, q, k, v, cache)
    return self.resid_dropout(self.c_proj(out)), None


class NoPositionTable(nn.Module):
    """Stands in for GPT-2's learned absolute table ``wpe`` when pezoo's encoding replaces it:
    zeros of the model width, no parameters (so none in the state dict)."""

    zero: Tensor

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width
        self.register_buffer("zero", torch.zeros(()), persistent=False)  # follows the model's dtype

    def forward(self, position_ids: Tensor) -> Tensor:
        return self.zero.expand(*position_ids.shape, self.width).to(position_ids.device)

    def extra_repr(self) -> str:
        return f"width={self.width} (GPT-2's learned positions, removed by pezoo.hf)"


_LLAMA = {"layers": "layers", "attention": "self_attn", "forward": llama_attention_forward, "own": "rope"}
FAMILIES: dict[str, dict[str, Any]] = {
    "llama": _LLAMA,
    "mistral": _LLAMA,
    "qwen2": _LLAMA,
    "gpt2": {"layers": "h", "attention": "attn", "forward": gpt2_attention_forward, "table": "wpe"},
}
"""The model families pezoo.hf adapts, by ``config.model_type``: where the decoder layers and
their attention are, the attention forward that replaces theirs, the model's own encoding
(``own``: reproduced by that pezoo name) and a learned position table to remove (``table``)."""


def sliding_window(config: Any) -> int | None:
    """The model's own sliding attention window, if it uses one (pezoo's attention is global)."""
    window = getattr(config, "sliding_window", None)
    if config.model_type == "qwen2" and not getattr(config, "use_sliding_window", False):
        return None
    return int(window) if window else None
