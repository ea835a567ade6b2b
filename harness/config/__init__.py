"""Typed, frozen run configuration with strict keys, and the named presets: what a run is.

One module per part:

    numbers     the one number checker: whether a value from outside is a number of the kind
                and range it must be (configs, records, kept results, store rows, diagnostics)
    checks      strict keys, and each config value's type and range
    backbone    ``BackboneConfig``: the backbone's shape, shared by every run of a comparison
    precisions  the precisions a run trains and evaluates in, by name
    global_rng  torch's one global RNG, and the lock whoever seeds, draws from or restores it holds
    limits      upper bounds for every size-like value of a run's configuration
    pe_spec     encoding specs in the benchmark: the options a run records, its name, and
                which options an inference-time variant may change
    protocols   encodings as their papers run them, sized for a run's backbone, and how a run
                departs from its paper
    run_config  ``RunConfig`` and its sections ``TrainConfig``, ``EvalConfig``; the run id
    lm_eval     ``LmEvalConfig``: a language-modelling run's evaluation section (its ``eval``)
    presets     the named protocols (``PRESETS``) and ``preset_config``
"""

from harness.config.backbone import BackboneConfig
from harness.config.checks import (
    INT64_MAX,
    as_float,
    check_choice,
    check_int,
    check_name,
    check_number,
    check_plain,
    is_finite_number,
    shown,
    strict,
)
from harness.config.presets import (
    GPU_PRECISION_NOTE,
    GPU_PRESETS,
    LM_PRESETS,
    PRESET_DESCRIPTIONS,
    PRESETS,
    PRISM_RAMPED_TASKS,
    preset_config,
    prism_curriculum,
)
from harness.config.run_config import (
    MATCHES,
    NEW_FIELD_DEFAULTS,
    PACK_LOSSES,
    PROTOCOLS,
    SCHEDULES,
    SELECTIONS,
    EvalConfig,
    RunConfig,
    TrainConfig,
    check_backbone,
)

__all__ = [
    "GPU_PRECISION_NOTE",
    "GPU_PRESETS",
    "INT64_MAX",
    "LM_PRESETS",
    "MATCHES",
    "NEW_FIELD_DEFAULTS",
    "PACK_LOSSES",
    "PRESETS",
    "PRESET_DESCRIPTIONS",
    "PRISM_RAMPED_TASKS",
    "PROTOCOLS",
    "SCHEDULES",
    "SELECTIONS",
    "BackboneConfig",
    "EvalConfig",
    "RunConfig",
    "TrainConfig",
    "as_float",
    "check_backbone",
    "check_choice",
    "check_int",
    "check_name",
    "check_number",
    "check_plain",
    "is_finite_number",
    "preset_config",
    "prism_curriculum",
    "shown",
    "strict",
]
