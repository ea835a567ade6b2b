"""Combinations (``create("abacus+fire")``): each hook of every part, checked against the
parts' own formulas written out here, and every combination the interface cannot define
refused before anything is built."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

import pezoo
from pezoo.combined import Combined
from pezoo.context import AttentionContext
from pezoo.testing import check_encoding

DIMS = pezoo.ModelDims(d_model=32, n_heads=4, n_layers=2)


def ctx_for(s: int) -> AttentionContext:
    pos = torch.arange(s)[None]
    return AttentionContext(q_pos=pos, k_pos=pos)


@pytest.mark.parametrize("name", ["abacus+fire", "abacus+rope", "learned_ape+alibi", "randomized:abacus+fire"])
def test_combinations_pass_the_kit(name):
    check_encoding(lambda: pezoo.create(name, dims=DIMS), DIMS)


def test_biases_add_as_written_out():
    """t5+alibi: softmax(q k^T / sqrt(e) + T5's bucket bias + ALiBi's -m_h |i - j|)."""
    torch.manual_seed(0)
    pe = pezoo.create("t5+alibi", dims=DIMS)
    b, h, s, e = 2, 4, 7, 8
    q, k, v = torch.randn(3, b, h, s, e).unbind(0)
    ctx = ctx_for(s)
    out, _ = pezoo.attend(q, k, v, ctx, pe.bias(0, q, k, ctx))
    t5 = pe.parts[0].bias(0, q, k, ctx)[0].materialize(ctx, h, torch.float32)  # T5 alone, tested in test_t5
    i, j = torch.arange(s)[:, None], torch.arange(s)[None, :]
    slopes = torch.tensor([2.0 ** (-8.0 * (m + 1) / h) for m in range(h)])  # Press et al. 2022, §3
    alibi = -slopes[:, None, None] * (i - j).abs()
    scores = q @ k.transpose(-1, -2) / math.sqrt(e) + t5 + alibi
    scores = scores.masked_fill(j > i, float("-inf"))
    torch.testing.assert_close(out, F.softmax(scores, -1) @ v, rtol=1e-5, atol=1e-6)


def test_abacus_plus_rope_embeds_digits_and_rotates_qk():
    torch.manual_seed(0)
    pe = pezoo.create("abacus+rope", dims=DIMS).eval()
    abacus, rope = pe.parts
    tokens = torch.tensor([[1, 2, 3, 12, 4, 5]])  # digits 1 2 3, a non-digit, digits 4 5
    x = torch.randn(1, 6, 32)
    got = pe.embed_tokens(x, tokens, ctx_for(6))
    index = torch.tensor([1, 2, 3, 0, 1, 2])  # place within each number (McLeish et al. §3), eval: k = 0
    torch.testing.assert_close(got, x + abacus.table[index][None])
    q, k = torch.randn(2, 1, 4, 6, 8).unbind(0)
    rq, rk = pe.qk(0, q, k, ctx_for(6))
    theta = 10000.0 ** (-torch.arange(0, 8, 2) / 8)  # Su et al., eq. 15
    ang = torch.arange(6)[:, None] * theta[None]  # (s, e/2)
    cos, sin = ang.cos(), ang.sin()

    def rotate(t):
        a, b = t[..., 0::2], t[..., 1::2]  # pairs (2i, 2i+1)
        return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)

    assert rope.layout == "interleaved"  # the default, which rotate() writes out
    torch.testing.assert_close(rq, rotate(q), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rk, rotate(k), rtol=1e-5, atol=1e-6)


def test_the_parts_state_round_trips_and_keeps_its_keys():
    torch.manual_seed(0)
    pe = pezoo.create("abacus+fire", dims=DIMS)
    keys = set(pe.state_dict())
    assert {"parts.0.table", "parts.1.mlp.0.0.weight"} <= keys
    fresh = pezoo.create("abacus+fire", dims=DIMS)
    fresh.load_state_dict(pe.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(pe.state_dict().values(), fresh.state_dict().values(), strict=True))
    assert pe.name == "abacus+fire" and pe.uses_positions  # FIRE reads positions


def test_regularisation_and_optimizer_groups_are_the_parts():
    prism = pezoo.create("prism", dims=DIMS, regulariser="frobenius")
    pe = pezoo.combine(prism, pezoo.create("alibi", dims=DIMS))
    assert torch.equal(pe.regularisation(), prism.regularisation())
    assert [g["params"] for g in pe.optimizer_groups()] == [g["params"] for g in prism.optimizer_groups()]
    assert float(pezoo.create("alibi+t5", dims=DIMS).regularisation()) == 0.0


def test_options_go_to_the_part_that_takes_them():
    pe = pezoo.create("abacus+fire", dims=DIMS, max_k=7, mlp_width=16)
    assert pe.parts[0].max_k == 7 and pe.parts[1].mlp[0][0].out_features == 16
    assert pe.max_position is None
    assert pezoo.create("learned_ape+alibi", dims=DIMS, max_position=64).max_position == 64


@pytest.mark.parametrize(
    ("name", "config", "error", "message"),
    [
        ("rope+xpos", {}, ValueError, "rope and xpos both transform queries and keys"),
        ("alibi+alibi", {}, ValueError, "alibi appears twice"),
        ("alibi+alibi", {"n_heads": 4}, ValueError, "alibi appears twice"),
        ("abacus+randomized:fire", {}, ValueError, r"in front of the whole combination \(randomized:abacus\+fire\)"),
        ("abacus+", {}, ValueError, "joined by '\\+'"),
        ("abacus+fyre", {}, KeyError, "fyre"),
        ("abacus+fire", {"bogus": 1}, TypeError, "unknown option bogus; valid options: abacus: .*; fire: "),
        ("learned_ape+abacus", {"init_std": 0.1}, ValueError, "init_std .* is taken by learned_ape and abacus"),
    ],
)
def test_undefined_combinations_are_refused(name, config, error, message):
    with pytest.raises(error, match=message):
        pezoo.create(name, dims=DIMS, **config)


def test_combine_refuses_what_create_refuses():
    with pytest.raises(ValueError, match=r"chooses its own positions.*randomized:rope\+alibi"):
        pezoo.combine(pezoo.create("randomized:rope", head_dim=8), pezoo.create("alibi", n_heads=4))
    with pytest.raises(ValueError, match="two or more"):
        Combined([pezoo.create("nope")])
    inner = pezoo.create("t5+alibi", dims=DIMS)
    with pytest.raises(ValueError, match="already a combination"):
        pezoo.combine(inner, pezoo.create("nope"))


def test_names_are_known_without_being_listed():
    assert pezoo.is_known("abacus+fire") and pezoo.is_known("randomized:abacus+fire")
    assert not pezoo.is_known("abacus+fyre") and not pezoo.is_known("bogus:abacus+fire")
    assert "abacus+fire" not in pezoo.available()
    assert pezoo.get("abacus+fire")(dims=DIMS).name == "abacus+fire"


@pytest.mark.parametrize(
    "name",
    [
        "randomized:nope+abacus",  # reads no positions: nothing to randomize
        "randomized+fire",  # a part that chooses its own positions
        "randomized:randomized+fire",
        "rope+xpos",  # two parts transform q and k
        "rope+rope",
    ],
)
def test_is_known_agrees_with_create(name):
    """is_known() answers whether create() builds the name: no yes for a name it refuses."""
    assert not pezoo.is_known(name)
    with pytest.raises(ValueError):
        pezoo.create(name, dims=DIMS)


def test_a_refused_randomized_part_suggests_a_name_that_builds():
    with pytest.raises(ValueError, match=r"randomize the whole combination instead \(randomized:ape\+fire\)"):
        pezoo.create("randomized+fire", dims=DIMS)
    assert pezoo.is_known("randomized:ape+fire")
    pezoo.create("randomized:ape+fire", dims=DIMS)


def _pairs_and_wrapped_pairs() -> list[str]:
    bases = [n for n in pezoo.available() if ":" not in n]
    pairs = [f"{a}+{b}" for a, b in itertools.permutations(bases, 2)]
    return pairs + [f"{w}:{a}+{b}" for w in pezoo.WRAPPERS for a, b in itertools.combinations(bases, 2)]


def test_every_combination_is_known_says_it_builds_builds():
    # before: 55 of them were refused when built: dape:alibi+kerple_log ("also acts through embed,
    # embed_tokens, observe, qk, ..." of a combination that adds two biases), dape+ssmax ("both
    # transform attention scores", where SSMax only passed DAPE's hook on), ssmax+stick_breaking
    refused = []
    for name in _pairs_and_wrapped_pairs():
        if not pezoo.is_known(name):
            continue
        try:
            pezoo.create(name, dims=DIMS)
        except ValueError as exc:
            refused.append(f"{name}: {exc}")
    assert refused == []


def test_a_wrapper_in_a_combination_counts_for_what_it_holds():
    dape, ssmax = pezoo.create("dape", dims=DIMS), pezoo.create("ssmax", dims=DIMS)  # over KERPLE-log, over RoPE
    both = Combined([dape, ssmax])
    assert both.score_transform(0, ctx_for(6)) is not None  # DAPE's MLP; SSMax passes on RoPE's none
    with pytest.raises(ValueError, match="both transform queries and keys"):
        Combined([ssmax, pezoo.create("rope", dims=DIMS)])  # SSMax over RoPE does transform them
    wrapped = pezoo.create("dape:alibi+kerple_log", dims=DIMS)
    q = k = torch.randn(1, 4, 6, 8)
    assert len(wrapped.bias(0, q, k, ctx_for(6))) == 2  # ALiBi's and KERPLE's, DAPE's MLP over their sum


def test_the_models_shape_given_as_keywords_reaches_every_encoding_inside():
    # before: a wrapper kept n_heads for itself (ALiBi.__init__() missing n_heads), and a
    # combination refused it ("option n_heads of 'alibi+kerple_log' is taken by alibi and kerple_log")
    dape = pezoo.create("dape:alibi", n_heads=8, n_layers=4)
    assert (dape.n_heads, dape.inner.n_heads) == (8, 8)
    both = pezoo.create("alibi+kerple_log", n_heads=8, n_layers=2)
    assert [p.n_heads for p in both.parts] == [8, 8]
    ssmax = pezoo.create("ssmax:rope", n_heads=4, n_layers=2, head_dim=16)  # RoPE takes head_dim, not heads
    assert ssmax.inner.head_dim == 16
    with pytest.raises(TypeError, match="unknown option"):
        pezoo.create("rope", n_heads=4)  # a plain encoding stays strict
