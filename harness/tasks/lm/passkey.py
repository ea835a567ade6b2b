"""Passkey retrieval at byte level: a key hidden at a depth in held-out text, asked for at the end.

Axis letters: b batch (samples), s sequence, c query block, v vocab (257).

The test of Mohtashami & Jaggi, "Landmark Attention" (2023, §4.2 and its code), which the
position-interpolation and YaRN papers use for context extension, in bytes. A sample of
length S is exactly S bytes (the model reads ``BOS`` and its first S - 1, as every window of
the track, ``harness.tasks.lm.data.window_tokens``)::

    filler[:at] + NEEDLE + filler[at:] + QUESTION + ANSWER

``NEEDLE`` is ``"\\nThe pass key is 68452. Remember it. 68452 is the pass key.\\n"`` (the
paper's line), ``QUESTION`` ``"\\nWhat is the pass key? The pass key is"`` (its prompt) and
``ANSWER`` ``" 68452"``: the key, five decimal digits, after a space. The filler is
S - :data:`FIXED_BYTES` contiguous bytes of one held-out region (the regions bits per byte
are scored on, ``harness.tasks.lm.data.scored_regions``: held-out documents, no 64-byte run of the
training text), never training text; the paper's repeated "The grass is green..." is
replaced by real held-out text. The needle starts at byte ``at = depth · F // 100`` of the
filler's F bytes (depth in percent, rounded down): depth 0 puts it first, right after BOS;
100 right before the question. A length is tested when its filler has at least one byte
(S > :data:`FIXED_BYTES`, 104): the grid's lengths are the run's test lengths above that
(:func:`passkey_lengths`), its depths :data:`DEPTHS`.

Draws. Sample i of length S under seed ``seed`` takes its key, its region and the filler's
offset in it from SHA-256 digests of ``pezoo/lm/passkey/<seed>/<S>/<i>/<what>`` (no random
number library whose streams might change): the same for every encoding and every call,
and shared by the sample's depths, so the depths of one sample differ only in where the
needle is (:func:`passkey_samples`).

How a model is scored on the samples is ``harness.evaluation.lm`` (:func:`~harness.evaluation.lm.evaluate_passkey`),
what it leaves is ``harness.records.lm_metrics.PasskeyCell``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "ANSWER",
    "ANSWER_BYTES",
    "DEPTHS",
    "FIXED_BYTES",
    "KEY_DIGITS",
    "NEEDLE",
    "QUESTION",
    "PasskeySample",
    "needle_at",
    "passkey_lengths",
    "passkey_samples",
]

NEEDLE = "\nThe pass key is {key}. Remember it. {key} is the pass key.\n"
"""The line that hides the key (Landmark Attention's), on a line of its own."""

QUESTION = "\nWhat is the pass key? The pass key is"
"""The prompt at the end of every sample."""

ANSWER = " {key}"
"""What the model must continue the question with: a space and the key."""

KEY_DIGITS = 5
"""A key is a number of this many decimal digits (10000..99999), so every answer has one length."""

DEPTHS = (0, 25, 50, 75, 100)
"""Where the needle starts, in percent of the filler."""

FIXED_BYTES = len(NEEDLE.format(key="0" * KEY_DIGITS)) + len(QUESTION) + len(ANSWER.format(key="0" * KEY_DIGITS))
"""The bytes of a sample that are not filler (104): the needle, the question and the answer."""

ANSWER_BYTES = len(ANSWER.format(key="0" * KEY_DIGITS))
"""The bytes scored per sample (6): the answer's."""


def passkey_lengths(lengths: Sequence[int]) -> tuple[int, ...]:
    """The test lengths the passkey grid takes: those with at least one byte of filler."""
    return tuple(s for s in lengths if s > FIXED_BYTES)


def needle_at(depth: int, filler: int) -> int:
    """Where the needle starts in a filler of ``filler`` bytes at ``depth`` percent (rounded down)."""
    return depth * filler // 100


def _draw(seed: int, length: int, index: int, what: str, below: int) -> int:
    """A number in ``0..below - 1`` from the SHA-256 of the draw's name (the bias of taking 64
    bits modulo a number below 2^20 is under 2^-44)."""
    digest = hashlib.sha256(f"pezoo/lm/passkey/{seed}/{length}/{index}/{what}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % below


@dataclass(frozen=True)
class PasskeySample:
    """One sample of the grid (module docstring).

    Attributes:
        length: S, its bytes.
        depth: where the needle starts, in percent of the filler.
        index: which draw of (seed, S) it is; the depths of one index share key and filler.
        key: the key's digits.
        region: which held-out region the filler is cut from.
        offset: where in that region the filler starts.
        at: where the needle starts in ``text`` (and in the filler).
        text: the sample's S bytes; its last :data:`ANSWER_BYTES` are the answer.
    """

    length: int
    depth: int
    index: int
    key: str
    region: int
    offset: int
    at: int
    text: bytes

    @property
    def answer(self) -> bytes:
        return self.text[-ANSWER_BYTES:]


def passkey_samples(regions: Sequence[bytes], length: int, samples: int, seed: int) -> list[PasskeySample]:
    """The ``samples`` draws of length ``length`` at every depth of :data:`DEPTHS`, draw-major
    (draw 0 at every depth, then draw 1, ...), fillers cut from ``regions`` (held-out text,
    each at least ``length`` bytes). ValueError when ``length`` has no filler or a region is
    too short."""
    filler = length - FIXED_BYTES
    if filler < 1:
        raise ValueError(f"a passkey sample of {length} bytes has no room for filler (more than {FIXED_BYTES} bytes)")
    if not regions or min(len(r) for r in regions) < filler:
        raise ValueError(f"the passkey grid cuts {filler} bytes of filler from each held-out region: one is shorter")
    out = []
    for i in range(samples):
        key = str(10 ** (KEY_DIGITS - 1) + _draw(seed, length, i, "key", 9 * 10 ** (KEY_DIGITS - 1)))
        region = _draw(seed, length, i, "region", len(regions))
        offset = _draw(seed, length, i, "offset", len(regions[region]) - filler + 1)
        text = regions[region][offset : offset + filler]
        needle, tail = NEEDLE.format(key=key).encode(), (QUESTION + ANSWER.format(key=key)).encode()
        for depth in DEPTHS:
            at = needle_at(depth, filler)
            out.append(PasskeySample(length, depth, i, key, region, offset, at, text[:at] + needle + text[at:] + tail))
    return out
