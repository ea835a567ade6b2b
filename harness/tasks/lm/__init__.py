"""The language-modelling tasks: a corpus, read as bytes.

``lm_en`` (English prose and verse) and ``lm_code`` (the Python standard library) are the
track's tasks (:data:`LM_TASKS`); each names its corpus (``harness.tasks.lm.corpora``). Tokens are
bytes, 0..255, plus one special token, :data:`BOS` (256), which starts every window the
model reads (a training window or an evaluation window alike), so every byte of a window is
predicted, the first from ``BOS`` alone. Nothing else is needed: windows are cut inside
documents and never padded.

The track's data, one module per part (this package's ``__init__`` holds the tasks):

    corpora   the corpora: obtained by package name, never committed
    overlap   the chunk-overlap scan: which 64-byte runs of one text occur in another
    split     training and held-out documents, near-duplicates kept on one side
    data      training windows and held-out regions of a corpus, as byte tensors
    passkey   passkey retrieval's samples: a key hidden at a depth in held-out text
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BOS", "LM_TASKS", "VOCAB_SIZE", "LmTask", "lm_task"]

BOS = 256
"""The token that starts every window."""

VOCAB_SIZE = 257
"""256 byte values and :data:`BOS`."""


@dataclass(frozen=True)
class LmTask:
    """A language-modelling task.

    Attributes:
        name: registry key (``lm_en``).
        corpus: the corpus it reads (``harness.tasks.lm.corpora.CORPORA``).
        description: one line for listings and the board.
    """

    name: str
    corpus: str
    description: str


LM_TASKS: dict[str, LmTask] = {
    "lm_en": LmTask(
        "lm_en", "en", "English prose and verse: Shakespeare and Milton, the King James Bible, Python's help topics"
    ),
    "lm_code": LmTask("lm_code", "code", "Python code: the CPython standard library of the running interpreter"),
}


def lm_task(name: str) -> LmTask:
    """The task ``name``; ValueError naming the valid ones otherwise."""
    try:
        return LM_TASKS[name]
    except KeyError:
        raise ValueError(f"unknown language-modelling task {name!r}; valid: {', '.join(LM_TASKS)}") from None
