"""Every in-tree encoding, one module per family; importing registers them.

Every module of this folder is imported, so a new encoding's file registers it without
being named here; the classes imported by name below are pezoo's public API
(``from pezoo import RoPE``). A new encoding is reached by its registry key
(``pezoo.create("name")``) or from its own module until it joins that list.
"""

import importlib
import pkgutil

from pezoo.combined import Combined, combine
from pezoo.encodings.abacus import Abacus, abacus_indices
from pezoo.encodings.alibi import ALiBi, alibi_slopes
from pezoo.encodings.ape import SinusoidalAPE, sinusoid_table
from pezoo.encodings.cope import CoPE, cope_bias, cope_interpolate, cope_positions
from pezoo.encodings.fire import FIRE, fire_bias, fire_bias_dense
from pezoo.encodings.hard_alibi import HardALiBi, hard_alibi_windows
from pezoo.encodings.kerple import KerpleLog, KerplePower, kerple_log_bias, kerple_power_bias
from pezoo.encodings.learned_ape import LearnedAPE
from pezoo.encodings.learned_prf import LearnedPRF, LearnedPRFScaleHint
from pezoo.encodings.nope import NoPE
from pezoo.encodings.prism import PRISM
from pezoo.encodings.randomized import RandomizedPE, RandomizedSinusoidalAPE, sample_sorted_positions
from pezoo.encodings.rope import RoPE, rope_angles, rotate_pairs
from pezoo.encodings.t5 import T5Bias, t5_relative_bucket
from pezoo.encodings.xpos import XPos, xpos_rotation, xpos_zeta

__all__ = [
    "FIRE",
    "PRISM",
    "ALiBi",
    "Abacus",
    "CoPE",
    "Combined",
    "HardALiBi",
    "KerpleLog",
    "KerplePower",
    "LearnedAPE",
    "LearnedPRF",
    "LearnedPRFScaleHint",
    "NoPE",
    "RandomizedPE",
    "RandomizedSinusoidalAPE",
    "RoPE",
    "SinusoidalAPE",
    "T5Bias",
    "XPos",
    "abacus_indices",
    "alibi_slopes",
    "combine",
    "cope_bias",
    "cope_interpolate",
    "cope_positions",
    "fire_bias",
    "fire_bias_dense",
    "hard_alibi_windows",
    "kerple_log_bias",
    "kerple_power_bias",
    "rope_angles",
    "rotate_pairs",
    "sample_sorted_positions",
    "sinusoid_table",
    "t5_relative_bucket",
    "xpos_rotation",
    "xpos_zeta",
]

for _module in pkgutil.iter_modules(__path__):  # sorted by file name
    importlib.import_module(f"{__name__}.{_module.name}")

del _module
