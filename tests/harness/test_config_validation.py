"""RunConfig.from_dict refuses every wrong key, type and range with a ValueError, whatever JSON it is given."""

from __future__ import annotations

import copy
import json
import math
import reprlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.config import PRESETS, EvalConfig, RunConfig, TrainConfig, preset_config

VALID = json.loads(json.dumps(preset_config("smoke", pe="rope", task="copy", seed=0).to_dict()))


def edited(path: str, value) -> dict:
    """VALID with the value at dotted ``path`` replaced (``KeyError``: the key removed)."""
    d = copy.deepcopy(VALID)
    *parents, last = path.split(".")
    target = d
    for p in parents:
        target = target[p]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return d


def test_every_preset_round_trips_through_json():
    for preset in PRESETS:
        cfg = preset_config(preset, pe="rope", task="copy", seed=3)
        assert RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("pe", KeyError, "missing key(s) pe"),
        ("task", KeyError, "missing key(s) task"),
        ("pe", "", "pe must be a non-empty name"),
        ("pe", 3, "pe must be a non-empty name"),
        ("seed", -1, "seed must be an integer >= 0"),
        ("seed", 2**63, "largest integer SQLite stores"),
        ("seed", 1.0, "seed must be an integer"),
        ("seed", True, "seed must be an integer"),
        ("preset", None, "preset must be a non-empty name"),
        ("protocol", ["decoder"], "unknown protocol"),
        ("pe_options", [], "pe_options must be a mapping"),
        ("pe_options", {"support": math.nan}, "pe_options.support must be a finite number"),
        ("pe_options", {"support": 2**64}, "pe_options.support must be at most"),
        ("backbone", [], "backbone config must be an object"),
        ("backbone.d_model", "32", "backbone.d_model must be an integer"),
        ("backbone.d_model", 33, "not divisible by backbone.n_heads"),
        ("backbone.n_heads", 0, "backbone.n_heads must be an integer >= 1"),
        ("backbone.d_ff", 0.5, "backbone.d_ff must be an integer"),
        ("backbone.backend", 1, "backbone.backend must be a non-empty name"),
        ("backbone.causal", "yes", "backbone.causal must be true or false"),
        ("train", "fast", "train config must be an object"),
        ("train.steps", 0, "train.steps must be an integer >= 1"),
        ("train.steps", 20.0, "train.steps must be an integer"),
        ("train.steps", 2**70, "largest integer SQLite stores"),
        ("train.batch_size", False, "train.batch_size must be an integer"),
        ("train.lr", 0.0, "train.lr must be > 0"),
        ("train.lr", -1e-3, "train.lr must be > 0"),
        ("train.lr", math.nan, "train.lr must be a finite number"),
        ("train.lr", math.inf, "train.lr must be a finite number"),
        ("train.lr", 10**400, "train.lr must be a finite number"),
        ("train.lr", "1e-3", "train.lr must be a number"),
        ("train.betas", [0.9], "train.betas must be two numbers"),
        ("train.betas", 0.9, "train.betas must be two numbers"),
        ("train.betas", [0.9, 1.0], "train.betas[1] must be < 1"),
        ("train.weight_decay", -0.1, "train.weight_decay must be >= 0"),
        ("train.warmup", -1, "train.warmup must be an integer >= 0"),
        ("train.min_lr_ratio", 1.5, "train.min_lr_ratio must be <= 1"),
        ("train.grad_clip", 0.0, "train.grad_clip must be > 0"),
        ("train.train_max", "5", "train.train_max must be an integer"),
        ("train.curriculum", 5, "train.curriculum must be a list"),
        ("train.curriculum", [[0]], "train.curriculum[0] must be [start_step, max_scale]"),
        ("train.curriculum", [[0, "5"]], "train.curriculum[0] max scale must be an integer"),
        ("train.optimizer", "sgd", "unknown optimizer 'sgd'"),
        ("train.schedule", None, "unknown schedule"),
        ("train.pack", -2, "train.pack must be an integer >= 0"),
        ("train.pack_loss", 0, "unknown pack_loss"),
        ("train.nosuch", 1, "unknown train config key(s) nosuch"),
        ("eval.test_stride", 0, "eval.test_stride must be an integer >= 1"),
        ("eval.test_stride", -1, "eval.test_stride must be an integer >= 1"),
        ("eval.samples", 0, "eval.samples must be an integer >= 1"),
        ("eval.samples", -5, "eval.samples must be an integer >= 1"),
        ("eval.batch_size", 0, "eval.batch_size must be an integer >= 1"),
        ("eval.test_max", 1e9, "eval.test_max must be an integer"),
        ("eval.every", -1, "eval.every must be >= 0"),
        ("eval.start_below_loss", math.nan, "eval.start_below_loss must be a finite number"),
        ("eval.start_below_loss", 0.0, "eval.start_below_loss must be > 0"),
        ("eval.start_below_loss", "low", "eval.start_below_loss must be a number"),
        ("eval.select", ["final"], "unknown eval.select"),
        ("eval.window_jump", 0, "eval.window_jump must be an integer >= 1"),
        ("eval.match", None, "unknown eval.match"),
    ],
    ids=reprlib.repr,
)
def test_each_wrong_value_is_a_value_error_naming_it(path, value, message):
    with pytest.raises(ValueError) as info:
        RunConfig.from_dict(edited(path, value))
    assert message in str(info.value)


def test_a_missing_section_or_field_takes_its_default():
    assert RunConfig.from_dict(edited("eval", KeyError)).eval == EvalConfig()
    assert RunConfig.from_dict(edited("train.lr", KeyError)).train.lr == TrainConfig().lr


@pytest.mark.parametrize("value", [None, [], "config", 3, 1.5, True])
def test_a_config_that_is_not_an_object_is_a_value_error(value):
    with pytest.raises(ValueError, match="must be an object"):
        RunConfig.from_dict(value)


# --------------------------------------------------------------------------------------
# Fuzzing: random JSON anywhere in a config gives a config or a ValueError, nothing else
# --------------------------------------------------------------------------------------

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.sampled_from([0, 1, -1, 2**63 - 1, 2**63, 10**400])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
)
JSON = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip


def _paths(value, prefix=()):
    """Every (path) into nested dicts and lists of ``value``."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


PATHS = [p for p in _paths(VALID) if p]


def _replace(d, path, value, delete=False):
    d = copy.deepcopy(d)
    target = d
    for p in path[:-1]:
        target = target[p]
    if delete and isinstance(target, dict):
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return d


def _builds_or_value_error(d) -> None:
    try:
        cfg = RunConfig.from_dict(d)
    except ValueError:
        return
    # what was accepted is a whole, usable config
    assert RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert len(cfg.run_id()) == 16 and cfg.test_lengths()


@settings(max_examples=200, deadline=None)
@given(value=JSON)
def test_random_json_is_a_config_or_a_value_error(value):
    _builds_or_value_error(value)


@settings(max_examples=200, deadline=None)
@given(path=st.sampled_from(PATHS), value=JSON, delete=st.booleans())
def test_random_json_inside_a_valid_config_is_a_config_or_a_value_error(path, value, delete):
    _builds_or_value_error(_replace(VALID, path, value, delete))


@pytest.mark.parametrize("key", ["pe_options", "eval_pe_options", "pe", "seed"])
def test_overrides_cannot_set_what_the_spec_sets(key):
    """An override of pe_options used to be replaced by the spec's options without a word:
    a run configured as rope{base=500} trained with base 10000."""
    with pytest.raises(ValueError, match=f"overrides cannot set {key}.*options in the spec"):
        preset_config("smoke", pe="rope", task="copy", seed=0, overrides={key: {"base": 500.0}})
