"""The harness's layout: every package's ``__init__`` docstring is a map of its rooms (each
module and subpackage on a line of its own, named first, then what it is for), and the top
level stays small: ``__init__``, ``cli`` and the subpackages, at most 12 entries."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parents[2] / "harness"
TOP_LEVEL_MOST = 12
"""Top-level .py files and subpackages of harness/ together."""


def rooms(package: Path) -> list[str]:
    """The modules (``x.py`` but ``__init__``) and subpackages of ``package``, by name."""
    modules = [p.stem for p in package.glob("*.py") if p.name != "__init__.py"]
    packages = [p.name for p in package.iterdir() if p.is_dir() and p.name != "__pycache__" and any(p.rglob("*.py"))]
    return sorted(modules + packages)


def mapped(package: Path) -> set[str]:
    """The names the map in ``package``'s ``__init__`` docstring lists: the first word of
    each indented line (``    name   what it is for``)."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text()), clean=False) or ""
    return {m.group(1) for m in re.finditer(r"^[ \t]+([A-Za-z_]\w*)[ \t]+\S", doc, re.M)}


def map_problems(root: Path) -> list[str]:
    """Each folder of python files under ``root`` (itself included) that is not a package, and
    each module or subpackage its parent's map leaves out."""
    problems = []
    for package in [root, *sorted(p for p in root.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        if not any(package.rglob("*.py")):
            continue
        where = package.relative_to(root.parent)
        if not (package / "__init__.py").is_file():
            problems.append(f"{where} holds python files but no __init__.py")
            continue
        missing = [name for name in rooms(package) if name not in mapped(package)]
        problems += [f"{where}/__init__.py's map does not name {name}" for name in missing]
    return problems


def test_every_module_and_subpackage_is_on_its_parents_map():
    assert map_problems(HARNESS) == []


def test_the_harness_top_level_holds_init_cli_and_at_most_ten_subpackages():
    entries = rooms(HARNESS)
    assert len(entries) + 1 <= TOP_LEVEL_MOST, entries  # + __init__.py
    assert [e for e in entries if (HARNESS / f"{e}.py").is_file()] == ["cli"], entries


def _package(tmp_path: Path, doc: str, modules: list[str]) -> Path:
    root = tmp_path / "harness"
    root.mkdir()
    (root / "__init__.py").write_text(f'"""{doc}"""\n')
    for name in modules:
        path = root / f"{name.replace('.', '/')}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    return root


@pytest.mark.parametrize(
    ("doc", "modules", "problem"),
    [
        # a module added beside the mapped ones
        ("Rooms:\n\n    cli  the command line\n", ["cli", "extra"], "harness/__init__.py's map does not name extra"),
        # a name in prose is not a map line
        ("The cli and the extra module.\n", ["cli", "extra"], "harness/__init__.py's map does not name cli"),
        # a subpackage the map leaves out
        ("Rooms:\n\n    cli  the command line\n", ["cli", "sub.__init__"], "map does not name sub"),
        # a folder of modules that is no package
        ("Rooms:\n\n    cli  x\n    loose  y\n", ["cli", "loose.mod"], "harness/loose holds python files but no"),
    ],
)
def test_an_unmapped_module_is_named(tmp_path, doc, modules, problem):
    assert any(problem in p for p in map_problems(_package(tmp_path, doc, modules)))


def test_a_nested_packages_map_is_checked_too(tmp_path):
    root = _package(tmp_path, "Rooms:\n\n    sub  a subpackage\n", ["sub.mod"])
    (root / "sub" / "__init__.py").write_text('"""A subpackage.\n\n    other  not mod\n"""\n')
    assert map_problems(root) == ["harness/sub/__init__.py's map does not name mod"]
    (root / "sub" / "__init__.py").write_text('"""A subpackage.\n\n    mod  its one module\n"""\n')
    assert map_problems(root) == []
