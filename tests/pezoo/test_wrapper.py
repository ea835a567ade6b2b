"""The wrapper base (pezoo.wrapper.Wrapper) and what a built encoding acts through
(pezoo.interface.acts_through): read off what it holds, not off its class."""

from __future__ import annotations

import pytest
import torch

import pezoo
from pezoo.combined import Combined
from pezoo.context import AttentionContext
from pezoo.interface import HOOKS, PositionalEncoding, acts_through, defines_hook
from pezoo.wrapper import Wrapper

DIMS = pezoo.ModelDims(d_model=32, n_heads=4, n_layers=2)


def acts(encoding: PositionalEncoding) -> set[str]:
    return {hook for hook in HOOKS if acts_through(encoding, hook)}


def test_what_a_built_encoding_acts_through_is_what_it_holds_does():
    assert acts(pezoo.create("nope", dims=DIMS)) == set()
    assert acts(pezoo.create("randomized:rope", dims=DIMS)) == {"positions", "padded_positions", "qk"}
    assert acts(pezoo.create("dape:alibi", dims=DIMS)) == {"bias", "score_transform"}
    assert acts(pezoo.create("ssmax:alibi", dims=DIMS)) == {"qk", "bias"}  # its factor on q, ALiBi's bias
    assert acts(pezoo.create("alibi+kerple_log", dims=DIMS)) == {"bias"}
    assert acts(pezoo.create("abacus+fire", dims=DIMS)) == {"embed_tokens", "bias"}
    assert acts(pezoo.create("fox", dims=DIMS)) == {"observe", "bias"}


def test_a_class_answers_for_its_own_work_only():
    from pezoo.encodings.dape import DAPE
    from pezoo.encodings.ssmax import SSMax

    assert defines_hook(DAPE, "score_transform") and not defines_hook(DAPE, "bias")
    assert defines_hook(SSMax, "qk") and not defines_hook(SSMax, "normaliser")
    assert not any(defines_hook(Combined, hook) for hook in HOOKS)
    assert not any(defines_hook(Wrapper, hook) for hook in HOOKS)


class _Recording(PositionalEncoding):
    """Every hook does work of its own: it records its call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def positions(self, batch, length, device="cpu"):
        self.calls.append("positions")
        return torch.arange(length)[None]

    def padded_positions(self, lengths, width, device="cpu"):
        self.calls.append("padded_positions")
        return torch.arange(width)[None]

    def embed(self, x, pos):
        self.calls.append("embed")
        return x

    def embed_tokens(self, x, tokens, ctx):
        self.calls.append("embed_tokens")
        return x

    def observe(self, layer, x, ctx):
        self.calls.append("observe")

    def qk(self, layer, q, k, ctx):
        self.calls.append("qk")
        return q, k

    def bias(self, layer, q, k, ctx):
        self.calls.append("bias")
        return []

    def score_transform(self, layer, ctx):
        self.calls.append("score_transform")
        return None

    def normaliser(self, layer, ctx):
        self.calls.append("normaliser")
        return None


class _Plain(Wrapper):
    """A plugin's wrapper that changes nothing: every hook reaches the inner encoding."""


def _call(encoding: PositionalEncoding, hook: str) -> None:
    pos = torch.arange(3)[None]
    x, q, ctx = torch.zeros(1, 3, 8), torch.zeros(1, 2, 3, 4), AttentionContext(q_pos=pos, k_pos=pos)
    args = {
        "positions": (1, 3),
        "padded_positions": (torch.tensor([3]), 3),
        "embed": (x, torch.arange(3)[None]),
        "embed_tokens": (x, torch.zeros(1, 3, dtype=torch.long), ctx),
        "observe": (0, x, ctx),
        "qk": (0, q, q, ctx),
        "bias": (0, q, q, ctx),
        "score_transform": (0, ctx),
        "normaliser": (0, ctx),
    }
    getattr(encoding, hook)(*args[hook])


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_of_the_interface_reaches_a_wrappers_inner_encoding(hook):
    # a hook added to the interface (HOOKS) and not to Wrapper fails here, not in a plugin's model
    inner = _Recording()
    wrapped = _Plain(inner)
    _call(wrapped, hook)
    assert inner.calls == [hook]
    assert acts_through(wrapped, hook) and not defines_hook(_Plain, hook)


def test_a_wrapper_passes_on_the_rest_of_the_interface():
    inner = pezoo.create("randomized:rope", dims=DIMS)
    wrapped = _Plain(inner)
    assert wrapped.random_at_eval and wrapped.delegates() == (inner,)
    assert (wrapped.uses_positions, wrapped.max_position) == (inner.uses_positions, inner.max_position)
    with wrapped.seeded(3):
        a = wrapped.positions(1, 5)
    with wrapped.seeded(3):
        assert torch.equal(a, wrapped.positions(1, 5))
    with pytest.raises(TypeError, match="_Plain wraps a pezoo PositionalEncoding, got str"):
        _Plain("rope")  # type: ignore[arg-type]


def test_pezoo_hf_reads_a_plugin_wrapper_by_what_it_holds():
    # before: pezoo.hf looked past pezoo's own wrappers by class name only; any other wrapper's
    # forwarded observe counted as reading the tokens in order
    pytest.importorskip("transformers")  # pezoo.hf's (the rest of this file needs torch alone)
    from pezoo.hf.calls import reads_tokens_in_order

    assert not reads_tokens_in_order(_Plain(pezoo.create("nope", dims=DIMS)))
    assert reads_tokens_in_order(_Plain(pezoo.create("fox", dims=DIMS)))
