"""Dependencies point one way: pezoo <- harness <- leaderboard."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def imported_top_levels(package: str) -> set[str]:
    names = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    return names


def imported_top_levels_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_pezoo_needs_only_torch_and_einops():
    hf = ROOT / "pezoo" / "hf"
    third_party = set()
    for path in (ROOT / "pezoo").rglob("*.py"):
        if hf not in path.parents:
            third_party |= imported_top_levels_of(path)
    third_party -= {"pezoo", "__future__", "tomllib"} | set(sys.stdlib_module_names)  # tomllib: 3.11's, not 3.10's
    # optional extras (gpu: xformers, plot: matplotlib) are imported lazily, where used; triton
    # (PRISM's CUDA scan, pezoo/encodings/prism/triton_scan.py) under try/except ImportError; tomli
    # on Python 3.10 only, where the standard library lacks tomllib (spec options: pezoo/spec.py)
    assert third_party <= {"torch", "einops", "matplotlib", "xformers", "triton", "tomli"}, third_party


def test_pezoo_hf_needs_only_the_hf_extra():
    # pezoo.hf (extra hf: transformers, which brings safetensors) is imported only by `import pezoo.hf`;
    # a spec with options ("prism{paper}") is pezoo's own (pezoo.spec, pezoo.setups)
    third_party = set()
    for path in (ROOT / "pezoo" / "hf").rglob("*.py"):
        third_party |= imported_top_levels_of(path)
    third_party -= {"pezoo", "__future__"} | set(sys.stdlib_module_names)
    assert third_party <= {"torch", "einops", "transformers", "safetensors"}, third_party


def _modules(package: str) -> list[str]:
    """Every module of ``package`` by dotted name (a package by its ``__init__``)."""
    names = []
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _loaded_after_importing(modules: list[str], watched: tuple[str, ...]) -> list[str]:
    """Which of ``watched`` (top-level packages) are in ``sys.modules`` after a fresh interpreter
    imports every one of ``modules``."""
    code = (
        f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
        f"print(sorted(w for w in {watched!r} if w in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    return eval(out.strip().splitlines()[-1])


def test_every_pezoo_module_imports_without_the_harness_or_the_leaderboard():
    """The floor pezoo stands on is its own: importing any of its modules (pezoo.hf too, where
    transformers is installed) loads neither harness nor leaderboard, lazily imported or not."""
    modules = _modules("pezoo")
    try:
        import transformers  # noqa: F401
    except ImportError:  # pezoo.hf needs its extra; the rest of pezoo is imported all the same
        modules = [m for m in modules if not m.startswith("pezoo.hf")]
    assert _loaded_after_importing(modules, ("harness", "leaderboard")) == []


def test_every_harness_module_but_the_command_lines_top_imports_without_the_leaderboard():
    """The command line's top (harness.cli and the subcommands of harness.commands) loads the
    leaderboard's commands through their entry point; no other harness module loads it, not
    even the helpers the subcommands share (harness.commands.options, report, printable, ...)."""
    subcommands = ("bench", "list", "lm", "results", "sweep")
    top = {"harness.cli", "harness.commands", *(f"harness.commands.{c}" for c in subcommands)}
    modules = [m for m in _modules("harness") if m not in top]
    assert "harness.commands.report" in modules
    assert _loaded_after_importing(modules, ("leaderboard",)) == []


def test_importing_pezoo_loads_no_optional_or_harness_modules():
    # torch._dynamo: the compiler, which torch.compile imports; not pezoo (pezoo.eager says why)
    optional = ("harness", "leaderboard", "pandas", "matplotlib", "xformers", "click", "transformers", "torch._dynamo")
    code = f"import pezoo, sys; print(sorted(m for m in {optional!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_harness_never_imports_the_leaderboard():
    """Floors point down: the leaderboard plugs its commands and its published runs into the
    harness's command line through entry points (harness.cli.COMMANDS_GROUP,
    harness.commands.sweep.PUBLISHED_RUNS_GROUP), so no harness module names it."""
    for path in (ROOT / "harness").rglob("*.py"):
        text = path.read_text()
        assert "import leaderboard" not in text and "from leaderboard" not in text, path


def test_pezoo_never_names_the_harness_or_the_leaderboard():
    """pezoo is the lowest floor: no pezoo module imports harness or leaderboard, not even lazily
    inside a function (pezoo.hf read specs through the harness once)."""
    for path in (ROOT / "pezoo").rglob("*.py"):
        assert not imported_top_levels_of(path) & {"harness", "leaderboard"}, path


def test_the_leaderboard_commands_and_published_runs_reach_the_cli_through_entry_points():
    from click.testing import CliRunner

    from harness.cli import main
    from harness.commands.sweep import published_runs

    assert "leaderboard" in main.commands
    assert CliRunner().invoke(main, ["leaderboard", "--help"]).exit_code == 0
    assert isinstance(published_runs(), list)


PEZOO_PUBLIC_MODULES = {
    "pezoo",
    "pezoo.spec",
    "pezoo.setups",
    "pezoo.backends",
    "pezoo.testing",
    "pezoo.hf",
    "pezoo.limits",
}
"""What the harness may import pezoo through: the package's public names, the spec syntax,
the papers' setups, the backends, the conformance kit, the size bounds, and pezoo in Hugging Face models
(the LM track's "your own model" evaluation)."""

MEASURES_PRISM_KERNELS = {"harness/perf/prism.py", "harness/perf/grid.py"}
"""The performance report times PRISM's own kernels (its scan, its streams) one by one."""


def test_the_harness_uses_pezoo_only_through_its_public_modules():
    """harness/__init__.py's promise: no import reaches pezoo's internals (pezoo.base,
    an encoding's module, pezoo.registry), except where PRISM's kernels are measured."""
    reaching = []
    for path in sorted((ROOT / "harness").rglob("*.py")):
        where = str(path.relative_to(ROOT))
        if where in MEASURES_PRISM_KERNELS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            modules = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                else []
            )
            reaching += [
                f"{where}: {m}" for m in modules if m.split(".")[0] == "pezoo" and m not in PEZOO_PUBLIC_MODULES
            ]
    assert not reaching, reaching
