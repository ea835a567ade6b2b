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

import sys
import textwrap
from pathlib import Path

import pezoo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from import_graph import ModuleGraph, find_cycles

ROOT = Path(pezoo.__file__).resolve().parent


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


def test_no_two_of_pezoos_parts_import_each_other():
    """Floors between pezoo's top-level parts too (a module or a subpackage: ``pezoo.registry``,
    ``pezoo.encodings``, ``pezoo.hf``, ...): an encoding registers itself with the registry,
    so the registry must not reach back into ``pezoo.encodings`` (the combination mechanism
    it builds ``a+b`` with lives below both, in ``pezoo.combined``)."""
    graph = ModuleGraph(ROOT).edges()
    parts: dict[str, set[str]] = {}
    for source, targets in graph.items():
        top = ".".join(source.split(".")[:2])
        parts.setdefault(top, set())
        for target in targets:
            other = ".".join(target.split(".")[:2])
            parts.setdefault(other, set())
            if other != top:
                parts[top].add(other)
    assert find_cycles(parts) == []
