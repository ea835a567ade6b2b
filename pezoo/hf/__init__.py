"""Any pezoo encoding in a Hugging Face causal LM, in one call (``pip install 'pezoo[hf]'``).

    import pezoo.hf
    model = pezoo.hf.use_encoding(AutoModelForCausalLM.from_pretrained(...), "alibi")
    model.generate(**tokenizer(texts, return_tensors="pt", padding=True), max_new_tokens=20)

:func:`use_encoding` replaces the model's positional encoding in place, for the Llama family
(Llama, Mistral, Qwen2) and GPT-2: the encoding becomes the submodule ``pezoo_encoding`` (its
parameters train, move and save with the model), every attention layer runs pezoo's hooks and
attention (:mod:`pezoo.hf.families`), and ``generate`` keeps its KV cache, sampling and
left padding (:mod:`pezoo.hf.calls`; the adapted forward passes: :mod:`pezoo.hf.forward`).
``save_pretrained`` records the spec in the config; :func:`from_pretrained` rebuilds the
same model with every weight.

Importing :mod:`pezoo` never imports transformers; this module does.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from transformers import AutoConfig, PreTrainedModel
from transformers.modeling_utils import AttentionInterface

from pezoo.attention import BACKENDS
from pezoo.base import ModelDims, PositionalEncoding, create
from pezoo.hf import auto, weight_files
from pezoo.hf.adapter import Adapter
from pezoo.hf.families import (
    ATTENTION_NAME,
    FAMILIES,
    Family,
    NoPositionTable,
    attention_forward,
    dropout_probability,
    pezoo_attention,
)
from pezoo.hf.forward import _base_forward, _generate, _get, _layer_forward, _observe, _original
from pezoo.hf.limits import check_option_sizes
from pezoo.hf.own import layer_head_dims, rope_scaling, sliding_window
from pezoo.interface import acts_through
from pezoo.registry import unknown_name_message
from pezoo.scores import Sinks, SoftCap
from pezoo.setups import paper_options
from pezoo.spec import parse_pe

__all__ = ["Adapter", "from_pretrained", "model_dims", "plan", "set_scale_hint", "use_encoding"]

CONFIG_KEY = "pezoo"
"""The config attribute ``save_pretrained`` writes the encoding's spec under."""

ENCODING_MODULE = "pezoo_encoding"
"""The submodule of the model that holds the encoding (its state-dict prefix)."""

AttentionInterface.register(ATTENTION_NAME, pezoo_attention)


def use_encoding(model: PreTrainedModel, spec: str, *, backend: str = "auto", **options: Any) -> PreTrainedModel:
    """Replace the positional encoding of a transformers causal LM with pezoo's ``spec``, in place.

    Args:
        model: a causal LM of a family in :data:`pezoo.hf.families.FAMILIES` (Llama, Mistral,
            Mixtral, Qwen2, Qwen3, Granite, Gemma, Gemma2, Gemma 3 (text), Cohere2, Llama 4 (text),
            OLMo, OLMo2, OLMo 3, Starcoder2, Phi, Phi3, StableLM, GPT-NeoX, GPT-J, Falcon, Bloom, MPT,
            OPT, GPT-2, GPTBigCode and more: the table's keys).
        spec: any name :func:`pezoo.create` accepts (``"alibi"``, ``"randomized:rope"``,
            ``"abacus+fire"``, a plugin), or a spec with options (``"alibi{n_biased=4}"``,
            ``"prism{paper}"``: the paper's setup for this model's size, :mod:`pezoo.setups`).
        backend: the :func:`pezoo.attend` backend (``"auto"``: sdpa on CPU, the fused one that
            lowers every bias on CUDA).
        options: the encoding's options, as keywords (over a spec's).

    ``"rope"`` on a model whose own encoding is RoPE takes the model's layout, base, rotary
    dim and ``rope_parameters`` (rope scaling), so the logits are the model's own; given
    options win. ``"hybrid"`` on Cohere 2 takes its RoPE, its layer pattern and its sliding
    window: the model's own RNoPE-SWA; on Llama 4, its RoPE, pattern, chunks and temperature
    (iRoPE); on Gemma 3 and OLMo 3, its local and global layers' RoPE and its window (on Gemma 4,
    also its global layers' head width). A learned absolute
    table (GPT-2's and GPTBigCode's ``wpe``, OPT's ``embed_positions``) and an ALiBi of the model's own
    (Bloom, MPT, Falcon with ``alibi``) are replaced by the encoding.

    Returns:
        ``model``, adapted: its class becomes ``pezoo.hf.auto.Pezoo<Class>`` (model type
        ``pezoo_<type>``: saved, it loads as itself through ``AutoModelForCausalLM``),
        ``model.pezoo_encoding`` is the encoding, ``model.config.pezoo`` the spec.

    Raises:
        ValueError: a model family pezoo.hf does not adapt, or a configuration it refuses (by
            reason); a model that is not its family's causal LM (a base model, a classifier); a
            model already adapted; an unknown backend; an option that contradicts the model's
            shape or exceeds :mod:`pezoo.hf.limits`.
        TypeError: a spec or backend that is not a string.
        TypeError, ValueError: from building the encoding (unknown options, bad values).
    """
    model_type, family = _adaptable(model, spec, backend)
    config = model.config
    base = _get(model.base_model, family.core)
    head_dim = model_dims(config).head_dim
    recorded = _jsonable(options)  # before anything changes: save_pretrained must be able to write them
    layers = _get(base, family.layers)
    attentions = [_get(layer, family.attention) for layer in layers]
    projected = [getattr(a, "head_dim", head_dim) for a in attentions]  # what each layer's projections split by
    encoding = _build(model, family, spec, options, projected)
    if getattr(base, "gradient_checkpointing", False) and observes(encoding):
        raise ValueError(_NO_CHECKPOINTING.format(encoding.name or spec))
    weight = base.get_input_embeddings().weight
    encoding.to(device=weight.device, dtype=weight.dtype if weight.dtype.is_floating_point else None)
    encoding.train(model.training)
    model.add_module(ENCODING_MODULE, encoding)
    adapter = Adapter(encoding, backend, head_dim)
    # a model whose own encoding is hybrid (Cohere 2, EXAONE 4, Llama 4, Gemma 3, OLMo 3) windows its RoPE layers
    # in it: any hybrid brings its own windows; another encoding would attend globally, so it is refused past them
    windowed_by_encoding = family.own_encoding(config) == "hybrid" == _encoding_name(spec)
    adapter.window = None if windowed_by_encoding else sliding_window(config)
    cap = family.softcap(config)
    adapter.softcap = None if cap is None else SoftCap(cap)
    adapter.dropout = dropout_probability(attentions[0], config) if attentions else 0.0
    object.__setattr__(model, "_pezoo_adapter", adapter)  # a plain attribute: not a submodule
    _adapt_modules(model, base, family, model_type, list(zip(layers, attentions, strict=True)), adapter)
    config.pezoo = {"spec": spec, "options": recorded, "backend": backend}
    return model


def _adaptable(model: PreTrainedModel, spec: Any, backend: str) -> tuple[str, Family]:
    """(model type, family) of a model :func:`use_encoding` can adapt with ``spec`` and
    ``backend``; raises its TypeError or ValueError otherwise, before anything changes."""
    if not isinstance(spec, str):
        raise TypeError(f"pezoo.hf: the spec is an encoding's name as a string (e.g. 'alibi'); got {spec!r}")
    config = model.config
    model_type = auto.base_type(getattr(config, "model_type", ""))
    family = FAMILIES.get(model_type)
    if family is None:
        raise ValueError(f"pezoo.hf adapts model types {', '.join(sorted(FAMILIES))}; got {model_type!r}")
    _check_causal_lm(model, model_type)
    reason = family.refuse(config)
    if reason is not None:
        raise ValueError(f"pezoo.hf cannot adapt this {model_type} model: {reason}")
    if getattr(model, "_pezoo_adapter", None) is not None:
        raise ValueError("this model already runs a pezoo encoding; load a fresh model to change it")
    if not isinstance(backend, str):
        raise TypeError(
            f"pezoo.hf: backend is an attention backend's name, one of {', '.join(sorted({'auto', *BACKENDS}))}; "
            f"got {backend!r}"
        )
    if backend != "auto" and backend not in BACKENDS:
        raise ValueError(unknown_name_message("attention backend", backend, sorted({"auto", *BACKENDS})))
    if family.sinks is not None and backend != "auto" and backend not in Sinks.backends:
        raise ValueError(
            f"pezoo.hf cannot run this {model_type} model on the {backend} backend: its attention has sinks (a "
            f"learned logit per head in softmax's denominator), which backends {' and '.join(Sinks.backends)} take "
            "(or auto, which picks one)"
        )
    cap = family.softcap(config)
    if cap is not None and backend != "auto" and backend not in SoftCap.backends:
        raise ValueError(
            f"pezoo.hf cannot run this {model_type} model on the {backend} backend: it soft-caps its attention "
            f"logits (cap {cap:g}), which backends {' and '.join(SoftCap.backends)} take (or auto, which picks one)"
        )
    return model_type, family


def _check_causal_lm(model: PreTrainedModel, model_type: str) -> None:
    """ValueError unless ``model`` is its family's causal LM (what ``AutoModelForCausalLM``
    loads): :func:`use_encoding` turns the model into the adapted causal LM class, which would
    leave a base model (``AutoModel``) or a classifier without the attributes that class reads,
    failing at the first forward rather than here."""
    try:
        wanted = auto.original_causal_lm(model_type)
    except (KeyError, ImportError, AttributeError):  # a family this transformers lacks: no model of it exists here
        return
    if not isinstance(model, wanted):
        raise ValueError(
            f"pezoo.hf adapts causal LMs: a {model_type} model must be a {wanted.__name__} (as "
            f"AutoModelForCausalLM.from_pretrained loads it), got a {type(model).__name__}; load it with "
            "AutoModelForCausalLM"
        )


def _adapt_modules(
    model: PreTrainedModel,
    base: Any,
    family: Family,
    model_type: str,
    layers: list[tuple[Any, Any]],
    adapter: Adapter,
) -> None:
    """Point the model's modules at ``adapter`` and swap in pezoo's classes: the learned
    position table (if any) for a null one, each (layer, attention) pair, the base model,
    its config and the model itself."""
    if family.table is not None:
        parent, _, attr = family.table.rpartition(".")
        setattr(_get(base, parent) if parent else base, attr, NoPositionTable(model.config.hidden_size))
    for index, (layer, attention) in enumerate(layers):
        for module in (attention, layer):
            object.__setattr__(module, "_pezoo_adapter", adapter)
            object.__setattr__(module, "_pezoo_layer", index)
        object.__setattr__(attention, "_pezoo_family", model_type)
        attention.__class__ = auto.part_class(type(attention), attention_forward)
        layer.__class__ = auto.part_class(type(layer), _layer_forward)
        layer.register_forward_pre_hook(_observe, with_kwargs=True)
    object.__setattr__(base, "_pezoo_adapter", adapter)
    if base is not model:
        base.__class__ = auto.part_class(type(base), _base_forward)
    model.config.__class__ = auto.config_class(model_type)
    model.__class__ = auto.causal_lm_class(model_type)
    auto.keep_recording(model, base)


def from_pretrained(path: str | Path, **kwargs: Any) -> PreTrainedModel:
    """Load a model saved by ``save_pretrained`` after :func:`use_encoding`, with every weight:
    ``AutoModelForCausalLM.from_pretrained(path, **kwargs)`` does the same once pezoo.hf is
    imported; this also loads folders saved before adapted models had a model type of their
    own (their config names the original type and carries the ``pezoo`` record), and refuses
    a folder whose weights do not match the model exactly.

    Raises:
        ValueError: the config records no pezoo encoding; a weight the files hold is not the
            model's, or one the model needs is missing.
    """
    hub = {k: kwargs[k] for k in ("subfolder", "revision", "cache_dir", "token", "local_files_only") if k in kwargs}
    config = AutoConfig.from_pretrained(path, **hub)
    record = getattr(config, CONFIG_KEY, None)
    if not isinstance(record, Mapping) or "spec" not in record:
        raise ValueError(f"{path}: the config records no pezoo encoding (save a model adapted with use_encoding)")
    model_type = auto.base_type(config.model_type)
    if model_type not in FAMILIES:
        raise ValueError(f"{path}: pezoo.hf adapts model types {', '.join(sorted(FAMILIES))}; got {model_type!r}")
    config.__class__ = auto.config_class(model_type)
    kwargs.pop("config", None)
    model, info = auto.causal_lm_class(model_type).from_pretrained(
        path, config=config, output_loading_info=True, **kwargs
    )
    if info.get("unexpected_keys") or info.get("missing_keys") or info.get("mismatched_keys"):
        raise ValueError(
            f"{path}: weights not loaded: unexpected {sorted(info.get('unexpected_keys', []))}, "
            f"missing {sorted(info.get('missing_keys', []))}, mismatched {sorted(info.get('mismatched_keys', []))}"
        )
    return model


def plan(model: PreTrainedModel, width: int) -> None:
    """Plan positions for ``width`` tokens on the next sequence batch only (a decoding loop of
    your own; ``generate`` plans from ``max_new_tokens``): needed only by encodings whose
    positions depend on the length (randomized PE). Later batches are planned for their own
    length again, so training is not drawn for a longer sequence than it has."""
    _adapter(model).next_width = int(width)


def set_scale_hint(model: PreTrainedModel, hint: Tensor | None) -> None:
    """The instance scale n of each row, (b,), for encodings that read one (``learned_prf_sh``);
    None clears it. It stays until changed. ValueError unless it is a real tensor of
    finite values > 0 (a nan hint made every logit nan; 0 and negatives passed as well):
    checked here, once, on the host, not in the forward pass."""
    adapter = _adapter(model)
    if hint is not None:
        if not isinstance(hint, Tensor) or hint.is_complex() or hint.dtype == torch.bool:
            raise ValueError(f"pezoo.hf.set_scale_hint: the hint must be a real tensor of shape (b,), got {hint!r}")
        if hint.numel() and not bool(((hint > 0) & torch.isfinite(hint)).all()):
            raise ValueError(
                f"pezoo.hf.set_scale_hint: each row's instance scale n must be a finite number > 0, got "
                f"{hint.flatten()[:8].tolist()}"
            )
    adapter.scale_hint = hint


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


def _check_head_widths(encoding: PositionalEncoding, head_dim: int, projected: list[int]) -> None:
    """ValueError unless every layer's q/k heads (``projected``, as its projections split them)
    are as wide as the encoding takes them there (:meth:`PositionalEncoding.qk_head_dims`): any
    width for one that does not transform q and k (a bias, NoPE), ``head_dim`` for RoPE and its
    kin, each kind's own for a hybrid whose G layers have a width of their own (Gemma 4's)."""
    wanted = encoding.qk_head_dims(head_dim, len(projected))
    wrong = [(layer, want, got) for layer, (want, got) in enumerate(zip(wanted, projected, strict=True))
             if want is not None and want != got]  # fmt: skip
    if not wrong:
        return
    layer, want, got = wrong[0]
    raise ValueError(
        f"pezoo.hf: the config gives heads {head_dim} wide and the attention layers split q/k into heads "
        f"{sorted(set(projected))} wide; {encoding.name or type(encoding).__name__} transforms q and k in heads of "
        f"the width it was built for ({want} at layer {layer}, whose heads are {got} wide; {len(wrong)} such "
        f"layer{'s' if len(wrong) > 1 else ''}): adapt this model with an encoding that does not (a bias: alibi, "
        "t5, fire, kerple_log, ...) or with its own hybrid"
    )


def model_dims(config: Any) -> ModelDims:
    """The shape pezoo builds an encoding for, from a transformers config: the hidden size
    (what an encoding that adds to the residual stream is sized by), heads, layers, and each
    head's width (``head_dim`` where the config gives one: Gemma's, Qwen3's and Mistral
    Nemo's heads are not hidden size / heads wide)."""
    if isinstance(config, Mapping):  # a config's dict (config.to_dict()): not what transformers passes
        raise ValueError(
            "pezoo.hf.model_dims wants a transformers config object (model.config, or AutoConfig.from_pretrained(...)),"
            " got a dict; build one with transformers.PretrainedConfig.from_dict(...)"
        )
    width, n_heads = config.hidden_size, config.num_attention_heads
    widths = layer_head_dims(config)  # Gemma 4: one per layer, which config.head_dim refuses to say
    head_dim = widths[0] if widths else getattr(config, "head_dim", None)
    if head_dim:
        return ModelDims(width, n_heads, config.num_hidden_layers, head_dim=head_dim)
    if width % n_heads:
        raise ValueError(
            f"pezoo.hf: hidden size {width} is not divisible by {n_heads} heads and the config gives no head_dim"
        )
    return ModelDims(width, n_heads, config.num_hidden_layers)


def _build(
    model: PreTrainedModel, family: Family, spec: str, options: Mapping[str, Any], projected: list[int] | None = None
) -> PositionalEncoding:
    """The encoding ``spec`` with ``options`` for ``model``, its options checked against the
    model's shape and :mod:`pezoo.hf.limits` before anything is allocated, and against each
    layer's head width (``projected``, :func:`_check_head_widths`) before its RoPE is compared."""
    config = model.config
    dims = model_dims(config)
    name, given = _parse(spec, dims)
    given.update(options)
    _check_shape(given, dims)
    check_option_sizes(given, spec)
    own = name == family.own_encoding(config) and name in OWN_READ
    mine = set(given)  # the options the caller gave: they win over the model's
    if own:  # the model's own RoPE (or its hybrid: Cohere 2, EXAONE 4, Llama 4, Gemma 3, OLMo 3), reproduced
        try:
            read = family.own_options(config)
        except ValueError as exc:
            raise ValueError(f"pezoo.hf cannot adapt this {config.model_type} model with {name}: {exc}") from None
        given = {**_own_rope(config, family, name), **read, **given}
    encoding = create(name, dims=dims, **given)
    if projected is not None:
        _check_head_widths(encoding, dims.head_dim, projected)
    # the frequencies read from the config must be the model's; a RoPE the caller set is the caller's
    if own and name in ("rope", "ssmax:rope") and not mine & ROPE_FREQUENCY_OPTIONS:
        rope = encoding.inner if name == "ssmax:rope" else encoding
        _check_own_rope(model, family, rope, "inv_freq", "full_attention_inv_freq", "sliding_attention_inv_freq")
    if own and name == "hybrid":  # its R layers' RoPE (Gemma 3: one per layer kind), its G layers'
        if not mine & {"base", "scaling", "layout", "rotary_fraction"}:
            _check_own_rope(model, family, encoding.rope, "inv_freq", "sliding_attention_inv_freq")
        global_rope = getattr(encoding, "global_rope", None)
        if global_rope is not None and not mine & {"global_base", "global_scaling", "global_rotary_fraction", "layout"}:
            _check_own_rope(model, family, global_rope, "full_attention_inv_freq")
    return encoding


OWN_READ = ("rope", "hybrid", "ssmax:rope")
"""The own encodings pezoo.hf reads from a model's config (its RoPE, and a hybrid's layers or a
temperature's constants, ``Family.own_options``), so that the adapted model is the model."""

ROPE_FREQUENCY_OPTIONS = frozenset({"base", "rotary_dim", "rotary_fraction", "scaling", "layout"})
"""RoPE's options that set its frequencies: given any, the model's own are not compared."""


def _encoding_name(spec: str) -> str:
    """The registry name a spec builds (``hybrid{window=8}`` -> ``hybrid``)."""
    return parse_pe(spec).name if "{" in spec else spec


def _check_shape(given: Mapping[str, Any], dims: ModelDims) -> None:
    """An option that sizes the encoding for another model (``n_heads=8`` on a 4-head one) is
    an error here, not a shape mismatch at the first forward."""
    for key, value in dims.as_kwargs().items():
        if key in given and given[key] != value:
            raise ValueError(
                f"{key}={given[key]!r} contradicts the model's {key}={value}: pezoo.hf sizes the encoding from the "
                "model's config; drop the option"
            )


def _own_rope(config: Any, family: Family, name: str = "rope") -> dict[str, Any]:
    """pezoo's RoPE options that reproduce the model's own: its layout, base, rotary dim and scaling.

    ``partial_rotary_factor`` counts only in families that apply it (GPT-NeoX, Phi, Phi3,
    StableLM); Llama and its kin rotate every feature whatever the key says, and so does
    pezoo then. GPT-J names its rotary dim ``rotary_dim``. ``hybrid`` (``name``) takes the
    layout, base and scaling: a model whose RoPE is partial is refused for it."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    # transformers' proportional RoPE is p-RoPE, whose p it keeps in partial_rotary_factor (rope_scaling)
    factor = None if params.get("rope_type") == "proportional" else params.pop("partial_rotary_factor", None)
    out: dict[str, Any] = {"layout": family.rope_layout}
    if "rope_theta" in params:
        out["base"] = float(params["rope_theta"])
    if getattr(config, "rotary_dim", None) is not None and family.rope_layout == "interleaved":  # GPT-J
        out["rotary_dim"] = int(config.rotary_dim)
    elif family.applies_partial_rotary and factor is not None and factor != 1:
        out["rotary_fraction"] = float(factor)
    scaling = rope_scaling(params)
    if scaling is not None:
        out["scaling"] = scaling
    extra = sorted(set(out) - {"layout", "base", "scaling"})
    if name == "hybrid" and extra:
        raise ValueError(
            f"this model's RoPE has {' and '.join(extra)} ({params}), which pezoo's hybrid does not take: "
            "its own encoding cannot be reproduced; adapt it with another encoding"
        )
    return out


def _check_own_rope(model: PreTrainedModel, family: Family, encoding: Any, *buffers: str) -> None:
    """The model's rotary frequencies, where it keeps them (``rotary_emb.inv_freq`` of its core,
    or the first of ``buffers`` it has: Gemma 3 keeps one per layer kind, Laguna one per kind
    it has) and they do not
    depend on the length, must be pezoo's: a config pezoo would read differently is refused."""
    rotary = getattr(_get(model.base_model, family.core), "rotary_emb", None)
    theirs = next((getattr(rotary, b) for b in buffers or ("inv_freq",) if hasattr(rotary, b)), None)
    scaling = getattr(encoding, "scaling", None)
    if not isinstance(theirs, Tensor) or theirs.is_meta or scaling is None or scaling.depends_on_length:
        return
    ours, _ = encoding.frequencies()
    if ours.shape != theirs.shape or not torch.allclose(ours, theirs.float().cpu(), rtol=1e-5, atol=0):
        raise ValueError(
            f"pezoo's RoPE reads this model's rope config differently ({ours.numel()} frequencies, the model "
            f"{theirs.numel()}): give rope's options explicitly (base, rotary_dim, scaling)"
        )


def observes(encoding: PositionalEncoding) -> bool:
    """Whether some part of ``encoding`` keeps state along the layers (``observe``: PRISM)."""
    return acts_through(encoding, "observe")


_NO_CHECKPOINTING = (
    "{} advances its state in each layer (observe), which recomputing a checkpointed layer would advance again: "
    "pezoo.hf refuses gradient checkpointing with it (train without, or with a position-only encoding)"
)


def _adapted_init(self: Any, config: Any, *args: Any, **kwargs: Any) -> None:
    """An adapted model built from its config (``from_pretrained``, ``from_config``): the model,
    then the encoding its ``pezoo`` record names."""
    _original(type(self)).__init__(self, config, *args, **kwargs)
    record = getattr(config, CONFIG_KEY, None)
    spec, options, backend = _saved_record(record, type(self).__name__)
    with torch.device("cpu"):  # not on the meta device of a lazy init: the encoding may compute on its values
        use_encoding(self, spec, backend=backend, **options)


def _saved_record(record: Any, owner: str) -> tuple[str, dict[str, Any], str]:
    """(spec, options, backend) of a config's ``pezoo`` record, each checked for its type, so a
    hand-edited config fails here in one line rather than in Python's own words later."""
    if not isinstance(record, Mapping) or "spec" not in record:
        raise ValueError(f"{owner} needs a config with a pezoo record (spec, options, backend)")
    spec, options, backend = record["spec"], record.get("options", {}), record.get("backend", "auto")
    if not isinstance(spec, str):
        raise ValueError(f"the config's pezoo spec must be an encoding's name as a string; got {spec!r}")
    if not isinstance(options, Mapping) or not all(isinstance(key, str) for key in options):
        raise ValueError(f"the config's pezoo options must be a mapping of option names to values; got {options!r}")
    if not isinstance(backend, str):
        raise ValueError(f"the config's pezoo backend must be a backend's name; got {backend!r}")
    return spec, dict(options), backend


def _adapted_from_pretrained(cls: Any, *args: Any, **kwargs: Any) -> Any:
    """transformers' ``from_pretrained``, then the encoding's derived tables rebuilt: the loader
    leaves non-persistent buffers uninitialised (they are in no weight file). A local folder
    holding a single weight file and a sharded index at once is refused: transformers would
    read the single file, which may be another model's (:func:`pezoo.hf.weight_files.ambiguous`)."""
    path = args[0] if args else kwargs.get("pretrained_model_name_or_path")
    if isinstance(path, (str, Path)) and Path(path).is_dir():
        folder = Path(path, kwargs.get("subfolder") or "")
        both = weight_files.ambiguous(folder, kwargs.get("variant"))
        if both:
            raise ValueError(
                f"{folder} holds weights in two layouts ({', '.join(both)}), left by saves of different models "
                "or shard sizes: which are the model's is ambiguous; remove the stale ones, or save the model again"
            )
    loaded = _original(cls).from_pretrained.__func__(cls, *args, **kwargs)
    model = loaded[0] if isinstance(loaded, tuple) else loaded
    _rebuild_buffers(model)
    return loaded


def _rebuild_buffers(model: Any) -> None:
    spec, options, _ = _saved_record(model.config.pezoo, type(model).__name__)
    family = FAMILIES[auto.base_type(model.config.model_type)]
    with torch.device("cpu"):
        fresh = _build(model, family, spec, options)
    kept = dict(fresh.named_modules())
    for name, module in model.pezoo_encoding.named_modules():
        for buffer in module._non_persistent_buffers_set:
            value = getattr(kept[name], buffer)
            old = getattr(module, buffer)
            if isinstance(value, Tensor) and isinstance(old, Tensor):
                setattr(
                    module, buffer, value.to(device=old.device, dtype=old.dtype if old.is_floating_point() else None)
                )


def _save_pretrained(self: Any, save_directory: str | Path, *args: Any, **kwargs: Any) -> Any:
    """``save_pretrained``, with the config's ``auto_map`` and :data:`pezoo.hf.auto.REMOTE_CODE`
    beside the weights (see :mod:`pezoo.hf.auto`), replacing every weight file the folder held,
    of either layout (:func:`pezoo.hf.weight_files.replacing`), so the folder holds this model's
    weights alone."""
    auto_map, text = auto.remote_code(auto.base_type(self.config.model_type))
    self.config.auto_map = auto_map
    save = _original(type(self)).save_pretrained
    call = inspect.signature(save).bind_partial(self, save_directory, *args, **kwargs).arguments
    writes = (
        self.should_save_on_this_rank(call.get("is_main_process", True))
        if hasattr(self, "should_save_on_this_rank")
        else call.get("is_main_process", True)
    )
    own_weights = (
        writes and not call.get("distributed_checkpoint") and not getattr(self, "_hf_peft_config_loaded", False)
    )
    if own_weights:  # the model's own weight files (not an adapter's, not another rank's)
        with weight_files.replacing(Path(save_directory), call.get("variant")):
            out = save(self, save_directory, *args, **kwargs)
    else:
        out = save(self, save_directory, *args, **kwargs)
    Path(save_directory, auto.REMOTE_CODE).write_text(text)
    return out


def _activation_checkpointing_enable(self: Any, *args: Any, **kwargs: Any) -> Any:
    """Refused for an encoding that advances state per layer (:data:`_NO_CHECKPOINTING`); every
    other encoding recomputes exactly (its hooks read the call's context, passed to each layer)."""
    if observes(self.pezoo_encoding):
        raise ValueError(_NO_CHECKPOINTING.format(self.pezoo_encoding.name or type(self.pezoo_encoding).__name__))
    return _original(type(self)).activation_checkpointing_enable(self, *args, **kwargs)


def adapted_lm_methods() -> dict[str, Any]:
    """What the adapted causal LM classes (:mod:`pezoo.hf.auto`) add to the model's: given to
    :func:`pezoo.hf.auto.register` below (they call :func:`use_encoding`, which makes those
    classes, so auto takes them from here rather than importing this module back)."""
    return {
        "__init__": _adapted_init,
        "from_pretrained": classmethod(_adapted_from_pretrained),
        "generate": _generate,
        "save_pretrained": _save_pretrained,
        "activation_checkpointing_enable": _activation_checkpointing_enable,
    }


def _jsonable(options: Mapping[str, Any]) -> dict[str, Any]:
    try:
        json.dumps(dict(options))
    except TypeError as exc:
        raise TypeError(
            f"pezoo.hf records the options in the model's config, so they must be JSON values: {exc}"
        ) from exc
    return dict(options)


auto.register(adapted_lm_methods())
