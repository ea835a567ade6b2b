"""LM sweep files (``leaderboard/lm/sweep.toml``): encodings, variants, fine-tuned variants, seeds
and tasks, read into ``LmConfig`` s in the order they run (seed-major, trained runs first).

``seeds`` are every row's; ``claim_seeds`` (optional) are the seeds of every row a paper's
claim names (``harness.lm.claims.claimed``: the row a claim is about or one it is compared
with), and of the trained run a named variant evaluates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.lm.claims import claimed
from harness.lm.config import LmConfig, lm_preset_config
from harness.records.inputs import TOML_LIMIT, parse_toml, read_text

__all__ = ["SWEEP_KEYS", "load_lm_sweep", "sweep_configs"]

SWEEP_KEYS = ("preset", "tasks", "seeds", "claim_seeds", "pe", "variants", "finetune_steps", "finetuned", "overrides")
"""The keys an LM sweep file may hold."""


def sweep_configs(table: Mapping[str, Any], *, tasks: Sequence[str] | None = None) -> list[LmConfig]:
    """The configs of a sweep table (a parsed file), restricted to ``tasks`` when given."""
    unknown = sorted(set(table) - set(SWEEP_KEYS))
    if unknown:
        raise ValueError(f"unknown LM sweep key(s) {', '.join(unknown)}; valid keys: {', '.join(SWEEP_KEYS)}")
    preset = table.get("preset", "lm")
    wanted = list(table.get("tasks", ["lm_en"]))
    if tasks:
        missing = sorted(set(tasks) - set(wanted))
        if missing:
            raise ValueError(f"the sweep has no task(s) {', '.join(missing)}; its tasks: {', '.join(wanted)}")
        wanted = [t for t in wanted if t in tasks]
    overrides = table.get("overrides", {})
    steps = int(table.get("finetune_steps", 0))
    every = list(table.get("seeds", [0]))
    seeds = list(dict.fromkeys(every + list(table.get("claim_seeds", []))))

    def variants_of(task: str, seed: int) -> list[LmConfig]:
        kw = {"task": task, "seed": seed, "overrides": overrides}
        out = [lm_preset_config(preset, pe=pe, **kw) for pe in table.get("variants", [])]
        out += [lm_preset_config(preset, pe=pe, finetune_steps=steps, **kw) for pe in table.get("finetuned", [])]
        return out if seed in every else [v for v in out if claimed(v)]

    configs: list[LmConfig] = []
    for task in wanted:
        for seed in seeds:
            kw = {"task": task, "seed": seed, "overrides": overrides}
            trained = [lm_preset_config(preset, pe=pe, **kw) for pe in table.get("pe", [])]
            if seed not in every:  # a claim's seed: the rows a claim names, and the runs their variants evaluate
                needed = {v.trained_config().run_id() for v in variants_of(task, seed)}
                trained = [t for t in trained if claimed(t) or t.run_id() in needed]
            configs += trained
        for seed in seeds:
            configs += variants_of(task, seed)
    return configs


def load_lm_sweep(path: str | Path, *, tasks: Sequence[str] | None = None) -> list[LmConfig]:
    """The configs of the sweep file at ``path`` (ValueError naming the file on a bad one)."""
    try:
        table = parse_toml(read_text(Path(path), TOML_LIMIT))
    except OSError as exc:
        raise ValueError(f"{path}: {exc}") from None
    except ValueError as exc:  # FileReadError names the path itself
        raise ValueError(str(exc) if str(path) in str(exc) else f"{path}: {exc}") from None
    try:
        return sweep_configs(table, tasks=tasks)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
