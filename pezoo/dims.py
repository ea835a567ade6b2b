"""The shape of the model an encoding is built for (:class:`ModelDims`): below the registry,
which builds encodings for it, and the paper cards (``pezoo.cards``), whose setups are sized
by it, so neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SHAPE_KEYS", "ModelDims"]


@dataclass(frozen=True)
class ModelDims:
    """The shape of the model an encoding is built for.

    ``create(name, dims=ModelDims(...))`` passes each field to the encoding's
    constructor only if the constructor takes a keyword of that name, so one call
    builds any encoding for a given backbone (NoPE takes none, RoPE takes
    ``head_dim``, ALiBi ``n_heads``, APE ``d_model``, PRISM several).
    """

    d_model: int
    n_heads: int
    n_layers: int

    def __post_init__(self) -> None:
        if min(self.d_model, self.n_heads, self.n_layers) < 1:
            raise ValueError(f"ModelDims needs positive sizes, got {self}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}: heads would be "
                f"{self.d_model / self.n_heads:g} wide"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def as_kwargs(self) -> dict[str, int]:
        """The constructor keywords of the shape, :data:`SHAPE_KEYS`, with their values."""
        return {key: getattr(self, key) for key in SHAPE_KEYS}


SHAPE_KEYS = ("d_model", "n_heads", "n_layers", "head_dim")
"""The keywords that describe the model, not one encoding (:meth:`ModelDims.as_kwargs`): given
to a wrapper or a combination, each encoding inside that takes one gets it (``pezoo.create``)."""
