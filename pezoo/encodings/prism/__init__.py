"""PRISM (Lee 2025, "Position as Probability"): histogram-filter relative positions.

histogram.py    the pure update (Alg. 1) and the scan over tokens
gates.py        GRU gates and the copy branch's attention
fused_scan.py   the windowed scan as one autograd node with a hand-written backward
scan.py         the scan a layer runs: streams per step, windowed, checkpointed, fused
streams.py      histograms -> sinusoidal position streams -> extended q/k (Alg. 2–4)
config.py       PRISMConfig (every option, validated), PAPER_OPTIONS, the support rule
layer.py        PRISMLayer: gates, copy branch and filter of one PRISM layer's cursors
encoding.py     the ``prism`` encoding behind the one interface
metric.py       the learned distance and displacement pmf (§4.1, Eq. 6), for analysis
diagnostics.py  histograms, gates and cursor modes of a forward pass, and their plot
"""

from pezoo.encodings.prism.config import PAPER_OPTIONS, PRISMConfig, support_for
from pezoo.encodings.prism.encoding import PRISM
from pezoo.encodings.prism.histogram import (
    centre_one_hot,
    histogram_scan,
    histogram_step,
    histogram_transition,
    mix_copy,
    reachable_mask,
    sharpen,
)
from pezoo.encodings.prism.layer import PRISMLayer

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
