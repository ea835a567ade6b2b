"""Typed, frozen run configuration with strict keys, and the named presets.

A run is fully described by a ``RunConfig``: the encoding (name + options), the task,
the seed, and the backbone / training / evaluation configs. Its canonical JSON form is
stored with the run, and its hash is the run's identity in the results store.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from harness import limits
from harness.backbone import BackboneConfig
from harness.pe_spec import check_eval_options, identity_options, parse_pe, resolve_pe
from harness.precision import PRECISIONS

T = TypeVar("T")


def strict(cls: type[T], values: Mapping[str, Any], what: str | None = None) -> T:
    """Build dataclass ``cls`` from ``values``; an unknown or missing key is a ValueError naming the valid ones."""
    what = what or cls.__name__
    if not isinstance(values, Mapping):
        raise ValueError(f"{what} must be an object (a mapping of keys to values), got {shown(values)}")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    names = [f.name for f in fields]
    unknown = sorted(repr(k) if not isinstance(k, str) else k for k in values if k not in names)
    if unknown:
        raise ValueError(f"unknown {what} key(s) {', '.join(unknown)}; valid keys: {', '.join(names)}")
    missing = [
        f.name
        for f in fields
        if f.name not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValueError(f"{what}: missing key(s) {', '.join(missing)}")
    return cls(**values)


# --------------------------------------------------------------------------------------
# Value checks: every field of a config has a type and a range, checked when it is built
# --------------------------------------------------------------------------------------

INT64_MAX = 2**63 - 1
"""The largest integer SQLite stores (a signed 64-bit INTEGER): no config integer exceeds it."""


def shown(value: Any) -> str:
    """A short repr of ``value`` for an error message (a huge integer by its size, long text cut)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    return reprlib.repr(value)


def check_int(what: str, value: Any, minimum: int = 0, maximum: int = INT64_MAX) -> None:
    """``value`` is an int (not a bool, not a float) in ``minimum..maximum``; ValueError names ``what``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer, got {shown(value)}")
    if value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value}")
    if value > maximum:
        limit = " (the largest integer SQLite stores)" if maximum == INT64_MAX else " (harness.limits)"
        raise ValueError(f"{what} must be at most {maximum}{limit}, got {shown(value)}")


def is_finite_number(value: Any) -> bool:
    """Whether ``value`` is a finite int or float (not a bool). An int beyond the float range
    (JSON allows 400 digits) is not: comparing it with floats or ``math.isfinite`` would
    raise OverflowError where a checker must answer."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def check_number(
    what: str, value: Any, *, minimum: float | None = None, above: float | None = None, maximum: float | None = None
) -> None:
    """``value`` is a finite int or float (not a bool) with ``value >= minimum``, ``value > above``
    and ``value <= maximum`` for the bounds given; ValueError names ``what``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} must be a number, got {shown(value)}")
    if not is_finite_number(value):
        raise ValueError(f"{what} must be a finite number, got {shown(value)}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {value}")
    if above is not None and value <= above:
        raise ValueError(f"{what} must be > {above}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{what} must be <= {maximum}, got {value}")


def as_float(config: Any, name: str, what: str) -> None:
    """Make the number field ``name`` of the frozen dataclass ``config`` a float (1 -> 1.0), so
    one configuration has one canonical form and one run id; ValueError if it is not a number."""
    value = getattr(config, name)
    check_number(what, value)
    object.__setattr__(config, name, float(value))


def check_choice(what: str, value: Any, valid: Sequence[str]) -> None:
    """``value`` is one of the strings ``valid``; ValueError names ``what`` and the valid ones."""
    if not isinstance(value, str) or value not in valid:
        raise ValueError(f"unknown {what} {shown(value)}; valid: {', '.join(valid)}")


def check_name(what: str, value: Any) -> None:
    """``value`` is a non-empty string without surrounding whitespace (a registry name, a label)."""
    if not isinstance(value, str) or not value or value != value.strip():
        raise ValueError(f"{what} must be a non-empty name, got {shown(value)}")


def check_plain(what: str, value: Any, depth: int = 0) -> None:
    """``value`` is plain JSON data an encoding's options may hold: None, bools, strings,
    integers SQLite can store, finite floats, and lists / string-keyed mappings of them."""
    if depth > 16:
        raise ValueError(f"{what} is nested more than 16 levels deep")
    if value is None or isinstance(value, bool | str):
        return
    if isinstance(value, int):
        check_int(what, value, minimum=-INT64_MAX)
    elif isinstance(value, float):
        check_number(what, value)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_plain(f"{what}[{i}]", item, depth + 1)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{what} keys must be strings, got {shown(key)}")
            check_plain(f"{what}.{key}", item, depth + 1)
    else:
        raise ValueError(f"{what} must be plain JSON data, got {type(value).__name__}")


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
        precision: the arithmetic of training, per ``harness.precision.PRECISIONS``:
            ``fp32``, or ``bf16`` / ``fp16`` autocast over float32 weights (fp16 with
            loss scaling); docs/harness.md "Precision".
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
    precision: str = "fp32"

    def __post_init__(self) -> None:
        for name in ("lr", "weight_decay", "min_lr_ratio", "grad_clip"):
            as_float(self, name, f"train.{name}")
        check_int("train.steps", self.steps, minimum=1, maximum=limits.MAX_STEPS)
        check_int("train.batch_size", self.batch_size, minimum=1, maximum=limits.MAX_BATCH)
        check_number("train.lr", self.lr, above=0)
        if not (isinstance(self.betas, tuple) and len(self.betas) == 2):
            raise ValueError(f"train.betas must be two numbers (beta1, beta2), got {shown(self.betas)}")
        for i, beta in enumerate(self.betas):
            check_number(f"train.betas[{i}]", beta, minimum=0)
            if beta >= 1:
                raise ValueError(f"train.betas[{i}] must be < 1, got {beta}")
        object.__setattr__(self, "betas", tuple(float(b) for b in self.betas))
        check_number("train.weight_decay", self.weight_decay, minimum=0)
        check_int("train.warmup", self.warmup, maximum=limits.MAX_STEPS)
        check_number("train.min_lr_ratio", self.min_lr_ratio, minimum=0, maximum=1)
        check_number("train.grad_clip", self.grad_clip, above=0)
        check_int("train.train_max", self.train_max, minimum=1, maximum=limits.MAX_SCALE)
        check_int("train.train_min", self.train_min, minimum=1, maximum=limits.MAX_SCALE)
        check_choice("optimizer", self.optimizer, ("adamw", "adam"))
        check_choice("schedule", self.schedule, SCHEDULES)
        check_int("train.pack", self.pack, maximum=limits.MAX_TOKENS)
        if self.pack == 1:
            raise ValueError(f"train.pack is a row width of at least 2 tokens (0: no packing), got {self.pack}")
        check_choice("pack_loss", self.pack_loss, PACK_LOSSES)
        check_choice("train.precision", self.precision, PRECISIONS)
        if not isinstance(self.curriculum, tuple):
            raise ValueError(f"train.curriculum must be a list of [start_step, max_scale] stages, got "
                             f"{shown(self.curriculum)}")  # fmt: skip
        for i, stage in enumerate(self.curriculum):
            if not (isinstance(stage, tuple) and len(stage) == 2):
                raise ValueError(f"train.curriculum[{i}] must be [start_step, max_scale], got {shown(stage)}")
            check_int(f"train.curriculum[{i}] start step", stage[0], maximum=limits.MAX_STEPS)
            check_int(f"train.curriculum[{i}] max scale", stage[1], minimum=1, maximum=limits.MAX_SCALE)
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
        precision: the arithmetic of evaluation (``harness.precision.PRECISIONS``);
            None: the training's (``train.precision``).
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
    precision: str | None = None

    def __post_init__(self) -> None:
        check_int("eval.test_max", self.test_max, minimum=1, maximum=limits.MAX_SCALE)
        check_int("eval.test_stride", self.test_stride, minimum=1, maximum=limits.MAX_SCALE)
        check_int("eval.samples", self.samples, minimum=1, maximum=limits.MAX_SAMPLES)
        check_int("eval.batch_size", self.batch_size, minimum=1, maximum=limits.MAX_BATCH)
        if isinstance(self.every, int) and not isinstance(self.every, bool) and self.every < 0:
            raise ValueError(f"eval.every must be >= 0 (0: evaluate the final model only), got {self.every}")
        check_int("eval.every", self.every, maximum=limits.MAX_STEPS)
        if self.start_below_loss is not None:
            check_number("eval.start_below_loss", self.start_below_loss, above=0)
            as_float(self, "start_below_loss", "eval.start_below_loss")
        check_choice("eval.select", self.select, SELECTIONS)
        if self.select != "final" and self.every == 0:
            raise ValueError(f"eval.select={self.select!r} chooses among periodic evaluations: set eval.every > 0")
        if isinstance(self.window, int) and not isinstance(self.window, bool) and self.window < 0:
            raise ValueError(f"eval.window must be >= 0 (0: no window), got {self.window}")
        check_int("eval.window", self.window, maximum=limits.MAX_TOKENS)
        check_int("eval.window_jump", self.window_jump, minimum=1, maximum=limits.MAX_TOKENS)
        if self.window and not 1 <= self.window_jump < self.window:
            raise ValueError(
                f"eval.window must be larger than eval.window_jump, the {self.window_jump} oldest tokens a full "
                f"window drops at once, got {self.window}"
            )
        check_choice("eval.match", self.match, MATCHES)
        if self.precision is not None:
            check_choice("eval.precision", self.precision, PRECISIONS)


SELECTIONS = ("final", "top3", "best_in_dist")
"""How a run with periodic evaluations picks the metrics it reports (``EvalConfig.select``)."""

NEW_FIELD_DEFAULTS: dict[str, dict[str, Any]] = {
    "eval": {
        "every": 0,
        "start_below_loss": None,
        "select": "final",
        "window": 0,
        "window_jump": 20,
        "match": "trace",
        "precision": None,
    },
    "train": {"schedule": "cosine", "pack": 0, "pack_loss": "all", "precision": "fp32"},
}
"""Fields added after runs were first stored, at their default values. They are left out
of :meth:`RunConfig.run_id`, so a run stored before they existed keeps its identity (a
finished run is still found and skipped) while a non-default value makes a new run."""


PROTOCOLS = ("decoder", "encoder")
"""How an instance meets the model (``RunConfig.protocol``)."""


def check_backbone(b: BackboneConfig) -> None:
    """The types and ranges of a backbone's fields (``harness.backbone`` keeps the model, this the checks)."""
    check_int("backbone.vocab_size", b.vocab_size, minimum=1, maximum=limits.MAX_VOCAB)
    check_int("backbone.d_model", b.d_model, minimum=1, maximum=limits.MAX_WIDTH)
    check_int("backbone.n_layers", b.n_layers, minimum=1, maximum=limits.MAX_LAYERS)
    check_int("backbone.n_heads", b.n_heads, minimum=1, maximum=limits.MAX_HEADS)
    if b.d_model % b.n_heads:
        raise ValueError(f"backbone.d_model={b.d_model} is not divisible by backbone.n_heads={b.n_heads}")
    if b.d_ff is not None:
        check_int("backbone.d_ff", b.d_ff, minimum=1, maximum=4 * limits.MAX_WIDTH)
    check_name("backbone.backend", b.backend)
    if not isinstance(b.causal, bool):
        raise ValueError(f"backbone.causal must be true or false, got {shown(b.causal)}")


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run's result.

    ``protocol`` is how an instance meets the model: ``decoder`` (causal LM on
    ``<bos> prompt = target <eos>``, greedy decoding at evaluation; the PRISM and
    Turing-Programs papers) or ``encoder`` (non-causal, the input followed by blanks,
    targets predicted at the blanks; the randomized-PE paper). The encoder protocol
    needs ``backbone.causal=False`` and a task with a fixed ``output_length``.

    ``eval_pe_options`` (empty for a trained run) makes the config an *inference-time
    variant*: the weights of the run without them (:meth:`trained_config`, trained once)
    evaluated with the encoding built from ``pe_options`` updated by these (e.g. RoPE's
    ``scaling``: position interpolation, NTK, YaRN; ``harness.pe_spec.INFERENCE_OPTIONS``).
    It is a run of its own (its own id), trained never.
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
    eval_pe_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_name("pe", self.pe)
        check_name("task", self.task)
        check_int("seed", self.seed)
        check_name("preset", self.preset)
        check_choice("protocol", self.protocol, PROTOCOLS)
        if not isinstance(self.pe_options, Mapping):
            raise ValueError(f"pe_options must be a mapping of option names to values, got {shown(self.pe_options)}")
        check_plain("pe_options", self.pe_options)
        limits.check_option_sizes(self.pe_options, "pe_options")
        if not isinstance(self.eval_pe_options, Mapping):
            raise ValueError(
                f"eval_pe_options must be a mapping of option names to values, got {shown(self.eval_pe_options)}"
            )
        check_plain("eval_pe_options", self.eval_pe_options)
        limits.check_option_sizes(self.eval_pe_options, "eval_pe_options")
        if self.eval_pe_options and self.eval.select != "final":
            raise ValueError(
                f"an inference-time variant evaluates the trained run's final weights, but eval.select="
                f"{self.eval.select!r} reports another evaluation; variants need eval.select='final'"
            )
        for name, kind in (("backbone", BackboneConfig), ("train", TrainConfig), ("eval", EvalConfig)):
            if not isinstance(getattr(self, name), kind):
                raise ValueError(f"{name} must be a {kind.__name__}, got {shown(getattr(self, name))}")
        check_backbone(self.backbone)
        if self.eval.precision == self.train.precision:  # evaluated as trained: one behaviour, one run id
            object.__setattr__(self, "eval", dataclasses.replace(self.eval, precision=None))
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
        units = self.eval.samples * self.evaluated_scale_sum()
        if units > limits.MAX_EVAL_UNITS:
            raise ValueError(
                f"the evaluation sets would hold {units:,} scale units (eval.samples {self.eval.samples} times the "
                f"sum of the scales evaluated, training and test, up to eval.test_max {self.eval.test_max}); the "
                f"limit is {limits.MAX_EVAL_UNITS:,} (harness.limits): lower eval.samples or eval.test_max, or raise "
                "eval.test_stride to evaluate every k-th test scale"
            )

    def train_lengths(self) -> list[int]:
        return list(range(self.train.train_min, self.train.train_max + 1))

    def evaluated_scale_sum(self) -> int:
        """The sum of :meth:`train_lengths` and :meth:`test_lengths`, without building them."""
        a, b = self.train.train_min, self.train.train_max
        lo, hi, k = b + 1, self.eval.test_max, self.eval.test_stride
        m = (hi - lo) // k + 1  # test scales lo, lo+k, ..., then hi if the stride skips it
        last = lo + (m - 1) * k
        return (a + b) * (b - a + 1) // 2 + m * lo + k * m * (m - 1) // 2 + (hi if last != hi else 0)

    def test_lengths(self) -> list[int]:
        lo, hi, k = self.train.train_max + 1, self.eval.test_max, self.eval.test_stride
        lengths = list(range(lo, hi + 1, k))
        return lengths if lengths[-1] == hi else [*lengths, hi]

    @property
    def is_variant(self) -> bool:
        """Whether this is an inference-time variant of a trained run (``eval_pe_options``)."""
        return bool(self.eval_pe_options)

    def trained_config(self) -> RunConfig:
        """The run whose weights a variant evaluates (the config itself for a trained run)."""
        return dataclasses.replace(self, eval_pe_options={}) if self.eval_pe_options else self

    def eval_options(self) -> dict[str, Any]:
        """The encoding options the model is evaluated with: ``pe_options`` updated by
        ``eval_pe_options`` (key by key: a variant's ``scaling`` replaces the whole dict)."""
        return {**self.pe_options, **self.eval_pe_options}

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["pe_options"] = dict(self.pe_options)
        if self.eval_pe_options:
            d["eval_pe_options"] = dict(self.eval_pe_options)
        else:  # a trained run: its config as before variants existed (stored, published, hashed)
            d.pop("eval_pe_options")
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunConfig:
        """The config of a plain dict (``to_dict``'s form, JSON lists for tuples); a missing
        section or field takes its default. Any key, type or range that is wrong raises
        ValueError (never another exception, whatever JSON ``d`` holds)."""
        if not isinstance(d, Mapping):
            raise ValueError(f"a run config must be an object, got {shown(d)}")
        d = dict(d)
        sections: dict[str, type[Any]] = {"backbone": BackboneConfig, "train": TrainConfig, "eval": EvalConfig}
        values = {}
        for name in sections:
            section = d.pop(name, {})
            if not isinstance(section, Mapping):
                raise ValueError(f"{name} config must be an object, got {shown(section)}")
            values[name] = dict(section)
        train = values["train"]  # JSON has no tuples
        if isinstance(train.get("betas"), list):
            train["betas"] = tuple(train["betas"])
        if isinstance(train.get("curriculum"), list):
            train["curriculum"] = tuple(tuple(s) if isinstance(s, list) else s for s in train["curriculum"])
        built = {name: strict(kind, values[name], f"{name} config") for name, kind in sections.items()}
        return strict(cls, {**d, **built}, "run config")

    def run_id(self) -> str:
        """Stable identity: hash of the canonical JSON of everything but the preset label.

        Encoding options equal to what a stored run's missing option meant
        (``harness.pe_spec.stored_defaults``: ``randomize_eval=False``) are left out, so
        the run ids follow behaviour: ``{}`` from before the default changed and an
        explicit ``randomize_eval=False`` are one run, ``randomize_eval=True`` another."""
        d = self.to_dict()
        d.pop("preset")
        d["pe_options"] = identity_options(self.pe, d["pe_options"])
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
    # The CPU leaderboard's protocol (docs/protocol-study.md): the quick model trained
    # 10k steps, where 3k steps ranked how fast an encoding learns rather than how far it
    # extrapolates (Hard-ALiBi's EM>10 on copy rose 0.48 -> 0.91 between 2k and 10k).
    "board": {
        "backbone": {"d_model": 128, "n_layers": 3, "n_heads": 4},
        "train": {"steps": 10000, "batch_size": 64, "lr": 1e-3, "warmup": 100, "train_max": 10},
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
        "train": {"steps": 20000, "batch_size": 100, "lr": 3e-4, "warmup": 1000, "train_max": 40, "precision": "bf16"},
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
            "precision": "bf16",
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
            "precision": "bf16",
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
    # our reading of its "linear decay"), batch 16 rows of 500 tokens packed from a stream of examples,
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
            "precision": "bf16",
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

GPU_PRECISION_NOTE = "bf16 autocast over float32 weights (--precision fp32 for plain float32)"
"""How the GPU presets train (``train.precision = "bf16"``), said in their descriptions."""

PRESET_DESCRIPTIONS: dict[str, str] = {
    "quick": "CPU-sized: 3k steps of a 3-layer d128 decoder; 5-20 min per run on one core (the committed board)",
    "board": (
        "the CPU leaderboard's protocol: the quick model trained 10k steps; "
        "10-50 min per run on one core (prism{paper} 1.5-3 h)"
    ),
    "smoke": "seconds per run, for tests and smoke checks; learns nothing useful",
    "gpu": (
        "GPU-sized: 20k steps of a 5-layer d512 decoder (the PRISM paper's baseline shape), lengths to 40/150; "
        f"{GPU_PRECISION_NOTE}"
    ),
    "ruoss": (
        "Ruoss et al. 2023 (Randomized Positional Encodings), App. A: 5-block d64 encoder, 2M steps, Adam; "
        f"{GPU_PRECISION_NOTE}"
    ),
    "prism": (
        "Lee 2025 (PRISM) §6.2-6.4: 150k steps, curriculum, the mean of the 3 best periodic evaluations; "
        f"{GPU_PRECISION_NOTE}"
    ),
    "turing": (
        "Hou et al. (Turing Programs) §3.1.1: 12-layer d1024, 200k steps of packed 500-token rows; "
        f"{GPU_PRECISION_NOTE}"
    ),
}
"""One line per preset: what it is for (``pezoo list``, the start of ``pezoo bench``)."""

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
    """The RunConfig of ``preset`` for (pe, task, seed), with per-section overrides.

    ``pe`` is an encoding spec (``harness.pe_spec``: ``rope``, ``prism{paper}``,
    ``prism{n_cursors=4}``); the config records its resolved options, checked by building
    the encoding. A variant spec ``rope@{scaling={...}}`` gives the inference-time variant
    of that trained run (``RunConfig.eval_pe_options``, checked by
    ``harness.pe_spec.check_eval_options``). Under the ``prism`` preset an encoding with a paper setup
    (``harness.protocols``) gets it unless the spec names another (``prism{default}``).
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; valid presets: {', '.join(PRESETS)}")
    spec_keys = sorted({"pe", "task", "seed", "pe_options", "eval_pe_options"} & set(overrides or {}))
    if spec_keys:  # the spec and arguments set these; an override would be silently replaced
        raise ValueError(
            f"overrides cannot set {', '.join(spec_keys)}: pass pe, task and seed as arguments, and encoding "
            "options in the spec (pe='rope{base=500}', variants as 'rope@{scaling={...}}')"
        )
    sections = {k: dict(v) if isinstance(v, Mapping) else v for k, v in PRESETS[preset].items()}
    for section, values in (overrides or {}).items():
        if isinstance(values, Mapping):
            sections.setdefault(section, {}).update({k: v for k, v in values.items() if v is not None})
        elif values is not None:
            sections[section] = values
    if preset == "prism" and "curriculum" not in sections["train"]:
        sections["train"]["curriculum"] = prism_curriculum(task, sections["train"]["train_max"])
    cfg = RunConfig.from_dict({"pe": pe, "task": task, "seed": seed, "preset": preset, **sections})
    setup = "paper" if preset == "prism" else None  # the PRISM paper's protocol runs the paper's setups
    spec = parse_pe(pe)
    name, options = resolve_pe(spec.trained, task=task, backbone=cfg.backbone, default_setup=setup)
    cfg = dataclasses.replace(cfg, pe=name, pe_options=options)
    if spec.eval_options:
        check_eval_options(name, options, spec.eval_options, cfg.backbone, str(spec))
        cfg = dataclasses.replace(cfg, eval_pe_options=dict(spec.eval_options))
    return cfg
