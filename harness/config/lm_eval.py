"""The evaluation section of a language-modelling run (``RunConfig.eval`` for the tasks of
``harness.tasks.lm``): the test lengths, the held-out regions scored, the tail mode's target,
the attention's query block, the passkey grid and the curves by position, and a variant's
short fine-tune.

An algorithmic run's ``eval`` is an ``EvalConfig`` (scales, samples, decoding); a
language-modelling run's is an :class:`LmEvalConfig`: one ``RunConfig`` for both tracks,
its task saying which section it holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from harness.config.checks import check_choice, check_int, shown
from harness.config.precisions import PRECISIONS

__all__ = ["MAX_LM_LENGTH", "MODES", "LmEvalConfig"]

MAX_LM_LENGTH = 65_536
"""The longest test length a config may ask for."""

MODES = ("windows", "tail")
"""Evaluation modes: ``windows`` (every byte of a region scored in non-overlapping windows
of S tokens: the papers' default) and ``tail`` (the region's last ``tail`` bytes scored with
S - ``tail`` bytes of context before them: ALiBi App. B's fixed-target evaluation)."""


@dataclass(frozen=True)
class LmEvalConfig:
    """What a language-modelling run scores.

    Attributes:
        lengths: the test lengths S in tokens, increasing; the first should be the
            training length L (the reference every ratio is taken against).
        regions: how many held-out regions of ``max(lengths)`` bytes are scored, spread
            through the held-out documents in proportion to their lengths, none holding a
            64-byte run of the training text (``harness.tasks.lm.data.scored_regions``).
        tail: the tail mode's target bytes, the last ``tail`` of each region (lengths below
            it have no tail score; at ``tail`` = L the tail mode has its reference at L).
        chunk: queries per attention block: a forward pass of S tokens is fed as blocks of
            ``chunk`` queries against the cached keys, so no (S, S) score tensor exists.
        batch_size: windows per forward pass.
        precision: the arithmetic of evaluation; None: the training's.
        passkey: samples per cell of the passkey grid (``harness.tasks.lm.passkey``: a key hidden
            at each depth of :data:`~harness.tasks.lm.passkey.DEPTHS` in held-out text, at each test
            length above its 104 fixed bytes); 0: not measured. Added after records were
            published: at 0 it is left out of the config's JSON (:meth:`LmConfig.to_dict`),
            so their run ids and checksums stand.
        positions: whether the windows mode also keeps, at each length, the loss by position
            within the window (``harness.records.lm_positions``: nats and bytes per half-octave
            bucket; the record's ``positions`` key). Added after records were published: when
            False it is left out of the config's JSON, as ``passkey`` at 0.
        finetune_steps: an inference-time variant's short fine-tune (``RunConfig.eval_pe_options``):
            its trained run's final weights trained this many more steps at
            ``finetune_length`` tokens with the variant's encoding, at a tenth of the peak
            learning rate, before they are scored (position interpolation's and YaRN's
            fine-tune, Chen et al. 2023 §3; Peng et al. 2023 §4); 0: scored as trained.
        finetune_length: the fine-tune's window in tokens (0 with no fine-tune).

    The loop's periodic-evaluation settings have one value on this track (a run is scored
    once, at its end): ``every`` 0, ``start_below_loss`` None, ``select`` ``final``.
    """

    every: ClassVar[int] = 0
    start_below_loss: ClassVar[float | None] = None
    select: ClassVar[str] = "final"

    lengths: tuple[int, ...] = (256, 512, 1024, 2048, 4096)
    regions: int = 64
    tail: int = 256
    chunk: int = 256
    batch_size: int = 4
    precision: str | None = None
    passkey: int = 0
    positions: bool = False
    finetune_steps: int = 0
    finetune_length: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.lengths, tuple) or not self.lengths:
            raise ValueError(f"eval.lengths must be a non-empty list of token counts, got {shown(self.lengths)}")
        for s in self.lengths:
            check_int("eval.lengths[]", s, minimum=2, maximum=MAX_LM_LENGTH)
        if list(self.lengths) != sorted(set(self.lengths)):
            raise ValueError(f"eval.lengths must increase, got {list(self.lengths)}")
        longest = self.lengths[-1]
        uneven = [s for s in self.lengths if longest % s]
        if uneven:
            raise ValueError(
                f"eval.lengths {uneven} do not divide the longest, {longest}: every length scores the same "
                "regions of that many bytes in whole windows"
            )
        check_int("eval.regions", self.regions, minimum=1, maximum=10_000)
        check_int("eval.tail", self.tail, minimum=1, maximum=MAX_LM_LENGTH)
        check_int("eval.chunk", self.chunk, minimum=1, maximum=MAX_LM_LENGTH)
        check_int("eval.batch_size", self.batch_size, minimum=1, maximum=4096)
        if self.precision is not None:
            check_choice("eval.precision", self.precision, PRECISIONS)
        check_int("eval.passkey", self.passkey, maximum=10_000)
        if not isinstance(self.positions, bool):
            raise ValueError(f"eval.positions must be true or false, got {shown(self.positions)}")
        check_int("eval.finetune_steps", self.finetune_steps, maximum=1_000_000)
        check_int("eval.finetune_length", self.finetune_length, maximum=MAX_LM_LENGTH)
        if bool(self.finetune_steps) != bool(self.finetune_length):
            raise ValueError("eval.finetune_steps and eval.finetune_length go together (both 0: no fine-tune)")

    def tail_lengths(self) -> tuple[int, ...]:
        """The lengths with a tail score: those of at least ``tail`` tokens."""
        return tuple(s for s in self.lengths if s >= self.tail)


