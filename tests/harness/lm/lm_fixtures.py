"""A tiny corpus made in the tests (offline: no test downloads anything)."""

from __future__ import annotations

import random

from harness.lm.corpora import HELDOUT_MIN_BYTES, Corpus

WORDS = "the of and to in that is was he for it with as his on be at by thou thee".split()


def tiny_corpus(name: str = "en", documents: int = 12, seed: int = 0) -> Corpus:
    """``documents`` word-salad documents of 1-2x the hold-out minimum, deterministic."""
    rng = random.Random(seed)
    docs = []
    for i in range(documents):
        size = rng.randint(HELDOUT_MIN_BYTES, 2 * HELDOUT_MIN_BYTES)
        text = " ".join(rng.choice(WORDS) for _ in range(size // 3))
        docs.append((f"doc{i:02d}", text.encode()[:size]))
    return Corpus.of(name, docs, ["made in the tests"])
