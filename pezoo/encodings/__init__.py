"""Every in-tree encoding, one module per family; importing registers them."""

from pezoo.encodings.alibi import ALiBi, alibi_slopes
from pezoo.encodings.ape import SinusoidalAPE, sinusoid_table
from pezoo.encodings.hard_alibi import HardALiBi, hard_alibi_windows
from pezoo.encodings.learned_ape import LearnedAPE
from pezoo.encodings.learned_prf import LearnedPRF, LearnedPRFScaleHint
from pezoo.encodings.nope import NoPE
from pezoo.encodings.prism import PRISM
from pezoo.encodings.randomized import RandomizedPE, RandomizedSinusoidalAPE, sample_sorted_positions
from pezoo.encodings.rope import RoPE, rope_angles, rotate_pairs
from pezoo.encodings.t5 import T5Bias, t5_relative_bucket

__all__ = [
    "PRISM",
    "ALiBi",
    "HardALiBi",
    "LearnedAPE",
    "LearnedPRF",
    "LearnedPRFScaleHint",
    "NoPE",
    "RandomizedPE",
    "RandomizedSinusoidalAPE",
    "RoPE",
    "SinusoidalAPE",
    "T5Bias",
    "alibi_slopes",
    "hard_alibi_windows",
    "rope_angles",
    "rotate_pairs",
    "sample_sorted_positions",
    "sinusoid_table",
    "t5_relative_bucket",
]
