"""Encoding plugins (entry points): a name clash is an error naming both sources, a plugin
that does not import is listed apart with its error and refused by `pezoo bench` before it
starts, and the encoding's ``name`` is the entry-point key (issue 18, items 6-8)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from importlib import metadata

import pytest
import torch
from click.testing import CliRunner
from fake_entry_points import fake_entry_points

import pezoo
from harness.cli import main
from pezoo.base import ENCODINGS

PLUGIN_SOURCE = textwrap.dedent(
    """
    from pezoo import PositionalEncoding

    class Unnamed(PositionalEncoding):
        '''A plugin that leaves name unset.'''

    class Misnamed(PositionalEncoding):
        '''A plugin whose name is not its key.'''
        name = "something_else"

    class Agrees(PositionalEncoding):
        '''A plugin whose name is its key.'''
        name = "agrees_plugin"

    class Undocumented(PositionalEncoding):
        pass

    class UndocumentedAgrees(Agrees):
        name = None
    """
)


@pytest.fixture
def plugins(monkeypatch, tmp_path):
    """Install fake entry points: ``plugins(name=value, ...)``. ENCODINGS is restored afterwards."""
    (tmp_path / "fake_pezoo_plugin.py").write_text(PLUGIN_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(ENCODINGS, "_factories", {k: v for k, v in ENCODINGS._factories.items()})
    monkeypatch.setattr(ENCODINGS, "broken", {})

    def install(**points: str) -> None:
        eps = [metadata.EntryPoint(name, value, "pezoo.encodings") for name, value in points.items()]
        monkeypatch.setattr(metadata, "entry_points", fake_entry_points(eps))
        monkeypatch.setattr(ENCODINGS, "_entry_points_loaded", False)

    sys.modules.pop("fake_pezoo_plugin", None)  # a fresh import per test: loading sets the classes' name
    yield install
    sys.modules.pop("fake_pezoo_plugin", None)


def test_a_plugin_clashing_with_a_built_in_is_an_error_naming_both(plugins):
    plugins(rope="fake_pezoo_plugin:Unnamed")
    with pytest.raises(ValueError) as info:
        pezoo.create("rope", head_dim=8)
    message = str(info.value)
    assert "'rope'" in message and "fake_pezoo_plugin:Unnamed" in message and "pezoo.encodings.rope.RoPE" in message
    with pytest.raises(ValueError, match="clash"):  # every later listing too, not only the first
        pezoo.available()


def test_two_plugins_with_one_name_clash(plugins):
    plugins(twin="fake_pezoo_plugin:Unnamed")
    eps = [
        metadata.EntryPoint("twin", "fake_pezoo_plugin:Unnamed", "pezoo.encodings"),
        metadata.EntryPoint("twin", "fake_pezoo_plugin:Agrees", "pezoo.encodings"),
    ]
    metadata.entry_points = fake_entry_points(eps)  # the fixture's monkeypatch restores the original
    with pytest.raises(ValueError, match=r"Unnamed.*Agrees|Agrees.*Unnamed"):
        pezoo.available()


def test_the_name_is_the_entry_point_key(plugins):
    plugins(my_plugin="fake_pezoo_plugin:Unnamed", agrees_plugin="fake_pezoo_plugin:Agrees")
    assert pezoo.create("my_plugin").name == "my_plugin"
    assert pezoo.create("agrees_plugin").name == "agrees_plugin"


def test_a_plugin_whose_name_disagrees_with_its_key_does_not_load(plugins):
    plugins(misnamed="fake_pezoo_plugin:Misnamed")
    with pytest.raises(ImportError, match=r"something_else.*misnamed"):
        pezoo.create("misnamed")


def test_pezoo_list_loads_plugins_and_lists_broken_ones_apart(plugins):
    plugins(good_plugin="fake_pezoo_plugin:Unnamed", broken_plugin="no_such_module_for_pezoo:Thing")
    result = CliRunner().invoke(main, ["list"])
    assert result.exit_code == 0, result.output
    usable, _, rest = result.output.partition("plugins that failed to load")
    assert "good_plugin" in usable and "broken_plugin" not in usable
    broken_line = next(line for line in rest.splitlines() if "broken_plugin" in line)
    assert "no_such_module_for_pezoo" in broken_line
    assert "randomized:broken_plugin" not in pezoo.available()


def test_pezoo_list_describes_a_plugin_without_a_docstring_by_nothing_not_the_base_class(plugins):
    """It was listed with PositionalEncoding's "Base class of every pezoo encoding ..."; a
    subclass of a documented encoding keeps that encoding's description."""
    plugins(bare_plugin="fake_pezoo_plugin:Undocumented", heir_plugin="fake_pezoo_plugin:UndocumentedAgrees")
    lines = CliRunner().invoke(main, ["list"]).output.splitlines()
    bare = next(line for line in lines if line.lstrip().startswith("bare_plugin "))
    heir = next(line for line in lines if line.lstrip().startswith("heir_plugin "))
    assert len(bare.split()) == 2, bare  # its name and its wrappers' marks, no description
    assert heir.endswith("A plugin whose name is its key."), heir


@pytest.mark.parametrize("pe", ["broken_plugin", "randomized:broken_plugin"])
def test_bench_refuses_a_broken_plugin_before_it_starts(plugins, tmp_path, pe):
    plugins(broken_plugin="no_such_module_for_pezoo:Thing")
    result = CliRunner().invoke(
        main, ["bench", "--pe", pe, "--task", "copy", "--preset", "smoke", "--store", str(tmp_path / "s.sqlite")]
    )
    assert result.exit_code == 2, result.output
    assert "broken_plugin" in result.output and "failed to load" in result.output
    assert "no_such_module_for_pezoo" in result.output
    assert not (tmp_path / "s.sqlite").exists()  # refused before any run was stored


def _smoke_run(pe, tmp_path):
    from harness.config import preset_config
    from harness.execution.run import train_and_evaluate

    cfg = preset_config("smoke", pe=pe, task="copy", seed=0, overrides={"train": {"steps": 2}})
    result = train_and_evaluate(cfg, torch.device("cpu"), tmp_path / "ck.pt")
    assert result.status == "finished", result.traceback
    return result.provenance


def test_a_plugin_encodings_code_is_named_in_the_record(plugins, tmp_path, monkeypatch):
    # the record's commit is pezoo's: before, nothing said which code the plugin ran
    plugins(agrees_plugin="fake_pezoo_plugin:Agrees")
    prov = _smoke_run("agrees_plugin", tmp_path)
    assert prov["plugins"] == (
        "encoding agrees_plugin: not from an installed distribution, so no version identifies its code "
        "(module fake_pezoo_plugin)"
    )
    monkeypatch.setattr(metadata, "packages_distributions", lambda: {"fake_pezoo_plugin": ["fake-pezoo-plugin"]})
    monkeypatch.setattr(metadata, "version", lambda name: {"fake-pezoo-plugin": "1.2.0"}[name])
    prov = _smoke_run("randomized:agrees_plugin", tmp_path)
    assert prov["plugins"] == "encoding agrees_plugin: fake-pezoo-plugin 1.2.0 (module fake_pezoo_plugin)"


def test_a_built_in_run_names_no_plugins(tmp_path):
    assert "plugins" not in _smoke_run("randomized:rope", tmp_path)


# -- plugins that exit, crash or clash (issue 39) -----------------------------------------

MISBEHAVING_SOURCE = textwrap.dedent(
    """
    import os
    import signal
    import sys

    from pezoo import PositionalEncoding

    class ExitsInForward(PositionalEncoding):
        '''Calls sys.exit(0) in its forward (embed).'''

        def embed(self, x, pos):
            sys.exit(0)

    class ExitsWhenBuilt(PositionalEncoding):
        '''Calls sys.exit(0) in its constructor.'''

        def __init__(self, *args, **kwargs):
            sys.exit(0)

    class Hangs(PositionalEncoding):
        '''Never returns from its forward, as a deadlocked plugin would not.'''

        def embed(self, x, pos):
            import time

            time.sleep(3600)

    class Segfaults(PositionalEncoding):
        '''Its process dies of SIGSEGV in its forward, as a broken C extension's would.'''

        def embed(self, x, pos):
            os.kill(os.getpid(), signal.SIGSEGV)
    """
)


@pytest.fixture
def installed(monkeypatch, tmp_path):
    """Install a plugin distribution for real (a ``.dist-info`` with entry points on
    sys.path, which spawned workers inherit): ``installed(source, name=value, ...)``."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(ENCODINGS, "_factories", {k: v for k, v in ENCODINGS._factories.items()})
    monkeypatch.setattr(ENCODINGS, "broken", {})
    monkeypatch.setattr(ENCODINGS, "_entry_points_loaded", False)
    modules = []

    def install(source: str, **points: str) -> None:
        module = "misbehaving_pezoo_plugin_" + str(len(modules))
        modules.append(module)
        (tmp_path / f"{module}.py").write_text(source)
        info = tmp_path / f"{module}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
        lines = "".join(f"{name} = {module}:{value}\n" for name, value in points.items())
        (info / "entry_points.txt").write_text(f"[pezoo.encodings]\n{lines}")
        (info / "top_level.txt").write_text(f"{module}\n")

    yield install
    for module in modules:
        sys.modules.pop(module, None)


def test_a_plugin_that_exits_in_forward_fails_its_run_and_the_sweep_goes_on(installed, tmp_path):
    from harness.config import preset_config
    from harness.records.store import Store
    from harness.sweeps.executors import InProcess, run_sweep

    installed(MISBEHAVING_SOURCE, exits_plugin="ExitsInForward")
    exits, nope = (
        preset_config("smoke", pe=pe, task="copy", seed=0, overrides={"train": {"steps": 2}})
        for pe in ("exits_plugin", "nope")
    )
    with Store(tmp_path / "s.sqlite") as store:
        outcomes = run_sweep(InProcess(torch.device("cpu")), [exits, nope], store)
        runs = {r["pe"]: r for r in store.runs()}
    assert [o.status for o in outcomes] == ["failed", "finished"]
    assert "sys.exit(0)" in outcomes[0].error and "exits_plugin" in outcomes[0].error
    assert "misbehaving_pezoo_plugin_0 0.1" in outcomes[0].error  # its distribution
    assert runs["exits_plugin"]["status"] == "failed" and "SystemExit" in runs["exits_plugin"]["error"]


@pytest.mark.parametrize("at_import", ["import sys\nsys.exit(0)\n", "raise RuntimeError('no GPU here')\n"])
def test_a_plugin_that_exits_at_import_is_skipped_naming_it(installed, tmp_path, at_import):
    installed(at_import, broken_plugin="Anything")
    listed = CliRunner().invoke(main, ["list"])
    assert listed.exit_code == 0 and isinstance(listed.exception, type(None)), listed.output
    usable, _, rest = listed.output.partition("plugins that failed to load")
    assert "nope" in usable and "broken_plugin" not in usable
    line = next(line for line in rest.splitlines() if "broken_plugin" in line)
    assert "misbehaving_pezoo_plugin_0" in line  # the distribution that holds it
    args = ["bench", "--pe", "nope", "--task", "copy", "--preset", "smoke", "--steps", "2", "--device", "cpu"]
    result = CliRunner().invoke(main, [*args, "--store", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 0, result.output
    warning = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "broken_plugin" in warning[0] and "misbehaving_pezoo_plugin_0" in warning[0]
    assert "| nope" in result.output


def test_a_plugin_named_like_a_built_in_is_a_one_line_error_naming_both(plugins):
    plugins(rope="fake_pezoo_plugin:Unnamed")
    for args in (["list"], ["bench", "--pe", "nope", "--task", "copy"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error:"), result.output
        assert "fake_pezoo_plugin:Unnamed" in lines[0] and "pezoo.encodings.rope.RoPE" in lines[0]


def test_a_segfaulting_plugin_under_one_worker_fails_its_run_not_the_sweep(installed, tmp_path):
    # in a subprocess: before, the segfault killed bench itself (and would kill pytest here)
    installed(MISBEHAVING_SOURCE, segv_plugin="Segfaults")
    args = ["bench", "--pe", "segv_plugin,nope", "--task", "copy", "--preset", "smoke", "--steps", "2"]
    args += ["--device", "cpu", "--workers", "1", "--retries", "0", "--store", str(tmp_path / "s.sqlite")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    code = "import sys; from harness.cli import main; sys.argv = ['pezoo', *sys.argv[1:]]; main()"
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "SIGSEGV" in output and "| nope" in output
    from harness.records.store import Store

    with Store(tmp_path / "s.sqlite", readonly=True) as store:
        assert {r["pe"]: r["status"] for r in store.runs()} == {"segv_plugin": "failed", "nope": "finished"}


def test_a_hanging_plugin_is_stopped_after_the_hang_timeout_and_the_sweep_goes_on(installed, tmp_path):
    from harness.config import preset_config
    from harness.records.store import Store
    from harness.sweeps.executors import local_executor, run_sweep

    installed(MISBEHAVING_SOURCE, hangs_plugin="Hangs")
    hangs, nope = (
        preset_config("smoke", pe=pe, task="copy", seed=0, overrides={"train": {"steps": 2}})
        for pe in ("hangs_plugin", "nope")
    )
    executor = local_executor(torch.device("cpu"), 1, 2, hang_seconds=15.0)  # a worker process, even for one
    started = time.monotonic()
    with Store(tmp_path / "s.sqlite") as store:
        outcomes = run_sweep(executor, [hangs, nope], store, retries=0)
        runs = {r["pe"]: r for r in store.runs()}
    assert [o.status for o in outcomes] == ["failed", "finished"]
    assert "sent nothing for 15 s" in runs["hangs_plugin"]["error"] and "hung" in runs["hangs_plugin"]["error"]
    assert time.monotonic() - started < 300


def test_a_plugin_that_exits_when_built_is_refused_before_bench_starts(installed, tmp_path):
    installed(MISBEHAVING_SOURCE, exits_built="ExitsWhenBuilt")
    args = ["bench", "--pe", "exits_built,nope", "--task", "copy", "--preset", "smoke", "--device", "cpu"]
    result = CliRunner().invoke(main, [*args, "--store", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 2, result.output  # not 0, the status the plugin chose
    assert "exits_built" in result.output and "sys.exit(0)" in result.output
    assert not (tmp_path / "s.sqlite").exists()
