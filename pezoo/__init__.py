"""pezoo: a zoo of positional encodings behind one interface.

>>> import pezoo
>>> "rope" in pezoo.available()
True
>>> pe = pezoo.create("alibi", n_heads=8)
>>> both = pezoo.create("abacus+fire", dims=pezoo.ModelDims(d_model=64, n_heads=4, n_layers=2))
"""

from pezoo import backends, encodings
from pezoo import base as base  # the compatibility module: `pezoo.base.X` works after `import pezoo`, as before
from pezoo.attention import BACKENDS, SelfAttention, attend
from pezoo.biases import AttentionBias, BlockMask, DenseBias, LinearBias, RelativeFunctionBias, WindowMask
from pezoo.context import AttentionContext
from pezoo.encodings import (
    FIRE,
    PRISM,
    Abacus,
    ALiBi,
    Combined,
    CoPE,
    HardALiBi,
    KerpleLog,
    KerplePower,
    LearnedAPE,
    LearnedPRF,
    LearnedPRFScaleHint,
    NoPE,
    RandomizedPE,
    RoPE,
    SinusoidalAPE,
    T5Bias,
    XPos,
    combine,
)
from pezoo.interface import PositionalEncoding
from pezoo.registry import (
    ModelDims,
    PluginClashError,
    UnknownNameError,
    available,
    create,
    get,
    is_known,
    register,
    resolved_options,
)

__version__ = "0.1.0"

__all__ = [
    "BACKENDS",
    "FIRE",
    "PRISM",
    "ALiBi",
    "Abacus",
    "AttentionBias",
    "AttentionContext",
    "BlockMask",
    "CoPE",
    "Combined",
    "DenseBias",
    "HardALiBi",
    "KerpleLog",
    "KerplePower",
    "LearnedAPE",
    "LearnedPRF",
    "LearnedPRFScaleHint",
    "LinearBias",
    "ModelDims",
    "NoPE",
    "PluginClashError",
    "PositionalEncoding",
    "RandomizedPE",
    "RelativeFunctionBias",
    "RoPE",
    "SelfAttention",
    "SinusoidalAPE",
    "T5Bias",
    "UnknownNameError",
    "WindowMask",
    "XPos",
    "attend",
    "available",
    "backends",
    "combine",
    "create",
    "encodings",
    "get",
    "is_known",
    "register",
    "resolved_options",
]
