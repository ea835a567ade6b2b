"""pezoo: a zoo of positional encodings behind one interface.

>>> import pezoo
>>> "rope" in pezoo.available()
True
>>> pe = pezoo.create("alibi", n_heads=8)
>>> both = pezoo.create("abacus+fire", dims=pezoo.ModelDims(d_model=64, n_heads=4, n_layers=2))
"""

from pezoo import backends, encodings
from pezoo import base as base  # the compatibility module: `pezoo.base.X` works after `import pezoo`, as before
from pezoo.attention import BACKENDS, SelfAttention, attend, runnable_backend
from pezoo.biases import (
    AttentionBias,
    BlockMask,
    DenseBias,
    DifferenceBias,
    LinearBias,
    RelativeFunctionBias,
    WindowMask,
)
from pezoo.cards import FAMILIES, LmPaperClaim, LmRowSelector, PaperCard, PaperClaim, PlotLook, RunFacts, TracePlots
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
from pezoo.encodings.position_coupling import CoupledSegment, Coupling  # what a task declares, position coupling reads
from pezoo.encodings.prism.fused_scan import check_scan_backend  # $PEZOO_PRISM_SCAN, for a program to check up front
from pezoo.interface import PositionalEncoding, acts_through
from pezoo.registry import (
    ENCODINGS,
    WRAPPERS,
    ModelDims,
    PluginClashError,
    Registry,
    UnknownNameError,
    available,
    card_of,
    cards,
    create,
    family_of,
    get,
    is_known,
    register,
    resolved_options,
    unknown_name_message,
    variant_label,
)
from pezoo.wrapper import Wrapper  # the base of randomized:, ssmax:, dape: and a plugin's wrapper

__version__ = "0.1.0"

__all__ = [
    "BACKENDS",
    "ENCODINGS",
    "FAMILIES",
    "FIRE",
    "PRISM",
    "WRAPPERS",
    "ALiBi",
    "Abacus",
    "AttentionBias",
    "AttentionContext",
    "BlockMask",
    "CoPE",
    "Combined",
    "CoupledSegment",
    "Coupling",
    "DenseBias",
    "DifferenceBias",
    "HardALiBi",
    "KerpleLog",
    "KerplePower",
    "LearnedAPE",
    "LearnedPRF",
    "LearnedPRFScaleHint",
    "LinearBias",
    "LmPaperClaim",
    "LmRowSelector",
    "ModelDims",
    "NoPE",
    "PaperCard",
    "PaperClaim",
    "PlotLook",
    "PluginClashError",
    "PositionalEncoding",
    "RandomizedPE",
    "Registry",
    "RelativeFunctionBias",
    "RoPE",
    "RunFacts",
    "SelfAttention",
    "SinusoidalAPE",
    "T5Bias",
    "TracePlots",
    "UnknownNameError",
    "WindowMask",
    "Wrapper",
    "XPos",
    "acts_through",
    "attend",
    "available",
    "backends",
    "card_of",
    "cards",
    "check_scan_backend",
    "combine",
    "create",
    "encodings",
    "family_of",
    "get",
    "is_known",
    "register",
    "resolved_options",
    "runnable_backend",
    "unknown_name_message",
    "variant_label",
]
