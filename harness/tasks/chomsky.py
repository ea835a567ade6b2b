"""The Chomsky-hierarchy tasks (Delétang et al. 2023) as the randomized-PE paper uses them.

Ruoss et al. 2023 ("Randomized Positional Encodings Boost Length Generalization of
Transformers", Table 1) train on every length 1..40 and test on 41..500 with an encoder
that reads the input followed by ``output_length(n)`` blanks, scoring per-token accuracy
under each task's mask. The exact semantics (vocabularies, sampling, targets, masks)
are those of the public code that produced the paper's numbers (the code released with
Delétang et al. 2023, "Neural Networks and the Chomsky Hierarchy", which Ruoss et al. reuse).

Vocabulary mapping into the shared vocabulary: every id that the source writes as a
digit (bits, residues mod 5, stack actions 2/3/4, the missing-symbol and padding ids
2/3, the terminator 2 of the arithmetic outputs) becomes that digit token; ids that
denote an operator, bracket, variable or equals sign become their symbol (``+ - * ( )
x``, and ``≡`` for solve_equation's equals sign so that ``=`` stays the harness's
prompt separator). Targets carry no ``.``: that end marker is the PRISM paper's.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar

from harness.tasks.base import Task

RUOSS = "Ruoss et al. 2023 (randomized PE), Table 1"
BITS = ("0", "1")
TERMINATOR = "2"


def digit_tokens(k: int) -> tuple[str, ...]:
    """The tokens "0".."k-1"."""
    return tuple(str(i) for i in range(k))


def bits_le(value: int, width: int = 0) -> list[str]:
    """Binary of ``value``, least significant bit first, zero-filled to ``width`` bits
    (at least one bit: 0 is ``["0"]``)."""
    return list(f"{value:b}".zfill(width)[::-1])


def value_le(bits: list[str] | tuple[str, ...]) -> int:
    """Inverse of ``bits_le``."""
    return int("".join(reversed(bits)), 2) if bits else 0


def through_terminator(target: tuple[str, ...]) -> tuple[bool, ...]:
    """Mask scoring every target token up to and including the first terminator ``2``."""
    stop = target.index(TERMINATOR)
    return tuple(i <= stop for i in range(len(target)))


class ChomskyTask(Task):
    """A task of the randomized-PE paper: fixed output length, per-token accuracy.

    Subclasses give ``output_length(n)``; the mask defaults to every target token.
    """

    source: ClassVar[str] = RUOSS
    metric: ClassVar[str] = "token_accuracy"
    train_scales: ClassVar[tuple[int, int]] = (1, 40)
    test_scales: ClassVar[tuple[int, int]] = (41, 500)

    @abstractmethod
    def output_length(self, n: int) -> int:
        """Number of target tokens at scale n (the encoder reads this many blanks)."""

    def accuracy_mask(self, target: tuple[str, ...]) -> tuple[bool, ...] | None:
        return (True,) * len(target)
