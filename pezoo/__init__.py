"""pezoo: a zoo of positional encodings behind one interface.

>>> import pezoo
>>> "rope" in pezoo.available()
True
>>> pe = pezoo.create("alibi", n_heads=8)
>>> both = pezoo.create("abacus+fire", dims=pezoo.ModelDims(d_model=64, n_heads=4, n_layers=2))
"""

from pezoo import backends, encodings
from pezoo.attention import BACKENDS, SelfAttention, attend
from pezoo.base import (
    AttentionBias,
    AttentionContext,
    DenseBias,
    LinearBias,
    ModelDims,
    PositionalEncoding,
    RelativeFunctionBias,
    UnknownNameError,
    WindowMask,
    available,
    create,
    get,
    is_known,
    register,
)
from pezoo.encodings import (
    PRISM,
    ALiBi,
    Combined,
    HardALiBi,
    LearnedAPE,
    LearnedPRF,
    LearnedPRFScaleHint,
    NoPE,
    RandomizedPE,
    RoPE,
    SinusoidalAPE,
    combine,
)

__version__ = "0.1.0"

__all__ = [
    "BACKENDS",
    "PRISM",
    "ALiBi",
    "AttentionBias",
    "AttentionContext",
    "Combined",
    "DenseBias",
    "HardALiBi",
    "LearnedAPE",
    "LearnedPRF",
    "LearnedPRFScaleHint",
    "LinearBias",
    "ModelDims",
    "NoPE",
    "PositionalEncoding",
    "RandomizedPE",
    "RelativeFunctionBias",
    "RoPE",
    "SelfAttention",
    "SinusoidalAPE",
    "UnknownNameError",
    "WindowMask",
    "attend",
    "available",
    "backends",
    "combine",
    "create",
    "encodings",
    "get",
    "is_known",
    "register",
]
