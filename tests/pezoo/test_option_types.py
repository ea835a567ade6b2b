"""pezoo.create checks each option's value against its constructor's annotation, and each
size-like one against pezoo.limits, before the constructor runs; each constructor refuses a
float option that is not finite.

Each case was accepted before (the string "false" read as true; a float count reaching
torch.randint; a learning rate "abc" failing at the first optimiser step, after a sweep had
made its store; depth=10**20 building layers until the machine ran out of memory)."""

from __future__ import annotations

import collections.abc
import typing

import numpy as np
import pytest

import pezoo
from pezoo.limits import MAX_POSITIONS, MAX_WIDTH
from pezoo.option_types import describe, matches

DIMS = pezoo.ModelDims(d_model=32, n_heads=4, n_layers=2)


@pytest.mark.parametrize(
    ("name", "options", "error", "message"),
    [
        (
            "fire",
            {"share_layers": "false"},
            ValueError,
            "fire: share_layers must be true or false (a boolean), got the string 'false'",
        ),
        (
            "t5",
            {"bidirectional": "no"},
            ValueError,
            "t5: bidirectional must be true or false (a boolean), got the string 'no'",
        ),
        ("fope", {"learnable": 1}, ValueError, "fope: learnable must be true or false (a boolean), got 1 (int)"),
        (
            "randomized:rope",
            {"randomize_eval": "false"},
            ValueError,
            "randomized: randomize_eval must be true or false",
        ),
        ("abacus", {"max_k": 1.5}, ValueError, "abacus: max_k must be an integer, got 1.5 (float)"),
        ("prism", {"min_support": 1.5}, ValueError, "prism: min_support must be an integer, got 1.5 (float)"),
        ("prism", {"copy_dim": "3"}, ValueError, "prism: copy_dim must be an integer, got the string '3'"),
        ("learned_prf", {"depth": True}, ValueError, "learned_prf: depth must be an integer, got True (bool)"),
        ("prism", {"alpha_lr": "abc"}, ValueError, "prism: alpha_lr must be a number, got the string 'abc'"),
        ("prism", {"alpha_betas": "nope"}, ValueError, "prism: alpha_betas must be a list of 2 numbers"),
        ("prism", {"alpha_betas": [0.9]}, ValueError, "prism: alpha_betas must be a list of 2 numbers"),
        ("prism", {"layers": [0, "1"]}, ValueError, "prism: layers must be a list of integers"),
        (
            "prism",
            {"regulariser": "l1"},
            ValueError,
            "prism: regulariser must be one of 'orthogonal', 'frobenius', 'none'",
        ),
        ("prism", {"gamma_init": float("inf")}, ValueError, "gamma_init must be a finite number > 1, got inf"),
        ("prism", {"alpha_lr": float("inf")}, ValueError, "alpha_lr must be a finite number > 0, got inf"),
        ("abacus", {"init_std": float("nan")}, ValueError, "abacus: init_std must be a finite number >= 0, got nan"),
        ("rope", {"base": "10000"}, ValueError, "rope: base must be a number, got the string '10000'"),
        ("ssmax:nope", {"s_init": "x"}, ValueError, "ssmax: s_init must be a number"),
        ("alibi", {"n_biased": 2.0}, ValueError, "alibi: n_biased must be an integer or None (unset), got 2.0 (float)"),
        ("learned_prf", {"depth": 10**20}, ValueError, "learned_prf: depth must be at most 4,096 (pezoo.limits)"),
        ("learned_prf", {"hidden": 10**20}, ValueError, "learned_prf: hidden must be at most 4,096"),
        (
            "learned_ape",
            {"max_position": MAX_POSITIONS + 1},
            ValueError,
            "learned_ape: max_position must be at most 262,144",
        ),
    ],
)
def test_a_value_of_the_wrong_type_or_size_is_refused_naming_the_option(name, options, error, message):
    with pytest.raises(error) as caught:
        pezoo.create(name, dims=DIMS, **options)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("rope", {"base": 10000}),  # an int for a float
        ("prism", {"layers": [0, 1], "alpha_betas": [0.8, 0.92]}),  # lists from TOML/JSON for tuples
        ("abacus", {"max_k": np.int64(30), "digit_ids": [1, 2, 3]}),  # numpy's integers
        ("alibi", {"n_biased": None}),
        ("learned_prf", {"depth": 3, "hidden": MAX_WIDTH}),  # at the bound
        ("rope", {"scaling": {"rope_type": "linear", "factor": 2.0}}),
        ("randomized:rope", {"randomize_eval": False, "max_length": 4096}),
    ],
)
def test_values_of_the_declared_types_build(name, options):
    assert isinstance(pezoo.create(name, dims=DIMS, **options), pezoo.PositionalEncoding)


def test_the_matcher_reads_unions_literals_sequences_mappings_and_classes():
    hint = int | None
    assert matches(3, hint) and matches(None, hint) and not matches(3.0, hint) and not matches(True, hint)
    assert matches("a", typing.Literal["a", "b"]) and not matches("c", typing.Literal["a", "b"])
    assert not matches(1, typing.Literal[True])  # 1 == True, but not a bool
    assert matches((1, 2), tuple[int, ...]) and not matches("12", tuple[int, ...])
    assert matches([1, 2], collections.abc.Sequence[int]) and not matches([1.5], collections.abc.Sequence[int])
    assert matches({"k": 1}, collections.abc.Mapping[str, typing.Any]) and not matches(
        [], collections.abc.Mapping[str, typing.Any]
    )
    assert matches(10**400, float) and matches(float("nan"), float)  # bounds and finiteness: the constructor's
    assert matches(object(), typing.Any) and matches(object(), "Unresolved")  # unreadable: the constructor judges
    assert matches([1, 2], list[int]) and not matches([1, "2"], list[int])

    class Shaped(typing.Protocol):  # not runtime-checkable: isinstance would raise
        width: int

    assert matches(object(), Shaped)
    assert describe(float | None) == "a number or None (unset)"
    assert describe(tuple[int, float]) == "a list of 2: an integer, a number"


def test_a_plugin_whose_annotations_do_not_resolve_is_left_to_its_constructor():
    class Odd(pezoo.NoPE):
        def __init__(self, width: NotImported = 1) -> None:  # type: ignore[name-defined]  # noqa: F821
            super().__init__()
            self.width = width

    from pezoo.registry import _check_values

    _check_values(Odd, "odd", {"width": "anything"})  # no NameError, no refusal


def _float_options() -> list[tuple[str, str]]:
    from pezoo.option_types import _hints, _union_args
    from pezoo.registry import ENCODINGS, WRAPPERS

    named = [(n, f) for n, f in ENCODINGS.items()] + [(f"{p}:rope", f) for p, f in WRAPPERS.items()]
    return [
        (name, option)
        for name, factory in named
        for option, hint in _hints(factory).items()
        if hint is float or float in _union_args(hint)
    ]


@pytest.mark.parametrize(("name", "option"), _float_options())
def test_every_float_option_of_every_encoding_refuses_nan_and_inf_by_name(name, option):
    """Fourteen were taken (abacus's init_std, FIRE's threshold, learned PRF's feature scale,
    six of PRISM's): nan or inf trained to a NaN loss, or none at all, with nothing said."""
    for value in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError, match=option):
            pezoo.create(name, dims=DIMS, **{option: value})


def _shape_keys() -> list[tuple[str, str]]:
    from pezoo.registry import ENCODINGS, _accepted_keys

    keys = ("d_model", "n_heads", "n_layers", "head_dim")
    return [(name, key) for name, factory in ENCODINGS.items() for key in keys if key in _accepted_keys(factory)]


@pytest.mark.parametrize(("name", "key"), _shape_keys())
def test_a_model_shape_that_is_no_integer_is_refused_by_every_encoding(name, key):
    """The shape keys are each constructor's to check (with their bounds); KERPLE's took
    n_heads=True (True >= 1) and built one head."""
    shape = {"d_model": 32, "n_heads": 4, "n_layers": 2, "head_dim": 8}
    from pezoo.registry import ENCODINGS, _accepted_keys

    given = {k: v for k, v in shape.items() if k in _accepted_keys(ENCODINGS[name]) and k != "head_dim"}
    for value in (True, 8.0, "4"):
        with pytest.raises((ValueError, TypeError)):
            pezoo.create(name, **{**given, key: value})
