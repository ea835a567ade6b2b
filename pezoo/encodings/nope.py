"""NoPE: no positional encoding (Kazemnejad et al. 2023).

A causal decoder can still infer position from the causal mask; this is the baseline
every other encoding is compared with. Every hook is the identity.
"""

from __future__ import annotations

from pezoo.cards import PaperCard, PlotLook
from pezoo.interface import PositionalEncoding
from pezoo.registry import register

CARD = PaperCard(look=PlotLook("#000000", ""))  # black, solid: its look on the published board


@register("nope", card=CARD)
class NoPE(PositionalEncoding):
    """No positional information at all: every hook is the identity."""

    uses_positions = False
