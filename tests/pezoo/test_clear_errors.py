"""Mistakes a library user makes get a ValueError that names the fix, raised before any
computation, instead of an IndexError or an einsum shape error from deep inside."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

import pezoo
from pezoo.spec import parse_pe

DIMS = pezoo.ModelDims(d_model=32, n_heads=4, n_layers=2)
PER_LAYER = ["kerple_log", "kerple_power", "fire", "cope", "learned_prf", "learned_prf_sh"]


def _ctx() -> pezoo.AttentionContext:
    pos = torch.arange(5)[None]
    return pezoo.AttentionContext(q_pos=pos, k_pos=pos, scale_hint=torch.tensor([5]))


@pytest.mark.parametrize("name", PER_LAYER)
def test_a_layer_the_encoding_was_not_built_for(name):
    q = torch.randn(1, 4, 5, 8)
    with pytest.raises(ValueError, match=r"built for n_layers=2 \(layers 0\.\.1\), got layer 2"):
        pezoo.create(name, dims=DIMS).bias(2, q, q, _ctx())


@pytest.mark.parametrize("name", [*PER_LAYER, "ssmax", "fox", "hybrid"])
@pytest.mark.parametrize("layer", [True, 1.0, torch.tensor(True), torch.tensor(1.0), torch.tensor([1])])
def test_a_layer_that_is_no_integer_index(name, layer):
    """True passed the range check as 1, then indexed a per-layer table as a boolean mask:
    torch's broadcast or einsum errors (ssmax, FIRE, KERPLE, learned PRF); 1.0 was torch's
    IndexError. Integer layers of numpy and 0-dim tensors index as ints."""
    pe = pezoo.create(name, dims=DIMS)
    q = torch.randn(1, 4, 5, 8)
    with pytest.raises(ValueError, match=re.escape("layer must be an integer index (0..1), got")):
        pe.observe(layer, torch.randn(1, 5, 32), _ctx())
        pe.qk(layer, q, q, _ctx())
        pe.bias(layer, q, q, _ctx())
    for fine in (np.int64(1), torch.tensor(1)):
        ctx = _ctx()
        pe.observe(fine, torch.randn(1, 5, 32), ctx)
        pe.bias(fine, *pe.qk(fine, q, q, ctx), ctx)


@pytest.mark.parametrize("name", ["learned_prf", "learned_prf_sh"])
def test_learned_prf_with_another_head_count(name):
    q = torch.randn(1, 8, 5, 8)
    with pytest.raises(ValueError, match="built for n_heads=4, got q with 8 heads"):
        pezoo.create(name, dims=DIMS).bias(0, q, q, _ctx())


def test_model_dims_with_heads_that_do_not_divide_the_width():
    with pytest.raises(ValueError, match="d_model=63 is not divisible by n_heads=4"):
        pezoo.ModelDims(63, 4, 2)
    with pytest.raises(ValueError, match="positive"):
        pezoo.ModelDims(32, 4, 0)


def test_every_encoding_class_is_exported_at_the_top():
    for cls in ["FIRE", "Abacus", "CoPE", "KerpleLog", "KerplePower", "T5Bias", "XPos", "RoPE", "PRISM"]:
        assert getattr(pezoo, cls) is getattr(pezoo.encodings, cls)
        assert cls in pezoo.__all__


@pytest.mark.parametrize("name", ["alibi", "hard_alibi", "kerple_log", "fire", "t5", "learned_prf"])
def test_a_bias_materialised_for_another_head_count(name):
    """Used to broadcast into an error inside the attention that adds it, or an IndexError."""
    pe = pezoo.create(name, dims=DIMS)
    q = torch.randn(1, 4, 5, 8)
    ctx = _ctx()
    (bias,) = pe.bias(0, q, q, ctx)
    with pytest.raises(ValueError, match="materialised for n_heads=8"):
        bias.materialize(ctx, 8, torch.float32)
    assert bias.materialize(ctx, 4, torch.float32).shape[1] in (1, 4)


@pytest.mark.parametrize("name", ["kerple_log", "kerple_power", "randomized:kerple_log", "fire", "t5"])
def test_a_bias_built_for_more_heads_than_it_is_materialised_for(name):
    """KERPLE's per-head parameters were indexed by arange(4) and silently read for the
    first 4 of its 8 heads."""
    pe = pezoo.create(name, dims=pezoo.ModelDims(d_model=64, n_heads=8, n_layers=2))
    q = torch.randn(1, 4, 5, 8)
    ctx = _ctx()
    (bias,) = pe.bias(0, q, q, ctx)
    with pytest.raises(ValueError, match="holds 8 heads but was materialised for n_heads=4"):
        bias.materialize(ctx, 4, torch.float32)
    with pytest.raises(ValueError, match="holds 8 heads but was materialised for n_heads=4"):
        pezoo.attend(q, q, q, ctx, [bias])
    with torch.no_grad(), pytest.raises(ValueError, match="holds 8 heads but was materialised for n_heads=4"):
        pezoo.attend(q, q, q, ctx, [bias], backend="flex")  # refused before any kernel is built


def _per_head_table(q_pos, k_pos, head, table):
    return table[head, (q_pos - k_pos).abs().long().clamp(max=2)]


def test_a_relative_function_of_ones_own_checks_its_head_count_when_it_says_it():
    """A user's fn reading per-head params by the head: with ``n_heads`` given, a call for
    another head count is refused in either direction; the values for the right count
    are fn's own."""
    ctx = _ctx()
    table = torch.randn(4, 3)
    bias = pezoo.RelativeFunctionBias(_per_head_table, (table,), n_heads=4)
    out = bias.materialize(ctx, 4, torch.float32)
    d = (ctx.q_pos[0, :, None] - ctx.k_pos[0, None, :]).abs().clamp(max=2)
    assert torch.equal(out[0, 2], table[2][d])  # head 2 reads row 2
    for built, used in ((8, 4), (2, 4)):
        bias = pezoo.RelativeFunctionBias(_per_head_table, (torch.randn(built, 3),), n_heads=built)
        with pytest.raises(ValueError, match=f"holds {built} heads but was materialised for n_heads={used}"):
            bias.materialize(ctx, used, torch.float32)


def test_learned_prf_without_slots():
    """n_slots=0 built a model whose bias was zero everywhere, silently."""
    with pytest.raises(ValueError, match="n_slots must be >= 1"):
        pezoo.create("learned_prf", dims=DIMS, n_slots=0)


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("rope", {"base": -1.0}, "rope: base must be a finite number > 1, got -1.0"),  # NaN at step 1 before
        ("rope", {"base": 1.0}, "rope: base must be a finite number > 1"),  # every pair at one frequency
        ("rope", {"base": float("inf")}, "rope: base must be a finite number > 1"),
        ("xpos", {"base": -1.0}, "xpos: base must be a finite number > 1"),
        ("ape", {"base": 0.0}, "ape: base must be a finite number > 1"),
        ("learned_ape", {"init_std": -1.0}, "learned_ape: init_std must be a finite number >= 0"),
        ("t5", {"init_std": float("nan")}, "t5: init_std must be a finite number >= 0, got nan"),
        ("fire", {"init_c": float("nan")}, "fire: init_c must be a finite number, got nan"),
        # built without an error before, then NaN (temperature, scale_base) or an empty encoding
        ("learned_prf", {"temperature": 0}, "learned_prf: temperature must be a finite number > 0, got 0"),
        ("learned_prf_sh", {"temperature": -1.0}, "learned_prf_sh: temperature must be a finite number > 0"),
        ("xpos", {"scale_base": float("nan")}, "xpos: scale_base must be a finite number > 0, got nan"),
        ("xpos", {"gamma": float("inf")}, "xpos: gamma must be a finite number > 0, got inf"),
        ("xpos", {"head_dim": 0}, "xpos: head_dim must be an integer >= 1, got 0"),
        ("xpos", {"head_dim": -8}, "xpos: head_dim must be an integer >= 1, got -8"),
        ("rope", {"head_dim": 0}, "rope: head_dim must be an integer >= 1, got 0"),
        ("cope", {"head_dim": 0}, "cope: head_dim must be an integer >= 1, got 0"),
        ("cope", {"n_layers": 0}, "cope: n_layers must be an integer >= 1, got 0"),
        ("t5", {"n_heads": 0}, "t5: n_heads must be an integer >= 1, got 0"),
        ("t5", {"n_heads": 2.5}, "t5: n_heads must be an integer >= 1, got 2.5"),
        ("learned_prf", {"n_heads": 0}, "learned_prf: n_heads must be an integer >= 1, got 0"),  # ZeroDivisionError
        ("learned_prf", {"n_layers": 0}, "learned_prf: n_layers must be an integer >= 1, got 0"),
        ("learned_prf", {"d_model": 0}, "learned_prf: d_model must be an integer >= 1, got 0"),
        ("ape", {"d_model": 0}, "ape: d_model must be an integer >= 1, got 0"),
        ("randomized", {"d_model": 0}, "ape: d_model must be an integer >= 1, got 0"),
        ("learned_ape", {"d_model": -1}, "learned_ape: d_model must be an integer >= 1, got -1"),
        ("abacus", {"d_model": -1}, "abacus: d_model must be an integer >= 1, got -1"),
        ("hard_alibi", {"n_heads": 0}, "hard_alibi: n_heads must be an integer >= 1, got 0"),  # named n_masked
        ("prism", {"n_heads": 0}, "prism: n_heads must be an integer >= 1, got 0"),
    ],
)
def test_numeric_options_out_of_range(name, options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        pezoo.create(name, dims=DIMS, **options)


@pytest.mark.parametrize("name", ["xpos", "learned_prf", "hard_alibi", "t5", "cope", "prism"])
def test_the_smallest_valid_sizes_still_build(name):
    small = {"xpos": {"head_dim": 2}, "learned_prf": {"d_model": 1, "n_heads": 1, "n_layers": 1, "temperature": 1e-3}}
    small |= {"hard_alibi": {"n_heads": 1}, "t5": {"n_heads": 1}, "cope": {"head_dim": 1, "n_layers": 1}}
    small["prism"] = {"d_model": 4, "n_heads": 1, "n_layers": 1}
    pezoo.create(name, **small[name])


@pytest.mark.parametrize("name", ["ape", "learned_ape", "randomized:ape"])
def test_embed_names_a_wrong_width_or_layout(name):
    """A model of another width, or positions for another length, gave a raw broadcast
    error from inside the encoding."""
    pe = pezoo.create(name, d_model=16)
    pos = torch.arange(5)[None]
    assert pe.embed(torch.zeros(2, 5, 16), pos).shape == (2, 5, 16)
    with pytest.raises(ValueError, match=r"built for d_model=16: x must be \(b, s, 16\), got \(2, 5, 32\)"):
        pe.embed(torch.zeros(2, 5, 32), pos)
    with pytest.raises(
        ValueError, match=r"pos must be \(b\|1, s\) = \(2\|1, 5\) for x of shape \(2, 5, 16\), got \(1, 6\)"
    ):
        pe.embed(torch.zeros(2, 5, 16), torch.arange(6)[None])


def test_abacus_names_one_dimensional_tokens():
    """abacus.embed_tokens with (s,) tokens said "not enough values to unpack"."""
    pe = pezoo.create("abacus", d_model=16)
    ctx = _ctx()
    with pytest.raises(ValueError, match=r"tokens must be \(b\|1, s\)"):
        pe.embed_tokens(torch.zeros(1, 5, 16), torch.zeros(5, dtype=torch.long), ctx)


@pytest.mark.parametrize("name", [7, None, ["rope"]])
def test_a_name_that_is_no_string_is_a_type_error_saying_what_a_name_is(name):
    # the third probe: Python's own "argument of type 'int' is not iterable"
    for call in (pezoo.create, pezoo.resolved_options, pezoo.get):
        with pytest.raises(TypeError, match="an encoding name is a string such as 'rope'"):
            call(name)
    assert pezoo.is_known(name) is False
    with pytest.raises(TypeError, match="an encoding spec is a string such as 'rope'"):
        parse_pe(name)


def test_a_thousand_nested_wrappers_are_refused_before_anything_is_built():
    name = "randomized:" * 1200 + "rope"  # the third probe: a RecursionError
    for call in (pezoo.create, pezoo.resolved_options, pezoo.get):
        with pytest.raises(ValueError, match=r"nests 1200 wrappers; at most 8"):
            call(name)
    assert pezoo.is_known(name) is False
    with pytest.raises(ValueError, match="already randomized"):  # two: the wrapper's own refusal, as before
        pezoo.create("randomized:randomized:rope", dims=DIMS)


@pytest.mark.parametrize(
    ("name", "embed"),
    [
        ("learned_ape", lambda pe, x, ids: pe.embed(x, ids)),
        (
            "abacus",
            lambda pe, x, ids: pe.embed_tokens(
                x, ids, pezoo.AttentionContext(q_pos=torch.arange(5)[None], k_pos=torch.arange(5)[None])
            ),
        ),
    ],
)
def test_float_indices_into_a_learned_table_are_refused_by_name(name, embed):
    """Round four: torch's 'tensors used as indices must be long, int, byte or bool'."""
    pe = pezoo.create(name, dims=DIMS)
    with pytest.raises(ValueError, match=rf"{name}: .* must hold integers \(int64 or int32\), got torch.float32"):
        embed(pe, torch.randn(1, 5, 32), torch.arange(5.0)[None])
    # round five: int16 was torch's error, and uint8 indexed as a boolean mask (other rows, silently)
    for dtype in (torch.int16, torch.uint8, torch.int8):
        with pytest.raises(ValueError, match=rf"got {dtype}"):
            embed(pe, torch.randn(1, 5, 32), torch.arange(5, dtype=dtype)[None])
    x = torch.randn(1, 5, 32)
    pe.eval()  # abacus draws its offset in training
    assert torch.equal(embed(pe, x, torch.arange(5, dtype=torch.int32)[None]), embed(pe, x, torch.arange(5)[None]))


BIAS_ENCODINGS = ["alibi", "hard_alibi", "t5", "fire", "kerple_log", "kerple_power", "learned_prf", "dape"]


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
@pytest.mark.parametrize("name", BIAS_ENCODINGS)
def test_attend_refuses_positions_that_do_not_cover_the_queries_and_keys(name, backend):
    """One position for six tokens broadcast a relative bias to distance 0 everywhere (the
    output equalled NoPE's, silently); eight key positions for six keys failed in torch's words."""
    pe = pezoo.create(name, dims=DIMS).eval()
    q, k, v = (torch.randn(1, 4, 6, 8) for _ in range(3))
    six = torch.arange(6)[None]
    cases = [
        (torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, 1, dtype=torch.long), "6 queries on axis 2 of q for 1"),
        (six, torch.arange(8)[None], "6 keys on axis 2 of k for 8 positions in ctx.k_pos"),
        (six.expand(3, 6), six.expand(3, 6), "ctx.q_pos for a batch of 3 and q for a batch of 1"),
    ]
    for q_pos, k_pos, message in cases:
        ctx = pezoo.AttentionContext(q_pos=q_pos, k_pos=k_pos, causal=True)
        with pytest.raises(ValueError, match=re.escape(message)):
            pezoo.attend(q, k, v, ctx, pe.bias(0, q, k, ctx), backend=backend, transform=pe.score_transform(0, ctx))
    ctx = pezoo.AttentionContext(q_pos=six, k_pos=six, causal=True)  # the right positions still attend
    out, _ = pezoo.attend(q, k, v, ctx, pe.bias(0, q, k, ctx), backend="eager", transform=pe.score_transform(0, ctx))
    assert out.shape == (1, 4, 6, 8)


def test_an_error_about_many_unknown_options_names_a_few_and_counts_the_rest():
    """60,000 unknown options made a one-line error of a megabyte (every name listed)."""
    with pytest.raises(TypeError) as info:
        pezoo.create("alibi", dims=DIMS, **{f"o{i}": 1 for i in range(5000)})
    message = str(info.value)
    assert len(message) < 500 and "and 4,990 more" in message and "o0" in message


@pytest.mark.parametrize("dtype", [torch.bool, torch.complex64])
def test_positions_that_are_no_numbers_are_refused_by_the_context(dtype):
    """Bool positions were taken by most encodings: distances of True - False, silently."""
    good, bad = torch.arange(4)[None], torch.ones(1, 4, dtype=dtype)
    for q_pos, k_pos, name in ((bad, good, "q_pos"), (good, bad, "k_pos")):
        with pytest.raises(ValueError, match=f"got {name} of {dtype}"):
            pezoo.AttentionContext(q_pos=q_pos, k_pos=k_pos)


QK_ENCODINGS = ["rope", "xpos", "pope", "fope", "p_rope", "hybrid", "prism", "ssmax", "ssmax:alibi", "randomized:rope"]


@pytest.mark.parametrize("name", [*QK_ENCODINGS, "learned_prf", "learned_prf_sh", "cope"])
def test_positions_or_padding_of_another_batch_are_named_by_the_hook(name):
    """Positions of batch 2 for tokens of batch 3 failed in RoPE's (and every qk hook's)
    rotation, learned PRF's einsum and ssmax's key count in torch's words ("The size of tensor
    a (3) must match the size of tensor b (2)"); a batch of 1 still broadcasts."""
    pe = pezoo.create(name, dims=DIMS).eval()
    q, k = torch.randn(3, 4, 6, 8), torch.randn(3, 4, 6, 8)
    hint = torch.full((3,), 6.0)
    six = torch.arange(6)[None]
    hook = "bias" if name in ("learned_prf", "learned_prf_sh", "cope") else "qk"

    def run(ctx: pezoo.AttentionContext) -> None:
        pe.observe(0, torch.randn(3, 6, 32), ctx)
        getattr(pe, hook)(0, q, k, ctx)

    cases = [
        (dict(q_pos=six.expand(2, 6), k_pos=six.expand(2, 6)), "ctx.q_pos for a batch of 2 and q for a batch of 3"),
        (dict(q_pos=six, k_pos=six, key_padding_mask=torch.ones(2, 6, dtype=torch.bool)), "ctx.key_padding_mask"),
    ]
    for given, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            run(pezoo.AttentionContext(**given, scale_hint=hint))
    one_row = torch.ones(1, 6, dtype=torch.bool)
    run(pezoo.AttentionContext(q_pos=six, k_pos=six, scale_hint=hint, key_padding_mask=one_row))


@pytest.mark.parametrize(
    "mask, message",
    [
        (torch.ones(3, 6), "as a bool tensor, True for real keys; got torch.float32"),
        (torch.zeros(3, 6).masked_fill(torch.eye(3, 6, dtype=torch.bool), -math.inf), "got torch.float32"),
        (torch.ones(3, 6, dtype=torch.long), "got torch.int64 (a 1/0 mask: mask.bool()"),
        (torch.ones(3, 5, dtype=torch.bool), "of shape (b|1, j): one flag per key of k_pos ((3, 6)"),
        (torch.ones(3, 1, 6, dtype=torch.bool), "got (3, 1, 6)"),
        (torch.ones(2, 6, dtype=torch.bool), "got (2, 6)"),
    ],
)
def test_a_key_padding_mask_of_another_dtype_or_shape_is_refused_by_the_context(mask, message):
    """A 1/0 or additive float mask failed with torch's '"bitwise_and_cpu" not implemented for
    'Float'', an int one with 'where expected condition to be a boolean tensor', a mask of the
    wrong length or rank with a broadcast or expand error from inside attention."""
    pos = torch.arange(6)[None].expand(3, 6)
    with pytest.raises(ValueError, match=re.escape(message)):
        pezoo.AttentionContext(q_pos=pos, k_pos=pos, key_padding_mask=mask)


@pytest.mark.parametrize("backend", ["eager", "sdpa", "flex"])
def test_attend_names_a_key_padding_mask_of_another_batch(backend):
    pos = torch.arange(6)[None]
    q = torch.randn(3, 4, 6, 8)
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos, key_padding_mask=torch.ones(2, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"attend got ctx\.key_padding_mask for a batch of 2 and k for a batch of 3"):
        pezoo.attend(q, q, q, ctx, backend=backend)


@pytest.mark.parametrize(
    "hint, message",
    [
        (torch.ones(3, dtype=torch.bool), "got torch.bool"),
        (torch.full((3,), 6 + 0j), "got torch.complex64"),
        (6.0, "got a float (one n for every example: torch.tensor([n]))"),
        ([6, 6, 6], "got a list"),
    ],
)
def test_a_scale_hint_that_is_no_real_tensor_is_refused_by_the_context(hint, message):
    """A bool hint was learned_prf_sh's n = 1, silently; a number (the docs' ``scale_hint=n``)
    failed with "'float' object has no attribute 'ndim'", a complex one in torch.unique."""
    pos = torch.arange(6)[None]
    with pytest.raises(ValueError, match=re.escape(message)):
        pezoo.AttentionContext(q_pos=pos, k_pos=pos, scale_hint=hint)
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos, scale_hint=torch.full((3,), 6))  # integers are numbers
    q = torch.randn(3, 4, 6, 8)
    assert pezoo.create("learned_prf_sh", dims=DIMS).bias(0, q, q, ctx)[0].materialize(ctx, 4, q.dtype).shape[0] == 3


@pytest.mark.parametrize("options", [{}, {"nope_temperature": "llama4"}])
def test_hybrid_names_itself_for_positions_of_another_batch_on_every_layer_kind(options):
    """Its RoPE layers said "rope.qk …" (the part inside), and a NoPE layer with a temperature
    scaled q by the positions' batch in torch's broadcast words."""
    pe = pezoo.create("hybrid", dims=pezoo.ModelDims(d_model=32, n_heads=4, n_layers=4), pattern="RRRN", **options)
    q = k = torch.randn(3, 4, 6, 8)
    six = torch.arange(6)[None].expand(2, 6)
    for layer in range(4):
        with pytest.raises(ValueError, match=r"^hybrid\.qk got ctx\.q_pos for a batch of 2 and q for a batch of 3"):
            pe.qk(layer, q, k, pezoo.AttentionContext(q_pos=six, k_pos=six))
