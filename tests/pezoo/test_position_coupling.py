"""Position coupling (Cho et al. 2024, §3): the coupled ids against a plain loop over the
tokens written here, the offset, decoding in pieces, gradients and the options."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import pezoo
from pezoo import AttentionContext, CoupledSegment, Coupling
from pezoo.encodings.position_coupling import PositionCoupling, coupled_significance

PLUS, EQ, ARROW, DOT, COMMA, BOS, EOS = 10, 11, 12, 13, 14, 15, 16
ADDITION = Coupling(
    members=(*range(10), COMMA),
    segments=(CoupledSegment(), CoupledSegment(), CoupledSegment(width=5)),
    fixed=(BOS, EOS),
)


def reference_significance(tokens: list[int], coupling: Coupling) -> list[int]:
    """A plain loop: walk the tokens, keeping the open segment, the members seen in it and
    every segment's member count; -1 for a fixed token."""

    def spec(g: int) -> tuple[int, int | None]:
        return (coupling.segments[g].width, coupling.segments[g].down_from) if g < len(coupling.segments) else (1, None)

    def steps(r: int) -> int:
        width = spec(r)[0]
        return (members_of.get(r, 0) + width - 1) // width

    out: list[int] = []
    segment, seen, members_of = 0, 0, dict[int, int]()
    for token in tokens:
        if token in coupling.fixed:
            out.append(-1)
        elif token in coupling.members:
            width, ref = spec(segment)
            out.append(seen // width + 1 if ref is None else max(0, steps(ref) - seen // width))
            seen += 1
            members_of[segment] = members_of.get(segment, 0) + 1
        else:  # a separator: just below the first member of the segment it opens
            ref = spec(segment + 1)[1]
            out.append(0 if ref is None else steps(ref) + 1)
            segment, seen = segment + 1, 0
    return out


def _rule(coupling: Coupling) -> tuple[torch.Tensor, ...]:
    pe = PositionCoupling(d_model=4, coupling=coupling)
    return pe.members, pe.fixed, pe.widths, pe.down_from


def _ctx(s: int) -> AttentionContext:
    pos = torch.arange(s)[None]
    return AttentionContext(q_pos=pos, k_pos=pos)


def test_an_addition_with_its_chain_couples_digits_of_equal_significance():
    # <bos> 8 2 9 + 0 3 = 8 0 0 8 , 2 3 0 5 , 9 0 0 9 → 8 5 9 . <eos>   (928 + 30 = 958, LSD first)
    tokens = [BOS, 8, 2, 9, PLUS, 0, 3, EQ, 8, 0, 0, 8, COMMA, 2, 3, 0, 5, COMMA, 9, 0, 0, 9, ARROW, 8, 5, 9, DOT, EOS]
    want = [-1, 1, 2, 3, 0, 1, 2, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 0, 1, 2, 3, 0, -1]
    got, _ = coupled_significance(torch.tensor([tokens]), *_rule(ADDITION))
    assert got.tolist() == [want]
    assert reference_significance(tokens, ADDITION) == want


def test_a_reversed_copy_couples_each_digit_with_its_mirror():
    reverse = Coupling(members=tuple(range(10)), segments=(CoupledSegment(), CoupledSegment(down_from=0)))
    tokens = [3, 1, 4, 1, 5, EQ, 5, 1, 4, 1, 3, DOT]
    got, _ = coupled_significance(torch.tensor([tokens]), *_rule(reverse))
    # the answer's j-th digit shares x_{6-j}'s id; "=" sits just above x_5, where the count down starts
    assert got.tolist() == [[1, 2, 3, 4, 5, 6, 5, 4, 3, 2, 1, 0]]


segment_specs = st.lists(
    st.tuples(st.integers(1, 4), st.integers(0, 3)).map(lambda t: (t[0], t[1])), min_size=0, max_size=4
)


@st.composite
def couplings(draw) -> Coupling:
    members = draw(st.sets(st.integers(0, 9), min_size=1, max_size=8))
    fixed = draw(st.sets(st.integers(10, 12), max_size=2))
    segments = []
    for g, (width, ref) in enumerate(draw(segment_specs)):
        down = draw(st.booleans()) and g > 0
        segments.append(CoupledSegment(width, min(ref, g - 1) if down else None))
    return Coupling(tuple(sorted(members)), tuple(segments), tuple(sorted(fixed)))


@settings(max_examples=80, deadline=None)
@given(couplings(), st.lists(st.lists(st.integers(0, 14), min_size=1, max_size=30), min_size=1, max_size=3), st.data())
def test_significance_equals_a_plain_loop_whole_or_in_pieces(coupling, rows, data):
    s = min(len(r) for r in rows)
    tokens = torch.tensor([r[:s] for r in rows])
    want = [reference_significance(r[:s], coupling) for r in rows]
    rule = _rule(coupling)
    whole, _ = coupled_significance(tokens, *rule)
    assert whole.tolist() == want
    cuts = sorted(data.draw(st.lists(st.integers(0, s), max_size=3)))
    pieces, state = [], None
    for a, b in zip([0, *cuts], [*cuts, s], strict=True):  # a segment or a count may continue across calls
        piece, state = coupled_significance(tokens[:, a:b], *rule, state)
        pieces.append(piece)
    assert torch.cat(pieces, dim=1).tolist() == want


def test_eval_adds_the_table_row_of_each_id():
    pe = PositionCoupling(d_model=8, coupling=ADDITION).eval()
    tokens = torch.tensor([[BOS, 4, 7, PLUS, 2, EQ, 6, 2, 0, 6, ARROW, 6, DOT, EOS]])
    x = torch.randn(1, 14, 8)
    got = pe.embed_tokens(x, tokens, _ctx(14))
    ids = torch.tensor([[0, 2, 3, 1, 2, 1, 2, 2, 2, 2, 1, 2, 1, 0]])  # 1 + σ, fixed tokens at 0
    torch.testing.assert_close(got, x + pe.table[ids])


def test_training_shifts_every_coupled_id_by_one_offset_per_batch():
    pe = PositionCoupling(d_model=4, coupling=ADDITION, max_k=50, max_index=128).train()
    with torch.no_grad():  # row r = r: the output reads back the id
        pe.table.copy_(torch.arange(128.0)[:, None].expand(128, 4))
    tokens = torch.tensor([[BOS, 1, 2, PLUS, 3, EQ, 4], [BOS, 5, PLUS, 6, 7, EQ, EOS]])
    base = torch.tensor(
        [[1 + v if v >= 0 else 0 for v in reference_significance(r, ADDITION)] for r in tokens.tolist()]
    )
    fixed = torch.isin(tokens, torch.tensor([BOS, EOS]))
    offsets = set()
    torch.manual_seed(0)
    for _ in range(40):
        got = pe.embed_tokens(torch.zeros(2, 7, 4), tokens, _ctx(7))[..., 0].long()
        shift = got - base
        assert (got[fixed] == 0).all()  # <bos>, <eos> stay at row 0
        k = shift[~fixed].unique()
        assert k.numel() == 1 and 0 <= int(k) <= 50  # one offset for the batch, within max_k
        offsets.add(int(k))
    assert len(offsets) > 10  # it is drawn, not fixed


def test_a_seed_or_a_generator_fixes_the_training_offset():
    pe = PositionCoupling(d_model=4).train()
    tokens = torch.tensor([[1, 2, 3, PLUS, 4]])
    torch.manual_seed(3)
    a = pe.embed_tokens(torch.zeros(1, 5, 4), tokens, _ctx(5))
    torch.manual_seed(3)
    b = pe.embed_tokens(torch.zeros(1, 5, 4), tokens, _ctx(5))
    torch.testing.assert_close(a, b)
    outs = []
    for _ in range(2):
        with pe.drawing_from(torch.Generator().manual_seed(9)):
            outs.append(pe.embed_tokens(torch.zeros(1, 5, 4), tokens, _ctx(5)))
    torch.testing.assert_close(*outs)


@pytest.mark.parametrize("training", [False, True])
def test_decoding_in_pieces_equals_the_full_pass(training):
    pe = PositionCoupling(d_model=4, coupling=ADDITION).train(training)  # training: the offset persists too
    tokens = torch.tensor([[BOS, 1, 2, 3, PLUS, 4, 5, EQ, 1, 4, 0, 5, COMMA, 2, 5, 0, 7, ARROW, 5, 7, DOT, EOS]])
    s = tokens.shape[1]
    x = torch.randn(1, s, 4)
    torch.manual_seed(1)
    full = pe.embed_tokens(x, tokens, _ctx(s))
    torch.manual_seed(1)
    ctx = _ctx(s)
    pieces = [pe.embed_tokens(x[:, :8], tokens[:, :8], ctx)]  # the prompt, then one token at a time
    pieces += [pe.embed_tokens(x[:, t : t + 1], tokens[:, t : t + 1], ctx) for t in range(8, s)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full)


def test_the_gradient_reaches_exactly_the_rows_of_the_ids_used():
    pe = PositionCoupling(d_model=3, coupling=ADDITION, max_k=0, max_index=16).eval()
    tokens = torch.tensor([[BOS, 4, 7, PLUS, 2, EQ, 6, 2, 0, 6, ARROW, 6, DOT, EOS]])
    weights = torch.randn(1, 14, 3)
    (pe.embed_tokens(torch.zeros(1, 14, 3), tokens, _ctx(14)) * weights).sum().backward()
    ids = [0, 2, 3, 1, 2, 1, 2, 2, 2, 2, 1, 2, 1, 0]
    want = torch.zeros(16, 3)
    for t, i in enumerate(ids):
        want[i] += weights[0, t]
    torch.testing.assert_close(pe.table.grad, want)


def test_an_id_past_the_table_is_an_error_not_a_clamp():
    pe = PositionCoupling(d_model=4, max_k=2, max_index=8).eval()
    with pytest.raises(ValueError, match=r"rows for ids 0\.\.7 but a token got id 8.*larger max_index"):
        pe.embed_tokens(torch.zeros(1, 7, 4), torch.ones(1, 7, dtype=torch.long), _ctx(7))  # σ = 7, id 8


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_k": -1}, "max_k"),
        ({"max_k": 10, "max_index": 12}, "max_index"),
        ({"coupling": {"members": [1, 1]}}, "distinct"),
        ({"coupling": {"members": []}}, "at least one member"),
        ({"coupling": {"segments": []}}, "needs its members"),
        ({"coupling": {"members": [1], "fixed": [1]}}, "both members and fixed"),
        ({"coupling": {"members": [1], "segmnets": []}}, r"no key\(s\) \['segmnets'\]; valid keys"),
        ({"coupling": {"members": [1], "segments": [{"width": 0}]}}, "width"),
        ({"coupling": {"members": [1], "segments": [{"down_from": 0}]}}, "earlier segment"),
        ({"coupling": {"members": [1], "segments": [{}, {"down_from": 1}]}}, "earlier segment"),
        ({"coupling": [1, 2]}, "Coupling or a mapping"),
    ],
)
def test_bad_options_are_clear_errors(options, message):
    with pytest.raises(ValueError, match=message):
        PositionCoupling(d_model=4, **options)


def test_the_option_round_trips_as_plain_data():
    data = ADDITION.as_option()
    assert data == {
        "members": [*range(10), COMMA],
        "segments": [{"width": 1}, {"width": 1}, {"width": 5}],
        "fixed": [BOS, EOS],
    }
    assert Coupling.from_option(data) == ADDITION
    assert pezoo.resolved_options("position_coupling", coupling=data)["coupling"] == data


def test_it_reads_no_positions_and_cannot_be_randomized():
    assert pezoo.get("position_coupling").uses_positions is False
    with pytest.raises((ValueError, TypeError, KeyError), match="position_coupling"):
        pezoo.create("randomized:position_coupling", d_model=8)


def test_meta_build_then_reset_restores_the_coupling():
    with torch.device("meta"):
        pe = PositionCoupling(d_model=4, coupling=ADDITION)
    pe = pe.to_empty(device="cpu")
    pe.reset_parameters()
    assert pe.members.tolist() == [*range(10), COMMA] and pe.widths.tolist() == [1, 1, 5, 1]
    assert pe.down_from.tolist() == [-1, -1, -1, -1] and pe.fixed.tolist() == [BOS, EOS]
