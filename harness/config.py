"""Typed, frozen run configuration with strict keys, and the named presets.

A run is fully described by a ``RunConfig``: the encoding (name + options), the task,
the seed, and the backbone / training / evaluation configs. Its canonical JSON form is
stored with the run, and its hash is the run's identity in the results store.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from harness.backbone import BackboneConfig

T = TypeVar("T")


def strict(cls: type[T], values: Mapping[str, Any], what: str | None = None) -> T:
    """Build dataclass ``cls`` from ``values``; an unknown key is an error naming the valid ones."""
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ValueError(f"unknown {what or cls.__name__} key(s) {', '.join(unknown)}; valid keys: {', '.join(names)}")
    return cls(**values)


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation and training data.

    Attributes:
        steps: optimiser steps.
        batch_size: examples per step.
        lr: peak learning rate (AdamW).
        betas: AdamW betas.
        weight_decay: AdamW decoupled weight decay.
        warmup: linear warm-up steps, then cosine decay to ``min_lr_ratio * lr``.
        min_lr_ratio: final learning rate as a fraction of the peak.
        grad_clip: global gradient-norm clip.
        train_max: largest training scale N; scales are drawn uniformly from
            ``train_min..train_max`` per example.
        train_min: smallest training scale.
    """

    steps: int = 1500
    batch_size: int = 64
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 0.01
    warmup: int = 100
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0
    train_max: int = 10
    train_min: int = 1

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError("steps and batch_size must be >= 1")
        if not 1 <= self.train_min <= self.train_max:
            raise ValueError(f"need 1 <= train_min <= train_max, got {self.train_min}..{self.train_max}")


@dataclass(frozen=True)
class EvalConfig:
    """Which lengths are evaluated and on how many examples.

    Attributes:
        test_max: largest test scale M; test scales are ``train_max+1..test_max``
            (every one, or every ``test_stride``-th).
        test_stride: evaluate every k-th test scale (always including the last).
        samples: examples per evaluated scale (a fixed set per task/scale/seed).
        batch_size: decoding batch size.
    """

    test_max: int = 40
    test_stride: int = 1
    samples: int = 100
    batch_size: int = 100


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run's result."""

    pe: str
    task: str
    seed: int = 0
    preset: str = "quick"
    pe_options: Mapping[str, Any] = field(default_factory=dict)
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        if self.eval.test_max <= self.train.train_max:
            raise ValueError(
                f"test length {self.eval.test_max} must exceed the training length {self.train.train_max}: "
                "extrapolation is measured beyond training"
            )

    def train_lengths(self) -> list[int]:
        return list(range(self.train.train_min, self.train.train_max + 1))

    def test_lengths(self) -> list[int]:
        lo, hi, k = self.train.train_max + 1, self.eval.test_max, self.eval.test_stride
        lengths = list(range(lo, hi + 1, k))
        return lengths if lengths[-1] == hi else [*lengths, hi]

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["pe_options"] = dict(self.pe_options)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunConfig:
        d = dict(d)
        nested = {
            "backbone": (BackboneConfig, d.pop("backbone", {})),
            "train": (TrainConfig, dict(d.pop("train", {}))),
            "eval": (EvalConfig, d.pop("eval", {})),
        }
        if "betas" in nested["train"][1]:  # JSON has no tuples
            nested["train"][1]["betas"] = tuple(nested["train"][1]["betas"])
        built = {k: strict(c, dict(v), f"{k} config") for k, (c, v) in nested.items()}
        return strict(cls, {**d, **built}, "run config")

    def run_id(self) -> str:
        """Stable identity: hash of the canonical JSON of everything but the preset label."""
        d = self.to_dict()
        d.pop("preset")
        blob = json.dumps(d, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------
# Presets: a name for a whole protocol, recorded with every run
# --------------------------------------------------------------------------------------

PRESETS: dict[str, dict[str, Any]] = {
    # 2 CPU cores, a couple of minutes per run.
    "quick": {
        "backbone": {"d_model": 128, "n_layers": 3, "n_heads": 4},
        "train": {"steps": 1500, "batch_size": 64, "lr": 1e-3, "warmup": 100, "train_max": 10},
        "eval": {"test_max": 40, "samples": 100},
    },
    # Seconds: for tests and smoke checks, learns nothing useful.
    "smoke": {
        "backbone": {"d_model": 32, "n_layers": 1, "n_heads": 2},
        "train": {"steps": 20, "batch_size": 16, "lr": 1e-3, "warmup": 5, "train_max": 5},
        "eval": {"test_max": 8, "samples": 8},
    },
    # A GPU-sized run in the spirit of the PRISM paper's baselines (5 layers, 8 heads).
    "gpu": {
        "backbone": {"d_model": 512, "n_layers": 5, "n_heads": 8},
        "train": {"steps": 20000, "batch_size": 100, "lr": 3e-4, "warmup": 1000, "train_max": 40},
        "eval": {"test_max": 150, "test_stride": 10, "samples": 1000, "batch_size": 250},
    },
}


def preset_config(
    preset: str, *, pe: str, task: str, seed: int, overrides: Mapping[str, Mapping[str, Any]] | None = None
) -> RunConfig:
    """The RunConfig of ``preset`` for (pe, task, seed), with per-section overrides."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; valid presets: {', '.join(PRESETS)}")
    sections = {k: dict(v) for k, v in PRESETS[preset].items()}
    for section, values in (overrides or {}).items():
        sections.setdefault(section, {}).update({k: v for k, v in values.items() if v is not None})
    return RunConfig.from_dict({"pe": pe, "task": task, "seed": seed, "preset": preset, **sections})
