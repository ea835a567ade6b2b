"""What a plugin author can hand the registry by mistake, each refused with a sentence naming
it before anything is registered or changed: names that ``create`` could never reach, a
class registered twice, factories that are no encoding or build none, and entry points to
any of these."""

from __future__ import annotations

import sys
import textwrap
from importlib import metadata

import pytest
import torch
from fake_entry_points import fake_entry_points

import pezoo
from pezoo import PositionalEncoding, register
from pezoo.registry import ENCODINGS, WRAPPERS


@pytest.fixture
def registry(monkeypatch):
    """ENCODINGS as it is, restored after the test."""
    monkeypatch.setattr(ENCODINGS, "_factories", dict(ENCODINGS._factories))
    monkeypatch.setattr(ENCODINGS, "broken", {})
    return ENCODINGS


@pytest.mark.parametrize("name", ["my pe", "a:b", "a+b", "x{y}", "v@w", "a,b", "", " ", ".hidden", "-x"])
def test_a_name_create_cannot_reach_is_refused_and_nothing_changes(registry, name):
    class Mine(PositionalEncoding):
        pass

    before = dict(registry._factories)
    with pytest.raises(ValueError, match=r"may hold only letters, digits"):
        register(name)(Mine)
    assert registry._factories == before and Mine.name == ""


@pytest.mark.parametrize("name", [3, None, ("a",)])
def test_a_name_that_is_no_string_is_refused_and_the_listing_still_works(registry, name):
    with pytest.raises(TypeError, match=r"encoding names are strings"):
        registry.register(name, PositionalEncoding)
    assert "rope" in pezoo.available()  # sorting the names raised TypeError for every caller


def test_taking_a_built_in_name_leaves_the_class_as_it_was(registry):
    class Mine(PositionalEncoding):
        pass

    with pytest.raises(ValueError, match=r"'rope' is registered twice.*RoPE.*Mine"):
        register("rope")(Mine)
    assert Mine.name == "" and registry["rope"].__name__ == "RoPE"


def test_one_class_under_two_names_is_refused(registry):
    class Twice(PositionalEncoding):
        pass

    register("probe_first")(Twice)
    with pytest.raises(ValueError, match=r"registered as 'probe_first' already.*subclass"):
        register("probe_second")(Twice)
    assert "probe_second" not in registry
    assert pezoo.create("probe_first").name == "probe_first"  # was "probe_second": the last name won


@pytest.mark.parametrize("thing", [lambda: None, torch.nn.Linear], ids=["function", "nn.Module"])
def test_register_decorates_encoding_classes_only(registry, thing):
    with pytest.raises(TypeError, match=r"decorates a subclass of pezoo.PositionalEncoding"):
        register("probe_thing")(thing)
    assert "probe_thing" not in registry


def test_a_factory_that_cannot_be_called_is_refused(registry):
    with pytest.raises(TypeError, match=r"'probe_none': the factory must be callable.*None"):
        registry.register("probe_none", None)
    assert "probe_none" not in registry


def _three() -> int:
    return 3


@pytest.mark.parametrize("name", ["probe_int", "randomized:probe_int", "probe_int+alibi"])
def test_a_factory_that_builds_no_encoding_is_named(registry, name):
    registry.register("probe_int", _three)
    with pytest.raises(TypeError, match=r"'probe_int'.*_three returned builtins.int, not a pezoo.PositionalEncoding"):
        pezoo.create(name, dims=pezoo.ModelDims(d_model=32, n_heads=4, n_layers=2))


def test_a_wrapper_that_builds_no_encoding_is_named(registry, monkeypatch):
    monkeypatch.setitem(WRAPPERS, "probe", lambda inner: [inner])
    with pytest.raises(TypeError, match=r"'probe:'.*returned builtins.list, not a pezoo.PositionalEncoding"):
        pezoo.create("probe:rope", head_dim=8)


@pytest.mark.parametrize("dims", [{"d_model": 32, "n_heads": 4, "n_layers": 2}, (32, 4, 2)], ids=["dict", "tuple"])
def test_dims_that_are_no_model_dims_are_named(dims):
    with pytest.raises(TypeError, match=r"dims must be a pezoo.ModelDims"):  # was: AttributeError as_kwargs
        pezoo.create("rope", dims=dims)


PLUGIN = textwrap.dedent(
    """
    import torch
    from pezoo import PositionalEncoding

    NOT_CALLABLE = 3

    class NotAnEncoding(torch.nn.Module):
        pass

    class Fine(PositionalEncoding):
        pass

    def builds_a_list():
        return []
    """
)


@pytest.fixture
def plugins(registry, monkeypatch, tmp_path):
    """Install fake entry points: ``plugins(name=value, ...)``."""
    (tmp_path / "probe_pezoo_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("probe_pezoo_plugin", None)

    def install(**points: str) -> None:
        eps = [metadata.EntryPoint(name, value, "pezoo.encodings") for name, value in points.items()]
        monkeypatch.setattr(metadata, "entry_points", fake_entry_points(eps))
        monkeypatch.setattr(registry, "_entry_points_loaded", False)

    yield install
    sys.modules.pop("probe_pezoo_plugin", None)


def test_plugins_that_name_no_encoding_are_listed_as_broken_not_as_usable(plugins, registry):
    plugins(
        probe_three="probe_pezoo_plugin:NOT_CALLABLE",
        probe_module="probe_pezoo_plugin:NotAnEncoding",
        probe_fine="probe_pezoo_plugin:Fine",
    )
    broken = registry.load_plugins()
    assert set(broken) == {"probe_three", "probe_module"}  # both were listed as usable encodings
    assert "it names 3, not a PositionalEncoding subclass" in broken["probe_three"]
    assert "probe_pezoo_plugin.NotAnEncoding, not a PositionalEncoding subclass" in broken["probe_module"]
    assert "probe_fine" in pezoo.available() and "probe_module" not in pezoo.available()
    with pytest.raises(ImportError, match=r"probe_module.*NotAnEncoding"):
        pezoo.create("probe_module")  # was: the nn.Module, returned as if it were an encoding


@pytest.mark.parametrize("key", ["a+b", "has space", "wrapped:name", "opts{x}"])
def test_a_plugin_key_create_cannot_reach_is_listed_as_broken(plugins, registry, key):
    plugins(**{key: "probe_pezoo_plugin:Fine"})
    assert key not in pezoo.available() and not pezoo.is_known(key)  # was listed, and is_known said True
    assert "may hold only letters, digits" in registry.load_plugins()[key]


def test_a_plugin_factory_that_builds_no_encoding_is_named(plugins):
    plugins(probe_list="probe_pezoo_plugin:builds_a_list")
    with pytest.raises(TypeError, match=r"'probe_list'.*builds_a_list returned builtins.list"):
        pezoo.create("probe_list")
