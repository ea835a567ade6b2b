"""The forward passes of a model :func:`pezoo.hf.use_encoding` adapted: the base model's (the
call's context built first, the ``embed`` hooks on the token embeddings), each decoder
layer's (its call handed on, so a checkpointed layer's recompute sees its own), the
``observe`` pre-hook on the residual stream, and ``generate`` (positions planned for the
prompt plus the new tokens; the dynamic KV cache only)."""

from __future__ import annotations

import inspect
import warnings
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from pezoo.hf import calls

if TYPE_CHECKING:
    from pezoo.hf.adapter import Adapter


def _get(module: Any, path: str) -> Any:
    for part in filter(None, path.split(".")):
        module = getattr(module, part)
    return module


def _observe(
    module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """Forward pre-hook of a decoder layer: the ``observe`` hook on the residual stream entering
    it, and the call's context handed to the layer as ``pezoo_call`` (:func:`_layer_forward`)."""
    adapter: Adapter = module._pezoo_adapter  # type: ignore[assignment]
    call = kwargs.get("pezoo_call", adapter.call)
    if call is None:
        return None
    x = args[0] if args else kwargs["hidden_states"]
    calls.observe(adapter.encoding, call, module._pezoo_layer, x)  # type: ignore[arg-type]
    return args, {**kwargs, "pezoo_call": call}


def _layer_forward(self: Any, *args: Any, pezoo_call: calls.Call | None = None, **kwargs: Any) -> Any:
    """A decoder layer's forward with ``adapter.call`` set to the call it belongs to.

    transformers checkpoints a layer's ``forward`` with the arguments it was given, and runs it
    again in the backward pass, when a later forward may have replaced ``adapter.call``: the
    ``pezoo_call`` argument (added by :func:`_observe`) makes that recompute see its own call,
    whether or not the model passes keyword arguments on to the attention (Bloom, Falcon and
    StableLM do not)."""
    adapter: Adapter = self._pezoo_adapter
    before = adapter.call
    if pezoo_call is not None:
        adapter.call = pezoo_call
    try:
        return _original(type(self)).forward(self, *args, **kwargs)
    finally:
        adapter.call = before  # a recompute leaves the current call as it found it


_SIGNATURES: dict[type, inspect.Signature] = {}

_DYNAMIC_ONLY = (
    "pezoo.hf keeps the encoding's state with the default dynamic KV cache; {} is not supported "
    "(leave cache_implementation unset)"
)


ADAPTED_MODULE = "pezoo.hf.auto"
"""Where the adapted classes live (:mod:`pezoo.hf.auto` makes them; it imports this module for
their forwards, so this one names it rather than importing it back)."""


def _original(cls: type) -> Any:
    """The transformers class an adapted class (``pezoo.hf.auto.Pezoo<Name>``) extends."""
    for parent in cls.__mro__:
        if parent.__module__ != ADAPTED_MODULE and parent is not cls:
            return parent
    raise TypeError(f"{cls} is not an adapted class")


def _base_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
    """The base model's forward with the call's context built first and the ``embed`` hooks
    applied to the token embeddings (passed on as ``inputs_embeds``). The forward of the adapted
    base model's class; everything it needs is on the module (``_pezoo_adapter``), so a deep
    copy of the model runs its own."""
    adapter: Adapter = self._pezoo_adapter
    original = _original(type(self)).forward
    signature = _SIGNATURES.setdefault(type(self), inspect.signature(original))
    if "past_key_values" in kwargs and "cache" in signature.parameters:
        kwargs["cache"] = kwargs.pop("past_key_values")
    bound = signature.bind(self, *args, **kwargs)
    arguments = dict(bound.arguments)
    arguments.pop("self", None)
    var_keyword = None  # a loop: dynamo in torch 2.7 breaks the graph at next(generator, default)
    for parameter in signature.parameters.values():
        if parameter.kind is parameter.VAR_KEYWORD:
            var_keyword = parameter.name
    extra = dict(arguments.pop(var_keyword, {})) if var_keyword else {}
    cache_name = "cache" if "cache" in signature.parameters else "past_key_values"
    ids, embeds = arguments.get("input_ids"), arguments.get("inputs_embeds")
    if embeds is None:
        if ids is None:
            raise ValueError("give input_ids or inputs_embeds")
        embeds = self.get_input_embeddings()(ids)  # (b, s, d)
    b, s = embeds.shape[:2]
    cache, use_cache = _call_cache(self, arguments.get(cache_name), arguments.get("use_cache"))
    n_cached = cache.get_seq_length() if cache is not None else 0
    if adapter.window is not None and n_cached + s > adapter.window:
        raise ValueError(
            f"this model attends through a sliding window of {adapter.window} tokens, which pezoo.hf does not "
            f"reproduce (its attention is global); got {n_cached + s} tokens"
        )
    mask = _key_mask(arguments.get("attention_mask"), b, n_cached + s, embeds.device)
    call = calls.build_call(
        adapter.encoding,
        _encoding_state(cache, n_cached),
        mask,
        n_cached,
        s,
        max(adapter.planned_width, adapter.next_width),
        kept=cache is not None,
        scale_hint=adapter.scale_hint,
        head_dim=adapter.head_dim,
    )
    call.probs = bool(
        arguments.get(
            "output_attentions", extra.get("output_attentions", getattr(self.config, "output_attentions", False))
        )
    )
    call.per_layer = bool(getattr(self, "gradient_checkpointing", False)) and self.training
    adapter.call = call
    if self.training and adapter.dropout > 0:
        _drop_dropout(adapter)
    if n_cached == 0:
        adapter.next_width = 0  # plan() holds for one sequence batch
    embeds = calls.embed(adapter.encoding, call, embeds, ids)
    if ids is not None and "per_layer_inputs" in signature.parameters and arguments.get("per_layer_inputs") is None:
        if getattr(self, "hidden_size_per_layer_input", 0):  # Gemma 4's per-layer embeddings, looked up by token:
            arguments["per_layer_inputs"] = self.get_per_layer_inputs(ids)  # the encoded embeddings do not reverse
    arguments.update(input_ids=None, inputs_embeds=embeds, use_cache=use_cache)
    if cache_name in signature.parameters:
        arguments[cache_name] = cache
    if var_keyword:
        extra["pezoo_call"] = call  # to the layers: a checkpointed layer's recompute gets its own call
    return original(self, **arguments, **extra)


def _call_cache(model: Any, cache: Any, use_cache: bool | None) -> tuple[Any, bool]:
    """(the call's KV cache or None, whether it keeps one): the caller's cache, which must be
    a ``DynamicCache``, or a new one where ``use_cache`` (default: the config's, when not
    training) asks for one.

    A new cache keeps every key on every layer (``DynamicCache()``, not one built from the
    config, whose sliding-window layers drop keys past the window): pezoo's attention reads all
    of them, its encoding masks what a layer does not see. A caller's cache with sliding
    layers is refused where the adapted model may attend past the window (a ``hybrid`` on
    Cohere 2, Gemma 3, OLMo 3 or Llama 4); elsewhere sequences past the window are refused
    anyway, so such a cache never drops a key."""
    from transformers.cache_utils import DynamicCache

    if cache is not None and type(cache) is not DynamicCache:
        raise ValueError(_DYNAMIC_ONLY.format(f"a {type(cache).__name__}"))
    if cache is not None and model._pezoo_adapter.window is None and _drops_keys(cache):
        raise ValueError(
            "this cache keeps only a sliding window of keys on some layers (a DynamicCache built from the model's "
            "config), and pezoo's attention reads every key: pass DynamicCache() with no config, or no cache"
        )
    if use_cache is None:
        use_cache = bool(getattr(model.config, "use_cache", False)) and not model.training
    if cache is None and use_cache:
        cache = DynamicCache()
    return cache, use_cache


def _drops_keys(cache: Any) -> bool:
    """Whether a ``DynamicCache`` has layers that keep only a window of keys."""
    from transformers.cache_utils import DynamicLayer

    return any(type(layer) is not DynamicLayer for layer in getattr(cache, "layers", ()))


def _key_mask(mask: Tensor | None, b: int, keys: int, device: torch.device) -> Tensor:
    """The call's (b, keys) attention mask over all keys, cached and new: the caller's
    2-D mask, or all true without one."""
    if mask is None:
        return torch.ones(b, keys, dtype=torch.bool, device=device)
    if mask.dim() != 2 or mask.shape[1] != keys:
        raise ValueError(
            f"pezoo.hf needs a 2-D attention mask (b, {keys}) over all keys; got {tuple(mask.shape)} "
            "(a static or compiled cache's 4-D mask is not supported: use the default dynamic cache)"
        )
    return mask


def _encoding_state(cache: Any, n_cached: int) -> dict[Any, Any]:
    """The encoding's state for this sequence batch: kept with its KV cache (a fresh one when
    the cache starts empty), or a throwaway one without a cache."""
    if cache is None:
        return {}
    if n_cached == 0 or not hasattr(cache, "_pezoo_state"):
        cache._pezoo_state = {}
    state: dict[Any, Any] = cache._pezoo_state
    return state


def _drop_dropout(adapter: Adapter) -> None:
    """Warn, once per model, that the attention-probability dropout is not applied."""
    warnings.warn(
        f"pezoo.hf does not apply the model's attention-probability dropout (p={adapter.dropout:g}): "
        "pezoo.attend has none; its other dropouts stay",
        stacklevel=4,
    )
    adapter.dropout = 0.0  # once per model


def _generate(self: Any, *args: Any, **kwargs: Any) -> Any:
    """``generate`` that plans positions for the prompt plus ``max_new_tokens``."""
    from transformers.cache_utils import DynamicCache

    adapter: Adapter = self._pezoo_adapter
    ids = kwargs.get("input_ids", args[0] if args else None)
    config = kwargs.get("generation_config") or self.generation_config
    implementation = kwargs.get("cache_implementation", getattr(config, "cache_implementation", None))
    if implementation not in (None, "dynamic"):
        raise ValueError(_DYNAMIC_ONLY.format(f"cache_implementation={implementation!r}"))
    takes_cache = "cache" in inspect.signature(_original(type(self)).forward).parameters  # transformers' new name
    cache_name = "cache" if takes_cache else "past_key_values"
    given = kwargs.get("cache", kwargs.get("past_key_values"))
    if given is not None and type(given) is not DynamicCache:
        raise ValueError(_DYNAMIC_ONLY.format(f"a {type(given).__name__}"))
    new = kwargs.get("max_new_tokens", getattr(config, "max_new_tokens", None))
    longest = kwargs.get("max_length", getattr(config, "max_length", None))
    beams = kwargs.get("num_beams", getattr(config, "num_beams", 1)) or 1
    if beams > 1 and calls.reads_tokens_in_order(adapter.encoding):
        raise ValueError(
            f"{adapter.encoding.name} keeps per-row state along the sequence, which beam search would have to "
            "reorder with the beams; pezoo.hf does not: generate greedily or by sampling"
        )
    width = 0
    if ids is not None:
        width = ids.shape[1] + new if new is not None else (longest or 0)
    before, adapter.planned_width = adapter.planned_width, max(width, adapter.planned_width)
    if given is None and kwargs.get("use_cache", getattr(config, "use_cache", True)) is not False:
        for name in ("cache", "past_key_values"):  # an explicit None under either name: one name only
            kwargs.pop(name, None)
        kwargs[cache_name] = DynamicCache()  # every key on every layer (see _call_cache)
    try:
        return _original(type(self)).generate(self, *args, **kwargs)
    finally:
        adapter.planned_width = before
