"""NoPE: no positional encoding (Kazemnejad et al. 2023).

A causal decoder can still infer position from the causal mask; this is the baseline
every other encoding is compared with. Every hook is the identity.
"""

from __future__ import annotations

from pezoo.interface import PositionalEncoding
from pezoo.registry import register


@register("nope")
class NoPE(PositionalEncoding):
    """No positional information at all: every hook is the identity."""

    uses_positions = False
