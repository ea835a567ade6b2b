"""pezoo.limits: the one walk over an encoding's options that pezoo.hf and the harness word
their refusals from."""

import pytest

from pezoo.limits import MAX_DEPTH, MAX_POSITIONS, MAX_WIDTH, oversized_options


def test_the_walk_finds_size_options_above_their_bounds_wherever_they_nest():
    options = {
        "max_length": MAX_POSITIONS + 1,
        "d_pe": MAX_WIDTH,  # at the bound: allowed
        "scaling": {"original_max_position_embeddings": 10**9, "factor": 10**9},  # factor is no size
        "stages": [{"hidden": 10**5}, {"hidden": True}, {"hidden": "wide"}],  # a bool or a string: the encoding's
        "max_k": -(10**9),  # a sign: the encoding's to judge
    }
    assert list(oversized_options(options)) == [
        ("max_length", MAX_POSITIONS + 1, MAX_POSITIONS),
        ("scaling.original_max_position_embeddings", 10**9, MAX_POSITIONS),
        ("stages[0].hidden", 10**5, MAX_WIDTH),
    ]
    assert list(oversized_options(options["scaling"], "pe_options.scaling")) == [
        ("pe_options.scaling.original_max_position_embeddings", 10**9, MAX_POSITIONS)
    ]


def test_options_nested_too_deep_are_refused():
    deep: dict = {"max_k": 1}
    for _ in range(MAX_DEPTH + 1):
        deep = {"inner": deep}
    with pytest.raises(ValueError, match=f"deeper than {MAX_DEPTH} levels"):
        list(oversized_options(deep))


def test_the_harness_and_pezoo_hf_word_the_same_finding():
    harness_limits = pytest.importorskip("harness.config.limits")
    from pezoo.hf.limits import check_option_sizes

    options = {"scaling": {"original_max_position_embeddings": 10**9}}
    with pytest.raises(ValueError, match=r"pe_options\.scaling\.original_max_position_embeddings"):
        harness_limits.check_option_sizes(options, "pe_options")
    with pytest.raises(ValueError, match=r"rope: option scaling\.original_max_position_embeddings=1e\+09 .*262144"):
        check_option_sizes(options, "rope")
