"""RunConfig.from_dict refuses every wrong key, type and range with a ValueError, whatever JSON it is given."""

from __future__ import annotations

import copy
import json
import math
import reprlib
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from harness.config import LM_PRESETS, PRESETS, EvalConfig, RunConfig, TrainConfig, limits, preset_config
from harness.tasks.lm import LM_TASKS

RESULTS = Path(__file__).resolve().parents[2] / "leaderboard" / "results"
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
        cfg = preset_config(preset, pe="rope", task="lm_en" if preset in LM_PRESETS else "copy", seed=3)
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
        ("backbone.head", "Tied", "unknown backbone.head 'Tied'; valid: tied, untied"),
        ("backbone.head", True, "unknown backbone.head"),
        ("backbone.causal", "yes", "backbone.causal must be true or false"),
        ("train", "fast", "train config must be an object"),
        ("train.steps", 0, "train.steps must be an integer >= 1"),
        ("train.steps", 20.0, "train.steps must be an integer"),
        ("train.steps", 2**70, "train.steps must be at most"),
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
# Found by random draws on two fresh clones (issue 39): accepted, then test_lengths()
# built a 7.5-billion-element list (MemoryError once, the OOM killer the other time).
@example(path=("eval", "test_max"), value=7_508_565_006, delete=False)
# Its neighbours: every other scale, and the values any of them could take from JSON.
@example(path=("eval", "test_max"), value=2**63 - 1, delete=False)
@example(path=("train", "train_max"), value=7_508_565_005, delete=False)
@example(path=("eval", "samples"), value=10**8, delete=False)
def test_random_json_inside_a_valid_config_is_a_config_or_a_value_error(path, value, delete):
    _builds_or_value_error(_replace(VALID, path, value, delete))


@pytest.mark.parametrize("key", ["pe_options", "eval_pe_options", "pe", "seed"])
def test_overrides_cannot_set_what_the_spec_sets(key):
    """An override of pe_options used to be replaced by the spec's options without a word:
    a run configured as rope{base=500} trained with base 10000."""
    with pytest.raises(ValueError, match=f"overrides cannot set {key}.*options in the spec"):
        preset_config("smoke", pe="rope", task="copy", seed=0, overrides={key: {"base": 500.0}})


# --------------------------------------------------------------------------------------
# Upper bounds: every size-like value is refused above its bound, before anything is built
# --------------------------------------------------------------------------------------

SIZES = [
    ("eval.test_max", limits.MAX_SCALE),
    ("eval.test_stride", limits.MAX_SCALE),
    ("eval.samples", limits.MAX_SAMPLES),
    ("eval.batch_size", limits.MAX_BATCH),
    ("eval.every", limits.MAX_STEPS),
    ("eval.window", limits.MAX_TOKENS),
    ("eval.window_jump", limits.MAX_TOKENS),
    ("train.steps", limits.MAX_STEPS),
    ("train.batch_size", limits.MAX_BATCH),
    ("train.warmup", limits.MAX_STEPS),
    ("train.train_max", limits.MAX_SCALE),
    ("train.train_min", limits.MAX_SCALE),
    ("train.pack", limits.MAX_TOKENS),
    ("backbone.vocab_size", limits.MAX_VOCAB),
    ("backbone.d_model", limits.MAX_WIDTH),
    ("backbone.n_layers", limits.MAX_LAYERS),
    ("backbone.n_heads", limits.MAX_HEADS),
    ("backbone.d_ff", 4 * limits.MAX_WIDTH),
]


@pytest.mark.parametrize(("path", "bound"), SIZES, ids=[p for p, _ in SIZES])
def test_every_size_is_refused_above_its_bound(path, bound):
    with pytest.raises(ValueError) as info:
        RunConfig.from_dict(edited(path, bound + 1))
    assert f"{path} must be at most {bound}" in str(info.value)


@pytest.mark.parametrize(
    ("stage", "message"),
    [
        ([limits.MAX_STEPS + 1, 5], "train.curriculum[0] start step must be at most"),
        ([0, limits.MAX_SCALE + 1], "train.curriculum[0] max scale must be at most"),
    ],
)
def test_curriculum_stages_are_bounded(stage, message):
    with pytest.raises(ValueError) as info:
        RunConfig.from_dict(edited("train.curriculum", [stage]))
    assert message in str(info.value)


def test_each_bound_itself_is_a_valid_value():
    """The bounds are reachable: a config at each one (others kept small) is accepted."""
    small = {"eval.samples": 1, "eval.test_stride": limits.MAX_SCALE}  # keeps the evaluation sets small
    at_bounds = {
        "eval.test_max": limits.MAX_SCALE,
        "eval.batch_size": limits.MAX_BATCH,
        "eval.every": limits.MAX_STEPS,
        "train.steps": limits.MAX_STEPS,
        "train.warmup": limits.MAX_STEPS,
        "train.batch_size": limits.MAX_BATCH,
        "train.train_max": limits.MAX_SCALE - 1,
        "train.pack": limits.MAX_TOKENS,
        "backbone.vocab_size": limits.MAX_VOCAB,
        "backbone.d_model": limits.MAX_WIDTH,
        "backbone.n_layers": limits.MAX_LAYERS,
        "backbone.n_heads": limits.MAX_HEADS,
        "backbone.d_ff": 4 * limits.MAX_WIDTH,
    }
    d = VALID
    for path, value in {**small, **at_bounds}.items():
        d = _replace(d, tuple(path.split(".")), value)
    cfg = RunConfig.from_dict(d)
    assert cfg.eval.test_max == limits.MAX_SCALE and cfg.backbone.d_model == limits.MAX_WIDTH
    assert cfg.test_lengths() == [limits.MAX_SCALE]


def test_the_evaluation_sets_are_bounded_as_a_whole():
    """Each value within its bound, the product too large: samples x the scales evaluated."""
    d = _replace(_replace(VALID, ("eval", "test_max"), 2000), ("eval", "samples"), 1000)
    with pytest.raises(ValueError) as info:
        RunConfig.from_dict(d)
    assert "eval.samples" in str(info.value) and "eval.test_max" in str(info.value)
    # every 100th test scale: the same test range, a hundredth of the sets
    sparse = RunConfig.from_dict(_replace(d, ("eval", "test_stride"), 100))
    units = sparse.eval.samples * (sum(sparse.train_lengths()) + sum(sparse.test_lengths()))
    assert units == sparse.eval.samples * sparse.evaluated_scale_sum() <= limits.MAX_EVAL_UNITS


@pytest.mark.parametrize(
    ("train_min", "train_max", "test_max", "stride"),
    [(1, 5, 8, 1), (2, 50, 100, 10), (1, 40, 150, 10), (3, 3, 4, 7), (1, 40, 500, 1), (5, 9, 97, 13)],
)
def test_the_evaluated_scale_sum_is_the_sum_of_the_lengths(train_min, train_max, test_max, stride):
    cfg = RunConfig.from_dict(
        {**VALID, "train": {**VALID["train"], "train_min": train_min, "train_max": train_max},
         "eval": {**VALID["eval"], "test_max": test_max, "test_stride": stride}}
    )  # fmt: skip
    assert cfg.evaluated_scale_sum() == sum(cfg.train_lengths()) + sum(cfg.test_lengths())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_length": 99_999_999_999}, "pe_options.max_length must be at most"),
        ({"max_position": 2**40}, "pe_options.max_position must be at most"),
        ({"d_pe": 10**8}, "pe_options.d_pe must be at most"),
        ({"scaling": {"rope_type": "yarn", "original_max_position_embeddings": 1e12}},
         "pe_options.scaling.original_max_position_embeddings must be"),
        ({"max_k": 10**400}, "pe_options.max_k must be at most"),
    ],
)  # fmt: skip
def test_size_like_encoding_options_are_bounded_in_the_config(options, message):
    """A results record or a stored config is checked without building its encoding."""
    with pytest.raises(ValueError) as info:
        RunConfig.from_dict(edited("pe_options", options))
    assert message in str(info.value)


@pytest.mark.parametrize(
    "spec",
    [
        "randomized:ape{max_length=99999999999}",
        "learned_ape{max_position=99999999999}",  # built to check it: a 12.8 TB table
        "randomized:learned_ape{max_position=300000}",
        "t5{max_distance=99999999999}",
        "rope@{scaling={rope_type=yarn,factor=4.0,original_max_position_embeddings=99999999999}}",
    ],
)
def test_size_like_encoding_options_are_refused_before_the_encoding_is_built(spec, monkeypatch):
    import pezoo

    def no_build(*args, **kwargs):
        raise AssertionError("the encoding was built before its options were checked")

    monkeypatch.setattr(pezoo, "create", no_build)
    with pytest.raises(ValueError, match="must be at most"):
        preset_config("smoke", pe=spec, task="copy", seed=0)


def test_every_preset_and_published_record_is_within_the_bounds():
    """The bounds refuse nothing real: each preset on every task, and every published
    record's config (whose run id is unchanged)."""
    import harness.tasks as tasks

    for preset in PRESETS:
        for task in sorted(LM_TASKS) if preset in LM_PRESETS else tasks.available():
            preset_config(preset, pe="rope", task=task, seed=0)
    records = 0
    for path in sorted(RESULTS.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                assert RunConfig.from_dict(record["config"]).run_id() == record["run_id"], path
                records += 1
    assert records > 300


@pytest.mark.parametrize(
    ("path", "value"),
    [(("eval", "test_max"), 7_508_565_006), (("eval", "samples"), 10**8), (("pe_options", "max_length"), 10**11)],
)
def test_a_results_record_beyond_the_bounds_is_refused(path, value):
    """The results-record entry point: ``leaderboard check`` validates a record's config
    through RunConfig, so the bounds hold there too (before anything is built from it)."""
    from leaderboard.schema import validate_record

    line = next(line for p in sorted(RESULTS.glob("*.jsonl")) for line in p.read_text().splitlines() if line.strip())
    record = json.loads(line)
    assert validate_record(record) == []
    record["config"] = _replace(record["config"], path, value)
    problems = validate_record(record)
    assert any(f"{path[-1]} must be at most" in p for p in problems), problems
