"""Every bias says its per-element form (AttentionBias.element), which flex lowers with no
per-type branch: the form agrees with the materialised bias element by element."""

from __future__ import annotations

import math

import pytest
import torch

from pezoo.backends.flex import _element_site, _flex_mods
from pezoo.biases import (
    AttentionBias,
    BlockMask,
    DenseBias,
    ElementForm,
    ElementSite,
    LinearBias,
    RelativeFunctionBias,
    WindowMask,
)
from pezoo.context import AttentionContext
from pezoo.encodings.kerple import kerple_log_bias

H, NQ, NK = 3, 5, 7


def _grid(b: int) -> tuple[torch.Tensor, ...]:
    """Index tensors broadcasting to (b, h, i, j), as flex feeds one element at a time."""
    return (
        torch.arange(b).view(-1, 1, 1, 1),
        torch.arange(H).view(1, -1, 1, 1),
        torch.arange(NQ).view(1, 1, -1, 1),
        torch.arange(NK).view(1, 1, 1, -1),
    )


def _contexts() -> list[AttentionContext]:
    g = torch.Generator().manual_seed(0)
    gathered = torch.stack([torch.randperm(40, generator=g)[:NK].sort().values for _ in range(2)])  # (2, j)
    return [
        AttentionContext(q_pos=torch.arange(2, NK)[None], k_pos=torch.arange(NK)[None]),  # contiguous: from indices
        AttentionContext(q_pos=gathered[:, 2:], k_pos=gathered),  # randomized positions: gathered
    ]


BIASES = [
    LinearBias(torch.tensor([0.5, 0.25, 0.125])),
    WindowMask(torch.tensor([1.0, 3.0, math.inf])),
    BlockMask(3),
    RelativeFunctionBias(kerple_log_bias, (torch.tensor([1.0, 2.0, 0.5]), torch.tensor([0.3, 1.0, 2.0])), n_heads=H),
    DenseBias(torch.randn(1, H, NQ, NK, generator=torch.Generator().manual_seed(1))),
]


@pytest.mark.parametrize("bias", BIASES, ids=lambda b: type(b).__name__)
@pytest.mark.parametrize("which", [0, 1], ids=["contiguous", "gathered"])
def test_the_element_form_is_the_materialised_bias(bias, which):
    ctx = _contexts()[which]
    b = ctx.k_pos.shape[0]
    site = _element_site(ctx, H, NQ, NK, b)
    form = bias.element(site)
    dense = bias.materialize(ctx, H, torch.float32).expand(b, H, NQ, NK)
    bi, hi, qi, kj = _grid(b)
    if form.score is not None:
        got = form.score(torch.zeros(b, H, NQ, NK), bi, hi, qi, kj)
        torch.testing.assert_close(got, dense, rtol=1e-6, atol=1e-6)
    else:
        allowed = form.allowed(bi, hi, qi, kj).expand(b, H, NQ, NK)
        assert torch.equal(allowed, dense == 0) and bool((dense[~allowed] == -math.inf).all())


@pytest.mark.parametrize("bias", [BIASES[1], BIASES[2]], ids=lambda b: type(b).__name__)
def test_a_masks_block_summary_is_sound(bias):
    """any False only where no pair is allowed; all True only where every pair is."""
    from pezoo.backends.flex import _batched, _block_ranges
    from pezoo.biases import PositionRanges

    ctx = _contexts()[1]
    b = ctx.k_pos.shape[0]
    form = bias.element(_element_site(ctx, H, NQ, NK, b))
    ranges = PositionRanges(*_block_ranges(_batched(ctx.q_pos, b), 3, 2), *_block_ranges(_batched(ctx.k_pos, b), 4, 2))
    some, every = (t.expand(b, H, 3, 4) for t in form.blocks(ranges))
    ok = (bias.materialize(ctx, H, torch.float32) == 0).expand(b, H, NQ, NK)
    ok = torch.nn.functional.pad(ok, (0, 1, 0, 1), value=True)  # ragged last blocks: padding never decides
    tiles = ok.unflatten(2, (3, 2)).unflatten(4, (4, 2))  # (b, h, qb, 2, kb, 2)
    real = torch.nn.functional.pad(torch.ones(b, H, NQ, NK, dtype=torch.bool), (0, 1, 0, 1), value=False)
    real = real.unflatten(2, (3, 2)).unflatten(4, (4, 2))
    anywhere = (tiles & real).any(5).any(3)
    assert bool((some | ~anywhere).all())  # a block with an allowed pair is never skipped
    assert bool((~every | (tiles | ~real).all(5).all(3)).all())  # a block called full has no masked pair


class _OnlyElementwise(AttentionBias):
    """A bias type flex knows nothing about, which cannot be materialised: only its
    element form exists (a score of -0.5 per unit of key position)."""

    reads_positions_only = True

    def materialize(self, ctx, n_heads, dtype):
        raise NotImplementedError("no dense form")

    def element(self, site: ElementSite) -> ElementForm:
        return ElementForm(score=lambda score, b, h, qi, kj: score - 0.5 * site.k_position(b, kj))


def test_flex_lowers_any_bias_through_its_element_form():
    """No per-type branch: a new bias type is lowered by its own form, never materialised."""
    ctx = _contexts()[0]
    score_mod, mask_mod, masks = _flex_mods(ctx, [_OnlyElementwise(), BIASES[1]], H, NQ, NK, 1)
    assert score_mod is not None and mask_mod is not None and len(masks) == 1
    bi, hi, qi, kj = _grid(1)
    got = score_mod(torch.zeros(1, H, NQ, NK), bi, hi, qi, kj)
    torch.testing.assert_close(got, (-0.5 * torch.arange(NK, dtype=torch.float32)).expand(1, H, NQ, NK))
