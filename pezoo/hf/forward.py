"""The forward passes of a model :func:`pezoo.hf.use_encoding` adapted: the base model's (the
call's context built first, the ``embed`` hooks on the token embeddings), each decoder
layer's (its call handed on, so a checkpointed layer's recompute sees its own), the
``observe`` pre-hook on the residual stream, and ``generate`` (positions planned for the
prompt plus the new tokens; the dynamic KV cache only)."""

from __future__ import annotations

import copy
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
    "(leave cache_implementation unset, in generate's arguments and in model.generation_config)"
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
    if embeds.is_meta:
        raise ValueError(
            "pezoo.hf cannot run a model on the meta device: it plans each row's positions from the attention "
            "mask's values, which meta tensors do not hold; materialise the model first (model.to_empty(device=...) "
            "then reset_parameters() on each module, or load it with from_pretrained)"
        )
    b, s = embeds.shape[:2]
    cache, use_cache = _call_cache(self, arguments.get(cache_name), arguments.get("use_cache"))
    n_cached = cache.get_seq_length() if cache is not None else 0
    if adapter.window is not None and n_cached + s > adapter.window:
        raise ValueError(
            f"this model attends through a sliding window of {adapter.window} tokens, which pezoo.hf does not "
            f"reproduce (its attention is global); got {n_cached + s} tokens"
        )
    mask = _key_mask(arguments.get("attention_mask"), b, n_cached + s, embeds.device)
    state = _encoding_state(cache, n_cached)
    call = calls.build_call(
        adapter.encoding,
        state,
        mask,
        n_cached,
        s,
        max(adapter.planned_width, adapter.next_width),
        kept=cache is not None,
        scale_hint=adapter.scale_hint,
        head_dim=adapter.head_dim,
    )
    if not adapter.generating:  # generate derives its position_ids from the mask, as pezoo does
        _check_position_ids(arguments.get("position_ids", extra.get("position_ids")), state, mask, n_cached)
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


def _check_position_ids(position_ids: Tensor | None, state: dict[Any, Any], mask: Tensor, n_cached: int) -> None:
    """ValueError unless the caller's ``position_ids`` (b|1, s) are the positions pezoo gives
    the real new tokens: each one's column counted from its row's first real token. pezoo.hf
    takes the positions from the attention mask and reads no ``position_ids``: ones that say
    otherwise (packed sequences restarting within a row, as ``DataCollatorWithFlattening``
    gives them, whose documents the model itself keeps apart; an offset) would be ignored
    silently. Not checked under compile (a host sync)."""
    if position_ids is None or torch.compiler.is_compiling():
        return
    first: Tensor = state["pezoo.hf"]["first"]  # (b,)
    b, s = mask.shape[0], mask.shape[1] - n_cached
    given = position_ids.reshape(-1, position_ids.shape[-1]) if position_ids.dim() in (1, 2) else position_ids
    if given.dim() != 2 or given.shape[-1] != s or given.shape[0] not in (1, b):
        raise ValueError(
            f"pezoo.hf: position_ids of shape {tuple(position_ids.shape)} do not fit this call's {b} rows of {s} new "
            "tokens; pezoo.hf takes the positions from the attention mask: drop position_ids"
        )
    column = torch.arange(n_cached, n_cached + s, device=mask.device)[None, :]  # (1, s)
    ours = column - first.to(mask.device)[:, None]  # (b, s)
    real = mask[:, n_cached:].to(torch.bool) & (ours >= 0)
    wrong = real & (given.to(ours.device) != ours)
    if not bool(wrong.any()):
        return
    row = int(wrong.any(dim=1).nonzero()[0])
    theirs = given[min(row, given.shape[0] - 1)][real[row]]
    raise ValueError(
        f"pezoo.hf takes each token's position from the attention mask, counted from its row's first real token, "
        f"and reads no position_ids: row {row}'s are {theirs[:8].tolist()}, where pezoo's are "
        f"{ours[row][real[row]][:8].tolist()}. Packed sequences (positions restarting within a row) and offsets are "
        "not supported: drop position_ids, and give each sequence a row of its own with an attention mask"
    )


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
    ids = _prompt(args, kwargs)
    config = kwargs.get("generation_config") or self.generation_config
    implementation = _cache_implementation(self, kwargs)
    if implementation not in _DYNAMIC:
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
        if implementation is not None:  # the cache is given: transformers refuses it beside any implementation
            _unset_cache_implementation(self, kwargs)
    if kwargs.get("position_ids") is not None and ids is not None:
        mask = _key_mask(kwargs.get("attention_mask"), ids.shape[0], ids.shape[1], ids.device)
        _check_position_ids(kwargs["position_ids"], {"pezoo.hf": {"first": calls.first_real(mask)}}, mask, 0)
    generating, adapter.generating = adapter.generating, True
    try:
        return _original(type(self)).generate(self, *args, **kwargs)
    finally:
        adapter.planned_width = before
        adapter.generating = generating


_DYNAMIC = (None, "dynamic", "hybrid")
"""The ``cache_implementation`` values that mean the dynamic cache pezoo.hf keeps its state with:
unset, ``"dynamic"``, and ``"hybrid"``, which Gemma 2's and Gemma 3's checkpoints ship in their
generation config and transformers unsets itself (its sliding layers now default to the
dynamic cache)."""


def _cache_implementation(model: Any, kwargs: dict[str, Any]) -> str | None:
    """The ``cache_implementation`` ``generate`` would use, as transformers merges it: the
    keyword, else a given ``generation_config``'s, else (where that leaves it unset) the model's."""
    if "cache_implementation" in kwargs:
        return kwargs["cache_implementation"]
    given = getattr(kwargs.get("generation_config"), "cache_implementation", None)
    return given if given is not None else model.generation_config.cache_implementation


def _unset_cache_implementation(model: Any, kwargs: dict[str, Any]) -> None:
    """``generate``'s ``kwargs`` with ``cache_implementation`` unset wherever it is set (the
    keyword, a given ``generation_config``, the model's own), in place: pezoo.hf passes its
    ``DynamicCache``, which transformers refuses beside any implementation."""
    given = kwargs.get("generation_config")
    if given is not None and given.cache_implementation is not None:
        kwargs["generation_config"] = copy.deepcopy(given)  # the caller's stays as it was
        kwargs["generation_config"].cache_implementation = None
    if "cache_implementation" in kwargs or model.generation_config.cache_implementation is not None:
        kwargs["cache_implementation"] = None  # over the model's own, which transformers merges in


def _prompt(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Tensor | None:
    """The prompt ``generate`` was given, whose width (axis 1) plans the positions: positionally or
    as ``inputs`` (transformers' name), ``input_ids``, or ``inputs_embeds`` (b, s, d); None without one."""
    for prompt in (
        args[0] if args else None,
        kwargs.get("inputs"),
        kwargs.get("input_ids"),
        kwargs.get("inputs_embeds"),
    ):
        if prompt is not None:
            return prompt
    return None
