"""No import cycle among pezoo's modules, counting every import the code writes.

``tests/pezoo/test_import_graph.py`` checks the imports that run when a module loads. This
test counts all of them, so that a cycle cannot hide behind an import placed inside a
function or under ``if TYPE_CHECKING:``. Issue 65 named three that did: PRISM's ``encoding``
→ ``paper`` → ``diagnostics`` → ``encoding``, ``scan`` → ``fused_scan`` → ``triton_scan`` →
``scan``, and ``cards`` ↔ ``registry``; this test found a fourth, ``pezoo.hf`` → ``auto`` →
``pezoo.hf`` (with ``families`` and ``forward`` importing ``Adapter`` from ``pezoo.hf`` for
annotations). The rule for the graph, built from the source with ``ast``:

* **Every import statement is an edge**, wherever it sits: module level, inside functions and
  methods, under ``if TYPE_CHECKING:``, in ``try``/``except`` blocks. Only edges between pezoo
  modules count; a module's import of itself is ignored.
* **The module an import names**: ``import a.b`` names ``a.b``; ``from a.b import c`` names
  ``a.b.c`` when that is a module (a submodule imported by name), else ``a.b``. Relative
  imports are resolved against the importing module's package first.
* **A package imported from inside itself** (the module ``pezoo.x.y`` writing ``from pezoo.x
  import name``, or any pezoo module writing ``from pezoo import name``) is resolved to the
  submodule the name comes from: the package's ``__init__`` re-exports it with ``from
  pezoo.x.z import name`` (followed through nested packages), so the edge goes to ``pezoo.x.z``.
  Where the package's ``__init__`` defines the name itself, or the name cannot be traced, the
  edge goes to the package (its ``__init__``). A package imported from outside it is the
  package: importing it runs its whole ``__init__``.
* **A package's ``__init__`` is not counted as imported by its submodules** merely because
  Python runs it first: only the imports the code writes are edges (as in test_import_graph).

The test fails naming each cycle: one path through each strongly connected component of
more than one module, and the component's other modules where it has more.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pezoo

ROOT = Path(pezoo.__file__).resolve().parent


class ModuleGraph:
    """The import graph of the package rooted at ``root`` (a directory holding ``__init__.py``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.paths = {self._name(path): path for path in sorted(root.rglob("*.py"))}
        self.packages = {name for name, path in self.paths.items() if path.name == "__init__.py"}
        self._trees = {name: ast.parse(path.read_text(), str(path)) for name, path in self.paths.items()}
        self._reexports: dict[str, dict[str, str]] = {}

    def _name(self, path: Path) -> str:
        parts = path.relative_to(self.root.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def _base(self, importer: str, node: ast.ImportFrom) -> str:
        """The absolute module ``from ... import`` reads names from."""
        if not node.level:
            return node.module or ""
        package = importer.split(".") if importer in self.packages else importer.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        return ".".join(package + ([node.module] if node.module else []))

    def reexports(self, package: str) -> dict[str, str]:
        """Names the ``__init__`` of ``package`` imports from modules inside it: name -> module."""
        if package not in self._reexports:
            found: dict[str, str] = {}
            for node in ast.walk(self._trees[package]):
                if isinstance(node, ast.ImportFrom):
                    base = self._base(package, node)
                    if base.startswith(package + "."):
                        for alias in node.names:
                            found[alias.asname or alias.name] = (
                                f"{base}.{alias.name}" if (f"{base}.{alias.name}" in self.paths) else base
                            )
            self._reexports[package] = found
        return self._reexports[package]

    def home(self, package: str, name: str, seen: frozenset[str] = frozenset()) -> str:
        """The module ``name`` of ``package`` comes from: followed through its ``__init__``'s
        re-exports (and those of nested packages); the package itself where untraceable."""
        source = self.reexports(package).get(name)
        if source is None or source in seen:
            return package
        if source in self.packages and f"{source}.{name}" not in self.paths:
            return self.home(source, name, seen | {package})
        return source

    def imports(self, importer: str) -> set[str]:
        """The modules of the package that ``importer`` imports anywhere in its source."""
        found: set[str] = set()
        for node in ast.walk(self._trees[importer]):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = self._base(importer, node)
                for alias in node.names:
                    if f"{base}.{alias.name}" in self.paths:
                        found.add(f"{base}.{alias.name}")
                    elif base in self.packages and importer.startswith(base + "."):
                        found.add(self.home(base, alias.name))
                    else:
                        found.add(base)
        return {module for module in found if module in self.paths and module != importer}

    def edges(self) -> dict[str, set[str]]:
        return {name: self.imports(name) for name in self.paths}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle [a, b, ..., a] through each strongly connected component of ``graph`` with
    more than one node (Tarjan's algorithm, iterative), in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(component)
    return sorted(_cycle_through(graph, component) for component in components)


def _cycle_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle from the component's first module back to it (breadth-first)."""
    start = min(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if nxt not in parents:
                    parents[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle through {sorted(component)}")  # a component always has one


def test_pezoo_has_no_import_cycle_counting_every_import():
    graph = ModuleGraph(ROOT).edges()
    cycles = find_cycles(graph)
    assert not cycles, "import cycles among pezoo's modules:\n" + "\n".join(_describe(graph, c) for c in cycles)


def _describe(graph: dict[str, set[str]], cycle: list[str]) -> str:
    """The cycle as a path, and the rest of its strongly connected component."""
    component = _component(graph, cycle[0])
    rest = sorted(component - set(cycle))
    return " -> ".join(cycle) + (f" (in one knot with {', '.join(rest)})" if rest else "")


def _component(graph: dict[str, set[str]], node: str) -> set[str]:
    """The modules that ``node`` reaches and that reach it."""

    def reach(edges: dict[str, set[str]]) -> set[str]:
        seen, todo = {node}, [node]
        while todo:
            for nxt in edges[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reverse: dict[str, set[str]] = {name: set() for name in graph}
    for name, targets in graph.items():
        for target in targets:
            reverse[target].add(name)
    return reach(graph) & reach(reverse)


def test_the_graph_counts_lazy_and_type_checking_imports_and_resolves_packages():
    graph = ModuleGraph(ROOT).edges()
    assert "pezoo.encodings.combined" in graph["pezoo.registry"]  # imported inside a function
    assert "pezoo.hf.calls" in graph["pezoo.hf.families"]  # `from pezoo.hf import calls`: the submodule
    # `from pezoo.hf import Adapter` under TYPE_CHECKING: the module Adapter comes from, not pezoo.hf
    assert "pezoo.hf" not in graph["pezoo.hf.families"]
    assert "pezoo.encodings.prism.fused_scan" in graph["pezoo.encodings.prism.scan"]
    assert "pezoo.encodings.prism.triton_scan" in graph["pezoo.encodings.prism.fused_scan"]  # lazily
    assert "pezoo.encodings" in graph["pezoo"]  # a package's __init__ importing its subpackage
    assert "pezoo" not in graph["pezoo.registry"]  # running pezoo/__init__ first is no edge


def _package(tmp_path: Path, files: dict[str, str]) -> ModuleGraph:
    for relative, source in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return ModuleGraph(tmp_path / "pkg")


def test_the_cycle_finder_finds_a_planted_cycle_through_lazy_and_type_checking_imports(tmp_path):
    graph = _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "def f():\n    from pkg import b\n",  # a submodule, imported inside a function
            "pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub.c import X\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/c.py": "import pkg.a\nX = 1\n",
            "pkg/d.py": "import pkg.a\n",  # into the cycle, not on it
        },
    ).edges()
    assert graph["pkg.b"] == {"pkg.sub.c"}
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]]
    assert find_cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}, "e": {"a"}}) == [
        ["a", "b", "a"],
        ["c", "d", "c"],
    ]
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_a_package_imported_from_inside_resolves_to_the_submodule_the_name_comes_from(tmp_path):
    files = {
        "pkg/__init__.py": "from pkg.core import thing\nfrom pkg.user import use\nOWN = 1\n",
        "pkg/core.py": "thing = 1\n",
        "pkg/user.py": "def use():\n    from pkg import thing\n",  # thing is pkg.core's: no cycle with pkg
    }
    graph = _package(tmp_path, files).edges()
    assert graph["pkg.user"] == {"pkg.core"}
    assert find_cycles(graph) == []
    # a name the __init__ defines itself is the package's: pkg -> pkg.user -> pkg is a cycle
    files["pkg/user.py"] = "def use():\n    from pkg import OWN\n"
    (tmp_path / "pkg" / "user.py").write_text(files["pkg/user.py"])
    assert find_cycles(ModuleGraph(tmp_path / "pkg").edges()) == [["pkg", "pkg.user", "pkg"]]
