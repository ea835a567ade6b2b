"""Writing the site: only over what a build generated, all or nothing.

A missing or empty results folder is an error (never an empty board, ``leaderboard.site``);
only files listed in the output folder's manifest are ever deleted; a page or README
that this command did not generate (no generator marker) is never overwritten; every
file is written to a temporary name first and renamed into place only when all of them
were written, so an unwritable target leaves nothing half done.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path

from harness.config import shown
from harness.records.files import nearest_existing
from harness.records.inputs import MANIFEST_LIMIT, FileReadError, read_text
from leaderboard.readme import README_MARK, is_generated_readme
from leaderboard.schema import parse_json
from leaderboard.text import GENERATOR

MANIFEST = ".pezoo-site-manifest.json"
"""The output folder's list of the files the last build wrote: a rebuild deletes only stale entries of it."""
LEGACY_MARKER = ".pezoo-leaderboard-site"
"""What marked a generated site before the manifest: every ``*.html`` under it counts as generated."""
PAGE_MARK = f'<meta name="generator" content="{GENERATOR}">'
"""The line every generated page carries (checked before a page that is not in the manifest is replaced)."""


class SiteError(ValueError):
    """The site cannot be built or written: no results, diagnostics that cannot be drawn,
    a file in the way that this command did not generate, or a target that cannot be written."""


PAGE_PATH = re.compile(r"index\.html|lm\.html|lm\.md|lm-[a-z0-9_-]+\.svg|(?:tasks|encodings)/[a-z0-9_.-]+\.html")
"""The site paths a build writes (``slug`` names the pages; ``lm.html``, ``lm.md`` and its curves
``lm-<task>.svg``: the language-modelling section, ``leaderboard.lm_board``): the only entries a manifest
may list, so a manifest can name nothing outside the folder (no ``..``, no absolute path,
no other kind of file)."""


def _site_root(out_dir: Path) -> Path:
    """The output folder, resolved: the one folder a build writes and deletes under (the
    path given may lead there through links; nothing under it is followed)."""
    root = out_dir.resolve()
    if root.exists() and not root.is_dir():
        raise SiteError(f"{out_dir} is not a folder; choose another --out")
    return root


def _inside(root: Path, rel: str) -> Path:
    """``root / rel`` for a page path ``rel`` (``PAGE_PATH``), after checking that what
    exists of it is real folders and at most a regular file at its end: a symlink anywhere
    below ``root`` (``tasks`` -> ``../outside``) would make a write or a delete land outside
    the folder, and a FIFO would block the build; both are a SiteError."""
    path = root
    parts = rel.split("/")
    for i, part in enumerate(parts):
        path = path / part
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            break  # the rest does not exist yet: the build makes it
        except OSError as exc:
            raise SiteError(f"cannot check {path}: {exc.strerror or exc}") from None
        if stat.S_ISLNK(mode):
            raise SiteError(
                f"{path} is a symlink: `build` writes and deletes only inside {root}, never through a link; "
                "remove the link"
            )
        last = i == len(parts) - 1
        if (stat.S_ISDIR(mode) if last else not stat.S_ISDIR(mode)) or (last and not stat.S_ISREG(mode)):
            want = "a page file" if last else "a folder"
            raise SiteError(f"{path} is not {want}; move it aside or choose another --out")
    path = root.joinpath(*parts)
    if not path.resolve().is_relative_to(root):  # nothing above can lead out, but say so if it did
        raise SiteError(f"{path} is outside {root}; `build` writes only inside its folder")
    return path


def _previous_build(root: Path) -> tuple[set[str], bool]:
    """(files the previous build wrote, whether that build predates the manifest), for the
    resolved output folder ``root``.

    Raises SiteError for a non-empty folder that is not a generated site, and for a
    manifest that cannot be read (not a regular file of bounded size, not JSON) or that
    names anything but the pages a build writes (``PAGE_PATH``).
    """
    if not root.exists():
        return set(), False
    if not root.is_dir():
        raise SiteError(f"{root} is not a folder; choose another --out")
    manifest = root / MANIFEST
    if manifest.exists() or manifest.is_symlink():
        try:
            if manifest.is_symlink():
                raise ValueError("a symlink, not the manifest a build writes")
            body = parse_json(read_text(manifest, MANIFEST_LIMIT))
            files = body["files"] if isinstance(body, dict) and body.get("generator") == GENERATOR else None
        except FileReadError as exc:
            raise SiteError(f"{manifest} {exc.reason}; move the site folder aside and build again") from None
        except (ValueError, KeyError) as exc:
            raise SiteError(f"{manifest} cannot be read ({exc}); move the site folder aside and build again") from None
        bad = (
            [f for f in files if not (isinstance(f, str) and PAGE_PATH.fullmatch(f))] if isinstance(files, list) else []
        )
        if not isinstance(files, list) or bad:
            named = f" (it names {shown(bad[0])}, not a page a build writes)" if bad else ""
            raise SiteError(f"{manifest} is not a site manifest{named}; move the site folder aside and build again")
        return set(files), False
    if (root / LEGACY_MARKER).is_file():
        pages = {p.relative_to(root).as_posix() for p in root.rglob("*.html")}
        return {f for f in pages if PAGE_PATH.fullmatch(f)}, True
    if any(root.iterdir()):
        raise SiteError(f"{root} is not empty and is not a generated leaderboard site; choose another --out")
    return set(), False


def _carries_page_mark(path: Path) -> bool:
    if not path.is_file():  # a FIFO, a device: not a page, and never opened
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = [line.rstrip("\n") for line, _ in zip(f, range(8), strict=False)]  # the mark is on line 4
        return PAGE_MARK in head
    except OSError:
        return False


def _manifest_text(files: set[str]) -> str:
    return json.dumps({"generator": GENERATOR, "files": sorted(files)}, indent=1) + "\n"


def _unchanged(path: Path, text: str) -> bool:
    try:
        return path.is_file() and path.read_text(encoding="utf-8") == text
    except (OSError, UnicodeDecodeError):
        return False


def _readme_target(readme: Path) -> Path:
    """The README to write: refused when it is a symlink (it would be replaced by a file,
    or lead elsewhere) or something other than a regular file."""
    if readme.is_symlink():
        raise SiteError(f"{readme} is a symlink; `build` writes the README only as a file of its own (--readme)")
    if readme.exists() and not readme.is_file():
        raise SiteError(f"{readme} is not a regular file; choose another --readme")
    folder = nearest_existing(readme.parent)  # a file on the way: the write named its temporary file
    if folder is not None and not folder.is_dir():
        raise SiteError(f"{readme} cannot be written: {folder} is not a folder; choose another --readme")
    return readme


def write_site(out_dir: Path, pages: Mapping[str, str], readme: Path, readme_text: str) -> None:
    """Write ``pages`` under ``out_dir`` and the README, delete the previous build's stale pages.

    Refuses (SiteError, before writing anything) a non-empty ``out_dir`` that is not a
    generated site, a page path taken by a file the site did not generate, a README that
    is not a generated one (``README_MARK``), a manifest that names anything but the pages
    a build writes, and a symlink (or a FIFO, a device) anywhere a page is written or
    deleted: every path is resolved and must stay inside ``out_dir``. All files are first
    written under temporary names next to their targets; only when every one was written
    are they renamed into place. An OSError (permission, disk full) is a SiteError naming
    the path, with the temporary files removed and the old files untouched.

    One build writes a folder at a time: a build holds the lock export takes
    (``leaderboard.export.folder_lock``, on the folder's parent), so two concurrent builds
    cannot leave a page off the manifest.
    """
    from leaderboard.export import folder_lock

    try:
        with folder_lock(out_dir):
            _write_site(out_dir, pages, readme, readme_text)
    except OSError as exc:  # the lock's folder cannot be made or opened (the writes catch their own)
        raise SiteError(f"cannot write {exc.filename or out_dir}: {exc.strerror or exc}") from None


def _write_site(out_dir: Path, pages: Mapping[str, str], readme: Path, readme_text: str) -> None:
    root = _site_root(out_dir)
    previous, legacy = _previous_build(root)
    strange = sorted(rel for rel in pages if not PAGE_PATH.fullmatch(rel))
    if strange:  # the renderer names every page by ``slug``; this would be a bug
        raise SiteError(f"pages with paths a build does not write: {', '.join(strange)}")
    paths = {rel: _inside(root, rel) for rel in sorted(previous | set(pages))}
    foreign = sorted(
        str(paths[rel])
        for rel in pages
        if paths[rel].exists() and rel not in previous and not _carries_page_mark(paths[rel])
    )
    readme = _readme_target(readme)
    if readme.exists() and not is_generated_readme(readme):
        foreign.append(f"{readme} (no `{README_MARK}` first line)")
    if foreign:
        raise SiteError(
            "these files were not generated by `pezoo leaderboard build` and would be overwritten: "
            + "; ".join(foreign)
            + " (move them aside, or choose another --out / --readme)"
        )
    targets = {paths[rel]: text for rel, text in sorted(pages.items())}
    targets[readme] = readme_text
    # first: the manifest of everything either build wrote, so an interrupted write leaves
    # no generated file unlisted; after the pages, the manifest of this build
    manifest = _inside(root, MANIFEST)
    staged, final = _Staging(), _Staging()
    try:
        for path, text in [(manifest, _manifest_text(previous | set(pages))), *targets.items()]:
            if not _unchanged(path, text):
                staged.add(path, text)
        staged.commit()
        for rel in sorted(previous - set(pages)):
            stale = _inside(root, rel)  # checked again: never deleted through a link
            if stale.is_file():
                stale.unlink()
        if not _unchanged(manifest, _manifest_text(set(pages))):
            final.add(manifest, _manifest_text(set(pages)))
        final.commit()
        if legacy:
            (root / LEGACY_MARKER).unlink(missing_ok=True)
    except OSError as exc:
        staged.abandon()
        final.abandon()
        where = exc.filename or out_dir
        raise SiteError(f"cannot write {where}: {exc.strerror or exc}") from None


class _Staging:
    """Files written under temporary names, renamed into place together by ``commit``."""

    def __init__(self) -> None:
        self.files: list[tuple[Path, Path]] = []  # (temporary, target)
        self.made_dirs: list[Path] = []

    def add(self, path: Path, text: str) -> None:
        missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
        for d in reversed(missing):
            d.mkdir()
            self.made_dirs.append(d)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        with open(tmp, "x", encoding="utf-8", newline="\n") as f:  # a new file: never through a link put there
            self.files.append((tmp, path))  # created: removed by abandon() even if the write fails
            f.write(text)

    def commit(self) -> None:
        for tmp, path in self.files:
            os.replace(tmp, path)
        self.files, self.made_dirs = [], []

    def abandon(self) -> None:
        """Remove the temporary files not yet renamed, and the folders made for them if empty."""
        for tmp, _ in self.files:
            with contextlib.suppress(OSError):
                tmp.unlink()
        for d in reversed(self.made_dirs):
            with contextlib.suppress(OSError):
                d.rmdir()
