"""What tells the runs of a sweep apart: the axes that vary, and each run's label."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.config import RunConfig
from harness.config.pe_spec import config_display_name
from harness.sweeps.sweep import AXES


def axis_value(cfg: RunConfig, name: str) -> Any:
    """The value of override axis ``name`` (``AXES``) in ``cfg``."""
    section, key, _ = AXES[name]
    return getattr(getattr(cfg, section), key, None)  # None: an axis the run has not (an LM run has no test_max)


def varying_axes(configs: Sequence[RunConfig]) -> list[str]:
    """The override axes (and ``preset``) whose value differs between the runs."""
    names = ["preset"] if len({c.preset for c in configs}) > 1 else []
    return names + [n for n in AXES if len({axis_value(c, n) for c in configs}) > 1]


def run_label(cfg: RunConfig, axes: Sequence[str] = ()) -> str:
    """``rope on copy seed 0``, plus ``lr 0.0003`` etc. for each of ``axes``."""
    extra = "".join(f" {a} {cfg.preset if a == 'preset' else axis_value(cfg, a)}" for a in axes)
    return f"{config_display_name(cfg)} on {cfg.task} seed {cfg.seed}{extra}"
