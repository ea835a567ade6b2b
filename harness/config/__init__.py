"""Typed, frozen run configuration with strict keys, and the named presets.

One module per part:

    checks      strict keys, and each config value's type and range
    run_config  ``RunConfig`` and its sections ``TrainConfig``, ``EvalConfig``; the run id
    presets     the named protocols (``PRESETS``) and ``preset_config``
"""

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
from harness.training.backbone import BackboneConfig

__all__ = [
    "GPU_PRECISION_NOTE",
    "GPU_PRESETS",
    "INT64_MAX",
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
