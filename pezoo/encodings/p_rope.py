"""p-RoPE (Barbero et al. 2024, "Round and Round We Go! What makes Rotary Positional
Encodings useful?", ICLR 2025): RoPE that rotates only the highest-frequency fraction p of
its feature pairs and leaves the others unrotated (frequency 0).

A RoPE option in name: ``p_rope`` is ``rope`` with ``scaling={"rope_type": "p_rope", "p": p}``
(:func:`pezoo.encodings.rope_scaling.rope_frequencies`): pair i keeps θ_i = base^(−2i/r) for
i < ⌊p·r/2⌋ and gets 0 for the rest. It is registered under its own name so that it is run,
tabled and carded as the paper's encoding, trained with p-RoPE from the start (the paper's
setting), not as an inference-time variant of a RoPE-trained model.

Axis letters: b batch, h heads, i positions, e head dim, r rotary dim (r = e).
"""

from __future__ import annotations

from typing import Any

from pezoo.cards import PaperCard
from pezoo.encodings.rope import RoPE
from pezoo.registry import ModelDims, register

__all__ = ["PRoPE"]

PAPER = (
    "Barbero et al. 2024, “Round and Round We Go! What makes Rotary Positional Encodings useful?” "
    "(ICLR 2025, arXiv 2410.06205)"
)

P_PAPER = 0.75
"""The fraction of the paper's best p-RoPE Gemma 2B run in its Table 2 (p = 0.75)."""


def paper_options(task: str, dims: ModelDims) -> dict[str, Any]:
    """p = 0.75, the paper's Table 2 run that beats RoPE, on every task."""
    return {"p": P_PAPER}


CARD = PaperCard(paper=PAPER, setup=paper_options)
"""No board claim: the paper's claim (its Table 2) is perplexity at the training length, which
neither track tests as a claim; its page says so."""


@register("p_rope", card=CARD)
class PRoPE(RoPE):
    """p-RoPE (Barbero et al. 2024): RoPE keeping the ⌊p·e/2⌋ highest frequencies, the rest 0.

    Args:
        head_dim: per-head q/k width e.
        p: fraction of frequency pairs rotated, in [0, 1]: 1 is RoPE, 0 is NoPE (default 0.75).
        base: frequency base (10000).
        layout: ``"interleaved"`` (default) or ``"half"``, as :class:`RoPE`.
    """

    def __init__(
        self, *, head_dim: int, p: float = P_PAPER, base: float = 10000.0, layout: str = "interleaved"
    ) -> None:
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:  # NaN too
            # said here, not by the scaling it becomes (whose error read "rope scaling: p ...")
            raise ValueError(f"p_rope: p must be a number in [0, 1] (1 is RoPE, 0 is NoPE), got {p!r}")
        super().__init__(head_dim=head_dim, base=base, layout=layout, scaling={"rope_type": "p_rope", "p": p})
        self.p = float(p)

    def extra_repr(self) -> str:
        text = f"head_dim={self.head_dim}, p={self.p:g}, base={self.base:g}"
        return text if self.layout == "interleaved" else f"{text}, layout={self.layout!r}"
