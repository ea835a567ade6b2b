"""Abacus embeddings (McLeish et al. 2024, §3) against an independent digit-run count."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import pezoo
from pezoo import AttentionContext
from pezoo.encodings.abacus import Abacus, abacus_indices

DIGITS = tuple(range(10))  # the encoding's default digit ids
PLUS, EQ = 10, 11


def reference_indices(tokens: list[int], digits=DIGITS) -> list[int]:
    """Plain loop: each digit's place (from 1) in its run of consecutive digits, else 0."""
    out, run = [], 0
    for t in tokens:
        run = run + 1 if t in digits else 0
        out.append(run)
    return out


def _ctx(s: int) -> AttentionContext:
    pos = torch.arange(s)[None]
    return AttentionContext(q_pos=pos, k_pos=pos)


def test_the_papers_example_layout():
    # 8 2 9 + 0 3 = 8 0 0 8 , : two operands, then a four-digit chain step
    tokens = [8, 2, 9, PLUS, 0, 3, EQ, 8, 0, 0, 8, 12]
    got = abacus_indices(torch.isin(torch.tensor([tokens]), torch.tensor(DIGITS)))
    assert got.tolist() == [[1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 4, 0]]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 13), min_size=1, max_size=30), min_size=1, max_size=3), st.data())
def test_indices_equal_a_plain_count_whole_or_in_pieces(rows, data):
    s = min(len(r) for r in rows)
    tokens = torch.tensor([r[:s] for r in rows])
    want = [reference_indices(r[:s]) for r in rows]
    is_digit = torch.isin(tokens, torch.tensor(DIGITS))
    assert abacus_indices(is_digit).tolist() == want
    cut = data.draw(st.integers(0, s))  # a run may continue across the two calls
    first = abacus_indices(is_digit[:, :cut])
    run = first[:, -1] if cut else torch.zeros(len(rows), dtype=torch.long)
    second = abacus_indices(is_digit[:, cut:], run)
    assert torch.cat([first, second], dim=1).tolist() == want


def test_eval_adds_the_table_row_of_each_index():
    pe = Abacus(d_model=8, digit_ids=[4, 5, 6, 7, 8, 9, 10, 11, 12, 13]).eval()
    tokens = torch.tensor([[4, 13, 14, 5, 2, 6, 6, 6]])  # digits are ids 4..13 here
    x = torch.randn(1, 8, 8)
    got = pe.embed_tokens(x, tokens, _ctx(8))
    want = x + pe.table[torch.tensor([[1, 2, 0, 1, 0, 1, 2, 3]])]
    torch.testing.assert_close(got, want)


def test_training_shifts_every_digit_by_one_offset_per_batch():
    pe = Abacus(d_model=4, max_k=50, max_index=64).train()
    with torch.no_grad():  # row r = r: the output reads back the index
        pe.table.copy_(torch.arange(64.0)[:, None].expand(64, 4))
    tokens = torch.tensor([[1, 2, PLUS, 3, EQ], [5, PLUS, 6, 7, 8]])
    base = torch.tensor([reference_indices(r) for r in tokens.tolist()])
    offsets = set()
    torch.manual_seed(0)
    for _ in range(40):
        got = pe.embed_tokens(torch.zeros(2, 5, 4), tokens, _ctx(5))[..., 0].long()
        shift = got - base
        digits = base > 0
        assert (shift[~digits] == 0).all()  # non-digits stay at row 0
        k = shift[digits].unique()
        assert k.numel() == 1 and 0 <= int(k) <= 50  # one offset for the batch, within max_k
        offsets.add(int(k))
    assert len(offsets) > 10  # it is drawn, not fixed


def test_a_seed_fixes_the_training_offset():
    pe = Abacus(d_model=4).train()
    tokens = torch.tensor([[1, 2, 3, PLUS, 4]])
    torch.manual_seed(3)
    a = pe.embed_tokens(torch.zeros(1, 5, 4), tokens, _ctx(5))
    torch.manual_seed(3)
    b = pe.embed_tokens(torch.zeros(1, 5, 4), tokens, _ctx(5))
    torch.testing.assert_close(a, b)


def test_decoding_in_pieces_keeps_the_run_and_the_offset():
    pe = Abacus(d_model=4).train()  # training mode: the offset must persist across calls too
    tokens = torch.tensor([[1, 2, 3, PLUS, 4, 5, 6, 7, EQ, 9]])
    x = torch.randn(1, 10, 4)
    torch.manual_seed(1)
    full = pe.embed_tokens(x, tokens, _ctx(10))
    torch.manual_seed(1)
    ctx = _ctx(10)
    pieces = [pe.embed_tokens(x[:, :6], tokens[:, :6], ctx)]
    pieces += [pe.embed_tokens(x[:, t : t + 1], tokens[:, t : t + 1], ctx) for t in range(6, 10)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full)


def test_an_index_past_the_table_is_an_error_not_a_clamp():
    pe = Abacus(d_model=4, max_k=2, max_index=8).eval()
    x = torch.zeros(1, 9, 4)
    message = r"rows for indices 0\.\.7 but a digit got index 9 \(a number of 9 digits.*larger max_index"
    with pytest.raises(ValueError, match=message):
        pe.embed_tokens(x, torch.ones(1, 9, dtype=torch.long), _ctx(9))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"digit_ids": [1, 1]}, "distinct"),
        ({"digit_ids": []}, "distinct"),
        ({"max_k": -1}, "max_k"),
        ({"max_k": 10, "max_index": 11}, "max_index"),
    ],
)
def test_bad_options_are_clear_errors(options, message):
    with pytest.raises(ValueError, match=message):
        Abacus(d_model=4, **options)


def test_it_reads_no_positions_and_cannot_be_randomized():
    assert pezoo.get("abacus").uses_positions is False
    with pytest.raises((ValueError, TypeError, KeyError), match="abacus"):
        pezoo.create("randomized:abacus", d_model=8)


def test_meta_build_then_reset_restores_the_digit_ids():
    with torch.device("meta"):
        pe = Abacus(d_model=4, digit_ids=[4, 5, 6, 7, 8, 9, 10, 11, 12, 13])
    pe = pe.to_empty(device="cpu")
    pe.reset_parameters()
    assert pe.digits.tolist() == list(range(4, 14))


@pytest.mark.parametrize("name", ["abacus", "position_coupling"])
def test_a_context_seeded_with_planned_draws_is_the_pass_that_draws(name):
    """The CUDA-graph recipe of docs/use-in-your-model.md: the offset drawn outside the pass
    (``plan_draws``, from the same generator state) and handed in through the context's state
    gives the embedding the pass gives when it draws itself, and the pass then draws nothing;
    in eval mode nothing is planned (the offset is 0)."""
    pe = pezoo.create(name, d_model=8).train()
    tokens = torch.tensor([[1, 2, 10, 3, 4, 5, 11, 6]])
    x, pos = torch.randn(1, 8, 8), torch.arange(8)[None]
    drawing = torch.Generator().manual_seed(4)
    with pe.drawing_from(drawing):
        itself = pe.embed_tokens(x, tokens, AttentionContext(q_pos=pos, k_pos=pos))
    planning = torch.Generator().manual_seed(4)
    with pe.drawing_from(planning):
        draws = pe.plan_draws("cpu")
        state = planning.get_state()
        handed = pe.embed_tokens(x, tokens, AttentionContext(q_pos=pos, k_pos=pos, state=dict(draws)))
    assert torch.equal(handed, itself) and len(draws) == 1
    assert torch.equal(planning.get_state(), state) and torch.equal(state, drawing.get_state())
    assert pe.eval().plan_draws("cpu") == {}
