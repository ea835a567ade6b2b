"""A tiny corpus made in the tests (offline: no test downloads anything)."""

from __future__ import annotations

import random

from harness.tasks.lm.corpora import Corpus
from harness.tasks.lm.split import HELDOUT_MIN_BYTES

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


TINY = {"train": {"steps": 3, "batch_size": 2}, "eval": {"lengths": (32, 64), "regions": 1, "tail": 32}}
"""Overrides of the ``lm_smoke`` preset that make a run take about a second."""


def use_tiny_corpus(monkeypatch) -> Corpus:
    """The tiny corpus standing in for ``en`` during a test (the real one is never fetched)."""
    from harness.tasks.lm import corpora

    c = tiny_corpus("en")
    monkeypatch.setitem(corpora.CORPORA, "en", lambda **_: c)
    monkeypatch.setitem(corpora._LOADED, "en", c)
    return c


def cfg_of(pe: str, seed: int = 0, **kwargs):
    """The ``lm_smoke`` config of ``pe`` on ``lm_en`` with :data:`TINY`."""
    from harness.lm.config import lm_preset_config

    return lm_preset_config("lm_smoke", pe=pe, task="lm_en", seed=seed, overrides=TINY, **kwargs)
