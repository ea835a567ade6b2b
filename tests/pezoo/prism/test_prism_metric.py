"""The learned distance of PRISM's cursors (§4.1), the displacement pmf (Eq. 6) and the
similarity kernel of the sinusoidal streams (§5.2), against formulas written here."""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pezoo.encodings.prism import centre_one_hot, histogram_step
from pezoo.encodings.prism.metric import (
    displacement_pmf,
    expected_abs_displacement,
    mode_offsets,
    stream_similarity,
)
from pezoo.encodings.prism.streams import offset_table

SETTINGS = settings(max_examples=40, deadline=None)

# deterministic gate actions: (reset, move) with move in {+1, -1, 0}
ACTIONS = st.tuples(st.booleans(), st.sampled_from([1, -1, 0]))


def run_deterministic(actions: list[tuple[bool, int]], support: int) -> list[torch.Tensor]:
    """Histograms after each step of a cursor driven by 0/1 gates."""
    h = centre_one_hot((1,), support, dtype=torch.float64)
    out = []
    for reset, move in actions:
        gate = {1: "inc", -1: "dec", 0: "keep"}[move]
        p = {k: torch.tensor([1.0 if k == gate else 0.0], dtype=torch.float64) for k in ("inc", "dec", "keep")}
        h = histogram_step(
            h, torch.tensor([float(reset)], dtype=torch.float64), p["inc"], p["dec"], p["keep"],
            torch.tensor([2.0], dtype=torch.float64), 0.0,
        )  # fmt: skip
        out.append(h[0])
    return out


@SETTINGS
@given(st.lists(ACTIONS, min_size=1, max_size=12))
def test_deterministic_gates_define_a_metric(actions):
    support = len(actions) + 1
    hists = run_deterministic(actions, support)
    # the coordinate by direct path integration with a dynamic origin (§5.0.1): a reset
    # re-anchors at 0, then the move of the same step applies
    z, coords = 0, []
    for reset, move in actions:
        z = (0 if reset else z) + move
        coords.append(z)
    for h, zt in zip(hists, coords, strict=True):
        assert h.max().item() == 1.0 and h.sum().item() == 1.0  # one-hot
        assert mode_offsets(h).item() == zt

    z_hat = [mode_offsets(h).item() for h in hists]

    def d(a: int, b: int) -> int:
        return abs(z_hat[b] - z_hat[a])

    n = len(hists)
    for a, b in itertools.product(range(n), repeat=2):
        assert d(a, a) == 0
        assert d(a, b) == d(b, a)
        for c in range(n):
            assert d(a, b) <= d(a, c) + d(c, b)


@st.composite
def histograms(draw, count: int):
    bins = 2 * draw(st.integers(1, 5)) + 1
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    hs = rng.dirichlet(np.ones(bins) * draw(st.sampled_from([0.1, 1.0, 10.0])), size=count)
    return torch.tensor(hs)


@SETTINGS
@given(histograms(2))
def test_displacement_pmf_is_the_cross_correlation(hs):
    h_k, h_l = hs
    p = h_k.shape[0]
    pmf = displacement_pmf(h_k, h_l)
    assert (pmf >= 0).all() and abs(pmf.sum().item() - 1.0) < 1e-12
    for d in range(-(p - 1), p):
        brute = sum(h_k[i].item() * h_l[i + d].item() for i in range(p) if 0 <= i + d < p)
        assert abs(pmf[d + p - 1].item() - brute) < 1e-12
    # D_{k→ℓ} = -D_{ℓ→k} in distribution
    torch.testing.assert_close(displacement_pmf(h_l, h_k), pmf.flip(-1), rtol=0, atol=1e-14)


@SETTINGS
@given(histograms(3))
def test_expected_abs_displacement_is_symmetric_and_triangular(hs):
    a, b, c = hs
    dab, dba = expected_abs_displacement(a, b), expected_abs_displacement(b, a)
    assert abs(dab - dba) < 1e-12
    assert dab <= expected_abs_displacement(a, c) + expected_abs_displacement(c, b) + 1e-12
    p = a.shape[0]
    brute = sum(a[i] * b[j] * abs(i - j) for i in range(p) for j in range(p))
    assert abs(dab - brute) < 1e-12
    one_hot = torch.zeros(p, dtype=torch.float64)
    one_hot[p // 2] = 1
    assert expected_abs_displacement(one_hot, one_hot) == 0


def test_stream_kernel_peaks_at_zero_and_is_symmetric():
    support, d_pe = 40, 16
    table = offset_table(support, d_pe).double()
    eye = torch.eye(2 * support + 1, dtype=torch.float64)
    base = support  # offset 0

    def kappa(r: int) -> float:
        return stream_similarity(eye[base], eye[base + r], table).item()

    for r in range(-support, support + 1):
        expected = sum(math.cos(r / 10000 ** (2 * m / d_pe)) for m in range(d_pe // 2))
        assert abs(kappa(r) - expected) < 1e-4
        assert kappa(r) <= kappa(0) + 1e-9
        assert abs(kappa(r) - kappa(-r)) < 1e-5
    assert abs(kappa(0) - d_pe / 2) < 1e-5
    # and it only depends on the difference of the two offsets
    for z1, z2 in ((3, 10), (-5, 2), (0, 7)):
        got = stream_similarity(eye[base + z1], eye[base + z2], table).item()
        assert abs(got - kappa(z2 - z1)) < 1e-4
