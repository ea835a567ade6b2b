"""A language-modelling run's configuration, its presets, and its identity.

``LmConfig`` is to the LM track what ``harness.config.RunConfig`` is to the algorithmic
tasks: frozen, strict keys, its canonical JSON hashed into the run id. It reuses the
backbone's ``BackboneConfig`` (vocabulary fixed at 257: bytes and BOS) and the optimiser
fields of ``TrainConfig`` (``train_max`` is the training length L, in tokens), and adds
:class:`LmEvalConfig`: the test lengths, how many held-out regions are scored, the tail mode's
target, and the attention's query block.

An inference-time variant (``eval_pe_options``, e.g. RoPE's ``scaling``) evaluates the
final weights of the run without it, as on the algorithmic track; ``finetune_steps`` > 0
makes it a *fine-tuned* variant: those weights trained ``finetune_steps`` more steps at
``finetune_length`` tokens with the variant's encoding (position interpolation and YaRN's
short fine-tune, Chen et al. 2023 §3; Peng et al. 2023 §4), then evaluated.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.config.backbone import BackboneConfig
from harness.config.checks import check_choice, check_int, check_name, check_plain, shown, strict
from harness.config.pe_spec import check_eval_options, preflight_build, resolve_pe
from harness.config.run_config import TrainConfig, check_backbone
from harness.tasks.lm import VOCAB_SIZE, lm_task
from harness.training.precision import PRECISIONS
from pezoo.spec import PeSpec, parse_pe

__all__ = ["LM_PRESETS", "LmConfig", "LmEvalConfig", "lm_preset_config"]

MAX_LM_LENGTH = 65_536
"""The longest test length a config may ask for."""

MODES = ("windows", "tail")
"""Evaluation modes: ``windows`` (every byte of a region scored in non-overlapping windows
of S tokens: the papers' default) and ``tail`` (the region's last ``tail`` bytes scored with
S - ``tail`` bytes of context before them: ALiBi App. B's fixed-target evaluation)."""


@dataclass(frozen=True)
class LmEvalConfig:
    """What is scored.

    Attributes:
        lengths: the test lengths S in tokens, increasing; the first should be the
            training length L (the reference every ratio is taken against).
        regions: how many held-out regions of ``max(lengths)`` bytes are scored, spread
            through the held-out documents in proportion to their lengths, none holding a
            64-byte run of the training text (``harness.tasks.lm.data.scored_regions``).
        tail: the tail mode's target bytes, the last ``tail`` of each region (lengths below
            it have no tail score; at ``tail`` = L the tail mode has its reference at L).
        chunk: queries per attention block: a forward pass of S tokens is fed as blocks of
            ``chunk`` queries against the cached keys, so no (S, S) score tensor exists.
        batch_size: windows per forward pass.
        precision: the arithmetic of evaluation; None: the training's.
        passkey: samples per cell of the passkey grid (``harness.lm.passkey``: a key hidden
            at each depth of :data:`~harness.lm.passkey.DEPTHS` in held-out text, at each test
            length above its 104 fixed bytes); 0: not measured. Added after records were
            published: at 0 it is left out of the config's JSON (:meth:`LmConfig.to_dict`),
            so their run ids and checksums stand.
        positions: whether the windows mode also keeps, at each length, the loss by position
            within the window (``harness.records.lm_positions``: nats and bytes per half-octave
            bucket; the record's ``positions`` key). Added after records were published: when
            False it is left out of the config's JSON, as ``passkey`` at 0.
    """

    lengths: tuple[int, ...] = (256, 512, 1024, 2048, 4096)
    regions: int = 64
    tail: int = 256
    chunk: int = 256
    batch_size: int = 4
    precision: str | None = None
    passkey: int = 0
    positions: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.lengths, tuple) or not self.lengths:
            raise ValueError(f"eval.lengths must be a non-empty list of token counts, got {shown(self.lengths)}")
        for s in self.lengths:
            check_int("eval.lengths[]", s, minimum=2, maximum=MAX_LM_LENGTH)
        if list(self.lengths) != sorted(set(self.lengths)):
            raise ValueError(f"eval.lengths must increase, got {list(self.lengths)}")
        longest = self.lengths[-1]
        uneven = [s for s in self.lengths if longest % s]
        if uneven:
            raise ValueError(
                f"eval.lengths {uneven} do not divide the longest, {longest}: every length scores the same "
                "regions of that many bytes in whole windows"
            )
        check_int("eval.regions", self.regions, minimum=1, maximum=10_000)
        check_int("eval.tail", self.tail, minimum=1, maximum=MAX_LM_LENGTH)
        check_int("eval.chunk", self.chunk, minimum=1, maximum=MAX_LM_LENGTH)
        check_int("eval.batch_size", self.batch_size, minimum=1, maximum=4096)
        if self.precision is not None:
            check_choice("eval.precision", self.precision, PRECISIONS)
        check_int("eval.passkey", self.passkey, maximum=10_000)
        if not isinstance(self.positions, bool):
            raise ValueError(f"eval.positions must be true or false, got {shown(self.positions)}")

    def tail_lengths(self) -> tuple[int, ...]:
        """The lengths with a tail score: those of at least ``tail`` tokens."""
        return tuple(s for s in self.lengths if s >= self.tail)


@dataclass(frozen=True)
class LmConfig:
    """Everything that determines a language-modelling run's result (see the module docstring)."""

    pe: str
    task: str
    seed: int = 0
    preset: str = "lm"
    pe_options: Mapping[str, Any] = field(default_factory=dict)
    backbone: BackboneConfig = field(default_factory=lambda: BackboneConfig(vocab_size=VOCAB_SIZE))
    train: TrainConfig = field(default_factory=lambda: TrainConfig(train_min=256, train_max=256))
    eval: LmEvalConfig = field(default_factory=LmEvalConfig)
    eval_pe_options: Mapping[str, Any] = field(default_factory=dict)
    finetune_steps: int = 0
    finetune_length: int = 0

    def __post_init__(self) -> None:
        check_name("pe", self.pe)
        lm_task(self.task)
        check_int("seed", self.seed)
        check_name("preset", self.preset)
        for name in ("pe_options", "eval_pe_options"):
            value = getattr(self, name)
            if not isinstance(value, Mapping):
                raise ValueError(f"{name} must be a mapping of option names to values, got {shown(value)}")
            check_plain(name, value)
        for name, kind in (("backbone", BackboneConfig), ("train", TrainConfig), ("eval", LmEvalConfig)):
            if not isinstance(getattr(self, name), kind):
                raise ValueError(f"{name} must be a {kind.__name__}, got {shown(getattr(self, name))}")
        check_backbone(self.backbone)
        if self.backbone.vocab_size != VOCAB_SIZE or not self.backbone.causal:
            raise ValueError(f"a language-modelling run is a causal model of {VOCAB_SIZE} tokens (bytes and BOS)")
        if self.train.train_min != self.train.train_max:
            raise ValueError("train.train_min and train.train_max are both the training length L on the LM track")
        check_int("finetune_steps", self.finetune_steps, maximum=1_000_000)
        check_int("finetune_length", self.finetune_length, maximum=MAX_LM_LENGTH)
        if self.finetune_steps and not self.eval_pe_options:
            raise ValueError("finetune_steps fine-tunes an inference-time variant: give eval_pe_options too")
        if bool(self.finetune_steps) != bool(self.finetune_length):
            raise ValueError("finetune_steps and finetune_length go together (both 0: no fine-tune)")

    @property
    def length(self) -> int:
        """The training length L in tokens."""
        return self.train.train_max

    @property
    def is_variant(self) -> bool:
        return bool(self.eval_pe_options)

    def trained_config(self) -> LmConfig:
        """The run whose weights a variant starts from."""
        if not self.is_variant:
            return self
        return dataclasses.replace(self, eval_pe_options={}, finetune_steps=0, finetune_length=0)

    def eval_options(self) -> dict[str, Any]:
        return {**self.pe_options, **self.eval_pe_options}

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["pe_options"] = dict(self.pe_options)
        d["eval_pe_options"] = dict(self.eval_pe_options)
        if not self.eval.passkey:  # not measured: as records written before the field existed
            del d["eval"]["passkey"]
        if not self.eval.positions:  # likewise
            del d["eval"]["positions"]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LmConfig:
        """The config of ``to_dict``'s form (JSON lists for tuples); ValueError on any wrong key or value."""
        if not isinstance(d, Mapping):
            raise ValueError(f"an LM run config must be an object, got {shown(d)}")
        d = dict(d)
        built: dict[str, Any] = {}
        for name, kind in (("backbone", BackboneConfig), ("train", TrainConfig), ("eval", LmEvalConfig)):
            section = d.pop(name, {})
            if not isinstance(section, Mapping):
                raise ValueError(f"{name} config must be an object, got {shown(section)}")
            section = dict(section)
            for key in ("betas", "curriculum", "lengths"):
                if isinstance(section.get(key), list):
                    section[key] = tuple(section[key])
            built[name] = strict(kind, section, f"{name} config")
        return strict(cls, {**d, **built}, "LM run config")

    def run_id(self) -> str:
        """Stable identity: the hash of the canonical JSON of everything but the preset label."""
        d = self.to_dict()
        d.pop("preset")
        blob = json.dumps(d, sort_keys=True, separators=(",", ":"), default=str)
        return "lm-" + hashlib.sha256(blob.encode()).hexdigest()[:16]


LM_PRESETS: dict[str, dict[str, Any]] = {
    # Issue 52's protocol: a ~0.8M-parameter byte-level decoder trained at L = 256. float32:
    # on a CPU without bf16 units (AVX2 only, as the board's machine) bf16 autocast is far
    # slower (benchmarks/lm_cost.py); on a GPU run it with --precision bf16. Scored (issue 63)
    # on 64 regions of 4096 bytes (256 KB, every held-out document), the tail mode's target
    # the last L = 256 bytes of each, so that mode has its reference at L too.
    "lm": {
        "backbone": {"d_model": 128, "n_layers": 4, "n_heads": 4},
        "train": {
            "steps": 4000,
            "batch_size": 16,
            "lr": 1e-3,
            "warmup": 200,
            "train_min": 256,
            "train_max": 256,
        },
        "eval": {
            "lengths": (256, 512, 1024, 2048, 4096),
            "regions": 64,
            "tail": 256,
            "passkey": 10,
            "positions": True,
        },
    },
    # The same, tested to 16,384 (the papers' longest): 16 regions of 16,384 bytes (256 KB; not
    # every held-out document of lm_code has a 16 KB stretch free of training text).
    "lm_long": {
        "backbone": {"d_model": 128, "n_layers": 4, "n_heads": 4},
        "train": {
            "steps": 4000,
            "batch_size": 16,
            "lr": 1e-3,
            "warmup": 200,
            "train_min": 256,
            "train_max": 256,
        },
        "eval": {
            "lengths": (256, 512, 1024, 2048, 4096, 8192, 16384),
            "regions": 16,
            "tail": 256,
            "passkey": 10,
            "positions": True,
        },
    },
    # Seconds: for tests and smoke checks; learns little.
    "lm_smoke": {
        "backbone": {"d_model": 32, "n_layers": 1, "n_heads": 2},
        "train": {"steps": 10, "batch_size": 4, "lr": 1e-3, "warmup": 2, "train_min": 32, "train_max": 32},
        "eval": {"lengths": (32, 64, 128), "regions": 2, "tail": 32, "chunk": 32, "passkey": 2, "positions": True},
    },
}
"""The LM track's presets, as data (the ``lm`` preset is the board's)."""

LM_PRESET_DESCRIPTIONS = {
    "lm": "LM track: byte-level d128 x 4 layers x 4 heads, 4000 steps of 16 x 256 bytes, bpb at 256..4096 on 256 KB",
    "lm_long": "the lm preset tested to 16,384 bytes",
    "lm_smoke": "seconds per run, for tests and smoke checks of the LM track; learns little",
}

FINETUNE_STEPS = 200
"""Steps of the short fine-tune at 4L that PI and YaRN variants get (``--finetune``): the
papers fine-tune about 1000 steps at their scale (PI §3.1; YaRN §4); 200 of the lm preset's
batch is 5% of its training."""


def lm_preset_config(
    preset: str,
    *,
    pe: PeSpec | str,
    task: str,
    seed: int,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    finetune_steps: int = 0,
) -> LmConfig:
    """The LmConfig of ``preset`` for (pe, task, seed); a variant spec (``rope@{scaling=...}``)
    gives the inference-time variant, fine-tuned ``finetune_steps`` at 4L when > 0."""
    if preset not in LM_PRESETS:
        raise ValueError(f"unknown LM preset {preset!r}; valid: {', '.join(LM_PRESETS)}")
    sections = {k: dict(v) for k, v in LM_PRESETS[preset].items()}
    for section, values in (overrides or {}).items():
        if section not in sections:
            raise ValueError(f"unknown config section {section!r}; valid: {', '.join(sections)}")
        sections[section].update({k: v for k, v in values.items() if v is not None})
    sections["backbone"]["vocab_size"] = VOCAB_SIZE
    spec = parse_pe(pe) if isinstance(pe, str) else pe
    cfg = LmConfig.from_dict({"pe": spec.name, "task": task, "seed": seed, "preset": preset, **sections})
    name, options = resolve_pe(spec.trained, task=task, backbone=cfg.backbone)
    cfg = dataclasses.replace(cfg, pe=name, pe_options=options)
    try:  # an unknown name or option fails here, before any run
        preflight_build(name, options, cfg.backbone)
    except KeyError as exc:  # pezoo's UnknownNameError, with its suggestions
        raise ValueError(str(exc.args[0]) if exc.args else str(exc)) from None
    if spec.eval_options:
        check_eval_options(name, options, spec.eval_options, cfg.backbone, str(spec))
        cfg = dataclasses.replace(cfg, eval_pe_options=dict(spec.eval_options))
        if finetune_steps:
            cfg = dataclasses.replace(cfg, finetune_steps=finetune_steps, finetune_length=4 * cfg.length)
    elif finetune_steps:
        raise ValueError(f"{spec}: a fine-tune is for an inference-time variant (rope@{{scaling=...}})")
    return cfg
