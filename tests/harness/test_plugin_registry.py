"""Encoding plugins (entry points): a name clash is an error naming both sources, a plugin
that does not import is listed apart with its error and refused by `pezoo bench` before it
starts, and the encoding's ``name`` is the entry-point key (issue 18, items 6-8)."""

from __future__ import annotations

import sys
import textwrap
from importlib import metadata

import pytest
import torch
from click.testing import CliRunner

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
        monkeypatch.setattr(metadata, "entry_points", lambda group=None: [e for e in eps if e.group == group])
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
    metadata.entry_points = lambda group=None: eps  # the fixture's monkeypatch restores the original
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
    from harness.run import train_and_evaluate

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
