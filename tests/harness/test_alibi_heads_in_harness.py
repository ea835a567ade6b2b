"""ALiBi on a subset of heads in the benchmark: the split is in the spec, so in the run's label."""

from __future__ import annotations

import pytest

from harness.config.pe_spec import check_options, display_name
from harness.training.backbone import BackboneConfig
from pezoo.spec import parse_pe

QUICK = BackboneConfig(d_model=128, n_layers=3, n_heads=4)


def test_the_head_split_is_in_the_label():
    spec = parse_pe("alibi{n_biased=2}")
    check_options(spec.name, spec.options, QUICK)
    assert display_name(spec.name, spec.options) == "alibi{n_biased=2}"
    assert display_name("alibi", {}) == "alibi"  # all heads: the label (and run id) of every ALiBi run so far


def test_more_biased_heads_than_the_backbone_has_is_refused_before_training():
    with pytest.raises(ValueError, match="n_biased"):
        check_options("alibi", {"n_biased": 5}, QUICK, "alibi{n_biased=5}")
