"""Layout mistakes with RoPE and xPos raise, naming the mistake, instead of broadcasting
into a silently wrong rotation (when sequence length and head count happen to be equal)
or a cryptic shape error deep inside."""

from __future__ import annotations

import pytest
import torch

import pezoo
from pezoo.context import AttentionContext

ENCODERS = {"rope": lambda: pezoo.RoPE(head_dim=16), "xpos": lambda: pezoo.create("xpos", head_dim=16)}


def _ctx(i: int, j: int | None = None) -> AttentionContext:
    return AttentionContext(q_pos=torch.arange(j or i)[None, -i:], k_pos=torch.arange(j or i)[None])


def test_the_context_wants_2d_positions():
    with pytest.raises(ValueError, match=r"\(b\|1, s\).*\[None\]"):
        AttentionContext(q_pos=torch.arange(5), k_pos=torch.arange(5))
    with pytest.raises(ValueError, match="all keys, cached ones included"):
        AttentionContext(q_pos=torch.arange(5)[None], k_pos=torch.arange(3)[None])


@pytest.mark.parametrize("name", list(ENCODERS))
def test_heads_and_tokens_swapped(name):
    """(b, s, h, e), the flash-attn / HF layout, with s != h."""
    q = torch.randn(1, 6, 2, 16)
    with pytest.raises(ValueError, match=r"axis 2 of q.*\(b, h, s, e\)"):
        ENCODERS[name]().qk(0, q, q, _ctx(6))


@pytest.mark.parametrize("name", list(ENCODERS))
def test_missing_head_axis(name):
    q = torch.randn(2, 5, 16)
    with pytest.raises(ValueError, match=r"shape \(b, h, s, e\)"):
        ENCODERS[name]().qk(0, q, q, _ctx(5))


@pytest.mark.parametrize("name", list(ENCODERS))
def test_wider_heads_than_built_for(name):
    """Used to rotate the first 16 of 32 features silently (as if partial rotary)."""
    q = torch.randn(1, 2, 5, 32)
    with pytest.raises(ValueError, match="built for head_dim=16, got q/k of width 32"):
        ENCODERS[name]().qk(0, q, q, _ctx(5))


@pytest.mark.parametrize("name", list(ENCODERS))
def test_the_whole_cache_passed_as_keys(name):
    """qk takes the new keys; passing the cache rotated every key to the last position."""
    q, k = torch.randn(1, 2, 1, 16), torch.randn(1, 2, 6, 16)
    with pytest.raises(ValueError, match="new keys only"):
        ENCODERS[name]().qk(0, q, k, _ctx(1, 6))


@pytest.mark.parametrize("name", list(ENCODERS))
def test_a_decoding_step_still_works(name):
    q = torch.randn(1, 2, 1, 16)
    out_q, out_k = ENCODERS[name]().qk(0, q, q, _ctx(1, 6))
    assert out_q.shape == out_k.shape == q.shape


@pytest.mark.parametrize(
    ("spec", "options", "want"),
    [
        ("rope", {}, [8, 8, 8, 8]),
        ("alibi", {}, [None] * 4),
        ("nope", {}, [None] * 4),
        ("ssmax", {}, [8, 8, 8, 8]),  # over RoPE, its paper's setup
        ("ssmax:nope", {}, [None] * 4),  # its factor on q fits any width
        ("randomized:rope", {}, [8, 8, 8, 8]),
        ("ssmax:pope", {}, [8, 8, 8, 8]),
        ("abacus+fire", {}, [None] * 4),
        ("abacus+rope", {}, [8, 8, 8, 8]),
        ("hybrid", {"pattern": "RRN"}, [8, 8, None, 8]),
        ("hybrid", {"pattern": "RRRG", "global_head_dim": 16}, [8, 8, 8, 16]),
        ("ssmax:hybrid", {"pattern": "RRRG", "global_head_dim": 16}, [8, 8, 8, 16]),
        ("randomized:hybrid", {"pattern": "RRRG", "global_head_dim": 16}, [8, 8, 8, 16]),
    ],
)
def test_each_layer_says_how_wide_the_heads_it_transforms_are(spec, options, want):
    """``qk_head_dims``: what pezoo.hf and the harness compare with each layer's projections
    before anything runs (Gemma 4's global heads are twice as wide as its windowed ones)."""
    encoding = pezoo.create(spec, dims=pezoo.ModelDims(32, 4, 4), **options)
    assert encoding.qk_head_dims(8, 4) == want
