"""An adapted model as a transformers model type of its own, so that a saved one loads as itself.

``use_encoding`` turns a ``LlamaForCausalLM`` into a :class:`PezooLlamaForCausalLM` (its
config into a ``PezooLlamaConfig``, model type ``"pezoo_llama"``), a subclass made here for
each family of :data:`pezoo.hf.families.FAMILIES`; its base model and attention layers into
subclasses that run pezoo's forwards. The classes only add: the weights, their names and the
config's fields are the model's own, plus the encoding's submodule ``pezoo_encoding`` and the
config's ``pezoo`` record.

Importing :mod:`pezoo.hf` registers every ``pezoo_<type>`` config with ``AutoConfig`` and its
model with ``AutoModelForCausalLM``, so ``AutoModelForCausalLM.from_pretrained(folder)`` builds
the adapted model, and transformers loads the encoding's weights with the rest (from its own
weight files and index: nothing else in the folder is read). ``save_pretrained`` also writes
``pezoo_model.py`` and the config's ``auto_map`` pointing at it, transformers' way for a model
type it does not know: where pezoo is installed, ``from_pretrained(folder, trust_remote_code=True)``
loads it without importing pezoo.hf first; where it is not, transformers stops with "requires
the following packages that were not found in your environment: pezoo"; and without
``trust_remote_code`` nor pezoo.hf imported it stops at the unknown model type. No path loads
the untouched model silently.

The classes are named ``Pezoo`` + the original's name in this module, where pickling finds
them (made on first use, by name: :func:`__getattr__`).
"""

from __future__ import annotations

import importlib
from typing import Any

from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES, model_type_to_module_name
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from pezoo.hf.families import FAMILIES, attention_forward
from pezoo.hf.forward import _base_forward, _layer_forward

PREFIX = "pezoo_"
"""Model types of adapted models: ``pezoo_`` + the original's (``pezoo_llama``)."""

REMOTE_CODE = "pezoo_model.py"
"""The file ``save_pretrained`` writes beside the weights for ``trust_remote_code`` loading."""

_MADE: dict[str, type] = {}

_LM_METHODS: dict[str, Any] = {}
"""What the adapted causal LM classes add to the model's: given by :mod:`pezoo.hf` to
:func:`register` (they call ``use_encoding``, which makes the classes here)."""


def base_type(model_type: str) -> str:
    """The original model type of an adapted one (``pezoo_llama`` -> ``llama``); others unchanged."""
    return model_type[len(PREFIX) :] if model_type.startswith(PREFIX) else model_type


def _original_module(model_type: str, kind: str) -> Any:
    """transformers' ``configuration`` or ``modeling`` module of a model type (``llama4_text``
    lives in ``transformers.models.llama4``)."""
    folder = model_type_to_module_name(model_type)
    return importlib.import_module(f"transformers.models.{folder}.{kind}_{folder}")


def config_class(model_type: str) -> type[PretrainedConfig]:
    """The adapted config class of a family (``llama`` -> ``PezooLlamaConfig``)."""
    original = getattr(_original_module(model_type, "configuration"), CONFIG_MAPPING_NAMES[model_type])
    name = f"Pezoo{original.__name__}"
    if name not in _MADE:
        _MADE[name] = type(name, (original,), {"model_type": PREFIX + model_type, "__module__": __name__})
    return _MADE[name]


def original_causal_lm(model_type: str) -> type[PreTrainedModel]:
    """transformers' causal LM class of a family (``llama`` -> ``LlamaForCausalLM``): what
    ``AutoModelForCausalLM`` builds for it, and the only class of it ``use_encoding`` adapts."""
    return getattr(_original_module(model_type, "modeling"), MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])


def causal_lm_class(model_type: str) -> type[PreTrainedModel]:
    """The adapted causal LM class of a family (``llama`` -> ``PezooLlamaForCausalLM``)."""
    if not _LM_METHODS:
        raise RuntimeError("pezoo.hf.auto makes adapted models once pezoo.hf has registered them (import pezoo.hf)")
    original = original_causal_lm(model_type)
    name = f"Pezoo{original.__name__}"
    if name not in _MADE:
        body = {**_LM_METHODS, "config_class": config_class(model_type), "__module__": __name__}
        _MADE[name] = type(name, (original,), body)
    return _MADE[name]


def part_class(original: type, forward: Any) -> type:
    """A subclass of a model's part (its base model, an attention layer) whose forward is ``forward``."""
    name = f"Pezoo{original.__name__}"
    made = _MADE.get(name)
    if made is None:
        made = _MADE[name] = type(name, (original,), {"forward": forward, "__module__": __name__})
    if made.__mro__[1] is not original:
        raise ValueError(f"pezoo.hf: two classes named {original.__name__} ({original} and {made.__mro__[1]})")
    return made


def keep_recording(*models: PreTrainedModel) -> None:
    """transformers records hidden states and attentions by a registry keyed on the model's
    class name, filled in ``__init__``: an instance whose class ``use_encoding`` replaced is
    entered under its new name."""
    try:
        from transformers.utils.output_capturing import _CAN_RECORD_REGISTRY
    except ImportError:  # a transformers without the registry records by other means
        return
    for model in models:
        _CAN_RECORD_REGISTRY[model] = getattr(model, "_can_record_outputs", None)


def register(lm_methods: dict[str, Any]) -> None:
    """Register every family's adapted config and model with the Auto classes (idempotent),
    the models made with ``lm_methods`` (:func:`pezoo.hf.adapted_lm_methods`). A family the
    installed transformers does not have (5.20 lacks flint and apertus1p5_text) is left out: no
    model of it can be loaded there."""
    _LM_METHODS.update(lm_methods)
    for model_type in FAMILIES:
        if model_type not in CONFIG_MAPPING_NAMES or model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
            continue
        config = config_class(model_type)
        AutoConfig.register(PREFIX + model_type, config, exist_ok=True)
        AutoModelForCausalLM.register(config, causal_lm_class(model_type), exist_ok=True)


def remote_code(model_type: str) -> tuple[dict[str, str], str]:
    """The config's ``auto_map`` and the text of :data:`REMOTE_CODE` for a family."""
    config, model = config_class(model_type).__name__, causal_lm_class(model_type).__name__
    module = REMOTE_CODE.removesuffix(".py")
    auto_map = {"AutoConfig": f"{module}.{config}", "AutoModelForCausalLM": f"{module}.{model}"}
    text = (
        '"""A transformers model adapted by pezoo.hf.use_encoding: loading it needs pezoo '
        '(pip install \'pezoo[hf]\')."""\n\n'
        f"from pezoo.hf.auto import {config}, {model}\n\n"
        f'__all__ = ["{config}", "{model}"]\n'
    )
    return auto_map, text


def adapted_part_forward(original: type) -> Any:
    """The forward of an adapted part of a model: the base model's, a decoder layer's (the
    modules transformers checkpoints) or an attention layer's."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    if issubclass(original, PreTrainedModel):
        return _base_forward
    return _layer_forward if issubclass(original, GradientCheckpointingLayer) else attention_forward


def __getattr__(name: str) -> type:
    """An adapted class by name, made on first use (unpickling in a fresh process)."""
    if name in _MADE:
        return _MADE[name]
    if name.startswith("Pezoo"):
        original = name[len("Pezoo") :]
        for model_type in FAMILIES:
            if CONFIG_MAPPING_NAMES.get(model_type) == original:
                return config_class(model_type)
            if MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type) == original:
                return causal_lm_class(model_type)
        for model_type in FAMILIES:
            cls = getattr(_original_module(model_type, "modeling"), original, None)
            if isinstance(cls, type):
                return part_class(cls, adapted_part_forward(cls))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
