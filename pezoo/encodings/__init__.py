"""Every in-tree encoding, one module per family; importing registers them."""

from pezoo.encodings.alibi import ALiBi, alibi_slopes
from pezoo.encodings.ape import SinusoidalAPE, sinusoid_table
from pezoo.encodings.nope import NoPE
from pezoo.encodings.rope import RoPE, rope_angles, rotate_pairs

__all__ = ["ALiBi", "NoPE", "RoPE", "SinusoidalAPE", "alibi_slopes", "rope_angles", "rotate_pairs", "sinusoid_table"]
