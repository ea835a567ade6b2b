"""One declaration per setting (harness.sweeps.sweep.SETTINGS): the command-line option, the sweep
file's key, the grid axis and the config field are all made from its one entry."""

from __future__ import annotations

from harness.commands.bench import bench
from harness.sweeps.sweep import AXES, GRID_KEYS, SETTINGS, Grid, Setting, grid_from_mapping, naming_the_option


def test_every_setting_is_an_option_a_sweep_key_and_an_axis():
    options = {opt for p in bench.params for opt in p.opts}
    for name, setting in SETTINGS.items():
        assert setting.option(name) in options
        assert name in GRID_KEYS and AXES[name] == (setting.section, setting.key, setting.kind)
        assert naming_the_option(f"{setting.section}.{setting.key} must be positive").endswith(
            f"({setting.option(name)})"
        )


def test_bench_takes_few_parameters():
    import inspect

    assert len(inspect.signature(inspect.unwrap(bench.callback)).parameters) <= 15


def test_a_new_setting_is_one_entry(monkeypatch):
    """Adding an entry makes the sweep key, the grid axis and the config override."""
    monkeypatch.setitem(SETTINGS, "window_jump", Setting("eval", "window_jump", int, "Tokens dropped per slide."))
    grid = grid_from_mapping({"preset": "smoke", "pe": "nope", "task": "copy", "window": 40, "window_jump": [5, 7]})
    assert grid.window_jump == (5, 7) and grid.size() == 2
    assert [c.eval.window_jump for c in grid.configs()] == [5, 7]
    assert Grid(preset="smoke", pe=("nope",), task=("copy",), window_jump=(3,)).configs()[0].eval.window_jump == 3
