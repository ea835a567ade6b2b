"""The import graph of a package, read from its source with ``ast``: every import counts —
at the top of a module, inside a function (a "lazy" import), under ``if TYPE_CHECKING:``,
in ``try`` blocks. An import moved into a function to dodge a cycle is still the cycle
(STYLE, habit 18). Used by tests/pezoo/test_import_cycles.py (pezoo) and
tests/harness/test_floors.py (the harness's floors and cycles).

The rule for an edge:

* ``import a.b`` names ``a.b``; ``from a.b import c`` names ``a.b.c`` when that is a module
  (a submodule imported by name), else ``a.b``. Relative imports resolve against the
  importing module's package.
* A package imported from inside itself (``pkg.x.y`` writing ``from pkg.x import name``) is
  resolved to the submodule the name comes from, following the package ``__init__``'s
  re-exports (through nested packages); where the ``__init__`` defines the name itself, or
  it cannot be traced, the edge goes to the package. A package imported from outside it is
  the package: importing it runs its whole ``__init__``.
* A package's ``__init__`` is not counted as imported by its submodules merely because
  Python runs it first; only modules inside the scanned root count.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Import:
    """One edge as the code writes it: ``source`` imports ``target`` at ``line``, ``lazy``
    when the statement sits inside a function."""

    source: str
    target: str
    line: int
    lazy: bool


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

    def statements(self, importer: str) -> list[Import]:
        """Every import of a module of the package in ``importer``'s source, with its line and
        whether it sits inside a function."""
        tree = self._trees[importer]
        inside: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                inside |= {id(n) for n in ast.walk(node) if n is not node}
        found: list[Import] = []
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                for alias in node.names:
                    name = alias.name
                    while name and name not in self.paths:  # `import a.b.c` of a name below a module
                        name = name.rpartition(".")[0]
                    targets.append(name)
            elif isinstance(node, ast.ImportFrom):
                base = self._base(importer, node)
                for alias in node.names:
                    if f"{base}.{alias.name}" in self.paths:
                        targets.append(f"{base}.{alias.name}")
                    elif base in self.packages and importer.startswith(base + "."):
                        targets.append(self.home(base, alias.name))
                    else:
                        targets.append(base)
            lazy = id(node) in inside
            found += [Import(importer, t, node.lineno, lazy) for t in targets if t in self.paths and t != importer]
        return found

    def imports(self, importer: str) -> set[str]:
        """The modules of the package that ``importer`` imports anywhere in its source."""
        return {i.target for i in self.statements(importer)}

    def edges(self) -> dict[str, set[str]]:
        return {name: self.imports(name) for name in self.paths}

    def all_statements(self) -> list[Import]:
        return [i for name in self.paths for i in self.statements(name)]


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
