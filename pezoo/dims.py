"""The shape of the model an encoding is built for (:class:`ModelDims`): below the registry,
which builds encodings for it, and the paper cards (``pezoo.cards``), whose setups are sized
by it, so neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral

__all__ = ["SHAPE_KEYS", "ModelDims"]


@dataclass(frozen=True)
class ModelDims:
    """The shape of the model an encoding is built for.

    ``create(name, dims=ModelDims(...))`` passes each field to the encoding's
    constructor only if the constructor takes a keyword of that name, so one call
    builds any encoding for a given backbone (NoPE takes none, RoPE takes
    ``head_dim``, ALiBi ``n_heads``, APE ``d_model``, PRISM several).

    ``head_dim`` is each head's q/k width, ``d_model / n_heads`` unless given: many released
    models decouple the two (Gemma 2 2B: d 2304, 8 heads of 256; Qwen3 0.6B: d 1024, 16 heads
    of 128), and an encoding that rotates or widens q and k takes ``head_dim``, one that
    adds to the residual stream ``d_model``.
    """

    d_model: int
    n_heads: int
    n_layers: int
    head_dim: int = None  # type: ignore[assignment]  # d_model // n_heads when not given: set in __post_init__

    def __post_init__(self) -> None:
        sizes = (self.d_model, self.n_heads, self.n_layers, 1 if self.head_dim is None else self.head_dim)
        if any(isinstance(n, bool) or not isinstance(n, Integral) for n in sizes) or min(sizes) < 1:
            raise ValueError(f"ModelDims needs positive integer sizes, got {self}")
        if self.head_dim is None:
            if self.d_model % self.n_heads:
                raise ValueError(
                    f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}: heads would be "
                    f"{self.d_model / self.n_heads:g} wide (give head_dim where the model's heads are another width)"
                )
            object.__setattr__(self, "head_dim", self.d_model // self.n_heads)

    def as_kwargs(self) -> dict[str, int]:
        """The constructor keywords of the shape, :data:`SHAPE_KEYS`, with their values."""
        return {key: getattr(self, key) for key in SHAPE_KEYS}


SHAPE_KEYS = ("d_model", "n_heads", "n_layers", "head_dim")
"""The keywords that describe the model, not one encoding (:meth:`ModelDims.as_kwargs`): given
to a wrapper or a combination, each encoding inside that takes one gets it (``pezoo.create``)."""
