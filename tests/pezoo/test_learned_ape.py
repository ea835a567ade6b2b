"""learned_ape: x + E[pos] with a fixed maximum position (Gehring et al. 2017)."""

from __future__ import annotations

import pytest
import torch

import pezoo
from pezoo.encodings.learned_ape import LearnedAPE
from pezoo.encodings.randomized import DEFAULT_MAX_LENGTH


def test_embed_adds_the_table_row_of_each_position():
    pe = pezoo.create("learned_ape", d_model=6, max_position=10)
    x = torch.randn(2, 4, 6)
    pos = torch.tensor([[0, 3, 7, 9]])
    table = pe.table.detach()
    # independent formula: one-hot(pos) @ E, added to x
    onehot = torch.nn.functional.one_hot(pos, 10).to(torch.float32)  # (1, s, P)
    want = x + onehot @ table
    torch.testing.assert_close(pe.embed(x, pos), want)


def test_per_example_positions():
    pe = pezoo.create("learned_ape", d_model=4, max_position=8)
    x = torch.zeros(2, 3, 4)
    pos = torch.tensor([[0, 1, 2], [5, 6, 7]])
    out = pe.embed(x, pos)
    torch.testing.assert_close(out[1, 0], pe.table[5].detach())
    torch.testing.assert_close(out[0, 2], pe.table[2].detach())


def test_positions_past_the_maximum_are_a_clear_error():
    pe = pezoo.create("learned_ape", d_model=4, max_position=8)
    pe.positions(1, 8)  # exactly max_position tokens is fine
    with pytest.raises(ValueError, match="supports positions < 8"):
        pe.positions(1, 9)
    with pytest.raises(ValueError, match=r"positions 0\.\.7 .* \[0, 8\].*max_position"):
        pe.embed(torch.zeros(1, 2, 4), torch.tensor([[0, 8]]))
    with pytest.raises(ValueError, match="max_position"):
        pe.embed(torch.zeros(1, 1, 4), torch.tensor([[-1]]))


def test_default_maximum_covers_randomized_positions():
    assert LearnedAPE(d_model=4).max_position == DEFAULT_MAX_LENGTH
    pe = pezoo.create("randomized:learned_ape", d_model=4)
    pe.train()
    pos = pe.positions(1, 50)
    assert int(pos.max()) < pe.inner.max_position
    pe.embed(torch.zeros(1, 50, 4), pos)


def test_randomized_needs_max_position_at_least_l():
    with pytest.raises(ValueError, match=r"max_position >= 100"):
        pezoo.create("randomized:learned_ape", d_model=4, max_position=64, max_length=100)
    pe = pezoo.create("randomized:learned_ape", d_model=4, max_position=100, max_length=100)
    assert pe.max_position == 100


def test_only_the_table_is_state_and_rows_past_training_get_no_gradient():
    pe = pezoo.create("learned_ape", d_model=4, max_position=16)
    assert list(pe.state_dict()) == ["table"]
    x = torch.randn(2, 5, 4)
    pe.embed(x, torch.arange(5)[None]).pow(2).sum().backward()
    grad = pe.table.grad
    assert grad[:5].abs().sum() > 0
    assert torch.equal(grad[5:], torch.zeros_like(grad[5:]))  # the extrapolation failure mode


def test_dtype_follows_the_input():
    pe = pezoo.create("learned_ape", d_model=4, max_position=8)
    out = pe.embed(torch.zeros(1, 3, 4, dtype=torch.bfloat16), torch.arange(3)[None])
    assert out.dtype == torch.bfloat16
