"""Upper bounds for every size-like value of a run's configuration.

A run's config reaches the harness from the command line, a sweep file, a results record
or a test's random draw; each goes through ``RunConfig``, which checks these bounds before
anything is allocated from them or the results store exists (``--test-len 30000000``
used to be accepted, create the store and grow past 5.5 GB without finishing; a fuzz test
drew ``eval.test_max = 7_508_565_006`` and built a 7.5-billion-element list of lengths).

The bounds are generous for every preset, every source paper's protocol and every
published record (the largest: the randomized-PE paper's encoder evaluated at every length
to 500 on 500 examples, and Turing Programs' 12-layer d1024 decoder trained on packed
500-token rows), and far below what fills a machine's memory. They refuse typos and absurd
values; they do not promise that every combination within them fits a given machine.

Sizes of one value each:

==================  =============================================================
``MAX_SCALE``       ``train.train_min``, ``train.train_max``, ``eval.test_max``,
                    ``eval.test_stride``, a curriculum stage's max scale
``MAX_STEPS``       ``train.steps``, ``train.warmup``, ``eval.every``, a curriculum
                    stage's start step
``MAX_BATCH``       ``train.batch_size``, ``eval.batch_size``
``MAX_SAMPLES``     ``eval.samples``
``MAX_TOKENS``      ``train.pack``, ``eval.window``, ``eval.window_jump``
``MAX_WIDTH``       ``backbone.d_model``; 4 x it for ``backbone.d_ff``
``MAX_LAYERS``      ``backbone.n_layers``
``MAX_HEADS``       ``backbone.n_heads``
``MAX_VOCAB``       ``backbone.vocab_size``
==================  =============================================================

and one of a product: ``MAX_EVAL_UNITS`` bounds ``eval.samples`` times the sum of the
scales evaluated (training and test), the size of the evaluation sets a run builds once
and keeps (about two tokens per unit on copy-like tasks). Encoding options are bounded by
name (:data:`POSITION_OPTIONS`, :data:`WIDTH_OPTIONS`, wherever they appear, nested tables
included), since an encoding allocates from them when it is built: a learned table of
``max_position`` rows, randomized PE's range ``max_length``, PRISM's ``d_pe``.
"""

from __future__ import annotations

from typing import Any

from harness.config.numbers import check_number
from pezoo.limits import MAX_POSITIONS, MAX_WIDTH, POSITION_OPTIONS, WIDTH_OPTIONS, option_bound, oversized_options

# MAX_WIDTH (pezoo.limits, 4096) also bounds ``d_model``: 4x Turing Programs' 1024 (``d_ff`` up
# to 4x it); MAX_POSITIONS (262,144) is 4x ``MAX_TOKENS``. Encoding options share one table with
# pezoo.hf: POSITION_OPTIONS and WIDTH_OPTIONS, bounded by option_bound.
__all__ = ["MAX_POSITIONS", "MAX_WIDTH", "POSITION_OPTIONS", "WIDTH_OPTIONS", "check_option_sizes", "option_bound"]

MAX_SCALE = 10_000
"""Largest task scale (training or test): 20x the largest in any paper protocol (500)."""

MAX_STEPS = 10_000_000
"""Most optimiser steps: 5x the randomized-PE paper's 2M."""

MAX_BATCH = 4096
"""Largest training or decoding batch: 8x the largest preset's (500: ruoss decodes 500 at a time)."""

MAX_SAMPLES = 100_000
"""Most evaluation examples per scale: 100x the PRISM paper's 1000."""

MAX_EVAL_UNITS = 125_000_000
"""Most ``eval.samples x sum of evaluated scales``: 2x the randomized-PE protocol's
(500 examples at each scale 1..500: 62.6M), about 2 GB of token strings on copy."""

MAX_TOKENS = 65_536
"""Widest packed training row or decoding window, in tokens (Turing Programs: 500)."""

MAX_LAYERS = 128
"""Most Transformer blocks (the largest preset has 12)."""

MAX_HEADS = 256
"""Most attention heads per block (the largest preset has 16)."""

MAX_VOCAB = 65_536
"""Largest vocabulary (the tasks share 64 tokens)."""


def check_option_sizes(options: Any, what: str = "") -> None:
    """ValueError naming ``what.key`` (``key`` when ``what`` is empty) when a size-like
    option in ``options`` (a mapping, searched through nested mappings and lists) is a
    number above its bound (:func:`pezoo.limits.oversized_options`); values of any other type
    or sign are left to the encoding, which knows what it accepts."""
    for path, value, bound in oversized_options(options, what):
        check_number(path, value, integer=isinstance(value, int), maximum=bound)
