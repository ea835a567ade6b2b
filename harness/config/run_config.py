"""The typed, frozen run configuration with strict keys: ``RunConfig`` and its sections
``TrainConfig`` and ``EvalConfig`` (the backbone's is ``harness.config.backbone.BackboneConfig``).

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
from typing import Any

from harness.config import limits
from harness.config.backbone import HEADS, BackboneConfig
from harness.config.checks import (
    as_float,
    check_choice,
    check_int,
    check_name,
    check_number,
    check_plain,
    shown,
    strict,
)
from harness.config.lm_eval import LmEvalConfig
from harness.config.pe_spec import identity_options
from harness.config.precisions import PRECISIONS
from harness.tasks.lm import LM_TASKS, VOCAB_SIZE


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
        precision: the arithmetic of training, per ``harness.config.precisions.PRECISIONS``:
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
        precision: the arithmetic of evaluation (``harness.config.precisions.PRECISIONS``);
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


ALGORITHMIC_EVAL_KEYS = frozenset(f.name for f in dataclasses.fields(EvalConfig))
"""The evaluation settings of the algorithmic tasks (``EvalConfig``), which a language-modelling
run refuses by name (its ``eval`` is an ``LmEvalConfig``)."""

SELECTIONS = ("final", "top3", "best_in_dist")
"""How a run with periodic evaluations picks the metrics it reports (``EvalConfig.select``)."""


def _identity(d: dict[str, Any], pe: str) -> str:
    """The hash of a config dict (``RunConfig.to_dict``, sections possibly left out) as
    :meth:`RunConfig.run_id` takes it: no preset label, identity options, and fields added
    later left out at their defaults."""
    d = {**d, "pe_options": identity_options(pe, d["pe_options"])}
    d.pop("preset")
    for section, defaults in NEW_FIELD_DEFAULTS.items():
        if section not in d:
            continue
        d[section] = {k: v for k, v in d[section].items() if not (k in defaults and v == defaults[k])}
    blob = json.dumps(d, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


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
    "backbone": {"head": "tied"},
}
"""Fields added after runs were first stored, at their default values. They are left out
of :meth:`RunConfig.run_id`, so a run stored before they existed keeps its identity (a
finished run is still found and skipped) while a non-default value makes a new run."""


PROTOCOLS = ("decoder", "encoder")
"""How an instance meets the model (``RunConfig.protocol``)."""


def check_backbone(b: BackboneConfig) -> None:
    """The types and ranges of a backbone's fields (``harness.training.backbone`` keeps the model, this the checks)."""
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
    check_choice("backbone.head", b.head, HEADS)


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
    ``scaling``: position interpolation, NTK, YaRN; ``harness.config.pe_spec.inference_options``,
    from the encoding's paper card).
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
    eval: EvalConfig | LmEvalConfig = field(default_factory=EvalConfig)
    eval_pe_options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_lm(self) -> bool:
        """Whether the task is a language-modelling one (``harness.tasks.lm``): its ``eval``
        is an :class:`~harness.config.lm_eval.LmEvalConfig`, its result bits per byte."""
        return self.task in LM_TASKS

    @property
    def decode_eval(self) -> EvalConfig:
        """The algorithmic track's evaluation section (scales, samples, greedy decoding);
        TypeError for a language-modelling run, whose ``eval`` is :attr:`lm_eval`."""
        if not isinstance(self.eval, EvalConfig):
            raise TypeError(f"a run of task {self.task!r} is a language-modelling run: its eval is an LmEvalConfig")
        return self.eval

    @property
    def lm_eval(self) -> LmEvalConfig:
        """A language-modelling run's evaluation section; TypeError for an algorithmic run."""
        if not isinstance(self.eval, LmEvalConfig):
            raise TypeError(f"a run of task {self.task!r} is an algorithmic run: its eval is an EvalConfig")
        return self.eval

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
        eval_kind = LmEvalConfig if self.is_lm else EvalConfig
        for name, kind in (("backbone", BackboneConfig), ("train", TrainConfig), ("eval", eval_kind)):
            if not isinstance(getattr(self, name), kind):
                raise ValueError(f"{name} must be a {kind.__name__}, got {shown(getattr(self, name))}")
        check_backbone(self.backbone)
        if self.eval.precision == self.train.precision:  # evaluated as trained: one behaviour, one run id
            object.__setattr__(self, "eval", dataclasses.replace(self.eval, precision=None))
        if self.backbone.causal != (self.protocol == "decoder"):
            raise ValueError(f"the {self.protocol} protocol needs backbone.causal={self.protocol == 'decoder'}")
        if isinstance(self.eval, LmEvalConfig):
            self._check_lm(self.eval)
            return
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
                f"limit is {limits.MAX_EVAL_UNITS:,} (harness.config.limits): lower eval.samples or eval.test_max, "
                "or raise "
                "eval.test_stride to evaluate every k-th test scale"
            )

    def _check_lm(self, lm: LmEvalConfig) -> None:
        """A language-modelling run's own rules: a causal model of bytes and BOS, trained on
        windows of one length L, a fine-tune only for an inference-time variant."""
        if self.backbone.vocab_size != VOCAB_SIZE or not self.backbone.causal:
            raise ValueError(f"a language-modelling run is a causal model of {VOCAB_SIZE} tokens (bytes and BOS)")
        t = self.train
        one_length = "a language-modelling run trains on windows of one length L"
        if t.train_min != t.train_max:
            raise ValueError(f"{one_length}: train.train_min and train.train_max are both L")
        if t.pack:
            raise ValueError(f"train.pack packs an algorithmic task's examples; {one_length}, cut from its corpus")
        if t.curriculum:
            raise ValueError(f"train.curriculum raises an algorithmic task's scales; {one_length}")
        if lm.finetune_steps and not self.eval_pe_options:
            raise ValueError("eval.finetune_steps fine-tunes an inference-time variant: give eval_pe_options too")

    def train_lengths(self) -> list[int]:
        if self.is_lm:
            return [self.train.train_max]
        return list(range(self.train.train_min, self.train.train_max + 1))

    def evaluated_scale_sum(self) -> int:
        """The sum of :meth:`train_lengths` and :meth:`test_lengths`, without building them."""
        if isinstance(self.eval, LmEvalConfig):
            return sum(self.eval.lengths)
        a, b = self.train.train_min, self.train.train_max
        lo, hi, k = b + 1, self.eval.test_max, self.eval.test_stride
        m = (hi - lo) // k + 1  # test scales lo, lo+k, ..., then hi if the stride skips it
        last = lo + (m - 1) * k
        return (a + b) * (b - a + 1) // 2 + m * lo + k * m * (m - 1) // 2 + (hi if last != hi else 0)

    def test_lengths(self) -> list[int]:
        if isinstance(self.eval, LmEvalConfig):  # the lengths past L, in tokens
            return [s for s in self.eval.lengths if s > self.train.train_max]
        lo, hi, k = self.train.train_max + 1, self.eval.test_max, self.eval.test_stride
        lengths = list(range(lo, hi + 1, k))
        return lengths if lengths[-1] == hi else [*lengths, hi]

    @property
    def is_variant(self) -> bool:
        """Whether this is an inference-time variant of a trained run (``eval_pe_options``)."""
        return bool(self.eval_pe_options)

    def trained_config(self) -> RunConfig:
        """The run whose weights a variant evaluates (the config itself for a trained run)."""
        if not self.eval_pe_options:
            return self
        if isinstance(self.eval, LmEvalConfig):  # a fine-tune belongs to the variant, not to its trained run
            return dataclasses.replace(
                self, eval_pe_options={}, eval=dataclasses.replace(self.eval, finetune_steps=0, finetune_length=0)
            )
        return dataclasses.replace(self, eval_pe_options={})

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
        lm = isinstance(d.get("task"), str) and d["task"] in LM_TASKS
        sections: dict[str, type[Any]] = {
            "backbone": BackboneConfig,
            "train": TrainConfig,
            "eval": LmEvalConfig if lm else EvalConfig,
        }
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
        if lm and isinstance(values["eval"].get("lengths"), list):
            values["eval"]["lengths"] = tuple(values["eval"]["lengths"])
        if lm:  # an algorithmic setting on an LM task: say which it is, not only that its key is unknown
            lm_keys = {f.name for f in dataclasses.fields(LmEvalConfig)}
            foreign = sorted(k for k in values["eval"] if k not in lm_keys and k in ALGORITHMIC_EVAL_KEYS)
            if foreign:
                raise ValueError(
                    f"eval.{foreign[0]} is an algorithmic task's setting; a language-modelling run is scored at its "
                    f"eval.lengths (the preset's: lm 256..4096, lm_long to 16384) on eval.regions held-out regions"
                )
        built = {name: strict(kind, values[name], f"{name} config") for name, kind in sections.items()}
        return strict(cls, {**d, **built}, "run config")

    def run_id(self) -> str:
        """Stable identity: hash of the canonical JSON of everything but the preset label.

        Encoding options equal to what a stored run's missing option meant
        (``harness.config.pe_spec.stored_defaults``: ``randomize_eval=False``) are left out, so
        the run ids follow behaviour: ``{}`` from before the default changed and an
        explicit ``randomize_eval=False`` are one run, ``randomize_eval=True`` another."""
        return _identity(self.to_dict(), self.pe)

    def training_id(self) -> str | None:
        """Identity of the run's training alone: :meth:`run_id`'s hash without the
        evaluation (the ``eval`` section and ``eval_pe_options``), for a run whose
        evaluation cannot touch its training: ``eval.every`` 0, only the final model
        evaluated. None for a run that evaluates during training. Two runs with one
        training id train the same model, so the final weights one of them kept serve the
        other (``harness.execution.run.train_and_evaluate``: another test range never trains again)."""
        if self.eval.every:
            return None
        d = self.to_dict()
        d.pop("eval")
        d.pop("eval_pe_options", None)
        return _identity(d, self.pe)
