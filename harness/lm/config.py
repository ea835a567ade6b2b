"""The configuration the LM page reads a run by (``LmConfig``), and the one the records the
track published before the one harness carry.

A language-modelling run's configuration is a ``harness.config.RunConfig`` whose ``eval`` is a
``harness.config.lm_eval.LmEvalConfig`` (``pezoo bench --task lm_en``). The page
(``leaderboard.lm_board``) and the earlier records use ``LmConfig``: frozen, strict keys, its
canonical JSON hashed into those records' run ids, the backbone's ``BackboneConfig``
(vocabulary fixed at 257: bytes and BOS), ``TrainConfig`` (``train_max`` is the training length
L, in tokens) and the same ``LmEvalConfig`` less its fine-tune, which ``LmConfig`` holds at its
top level: ``finetune_steps`` > 0 makes an inference-time variant (``eval_pe_options``, e.g.
RoPE's ``scaling``) a *fine-tuned* one, its trained run's weights trained ``finetune_steps``
more steps at ``finetune_length`` tokens with the variant's encoding (position interpolation
and YaRN's short fine-tune, Chen et al. 2023 §3; Peng et al. 2023 §4), then evaluated.
``LmRecord.of_run`` builds one from a run's ``RunConfig``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.config.backbone import BackboneConfig
from harness.config.checks import check_int, check_name, check_plain, shown, strict
from harness.config.lm_eval import MAX_LM_LENGTH, LmEvalConfig
from harness.config.pe_spec import check_eval_options, preflight_build, resolve_pe
from harness.config.presets import LM_PRESETS as PRESET_NAMES
from harness.config.presets import PRESETS
from harness.config.run_config import NEW_FIELD_DEFAULTS, TrainConfig, check_backbone
from harness.tasks.lm import VOCAB_SIZE, lm_task
from pezoo.spec import PeSpec, parse_pe

__all__ = ["LM_PRESETS", "LmConfig", "LmEvalConfig", "lm_preset_config"]

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
        if self.eval.finetune_steps:
            raise ValueError("an LmConfig holds its fine-tune in finetune_steps, not eval.finetune_steps")

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
        for key in ("finetune_steps", "finetune_length"):  # this config's own fields hold its fine-tune
            del d["eval"][key]
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
        """Stable identity: the hash of the canonical JSON of everything but the preset label
        and the backbone fields added later at their defaults (``backbone.head``: tied), so
        the published records keep their ids."""
        d = self.to_dict()
        d.pop("preset")
        later = NEW_FIELD_DEFAULTS["backbone"]
        d["backbone"] = {k: v for k, v in d["backbone"].items() if not (k in later and v == later[k])}
        blob = json.dumps(d, sort_keys=True, separators=(",", ":"), default=str)
        return "lm-" + hashlib.sha256(blob.encode()).hexdigest()[:16]


LM_PRESETS: dict[str, dict[str, Any]] = {name: PRESETS[name] for name in PRESET_NAMES}
"""The LM track's presets: the harness's own (``harness.config.presets``, where ``pezoo bench``
reads them too)."""

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
    gives the inference-time variant, fine-tuned ``finetune_steps`` at 4L when > 0. The form
    the records published before the one harness carry (a run's config is a ``RunConfig`` of
    ``harness.config.preset_config``; the page views it as an LmConfig, ``LmRecord.of_run``)."""
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
