"""The backbone's shape, the part of a run's configuration that every encoding of a
comparison shares (the model itself is ``harness.training.backbone``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackboneConfig:
    """Shape of the backbone (identical for every encoding in a comparison).

    Attributes:
        vocab_size: shared vocabulary size.
        d_model: residual width d.
        n_layers: Transformer blocks.
        n_heads: attention heads per block.
        d_ff: MLP hidden width (default 4 d).
        backend: attention backend (``pezoo.BACKENDS``).
        causal: decoder (True) or encoder (False) attention.
        head: the output layer: ``"tied"``, the input embedding transposed (Vaswani et al.
            §3.4; every board table but one), or ``"untied"``, a linear layer of its own.
            A tied head with this backbone's initialisation holds a lookup by content
            near the guess: on associative recall the board's model reaches EM 0.48 (RoPE)
            in 10 000 steps tied and 1.00 in 4000 untied (docs/protocol-study.md,
            "associative recall").
    """

    vocab_size: int = 64
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int | None = None
    backend: str = "sdpa"
    causal: bool = True
    head: str = "tied"


HEADS = ("tied", "untied")
"""The backbone's output layers (``BackboneConfig.head``)."""
