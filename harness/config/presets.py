"""Presets: a name for a whole protocol (backbone, training and evaluation), recorded with
every run, as data (``PRESETS``), with their descriptions, and the ``RunConfig`` of a preset
for one encoding, task and seed (:func:`preset_config`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from harness.config.pe_spec import check_eval_options, resolve_pe
from harness.config.run_config import RunConfig
from harness.tasks.lm import LM_TASKS
from harness.tasks.lm import VOCAB_SIZE as LM_VOCAB
from pezoo.spec import PeSpec, parse_pe

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
    # The language-modelling track (docs/lm.md; tasks lm_en and lm_code): a ~0.8M-parameter
    # byte-level decoder trained on windows of L = 256 bytes, scored in bits per byte at
    # 256..4096 on 64 held-out regions of 4096 bytes (256 KB, every held-out document), the
    # tail mode's target the last L bytes of each, with the passkey grid (10 samples a cell)
    # and curves by position. float32: on a CPU without bf16 units (AVX2 only, as the board's
    # machine) bf16 autocast is far slower (benchmarks/lm_cost.py); on a GPU --precision bf16.
    "lm": {
        "backbone": {"d_model": 128, "n_layers": 4, "n_heads": 4, "vocab_size": LM_VOCAB},
        "train": {"steps": 4000, "batch_size": 16, "lr": 1e-3, "warmup": 200, "train_min": 256, "train_max": 256},
        "eval": {"lengths": (256, 512, 1024, 2048, 4096), "regions": 64, "tail": 256, "passkey": 10, "positions": True},
    },
    # The same, tested to 16,384 (the papers' longest): 16 regions of 16,384 bytes (256 KB; not
    # every held-out document of lm_code has a 16 KB stretch free of training text).
    "lm_long": {
        "backbone": {"d_model": 128, "n_layers": 4, "n_heads": 4, "vocab_size": LM_VOCAB},
        "train": {"steps": 4000, "batch_size": 16, "lr": 1e-3, "warmup": 200, "train_min": 256, "train_max": 256},
        "eval": {
            "lengths": (256, 512, 1024, 2048, 4096, 8192, 16384),
            "regions": 16,
            "tail": 256,
            "passkey": 10,
            "positions": True,
        },
    },
    # Seconds: for tests and smoke checks of the LM track; learns little.
    "lm_smoke": {
        "backbone": {"d_model": 32, "n_layers": 1, "n_heads": 2, "vocab_size": LM_VOCAB},
        "train": {"steps": 10, "batch_size": 4, "lr": 1e-3, "warmup": 2, "train_min": 32, "train_max": 32},
        "eval": {"lengths": (32, 64, 128), "regions": 2, "tail": 32, "chunk": 32, "passkey": 2, "positions": True},
    },
}

LM_PRESETS = ("lm", "lm_long", "lm_smoke")
"""The presets of the language-modelling tasks (``harness.tasks.lm``); the others are the
algorithmic tasks'. A preset of one track refuses a task of the other."""

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
    "lm": (
        "language modelling (lm_en, lm_code): byte-level d128 x 4 layers, 4000 steps of 16 x 256 bytes, bits per byte "
        "at 256..4096 on 256 KB held out; ~25 min per run on one core"
    ),
    "lm_long": "the lm preset tested to 16,384 bytes",
    "lm_smoke": "seconds per run, for tests and smoke checks of the language-modelling tasks; learns little",
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
    preset: str, *, pe: PeSpec | str, task: str, seed: int, overrides: Mapping[str, Mapping[str, Any]] | None = None
) -> RunConfig:
    """The RunConfig of ``preset`` for (pe, task, seed), with per-section overrides.

    ``pe`` is an encoding spec (``pezoo.spec``: ``rope``, ``prism{paper}``,
    ``prism{n_cursors=4}``), parsed or as text; the config records its resolved options, checked by building
    the encoding. A variant spec ``rope@{scaling={...}}`` gives the inference-time variant
    of that trained run (``RunConfig.eval_pe_options``, checked by
    ``harness.config.pe_spec.check_eval_options``). Under the ``prism`` preset an encoding with a paper setup
    (``harness.config.protocols``) gets it unless the spec names another (``prism{default}``).
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; valid presets: {', '.join(PRESETS)}")
    if (task in LM_TASKS) != (preset in LM_PRESETS):
        track = "a language-modelling" if task in LM_TASKS else "an algorithmic"
        fits = LM_PRESETS if task in LM_TASKS else tuple(p for p in PRESETS if p not in LM_PRESETS)
        raise ValueError(f"task {task!r} is {track} task: its presets are {', '.join(fits)}, not {preset!r}")
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
    lm_train = sections.get("train", {})
    if task in LM_TASKS and isinstance(lm_train, dict) and "train_min" not in (overrides or {}).get("train", {}):
        lm_train["train_min"] = lm_train.get("train_max")  # one window length L (--train-len sets it)
    tune = {}  # a language-modelling variant's fine-tune: set with its eval_pe_options, below
    asked = (overrides or {}).get("eval") or {}
    given = sorted(k for k in ("finetune_steps", "finetune_length") if asked.get(k) is not None)
    if task not in LM_TASKS and given:  # else: "unknown eval config key(s) finetune_steps", an internal name
        raise ValueError(
            f"{' and '.join(given)} (--{given[0].replace('_', '-')}) fine-tune a language-modelling run's "
            f"inference-time variant; task {task!r} is an algorithmic task (the language-modelling tasks: "
            f"{', '.join(LM_TASKS)})"
        )
    if task in LM_TASKS and isinstance(sections.get("eval"), dict):
        tune = {k: sections["eval"].pop(k) for k in ("finetune_steps", "finetune_length") if k in sections["eval"]}
        if tune.get("finetune_steps") and not tune.get("finetune_length"):
            tune["finetune_length"] = 4 * sections["train"]["train_max"]  # PI's and YaRN's fine-tune at 4 L
    if preset == "prism" and "curriculum" not in sections["train"]:
        sections["train"]["curriculum"] = prism_curriculum(task, sections["train"]["train_max"])
    spec = parse_pe(pe) if isinstance(pe, str) else pe
    cfg = RunConfig.from_dict({"pe": spec.name, "task": task, "seed": seed, "preset": preset, **sections})
    setup = "paper" if preset == "prism" else None  # the PRISM paper's protocol runs the paper's setups
    name, options = resolve_pe(spec.trained, task=task, backbone=cfg.backbone, default_setup=setup)
    cfg = dataclasses.replace(cfg, pe=name, pe_options=options)
    if spec.eval_options:
        check_eval_options(name, options, spec.eval_options, cfg.backbone, str(spec))
        eval_section = dataclasses.replace(cfg.eval, **tune) if tune else cfg.eval
        cfg = dataclasses.replace(cfg, eval_pe_options=dict(spec.eval_options), eval=eval_section)
    elif tune.get("finetune_steps"):
        raise ValueError(f"{spec}: finetune_steps fine-tunes an inference-time variant (rope@{{scaling=...}})")
    return cfg
