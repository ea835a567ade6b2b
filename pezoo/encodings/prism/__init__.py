"""PRISM (Lee 2025, "Position as Probability"): histogram-filter relative positions.

histogram.py    the pure update (Alg. 1) and the scan over tokens
gates.py        GRU gates and the copy branch's attention
streams.py      histograms -> sinusoidal position streams -> extended q/k (Alg. 2–4)
metric.py       the learned distance and displacement pmf (§4.1, Eq. 6), for analysis
encoding.py     the ``prism`` encoding behind the one interface
diagnostics.py  histograms, gates and cursor modes of a forward pass, and their plot
"""

from pezoo.encodings.prism.encoding import PAPER_OPTIONS, PRISM, PRISMConfig, PRISMLayer, support_for
from pezoo.encodings.prism.histogram import (
    centre_one_hot,
    histogram_scan,
    histogram_step,
    histogram_transition,
    mix_copy,
    reachable_mask,
    sharpen,
)

__all__ = [
    "PAPER_OPTIONS",
    "PRISM",
    "PRISMConfig",
    "PRISMLayer",
    "centre_one_hot",
    "histogram_scan",
    "histogram_step",
    "histogram_transition",
    "mix_copy",
    "reachable_mask",
    "sharpen",
    "support_for",
]
