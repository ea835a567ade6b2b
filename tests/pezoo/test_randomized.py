"""Randomized PE (Ruoss et al. 2023 §3): sorted distinct random positions from [0, L)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import pezoo
from pezoo import AttentionContext
from pezoo.encodings.randomized import RandomizedPE, sample_sorted_positions


@settings(max_examples=60, deadline=None)
@given(data=st.data(), max_length=st.integers(1, 3000))
def test_positions_are_sorted_distinct_and_in_range(data, max_length):
    n = data.draw(st.integers(1, max_length))
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1)))
    pos = sample_sorted_positions(n, max_length, generator=g)
    assert pos.shape == (n,) and pos.dtype == torch.int64
    assert bool((pos[1:] > pos[:-1]).all())  # strictly increasing => distinct
    assert 0 <= int(pos.min()) and int(pos.max()) < max_length


def test_subsets_are_uniform():
    """The smallest sampled position k has P = C(L-1-k, n-1) / C(L, n) for a uniform subset."""
    big_l, n, draws = 10, 3, 20_000
    g = torch.Generator().manual_seed(0)
    first = torch.stack([sample_sorted_positions(n, big_l, generator=g)[0] for _ in range(draws)])
    counts = torch.bincount(first, minlength=big_l).to(torch.float64)
    want = torch.tensor([math.comb(big_l - 1 - k, n - 1) / math.comb(big_l, n) for k in range(big_l)])
    sd = (want * (1 - want) / draws).sqrt()
    assert bool(((counts / draws - want).abs() <= 5 * sd + 1e-9).all()), (counts / draws, want)


def test_resampled_per_batch_and_shared_by_the_batch():
    pe = pezoo.create("randomized:rope", head_dim=8)
    pe.train()
    a, b = pe.positions(4, 32), pe.positions(4, 32)
    assert a.shape == (1, 32)  # once per batch, not per sequence (Ruoss et al. §3)
    assert not torch.equal(a, b)
    assert int(a.max()) < 2048


def test_eval_draws_random_positions_by_default_as_the_paper():
    """Ruoss et al. §3: "At test time [...] we use the same procedure but for all token positions"."""
    for pe in (pezoo.create("randomized:alibi", n_heads=4), pezoo.create("randomized", d_model=8)):
        pe.eval()
        assert pe.random_at_eval
        pos = pe.positions(2, 9)
        assert pos.shape == (1, 9) and bool((pos[0, 1:] > pos[0, :-1]).all()) and int(pos.max()) < 2048
        assert not torch.equal(pos, torch.arange(9)[None])  # P(equal) = 1 / C(2048, 9)
        assert not torch.equal(pe.positions(2, 9), pos)


def test_plain_eval_positions_stay_a_named_option():
    for pe in (
        pezoo.create("randomized:alibi", n_heads=4, randomize_eval=False),
        pezoo.create("randomized", d_model=8, randomize_eval=False),
    ):
        pe.eval()
        assert not pe.random_at_eval
        assert torch.equal(pe.positions(2, 9), torch.arange(9)[None])
        pe.train()  # training is always random
        assert not torch.equal(pe.positions(2, 9), torch.arange(9)[None])


def test_seeded_draws_are_reproducible_and_leave_the_global_rng_alone():
    pe = pezoo.create("randomized:rope", head_dim=8, max_length=64)
    pe.eval()
    torch.manual_seed(123)
    before = torch.get_rng_state()
    with pe.seeded(7):
        a1, a2 = pe.positions(1, 10), pe.positions(1, 12)
    with pe.seeded(7):
        b1, b2 = pe.positions(1, 10), pe.positions(1, 12)
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.equal(a1, b1) and torch.equal(a2, b2)  # the same stream, draw by draw
    # independent formula: the first `n` of a seeded permutation of range(L), sorted
    want = torch.randperm(64, generator=torch.Generator().manual_seed(7))[:10].sort().values[None]
    assert torch.equal(a1, want)
    with pe.seeded(8):
        assert not torch.equal(pe.positions(1, 10), a1)


def test_length_beyond_l_is_a_clear_error():
    pe = pezoo.create("randomized:ape", d_model=8, max_length=16)
    for mode in (True, False):
        pe.train(mode)
        pe.positions(1, 16)
        with pytest.raises(ValueError, match=r"\[0, 16\).*17 tokens.*max_length"):
            pe.positions(1, 17)
    with pytest.raises(ValueError, match="at most 5 tokens"):
        sample_sorted_positions(6, 5)


@pytest.mark.parametrize("name", ["randomized:rope", "randomized", "randomized:abacus+fire"])
def test_a_negative_length_is_a_clear_error(name):
    """randperm(L)[:-1] gave L - 1 positions for a length of -1."""
    pe = pezoo.create(name, dims=pezoo.ModelDims(d_model=16, n_heads=2, n_layers=1))
    for mode, randomize_eval in ((True, True), (False, True), (False, False)):
        pe.train(mode)
        pe.randomize_eval = randomize_eval
        for length in (-1, -5):
            with pytest.raises(ValueError, match=f"length must be >= 0, got {length}"):
                pe.positions(2, length)
        assert pe.positions(2, 0).shape == (1, 0)
    with pytest.raises(ValueError, match="length must be >= 0, got -1"):
        sample_sorted_positions(-1, 5)


def test_bare_randomized_is_randomized_sinusoidal_ape():
    d = 6
    bare, wrapped = pezoo.create("randomized", d_model=d), pezoo.create("randomized:ape", d_model=d)
    assert bare.name == "randomized" and wrapped.name == "randomized:ape"
    pos = torch.tensor([[3, 17, 400, 2047]])
    x = torch.zeros(1, 4, d)
    # independent sin/cos formula at the sampled positions
    i = torch.arange(d // 2, dtype=torch.float64)
    angle = pos[0, :, None].to(torch.float64) / 10000 ** (2 * i / d)
    want = torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(-2).to(torch.float32)[None]
    torch.testing.assert_close(bare.embed(x, pos), want)
    torch.testing.assert_close(wrapped.embed(x, pos), want)


def test_randomized_alibi_biases_use_distances_between_sampled_positions():
    pe = pezoo.create("randomized:alibi", n_heads=2)
    pe.train()
    pos = pe.positions(1, 5)
    ctx = AttentionContext(q_pos=pos, k_pos=pos)
    (bias,) = pe.bias(0, torch.zeros(1, 2, 5, 4), torch.zeros(1, 2, 5, 4), ctx)
    dense = bias.materialize(ctx, 2, torch.float32)
    slopes = [2.0**-4, 2.0**-8]  # ALiBi, 2 heads: 2^(-8h/2)
    p = pos[0].tolist()
    for h in range(2):
        for i in range(5):
            for j in range(5):
                assert dense[0, h, i, j].item() == pytest.approx(-slopes[h] * abs(p[i] - p[j]))


def test_hooks_delegate_to_the_wrapped_encoding():
    torch.manual_seed(0)
    rope = pezoo.create("rope", head_dim=8)
    wrapped = RandomizedPE(pezoo.create("rope", head_dim=8), max_length=64)
    pos = torch.tensor([[1, 5, 6, 30]])
    ctx1, ctx2 = AttentionContext(q_pos=pos, k_pos=pos), AttentionContext(q_pos=pos, k_pos=pos)
    q, k = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4, 8)
    for a, b in zip(rope.qk(0, q, k, ctx1), wrapped.qk(0, q, k, ctx2), strict=True):
        torch.testing.assert_close(a, b)


def test_what_can_be_wrapped():
    names = pezoo.available()
    for base in ("ape", "learned_ape", "rope", "alibi", "learned_prf"):
        assert f"randomized:{base}" in names
    for base in ("nope", "randomized", "hard_alibi"):
        assert f"randomized:{base}" not in names
    with pytest.raises(ValueError, match="does not read positions"):
        pezoo.create("randomized:nope")
    with pytest.raises(ValueError, match="already randomized"):
        pezoo.create("randomized:randomized", d_model=8)
    with pytest.raises(ValueError, match="not wrappable"):
        pezoo.create("randomized:hard_alibi", n_heads=4)


def test_options_route_to_wrapper_and_inner():
    pe = pezoo.create("randomized:rope", dims=pezoo.ModelDims(32, 4, 2), max_length=100, base=500.0)
    assert pe.max_length == 100 and pe.inner.base == 500.0 and pe.inner.head_dim == 8
    with pytest.raises(TypeError, match="unknown option"):
        pezoo.create("randomized:rope", head_dim=8, max_lenght=100)


def test_state_dict_is_the_inner_state():
    pe = pezoo.create("randomized:learned_ape", d_model=4)
    assert list(pe.state_dict()) == ["inner.table"]


# -- a batch of right-padded rows of different lengths (padded_positions) ----------------


def test_a_short_padded_row_gets_a_uniform_subset_of_its_own_length():
    """Every row's real positions are a uniform sorted subset of [0, L) of the row's length,
    as each sequence's are in the paper: each of the C(6, 2) = 15 pairs a 2-token row can
    get is about equally frequent, (4, 5) included. Taking the first 2 of the 4-token
    row's draw instead (``draw="per_batch"``) never gives (4, 5)."""
    pe = pezoo.create("randomized:rope", head_dim=8, max_length=6).train()
    lengths, draws = torch.tensor([2, 4, 2]), 6000
    counts: dict[tuple[int, ...], int] = {}
    with pe.seeded(0):
        for _ in range(draws):
            pos = pe.padded_positions(lengths, 4)
            assert pos.shape == (3, 4) and torch.equal(pos[0], pos[2])  # one draw per length, shared
            assert bool((pos[1, 1:] > pos[1, :-1]).all()) and bool(pos[0, 1] > pos[0, 0])
            key = tuple(pos[0, :2].tolist())
            counts[key] = counts.get(key, 0) + 1
    assert len(counts) == math.comb(6, 2)
    want, sd = draws / 15, math.sqrt(draws * (1 / 15) * (14 / 15))
    assert all(abs(c - want) <= 5 * sd for c in counts.values()), counts
    shared = pezoo.create("randomized:rope", head_dim=8, max_length=6, draw="per_batch").train()
    with shared.seeded(0):
        pairs = {tuple(shared.padded_positions(lengths, 4)[0, :2].tolist()) for _ in range(2000)}
    assert (4, 5) not in pairs


def test_a_short_rows_last_position_spreads_over_the_whole_range():
    """L = 2048, a 2-token row beside a 40-token one: a uniform 2-subset's larger element
    averages 2·2049/3 - 1 ≈ 1365; the first 2 of a 40-subset average about 99."""
    pe = pezoo.create("randomized", d_model=16).train()
    lengths = torch.tensor([40, 2])
    with pe.seeded(1):
        last = torch.tensor([float(pe.padded_positions(lengths, 40)[1, 1]) for _ in range(1000)])
    want = 2 * 2049 / 3 - 1
    assert abs(float(last.mean()) - want) < 0.05 * want, float(last.mean())


def test_rows_of_the_full_width_are_one_plain_draw():
    """No padding: the paper's one draw per batch, from the same random stream as positions()."""
    pe = pezoo.create("randomized:rope", head_dim=8).train()
    torch.manual_seed(3)
    padded = pe.padded_positions(torch.tensor([7, 7, 7]), 7)
    torch.manual_seed(3)
    assert torch.equal(padded, pe.positions(3, 7))
    assert padded.shape == (1, 7)


def test_padding_repeats_the_rows_last_position():
    pe = pezoo.create("randomized:rope", head_dim=8).train()
    pos = pe.padded_positions(torch.tensor([3, 0, 5]), 5)
    assert bool((pos[0, 3:] == pos[0, 2]).all()) and bool((pos[1] == 0).all())
    assert bool((pos[2, 1:] > pos[2, :-1]).all())


def test_per_batch_draw_and_plain_eval_give_positions_for_the_whole_width():
    shared = pezoo.create("randomized:rope", head_dim=8, draw="per_batch").train()
    torch.manual_seed(4)
    got = shared.padded_positions(torch.tensor([2, 6]), 6)
    torch.manual_seed(4)
    assert torch.equal(got, shared.positions(2, 6))
    plain = pezoo.create("randomized:rope", head_dim=8, randomize_eval=False).eval()
    assert torch.equal(plain.padded_positions(torch.tensor([2, 6]), 6), torch.arange(6)[None])


def test_a_plain_encoding_plans_padded_rows_as_one_sequence():
    pe = pezoo.create("rope", head_dim=8)
    assert torch.equal(pe.padded_positions(torch.tensor([1, 4, 3]), 4), torch.arange(4)[None])


@pytest.mark.parametrize(
    ("lengths", "message"),
    [
        (torch.tensor([1.0, 2.0]), "1-D integer tensor"),
        (torch.tensor([[1, 2]]), "1-D integer tensor"),
        (torch.tensor([True, False]), "1-D integer tensor"),
        ([1, 2], "1-D integer tensor"),
        (torch.tensor([1, 5]), r"lie in \[0, 4\]"),
        (torch.tensor([-1, 2]), r"lie in \[0, 4\]"),
    ],
)
def test_bad_row_lengths_are_refused(lengths, message):
    for name in ("rope", "randomized:rope"):
        with pytest.raises(ValueError, match=message):
            pezoo.create(name, head_dim=8).padded_positions(lengths, 4)


def test_an_unknown_draw_is_refused():
    with pytest.raises(ValueError, match="draw must be one of 'per_length', 'per_batch'"):
        pezoo.create("randomized:rope", head_dim=8, draw="per_row")


def test_a_wrapped_encoding_keeps_its_optimizer_groups_and_regularisation():
    """randomized: forwards every hook, the optimiser's parameter groups and the training
    penalty included: an encoding with its own (a plugin's) keeps them when randomized."""
    from pezoo.interface import PositionalEncoding

    class Penalised(PositionalEncoding):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))

        def optimizer_groups(self):
            return [{"params": [self.w], "lr": 0.5}]

        def regularisation(self):
            return (self.w**2).sum()

    inner = Penalised()
    wrapped = RandomizedPE(inner, max_length=64)
    assert wrapped.optimizer_groups() == inner.optimizer_groups()
    assert torch.equal(wrapped.regularisation(), torch.tensor(3.0))
