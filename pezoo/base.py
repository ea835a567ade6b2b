"""Compatibility: the names of the interface, the biases and the registry in one import.

pezoo's core is four modules, one concept each, every floor pointing down:

    pezoo.context     AttentionContext, what an encoding sees inside attention, and the
                      argument checks every hook shares
    pezoo.biases      structured attention biases: an encoding says *what*, each backend *how*
    pezoo.interface   PositionalEncoding, the one interface (its seven hooks)
    pezoo.registry    names to factories, plugins, wrappers, combinations, ``create``

Before they were split, all of it lived here, and plugins import it from here
(``from pezoo.base import PositionalEncoding, register``): this module re-exports those
names, unchanged, for them. pezoo's own modules import from the four modules above.
"""

from __future__ import annotations

from pezoo.biases import (
    AttentionBias,
    BlockMask,
    DenseBias,
    DifferenceBias,
    LinearBias,
    RelativeFunctionBias,
    WindowMask,
)
from pezoo.context import AttentionContext, check_embed, check_layer, check_length, check_number, check_qk, check_sizes
from pezoo.interface import PositionalEncoding, check_lengths
from pezoo.registry import (
    ENCODINGS,
    ENTRY_POINT_GROUP,
    WRAPPERS,
    ModelDims,
    PluginClashError,
    Registry,
    UnknownNameError,
    available,
    create,
    get,
    is_known,
    register,
    resolved_options,
    unknown_name_message,
)

__all__ = [
    "ENCODINGS",
    "ENTRY_POINT_GROUP",
    "WRAPPERS",
    "AttentionBias",
    "AttentionContext",
    "BlockMask",
    "DenseBias",
    "DifferenceBias",
    "LinearBias",
    "ModelDims",
    "PluginClashError",
    "PositionalEncoding",
    "Registry",
    "RelativeFunctionBias",
    "UnknownNameError",
    "WindowMask",
    "available",
    "check_embed",
    "check_layer",
    "check_length",
    "check_lengths",
    "check_number",
    "check_qk",
    "check_sizes",
    "create",
    "get",
    "is_known",
    "register",
    "resolved_options",
    "unknown_name_message",
]
