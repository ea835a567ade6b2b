"""The harness's role packages are floors: each imports only itself and the floors below it,
and no module imports its way back to itself — counting every import, lazy ones and
``TYPE_CHECKING`` ones included (``tests/import_graph.py`` says how imports resolve).

The order, lowest first (the package map in ``harness/__init__.py`` names it too):

    tasks       what an instance of a task is (no other floor)
    config      what a run is: its configuration, the backbone's shape, precisions
    records     what a run leaves: metrics as counts, records, provenance, the store
    training    the model and the loop (reads records' types, writes checkpoints)
    evaluation  greedy decoding of a trained model, into records' metrics
    execution   one run from start to end: train, evaluate, record
    lm          the language-modelling track's corpora, runs and scoring
    perf        the zoo's performance measured (time and memory per encoding)
    sweeps      many runs: plans, estimates, progress, executors
    commands    the ``pezoo`` subcommands
    cli         the command line's top
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from import_graph import ModuleGraph, find_cycles

HARNESS = Path(__file__).resolve().parents[2] / "harness"

FLOORS = (
    "tasks",
    "config",
    "records",
    "training",
    "evaluation",
    "execution",
    "lm",
    "perf",
    "sweeps",
    "commands",
    "cli",
)


def floor_of(module: str) -> str | None:
    """The role package of a harness module (``harness.config.presets`` → ``config``); None
    for the top ``harness`` package itself (its docstring only)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def floor_problems(graph: ModuleGraph, floors: tuple[str, ...] = FLOORS) -> list[str]:
    """Each import from a floor to a higher one, and each package not on the floor list."""
    level = {name: i for i, name in enumerate(floors)}
    problems = []
    for module in graph.paths:
        floor = floor_of(module)
        if floor is not None and floor not in level:
            problems.append(f"{module}: package {floor!r} is on no floor; add it to FLOORS and the package map")
    for imp in graph.all_statements():
        source, target = floor_of(imp.source), floor_of(imp.target)
        if source is None or target is None or source == target or source not in level or target not in level:
            continue
        if level[target] > level[source]:
            how = "lazily " if imp.lazy else ""
            problems.append(f"{imp.source}:{imp.line} {how}imports {imp.target}, a floor above ({source} < {target})")
    return sorted(problems)


def cycle_problems(graph: ModuleGraph) -> list[str]:
    """Each cycle as a path of imports, each hop with the line that makes it."""
    by_hop = {(i.source, i.target): i for i in graph.all_statements()}
    problems = []
    for cycle in find_cycles(graph.edges()):
        hops = [by_hop[(a, b)] for a, b in itertools.pairwise(cycle)]
        problems.append(
            " -> ".join(
                [cycle[0], *(f"{h.target} (line {h.line} of {h.source}{', lazy' if h.lazy else ''})" for h in hops)]
            )
        )
    return problems


def test_each_floor_imports_only_the_floors_below_it():
    assert floor_problems(ModuleGraph(HARNESS)) == []


def test_no_module_imports_its_way_back_to_itself_lazy_imports_included():
    assert cycle_problems(ModuleGraph(HARNESS)) == []


def test_the_package_map_names_the_floors_in_order():
    doc = (HARNESS / "__init__.py").read_text()
    assert " -> ".join(FLOORS) in doc


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "harness"
    for name, text in {"__init__": "", **files}.items():
        path = root / f"{name.replace('.', '/')}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize("how", ["top", "lazy", "type_checking", "relative"])
def test_a_planted_cycle_is_found_however_it_is_imported(tmp_path, how):
    back = {
        "top": "from harness.a.one import x\n",
        "lazy": "def f():\n    from harness.a.one import x\n",
        "type_checking": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from harness.a.one import x\n",
        "relative": "from .one import x\n",
    }[how]
    root = _tree(
        tmp_path, {"a.__init__": "", "a.one": "from harness.a.two import y\nx = 1\n", "a.two": back + "y = 2\n"}
    )
    cycles = find_cycles(ModuleGraph(root).edges())
    assert cycles == [["harness.a.one", "harness.a.two", "harness.a.one"]]
    assert "harness.a.two" in cycle_problems(ModuleGraph(root))[0]


def test_an_upward_import_is_named_lazy_or_not(tmp_path):
    root = _tree(
        tmp_path,
        {"tasks.__init__": "def f():\n    from harness.config import c\n", "config.__init__": "c = 1\n"},
    )
    problems = floor_problems(ModuleGraph(root))
    assert problems == ["harness.tasks:2 lazily imports harness.config, a floor above (tasks < config)"]
    assert (
        floor_problems(
            ModuleGraph(
                _tree(
                    tmp_path / "ok", {"config.__init__": "from harness.tasks import t\n", "tasks.__init__": "t = 1\n"}
                )
            )
        )
        == []
    )


def test_a_package_on_no_floor_is_named(tmp_path):
    root = _tree(tmp_path, {"stray.__init__": ""})
    assert floor_problems(ModuleGraph(root)) == [
        "harness.stray: package 'stray' is on no floor; add it to FLOORS and the package map"
    ]
