"""Learned absolute position embeddings (Gehring et al. 2017, ConvS2S §3.1).

A table ``E`` of ``max_position`` learned vectors of width d; the token at position p
gets ``x + E[p]`` before layer 0. Positions at or beyond ``max_position`` have no row
and raise a ``ValueError`` (never a silent clamp or wrap); under ``torch.compile`` the
check is a device-side assert, so the forward pass stays one graph.

The default ``max_position`` (2048) equals the default range L of randomized PE, so
``randomized:learned_ape`` works out of the box: under randomization every row of the
table is visited during training, whereas a plain ``learned_ape`` trained on lengths
<= N only ever updates rows 0..N-1 and its rows past N stay at their initial values.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from pezoo.cards import PaperCard, PlotLook
from pezoo.context import check_embed, check_number, check_sizes
from pezoo.interface import PositionalEncoding
from pezoo.registry import register

DEFAULT_MAX_POSITION = 2048


CARD = PaperCard(look=PlotLook("#009E73", "7 3", "square"))  # bluish green, dashed: its look on the published board


@register("learned_ape", card=CARD)
class LearnedAPE(PositionalEncoding):
    """Learned absolute PE (Gehring et al. 2017): ``x + E[pos]``, E a (max_position, d) table.

    Args:
        d_model: embedding width d.
        max_position: number of rows; positions must lie in ``[0, max_position)``.
        init_std: standard deviation of the normal initialisation (0.02, as GPT-2).
    """

    max_position: int  # always bounded: the table's rows

    def __init__(self, *, d_model: int, max_position: int = DEFAULT_MAX_POSITION, init_std: float = 0.02) -> None:
        super().__init__()
        check_sizes("learned_ape", d_model=d_model)
        if max_position < 1:
            raise ValueError(f"max_position must be >= 1, got {max_position}")
        check_number("learned_ape", "init_std", init_std, at_least=0)
        self.d_model, self.init_std = d_model, init_std
        self.max_position = max_position
        self.table = nn.Parameter(torch.randn(max_position, d_model) * init_std)  # (max_position, d)

    def reset_parameters(self) -> None:
        """Re-initialise the parameters as the constructor does (deferred initialisation:
        after building on ``meta`` and ``to_empty``)."""
        with torch.no_grad():
            self.table.normal_(0.0, self.init_std)

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        """x (b, s, d), pos (b|1, s) -> x + E[pos]; raises if a position has no row."""
        check_embed(self.name, x, pos, self.d_model, rows=True)
        if pos.is_meta:  # shape inference: positions without values, nothing to check
            pass
        elif torch.compiler.is_compiling() or (pos.is_cuda and torch.cuda.is_current_stream_capturing()):
            # a host-side check would break the graph (compiled or CUDA) and sync; the assert runs on the device
            in_range = ((pos >= 0) & (pos < self.max_position)).all()
            torch._assert_async(in_range, f"learned_ape has rows for positions 0..{self.max_position - 1} only")
        elif pos.numel() and (int(pos.max()) >= self.max_position or int(pos.min()) < 0):
            raise ValueError(
                f"learned_ape has rows for positions 0..{self.max_position - 1} but got positions in "
                f"[{int(pos.min())}, {int(pos.max())}]; build it with a larger max_position"
            )
        return x + self.table[pos].to(x.dtype)  # (b|1, s, d) broadcast over b

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_position={self.max_position}"
