"""The interface, the structured biases and the registry, in one import (compatibility).

pezoo's core is four modules, one concept each, every floor pointing down:

    pezoo.context     AttentionContext, what an encoding sees inside attention, and the
                      argument checks every hook shares
    pezoo.biases      structured attention biases: an encoding says *what*, each backend *how*
    pezoo.interface   PositionalEncoding, the one interface (its seven hooks)
    pezoo.registry    names to factories, plugins, wrappers, combinations, ``create``

``from pezoo.base import PositionalEncoding, register`` (what plugins written before the
split import) keeps working: this module re-exports their names.
"""

from __future__ import annotations

from pezoo.biases import (
    AttentionBias as AttentionBias,
)
from pezoo.biases import (
    BlockMask as BlockMask,
)
from pezoo.biases import (
    DenseBias as DenseBias,
)
from pezoo.biases import (
    LinearBias as LinearBias,
)
from pezoo.biases import (
    RelativeFunctionBias as RelativeFunctionBias,
)
from pezoo.biases import (
    WindowMask as WindowMask,
)
from pezoo.context import (
    AttentionContext as AttentionContext,
)
from pezoo.context import (
    check_embed as check_embed,
)
from pezoo.context import (
    check_layer as check_layer,
)
from pezoo.context import (
    check_length as check_length,
)
from pezoo.context import (
    check_number as check_number,
)
from pezoo.context import (
    check_qk as check_qk,
)
from pezoo.context import (
    check_sizes as check_sizes,
)
from pezoo.interface import (
    PositionalEncoding as PositionalEncoding,
)
from pezoo.interface import (
    check_lengths as check_lengths,
)
from pezoo.registry import (
    ENCODINGS as ENCODINGS,
)
from pezoo.registry import (
    ENTRY_POINT_GROUP as ENTRY_POINT_GROUP,
)
from pezoo.registry import (
    WRAPPERS as WRAPPERS,
)
from pezoo.registry import (
    ModelDims as ModelDims,
)
from pezoo.registry import (
    PluginClashError as PluginClashError,
)
from pezoo.registry import (
    Registry as Registry,
)
from pezoo.registry import (
    UnknownNameError as UnknownNameError,
)
from pezoo.registry import (
    _class_overrides as _class_overrides,
)
from pezoo.registry import (
    available as available,
)
from pezoo.registry import (
    create as create,
)
from pezoo.registry import (
    get as get,
)
from pezoo.registry import (
    is_known as is_known,
)
from pezoo.registry import (
    register as register,
)
from pezoo.registry import (
    resolved_options as resolved_options,
)
from pezoo.registry import (
    unknown_name_message as unknown_name_message,
)

__all__ = [
    "ENCODINGS",
    "ENTRY_POINT_GROUP",
    "WRAPPERS",
    "AttentionBias",
    "AttentionContext",
    "BlockMask",
    "DenseBias",
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
