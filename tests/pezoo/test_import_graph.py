"""pezoo's modules import each other without a cycle, and pezoo.base stays a compatibility module.

The graph is built from the source (ast): an edge A -> B for every import of B at the top
level of A (not inside a function, not under ``if TYPE_CHECKING:``), where B is the module
the statement names, or the submodule for ``from package import submodule``. A package's
``__init__``, which Python runs before any of its submodules, is not counted as imported by
them: only the imports the code writes are.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import pezoo

ROOT = Path(pezoo.__file__).resolve().parent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_imports(tree: ast.Module, name: str, is_package: bool) -> set[str]:
    """Modules named by the imports at the top level of a module (its body, top-level ``if``,
    ``try`` and ``with`` blocks included, ``if TYPE_CHECKING:`` blocks excluded)."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's own package upwards
                    package = name.split(".") if is_package else name.split(".")[:-1]
                    package = package[: len(package) - (node.level - 1)]
                    base = ".".join(package + ([base] if base else []))
                for alias in node.names:
                    found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
            elif isinstance(node, ast.If):
                test = node.test
                is_type_checking = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                    isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
                )
                if not is_type_checking:
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                    visit(block)
            elif isinstance(node, ast.With):
                visit(node.body)

    visit(tree.body)
    return found


PATHS = {module_name(path): path for path in ROOT.rglob("*.py")}
MODULES = set(PATHS)


def import_graph() -> dict[str, set[str]]:
    """pezoo module -> the pezoo modules it imports at the top level."""
    graph = {}
    for name, path in PATHS.items():
        imports = top_level_imports(ast.parse(path.read_text()), name, path.name == "__init__.py")
        graph[name] = {m for m in imports if m in MODULES and m != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as [a, b, ..., a], or None (depth-first search)."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(node: str) -> list[str] | None:
        path.append(node)
        on_path.add(node)
        for nxt in sorted(graph[node]):
            if nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in done:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        on_path.discard(node)
        done.add(node)
        return None

    for start in sorted(graph):
        if start not in done:
            cycle = visit(start)
            if cycle:
                return cycle
    return None


def test_the_graph_sees_the_imports_it_should():
    graph = import_graph()
    assert "pezoo.interface" in graph["pezoo.registry"]  # from pezoo.interface import ...
    assert "pezoo.encodings.rope" in graph["pezoo.encodings.xpos"]
    assert "pezoo.encodings" in graph["pezoo"]  # from pezoo import encodings: the submodule
    assert "pezoo.combined" in graph["pezoo.registry"]  # a mechanism below the registry, imported at the top
    assert "pezoo.hf" not in graph["pezoo.hf.families"]  # `from pezoo.hf import Adapter` is under TYPE_CHECKING
    assert "pezoo.hf.calls" in graph["pezoo.hf.families"]  # ...`from pezoo.hf import calls` is not


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_pezoo_has_no_import_cycle():
    assert find_cycle(import_graph()) is None


def test_pezoo_modules_import_the_real_modules_not_the_compatibility_one():
    importers = sorted(name for name, imports in import_graph().items() if "pezoo.base" in imports)
    # pezoo/__init__ imports it only so that ``pezoo.base.X`` keeps working after ``import pezoo``;
    # pezoo.hf still imports from it (its imports are left to the change that owns it)
    assert set(importers) <= {"pezoo", "pezoo.hf"}, importers


@pytest.mark.parametrize("name", importlib.import_module("pezoo.base").__all__)
def test_pezoo_base_re_exports_the_real_objects(name):
    """``from pezoo.base import ...`` (plugins written before the split) keeps working."""
    import pezoo.base

    homes = ("pezoo.context", "pezoo.biases", "pezoo.interface", "pezoo.registry")
    real = [getattr(importlib.import_module(m), name) for m in homes if hasattr(importlib.import_module(m), name)]
    assert real and getattr(pezoo.base, name) is real[0]


def test_pezoo_base_is_reachable_after_import_pezoo():
    code = "import pezoo; print(pezoo.base.check_qk.__module__, pezoo.base.register.__module__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["pezoo.context", "pezoo.registry"]
