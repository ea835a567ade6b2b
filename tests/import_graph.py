"""The module graph of a package, read from its source with ``ast``: every import counts —
at the top of a module, inside a function (a "lazy" import), under ``if TYPE_CHECKING:``.
An import moved into a function to dodge a cycle is still the cycle (STYLE, habit 18).

Resolution rules:

* ``import a.b.c`` is an edge to ``a.b.c``; relative imports resolve against the
  importing module's package.
* ``from a.b import c`` is an edge to ``a.b.c`` where that is a module (a submodule taken
  by name), else to ``a.b`` (a name taken from the package's ``__init__``, which is where
  the importer's load order goes through).
* Only modules inside the scanned root count; imports of other packages are left out.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Import:
    """One import statement's edge: ``source`` imports ``target`` at ``line``;
    ``lazy`` when the statement sits inside a function."""

    source: str
    target: str
    line: int
    lazy: bool


@dataclass
class ModuleGraph:
    """Modules of one package tree (dotted names) and the imports between them."""

    modules: dict[str, Path]
    imports: list[Import] = field(default_factory=list)

    def edges(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {m: set() for m in self.modules}
        for imp in self.imports:
            out[imp.source].add(imp.target)
        return out

    def cycles(self) -> list[list[str]]:
        """Every strongly connected component of more than one module (or a module that
        imports itself), each as a list of its modules, sorted: one cycle per knot."""
        edges = self.edges()
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        found: list[list[str]] = []
        counter = 0

        def visit(root: str) -> None:  # Tarjan's algorithm, iteratively (deep trees stay clear of recursion limits)
            nonlocal counter
            work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(edges[root])))]
            index[root] = low[root] = counter
            counter += 1
            stack.append(root)
            on_stack.add(root)
            while work:
                node, children = work[-1]
                for child in children:
                    if child not in index:
                        index[child] = low[child] = counter
                        counter += 1
                        stack.append(child)
                        on_stack.add(child)
                        work.append((child, iter(sorted(edges[child]))))
                        break
                    if child in on_stack:
                        low[node] = min(low[node], index[child])
                else:
                    work.pop()
                    if work:
                        low[work[-1][0]] = min(low[work[-1][0]], low[node])
                    if low[node] == index[node]:
                        component = []
                        while True:
                            top = stack.pop()
                            on_stack.discard(top)
                            component.append(top)
                            if top == node:
                                break
                        if len(component) > 1 or node in edges[node]:
                            found.append(sorted(component))

        for module in sorted(edges):
            if module not in index:
                visit(module)
        return sorted(found)

    def cycle_path(self, component: list[str]) -> list[Import]:
        """One closed chain of imports through ``component``, for a readable failure."""
        members = set(component)
        by_source: dict[str, list[Import]] = {}
        for imp in self.imports:
            if imp.source in members and imp.target in members:
                by_source.setdefault(imp.source, []).append(imp)
        start = component[0]
        path: list[Import] = []
        seen = {start}
        node = start
        while True:
            options = sorted(by_source.get(node, []), key=lambda i: (i.target != start, i.target in seen, i.target))
            step = options[0]
            path.append(step)
            if step.target == start or step.target in seen:
                return path
            seen.add(step.target)
            node = step.target


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_graph(root: Path) -> ModuleGraph:
    """The graph of every ``.py`` module under the package folder ``root``."""
    modules = {module_name(root, p): p for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts}
    graph = ModuleGraph(modules)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), filename=str(path))
        inside_function: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                inside_function |= {id(n) for n in ast.walk(node) if n is not node}
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    targets.append(sub if sub in modules else source)
            for target in targets:
                while target and target not in modules:  # `import a.b.c` of a name below a module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph.imports.append(Import(name, target, node.lineno, id(node) in inside_function))
    return graph
