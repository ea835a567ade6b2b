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
        warmup: linear warm-up steps, then decay (``schedule``) to ``min_lr_ratio * lr``.
        min_lr_ratio: final learning rate as a fraction of the peak.
        schedule: the decay after warm-up, one of :data:`SCHEDULES`: ``cosine`` or
            ``linear`` (the Turing-Programs paper).
        grad_clip: global gradient-norm clip.
        train_max: largest training scale N; scales are drawn uniformly from
            ``train_min..train_max`` per example.
        train_min: smallest training scale.
        curriculum: ((start_step, max_scale), ...): from each start step on, training
            scales are capped at max_scale (and always at train_max). Empty: none.
        optimizer: "adamw" (decoupled weight decay) or "adam" (the randomized-PE paper).
        pack: 0 (one example per row, padded), or the row width in tokens: rows are
            consecutive windows cut from one endless stream of examples laid end to end
            (``<bos> prompt = target <eos> <bos> ...``), most starting mid-example (the
            Turing-Programs paper's 500-token training context; docs/harness.md).
        pack_loss: with ``pack``, which next tokens carry loss, per :data:`PACK_LOSSES`:
            ``all`` (a plain language-model loss, prompts included) or ``completion``
            (targets and EOS only, as unpacked rows).
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
    curriculum: tuple[tuple[int, int], ...] = ()
    optimizer: str = "adamw"
    schedule: str = "cosine"
    pack: int = 0
    pack_loss: str = "all"

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError("steps and batch_size must be >= 1")
        if self.optimizer not in ("adamw", "adam"):
            raise ValueError(f"unknown optimizer {self.optimizer!r}; valid: adamw, adam")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r}; valid: {', '.join(SCHEDULES)}")
        if self.pack < 0 or self.pack == 1:
            raise ValueError(f"train.pack is a row width of at least 2 tokens (0: no packing), got {self.pack}")
        if self.pack_loss not in PACK_LOSSES:
            raise ValueError(f"unknown pack_loss {self.pack_loss!r}; valid: {', '.join(PACK_LOSSES)}")
        starts = [s for s, _ in self.curriculum]
        if starts != sorted(starts) or any(m < self.train_min for _, m in self.curriculum):
            raise ValueError(f"curriculum stages must have increasing start steps and scales >= train_min: "
                             f"{self.curriculum}")  # fmt: skip
        if not 1 <= self.train_min <= self.train_max:
            raise ValueError(f"need 1 <= train_min <= train_max, got {self.train_min}..{self.train_max}")


SCHEDULES = ("cosine", "linear")
"""Learning-rate decays after the warm-up (``TrainConfig.schedule``)."""

PACK_LOSSES = ("all", "completion")
"""Which tokens of packed rows carry loss (``TrainConfig.pack_loss``)."""

MATCHES = ("trace", "answer")
"""What exact match compares (``EvalConfig.match``)."""


@dataclass(frozen=True)
class EvalConfig:
    """Which lengths are evaluated and on how many examples.

    Attributes:
        test_max: largest test scale M; test scales are ``train_max+1..test_max``
            (every one, or every ``test_stride``-th).
        test_stride: evaluate every k-th test scale (always including the last).
        samples: examples per evaluated scale (a fixed set per task/scale/seed).
        batch_size: decoding batch size.
        every: also evaluate every this many training steps (0: only the final model).
        start_below_loss: periodic evaluation starts once a step's training loss first
            drops below this (None: from the first period). The PRISM paper uses 0.1.
        select: which evaluation the run reports, per :data:`SELECTIONS`: ``final``
            (the trained model), ``top3`` (per length, the mean of the three evaluations
            with the highest exact match: the PRISM paper's score, which picks
            checkpoints on the test lengths) or ``best_in_dist`` (the one evaluation with
            the highest mean exact match on the training lengths: a selection that does
            not look at the test lengths). The final model is always a candidate.
        window: 0 (the model sees the whole sequence), or the most tokens the model
            conditions on: once decoding fills ``window`` tokens, the oldest
            ``window_jump`` are dropped and decoding goes on from the rest (the
            Turing-Programs paper's sliding-window inference). Teacher-forced accuracy
            uses the same contexts.
        window_jump: how many of the oldest tokens a full window drops at once.
        match: what exact match compares, per :data:`MATCHES`: ``trace`` (the whole
            completion and its EOS) or ``answer`` (only what follows the task's last
            ``answer_separator``, e.g. the sum after a Turing Program's last line; the
            trace must still end with EOS within the target's length).
    """

    test_max: int = 40
    test_stride: int = 1
    samples: int = 100
    batch_size: int = 100
    every: int = 0
    start_below_loss: float | None = None
    select: str = "final"
    window: int = 0
    window_jump: int = 20
    match: str = "trace"

    def __post_init__(self) -> None:
        if self.every < 0:
            raise ValueError(f"eval.every must be >= 0 (0: evaluate the final model only), got {self.every}")
        if self.select not in SELECTIONS:
            raise ValueError(f"unknown eval.select {self.select!r}; valid: {', '.join(SELECTIONS)}")
        if self.select != "final" and self.every == 0:
            raise ValueError(f"eval.select={self.select!r} chooses among periodic evaluations: set eval.every > 0")
        if self.window < 0:
            raise ValueError(f"eval.window must be >= 0 (0: no window), got {self.window}")
        if self.window and not 1 <= self.window_jump < self.window:
            raise ValueError(f"need 1 <= eval.window_jump < eval.window, got {self.window_jump} and {self.window}")
        if self.match not in MATCHES:
            raise ValueError(f"unknown eval.match {self.match!r}; valid: {', '.join(MATCHES)}")


SELECTIONS = ("final", "top3", "best_in_dist")
"""How a run with periodic evaluations picks the metrics it reports (``EvalConfig.select``)."""

NEW_FIELD_DEFAULTS = {
    "eval": {"every": 0, "start_below_loss": None, "select": "final", "window": 0, "window_jump": 20, "match": "trace"},
    "train": {"schedule": "cosine", "pack": 0, "pack_loss": "all"},
}
"""Fields added after runs were first stored, at their default values. They are left out
of :meth:`RunConfig.run_id`, so a run stored before they existed keeps its identity (a
finished run is still found and skipped) while a non-default value makes a new run."""


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run's result.

    ``protocol`` is how an instance meets the model: ``decoder`` (causal LM on
    ``<bos> prompt = target <eos>``, greedy decoding at evaluation; the PRISM and
    Turing-Programs papers) or ``encoder`` (non-causal, the input followed by blanks,
    targets predicted at the blanks; the randomized-PE paper). The encoder protocol
    needs ``backbone.causal=False`` and a task with a fixed ``output_length``.
    """

    pe: str
    task: str
    seed: int = 0
    preset: str = "quick"
    protocol: str = "decoder"
    pe_options: Mapping[str, Any] = field(default_factory=dict)
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        if self.protocol not in ("decoder", "encoder"):
            raise ValueError(f"unknown protocol {self.protocol!r}; valid protocols: decoder, encoder")
        if self.backbone.causal != (self.protocol == "decoder"):
            raise ValueError(f"the {self.protocol} protocol needs backbone.causal={self.protocol == 'decoder'}")
        if self.protocol == "encoder" and (self.train.pack or self.eval.window or self.eval.match != "trace"):
            raise ValueError(
                "train.pack, eval.window and eval.match belong to the decoder protocol; the encoder has none of them"
            )
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
        train = nested["train"][1]  # JSON has no tuples
        if "betas" in train:
            train["betas"] = tuple(train["betas"])
        if "curriculum" in train:
            train["curriculum"] = tuple(tuple(stage) for stage in train["curriculum"])
        built = {k: strict(c, dict(v), f"{k} config") for k, (c, v) in nested.items()}
        return strict(cls, {**d, **built}, "run config")

    def run_id(self) -> str:
        """Stable identity: hash of the canonical JSON of everything but the preset label."""
        d = self.to_dict()
        d.pop("preset")
        for section, defaults in NEW_FIELD_DEFAULTS.items():
            for key, default in defaults.items():
                if d[section].get(key, default) == default:
                    d[section].pop(key, None)
        blob = json.dumps(d, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------
# Presets: a name for a whole protocol, recorded with every run
# --------------------------------------------------------------------------------------

PRESETS: dict[str, dict[str, Any]] = {
    # 2 CPU cores, a couple of minutes per run.
    "quick": {
        "backbone": {"d_model": 128, "n_layers": 3, "n_heads": 4},
        "train": {"steps": 3000, "batch_size": 64, "lr": 1e-3, "warmup": 100, "train_max": 10},
        "eval": {"test_max": 40, "samples": 100},
    },
    # Seconds: for tests and smoke checks, learns nothing useful.
    "smoke": {
        "backbone": {"d_model": 32, "n_layers": 1, "n_heads": 2},
        "train": {"steps": 20, "batch_size": 16, "lr": 1e-3, "warmup": 5, "train_max": 5},
        "eval": {"test_max": 8, "samples": 8},
    },
    # A GPU-sized decoder run (5 layers, 8 heads as the PRISM paper's baselines).
    "gpu": {
        "backbone": {"d_model": 512, "n_layers": 5, "n_heads": 8},
        "train": {"steps": 20000, "batch_size": 100, "lr": 3e-4, "warmup": 1000, "train_max": 40},
        "eval": {"test_max": 150, "test_stride": 10, "samples": 1000, "batch_size": 250},
    },
    # Ruoss et al. 2023, App. A: encoder, 5 blocks x 8 heads, d_model 64; 2M steps of
    # batch 128 with Adam + clipping, lr swept over {1e-4, 3e-4, 5e-4} (--lr); one
    # training length per step from 1..40; 500 test examples at every length 41..500.
    "ruoss": {
        "protocol": "encoder",
        "backbone": {"d_model": 64, "n_layers": 5, "n_heads": 8, "causal": False},
        "train": {
            "steps": 2_000_000,
            "batch_size": 128,
            "lr": 1e-4,
            "optimizer": "adam",
            "weight_decay": 0.0,
            "betas": (0.9, 0.999),
            "warmup": 0,
            "min_lr_ratio": 1.0,
            "train_max": 40,
        },
        "eval": {"test_max": 500, "samples": 500, "batch_size": 500},
    },
    # Lee 2025 (PRISM) §6.2-6.4 baseline protocol: 5 layers, 8 heads, d 512, AdamW
    # (0.9, 0.98), lr 9e-5, batch 100, 150k steps, 1k warm-up; curriculum 5k steps at
    # scales <= 5, then <= 10 (+10 every 10k steps for the tasks listed in
    # PRISM_RAMPED_TASKS), 1000 test examples per length.
    "prism": {
        "backbone": {"d_model": 512, "n_layers": 5, "n_heads": 8},
        "train": {
            "steps": 150_000,
            "batch_size": 100,
            "lr": 9e-5,
            "betas": (0.9, 0.98),
            "warmup": 1000,
            "train_max": 40,
        },
        # §6.1: evaluate every 1k steps once the loss is below 0.1; report the mean of
        # the top 3 per length (docs/harness.md: and how to pick on in-distribution instead)
        "eval": {
            "test_max": 150,
            "test_stride": 10,
            "samples": 1000,
            "batch_size": 250,
            "every": 1000,
            "start_below_loss": 0.1,
            "select": "top3",
        },
    },
    # Hou et al. (Turing Programs) §3.1.1 base configuration: 12 layers, d 1024, 16
    # heads, AdamW wd 0.1, lr 7e-5 with 100 warm-up steps then linear decay (to 0:
    # SPEC-seeds A.3), batch 16 rows of 500 tokens packed from a stream of examples,
    # 200k steps; addition operands 2..50 digits, tested to 100 with sliding-window
    # decoding (500 tokens, jumps of 20), 288 test examples per length, exact match
    # of the final answer.
    "turing": {
        "backbone": {"d_model": 1024, "n_layers": 12, "n_heads": 16},
        "train": {
            "steps": 200_000,
            "batch_size": 16,
            "lr": 7e-5,
            "weight_decay": 0.1,
            "warmup": 100,
            "schedule": "linear",
            "min_lr_ratio": 0.0,
            "train_min": 2,
            "train_max": 50,
            "pack": 500,
        },
        "eval": {
            "test_max": 100,
            "test_stride": 10,
            "samples": 288,
            "batch_size": 96,
            "window": 500,
            "window_jump": 20,
            "match": "answer",
        },
    },
}

GPU_PRESETS = ("gpu", "ruoss", "prism", "turing")
"""Presets too large for a CPU; the CLI refuses them there unless told --allow-cpu."""

PRISM_RAMPED_TASKS = ("stack_manipulation", "reverse", "odds_first", "addition")
"""Tasks whose PRISM-paper curriculum keeps raising the length by 10 every 10k steps."""


def prism_curriculum(task: str, train_max: int) -> tuple[tuple[int, int], ...]:
    """Lee 2025 §6.4: 5k steps at scales <= 5, then <= 10; for PRISM_RAMPED_TASKS +10
    every further 10k steps up to train_max; the others jump to train_max at step 10k."""
    if task not in PRISM_RAMPED_TASKS:
        return ((0, min(5, train_max)), (5000, min(10, train_max)), (10000, train_max))
    stages, start, cap = [(0, min(5, train_max)), (5000, min(10, train_max))], 15000, 20
    while cap - 10 < train_max:
        stages.append((start, min(cap, train_max)))
        start, cap = start + 10000, cap + 10
    return tuple(stages)


def preset_config(
    preset: str, *, pe: str, task: str, seed: int, overrides: Mapping[str, Mapping[str, Any]] | None = None
) -> RunConfig:
    """The RunConfig of ``preset`` for (pe, task, seed), with per-section overrides."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; valid presets: {', '.join(PRESETS)}")
    sections = {k: dict(v) if isinstance(v, Mapping) else v for k, v in PRESETS[preset].items()}
    for section, values in (overrides or {}).items():
        if isinstance(values, Mapping):
            sections.setdefault(section, {}).update({k: v for k, v in values.items() if v is not None})
        elif values is not None:
            sections[section] = values
    if preset == "prism" and "curriculum" not in sections["train"]:
        sections["train"]["curriculum"] = prism_curriculum(task, sections["train"]["train_max"])
    return RunConfig.from_dict({"pe": pe, "task": task, "seed": seed, "preset": preset, **sections})
