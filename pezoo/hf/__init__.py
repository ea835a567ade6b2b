"""Any pezoo encoding in a Hugging Face causal LM, in one call (``pip install 'pezoo[hf]'``).

    import pezoo.hf
    model = pezoo.hf.use_encoding(AutoModelForCausalLM.from_pretrained(...), "alibi")
    model.generate(**tokenizer(texts, return_tensors="pt", padding=True), max_new_tokens=20)

:func:`use_encoding` replaces the model's positional encoding in place, for the Llama family
(Llama, Mistral, Qwen2) and GPT-2: the encoding becomes the submodule ``pezoo_encoding`` (its
parameters train, move and save with the model), every attention layer runs pezoo's hooks and
attention (:mod:`pezoo.hf.families`), and ``generate`` keeps its KV cache, sampling and
left padding (:mod:`pezoo.hf.calls`). ``save_pretrained`` records the spec in the config;
:func:`from_pretrained` rebuilds the same model with every weight.

Importing :mod:`pezoo` never imports transformers; this module does.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MethodType
from typing import Any

import torch
from torch import Tensor, nn
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel
from transformers.modeling_utils import AttentionInterface

from pezoo.base import ModelDims, PositionalEncoding, create
from pezoo.hf import calls
from pezoo.hf.families import ATTENTION_NAME, FAMILIES, NoPositionTable, pezoo_attention, sliding_window
from pezoo.setups import paper_options
from pezoo.spec import parse_pe

__all__ = ["Adapter", "from_pretrained", "plan", "set_scale_hint", "use_encoding"]

CONFIG_KEY = "pezoo"
"""The config attribute ``save_pretrained`` writes the encoding's spec under."""

ENCODING_MODULE = "pezoo_encoding"
"""The submodule of the model that holds the encoding (its state-dict prefix)."""

AttentionInterface.register(ATTENTION_NAME, pezoo_attention)


class Adapter:
    """What an adapted model's patched forwards share (not a module: the encoding is the
    model's submodule ``pezoo_encoding``, this only points at it).

    Attributes:
        encoding: the encoding.
        backend: the :func:`pezoo.attend` backend.
        planned_width: columns to plan positions for, while ``generate`` runs (from
            ``max_new_tokens``).
        next_width: the same for the next sequence batch only (:func:`plan`).
        scale_hint: the instance scale n per row, for encodings that read one
            (:func:`set_scale_hint`).
        call: the current forward call's context (:class:`pezoo.hf.calls.Call`).
    """

    def __init__(self, encoding: PositionalEncoding, backend: str, head_dim: int) -> None:
        self.encoding = encoding
        self.backend = backend
        self.head_dim = head_dim
        self.planned_width = 0
        self.next_width = 0
        self.window: int | None = None
        self.scale_hint: Tensor | None = None
        self.call: calls.Call | None = None


def use_encoding(model: PreTrainedModel, spec: str, *, backend: str = "auto", **options: Any) -> PreTrainedModel:
    """Replace the positional encoding of a transformers causal LM with pezoo's ``spec``, in place.

    Args:
        model: a Llama, Mistral, Qwen2 or GPT-2 causal LM (``config.model_type`` in
            :data:`pezoo.hf.families.FAMILIES`).
        spec: any name :func:`pezoo.create` accepts (``"alibi"``, ``"randomized:rope"``,
            ``"abacus+fire"``, a plugin), or a spec with options (``"alibi{n_biased=4}"``,
            ``"prism{paper}"``: the paper's setup for this model's size, :mod:`pezoo.setups`).
        backend: the :func:`pezoo.attend` backend (``"auto"``: sdpa on CPU, the fused one that
            lowers every bias on CUDA).
        options: the encoding's options, as keywords (over a spec's).

    ``"rope"`` on a model whose own encoding is RoPE (the Llama family) takes the model's
    layout (rotate-half, ``layout="half"``), base and ``rope_parameters`` (rope scaling), so
    the logits are the model's own; given options win. GPT-2's learned table ``wpe`` is
    removed (its state-dict entry with it) for every encoding: a learned absolute table is
    ``"learned_ape"``.

    Returns:
        ``model``, adapted: ``model.pezoo_encoding`` is the encoding, ``model.config.pezoo``
        the spec ``save_pretrained`` writes.

    Raises:
        ValueError: a model family pezoo.hf does not adapt, or a model already adapted.
        TypeError, ValueError: from building the encoding (unknown options, bad values).
    """
    config = model.config
    family = FAMILIES.get(getattr(config, "model_type", ""))
    if family is None:
        raise ValueError(
            f"pezoo.hf adapts model types {', '.join(sorted(FAMILIES))}; got {getattr(config, 'model_type', None)!r}"
        )
    if getattr(model, "_pezoo_adapter", None) is not None:
        raise ValueError("this model already runs a pezoo encoding; load a fresh model to change it")
    base = model.base_model
    n_heads, width = config.num_attention_heads, config.hidden_size
    head_dim = getattr(config, "head_dim", None) or width // n_heads
    if head_dim * n_heads != width:
        raise ValueError(f"pezoo.hf needs head_dim * heads = hidden size; got {head_dim} * {n_heads} != {width}")
    recorded = _jsonable(options)  # before anything changes: save_pretrained must be able to write them
    dims = ModelDims(width, n_heads, config.num_hidden_layers)
    name, given = _parse(spec, dims)
    given.update(options)
    if name == family.get("own") == "rope":  # the model's own RoPE, reproduced; given options win
        given = {**_own_rope(config), **given}
    weight = base.get_input_embeddings().weight
    encoding = create(name, dims=dims, **given)
    encoding.to(device=weight.device, dtype=weight.dtype if weight.dtype.is_floating_point else None)
    encoding.train(model.training)
    model.add_module(ENCODING_MODULE, encoding)

    adapter = Adapter(encoding, backend, head_dim)
    adapter.window = sliding_window(config)
    object.__setattr__(model, "_pezoo_adapter", adapter)  # a plain attribute: not a submodule
    table = family.get("table")
    if table is not None:
        setattr(base, table, NoPositionTable(width))
    layers = getattr(base, family["layers"])
    for index, layer in enumerate(layers):
        attention = getattr(layer, family["attention"])
        for module in (attention, layer):
            object.__setattr__(module, "_pezoo_adapter", adapter)
            object.__setattr__(module, "_pezoo_layer", index)
        attention.forward = MethodType(family["forward"], attention)
        layer.register_forward_pre_hook(_observe, with_kwargs=True)
    object.__setattr__(base, "_pezoo_adapter", adapter)
    base.forward = MethodType(_base_forward, base)
    model.generate = MethodType(_generate, model)
    config.pezoo = {"spec": spec, "options": recorded, "backend": backend}
    return model


def from_pretrained(path: str | Path, **kwargs: Any) -> PreTrainedModel:
    """Load a model saved by ``save_pretrained`` after :func:`use_encoding`: the base model by
    ``AutoModelForCausalLM.from_pretrained(path, **kwargs)``, the encoding from the spec in its
    config, and the encoding's weights from the same files.

    Raises:
        ValueError: the config records no pezoo encoding; a weight the files hold is neither
            the model's nor the encoding's, or one the model needs is missing.
    """
    config = AutoConfig.from_pretrained(path)
    record = getattr(config, CONFIG_KEY, None)
    if not isinstance(record, Mapping) or "spec" not in record:
        raise ValueError(f"{path}: the config records no pezoo encoding (save a model adapted with use_encoding)")
    with _quiet("transformers.modeling_utils"):
        model, info = AutoModelForCausalLM.from_pretrained(path, output_loading_info=True, **kwargs)
    use_encoding(model, record["spec"], backend=record.get("backend", "auto"), **record.get("options", {}))
    prefix = f"{ENCODING_MODULE}."
    saved = {k[len(prefix) :]: v for k, v in _read_weights(Path(path), prefix).items()}
    model.pezoo_encoding.load_state_dict(saved, strict=True)
    model.pezoo_encoding.to(device=model.get_input_embeddings().weight.device)
    unexpected = [k for k in info.get("unexpected_keys", []) if not k.startswith(prefix)]
    own = set(model.state_dict())
    missing = [k for k in info.get("missing_keys", []) if k in own]
    if unexpected or missing:
        raise ValueError(f"{path}: weights not loaded: unexpected {unexpected}, missing {missing}")
    return model


def plan(model: PreTrainedModel, width: int) -> None:
    """Plan positions for ``width`` tokens on the next sequence batch only (a decoding loop of
    your own; ``generate`` plans from ``max_new_tokens``): needed only by encodings whose
    positions depend on the length (randomized PE). Later batches are planned for their own
    length again, so training is not drawn for a longer sequence than it has."""
    _adapter(model).next_width = int(width)


def set_scale_hint(model: PreTrainedModel, hint: Tensor | None) -> None:
    """The instance scale n of each row, (b,), for encodings that read one (``learned_prf_sh``);
    None clears it. It stays until changed."""
    _adapter(model).scale_hint = hint


def _adapter(model: PreTrainedModel) -> Adapter:
    adapter = getattr(model, "_pezoo_adapter", None)
    if adapter is None:
        raise ValueError("this model runs no pezoo encoding: call pezoo.hf.use_encoding first")
    return adapter


def _parse(spec: str, dims: ModelDims) -> tuple[str, dict[str, Any]]:
    """(registry name, options) of a spec (:mod:`pezoo.spec`: ``name{key=value}``,
    ``name{paper}``: the paper setup sized for ``dims``, :mod:`pezoo.setups`)."""
    if "{" not in spec:
        return spec, {}
    parsed = parse_pe(spec)
    if parsed.eval_options:
        raise ValueError(
            f"{spec!r}: an inference-time variant (name@{{...}}) names a benchmark run evaluated differently; "
            "give the encoding its options directly (name{...} or keywords)"
        )
    options: dict[str, Any] = {}
    if parsed.setup == "paper":
        options.update(paper_options(parsed.name, "", dims))  # no task: its task-free setup
    options.update(parsed.options)
    return parsed.name, options


def _own_rope(config: Any) -> dict[str, Any]:
    """pezoo's RoPE options that reproduce the model's own: rotate-half, its base and scaling."""
    params = dict(config.rope_parameters or {})
    out: dict[str, Any] = {"layout": "half"}
    if "rope_theta" in params:
        out["base"] = float(params["rope_theta"])
    if params.get("rope_type", "default") != "default" or "partial_rotary_factor" in params:
        out["scaling"] = params
    return out


def _observe(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Forward pre-hook of a decoder layer: the ``observe`` hook on the residual stream entering it."""
    adapter: Adapter = module._pezoo_adapter  # type: ignore[assignment]
    if adapter.call is not None:
        x = args[0] if args else kwargs["hidden_states"]
        calls.observe(adapter.encoding, adapter.call, module._pezoo_layer, x)  # type: ignore[arg-type]


_SIGNATURES: dict[type, inspect.Signature] = {}


def _base_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
    """The base model's forward with the call's context built first and the ``embed`` hooks
    applied to the token embeddings (passed on as ``inputs_embeds``). Bound to the base model;
    everything it needs is on it (``_pezoo_adapter``), so a deep copy of the model runs its own."""
    from transformers.cache_utils import DynamicCache

    adapter: Adapter = self._pezoo_adapter
    if getattr(self, "gradient_checkpointing", False) and self.training:
        raise ValueError(
            "pezoo.hf does not support gradient checkpointing: recomputing a layer would run the encoding's "
            "hooks a second time on state they already advanced (PRISM's filter); disable it"
        )
    original = type(self).forward
    signature = _SIGNATURES.setdefault(type(self), inspect.signature(original))
    if "past_key_values" in kwargs and "cache" in signature.parameters:
        kwargs["cache"] = kwargs.pop("past_key_values")
    bound = signature.bind(self, *args, **kwargs)
    arguments = dict(bound.arguments)
    arguments.pop("self", None)
    extra = arguments.pop("kwargs", {})
    ids, embeds = arguments.get("input_ids"), arguments.get("inputs_embeds")
    if embeds is None:
        if ids is None:
            raise ValueError("give input_ids or inputs_embeds")
        embeds = self.get_input_embeddings()(ids)  # (b, s, d)
    b, s = embeds.shape[:2]
    cache = arguments.get("cache")
    use_cache = arguments.get("use_cache")
    if use_cache is None:
        use_cache = bool(getattr(self.config, "use_cache", False)) and not self.training
    if cache is None and use_cache:
        cache = DynamicCache(config=self.config)
    n_cached = cache.get_seq_length() if cache is not None else 0
    if adapter.window is not None and n_cached + s > adapter.window:
        raise ValueError(
            f"this model attends through a sliding window of {adapter.window} tokens, which pezoo.hf does not "
            f"reproduce (its attention is global); got {n_cached + s} tokens"
        )
    mask = arguments.get("attention_mask")
    if mask is None:
        mask = torch.ones(b, n_cached + s, dtype=torch.bool, device=embeds.device)
    elif mask.dim() != 2 or mask.shape[1] != n_cached + s:
        raise ValueError(
            f"pezoo.hf needs a 2-D attention mask (b, {n_cached + s}) over all keys; got {tuple(mask.shape)} "
            "(a static or compiled cache's 4-D mask is not supported: use the default dynamic cache)"
        )
    state: dict[Any, Any]
    if cache is None:
        state = {}
    else:
        if n_cached == 0 or not hasattr(cache, "_pezoo_state"):
            cache._pezoo_state = {}  # the encoding's state for this sequence batch lives with its KV cache
        state = cache._pezoo_state
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
    adapter.call = call
    if n_cached == 0:
        adapter.next_width = 0  # plan() holds for one sequence batch
    embeds = calls.embed(adapter.encoding, call, embeds, ids)
    arguments.update(input_ids=None, inputs_embeds=embeds, use_cache=use_cache)
    if "cache" in signature.parameters:
        arguments["cache"] = cache
    return original(self, **arguments, **extra)


def _generate(self: Any, *args: Any, **kwargs: Any) -> Any:
    """``generate`` that plans positions for the prompt plus ``max_new_tokens``."""
    adapter: Adapter = self._pezoo_adapter
    ids = kwargs.get("input_ids", args[0] if args else None)
    config = kwargs.get("generation_config") or self.generation_config
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
    try:
        return type(self).generate(self, *args, **kwargs)
    finally:
        adapter.planned_width = before


def _jsonable(options: Mapping[str, Any]) -> dict[str, Any]:
    try:
        json.dumps(dict(options))
    except TypeError as exc:
        raise TypeError(
            f"pezoo.hf records the options in the model's config, so they must be JSON values: {exc}"
        ) from exc
    return dict(options)


def _read_weights(path: Path, prefix: str) -> dict[str, Tensor]:
    """The tensors under ``prefix`` in a saved model's weight files (safetensors, sharded or
    not, or PyTorch's ``.bin``)."""
    files = sorted(path.glob("*.safetensors"))
    out: dict[str, Tensor] = {}
    if files:
        from safetensors import safe_open

        for file in files:
            with safe_open(str(file), framework="pt") as f:
                out.update({k: f.get_tensor(k) for k in f.keys() if k.startswith(prefix)})
        return out
    for file in sorted(path.glob("*.bin")):
        out.update(
            {k: v for k, v in torch.load(file, weights_only=True, map_location="cpu").items() if k.startswith(prefix)}
        )
    return out


class _NoLoadReport(logging.Filter):
    """Drops transformers' load report, which lists the encoding's weights as unexpected (and
    GPT-2's removed table as missing): :func:`from_pretrained` loads the first and checks the
    rest itself, raising on any other weight."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "LOAD REPORT" not in record.getMessage()


@contextlib.contextmanager
def _quiet(name: str) -> Iterator[None]:
    """Without transformers' load report (:class:`_NoLoadReport`) from logger ``name``. (Not by
    raising its level: the loader checks that level for other work.)"""
    from transformers.utils import logging as hf_logging

    logger = hf_logging.get_logger(name)
    drop = _NoLoadReport()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)
