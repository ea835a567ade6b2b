"""The score-transform and normaliser hooks (pezoo/scores.py): soft-capping against its formula
on eager and flex, the backends each hook declares and the errors of the others, ``auto``'s
choice, how wrappers and combinations pass the hooks on, and the conformance kit catching a
transform that lets a future score reach the past."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

import pezoo
from pezoo.backends import flex_compile, pick_backend
from pezoo.scores import Normaliser, ScoreTransform, Sinks, SoftCap, check_backend, hook_backends
from pezoo.testing import ConformanceError, check_encoding

DIMS = pezoo.ModelDims(d_model=16, n_heads=2, n_layers=2)


def test_soft_capping_matches_its_formula_with_biases_and_masks():
    """Gemma 2: softmax(cap · tanh(scale · q·k / cap) + bias), the causal mask after the cap."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 4) * 3 for _ in range(3))
    pos = torch.arange(5)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    slopes = torch.tensor([0.5, 0.25])
    out, _ = pezoo.attend(q, k, v, ctx, [pezoo.LinearBias(slopes)], transform=SoftCap(1.5))
    for h in range(2):
        for i in range(5):
            logits = [
                1.5 * math.tanh(float(q[0, h, i] @ k[0, h, j]) / 2 / 1.5) - slopes[h].item() * (i - j)
                for j in range(i + 1)
            ]
            top = max(logits)
            w = [math.exp(x - top) for x in logits]
            want = sum(wj / sum(w) * v[0, h, j] for j, wj in enumerate(w))
            torch.testing.assert_close(out[0, h, i], want, atol=1e-5, rtol=1e-5)


def test_attention_sinks_match_their_formula_with_biases_masks_and_padding():
    """gpt-oss: exp(s_ij) / (exp(t_h) + Σ_k exp(s_ik)) over the keys the query sees, the
    biases in s, the padding left out; the sinks' gradient is that of the formula. (A padded
    query, which sees no key, is not compared: its output is never read.)"""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 4) * 2 for _ in range(3))
    pos = torch.arange(5)[None]
    pad = torch.tensor([[True] * 5, [False, False, True, True, True]])  # row 1 left-padded by two
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos, key_padding_mask=pad)
    slopes = torch.tensor([0.5, 0.25])
    sinks = torch.tensor([0.3, -1.2], requires_grad=True)
    out, probs = pezoo.attend(q, k, v, ctx, [pezoo.LinearBias(slopes)], normaliser=Sinks(sinks), return_probs=True)
    want_out = torch.zeros_like(out)
    for b in range(2):
        for h in range(2):
            for i in range(5):
                if not pad[b, i]:
                    continue
                seen = [j for j in range(i + 1) if pad[b, j]]
                logits = [float(q[b, h, i] @ k[b, h, j]) / 2 - slopes[h].item() * (i - j) for j in seen]
                denominator = math.exp(sinks[h].item()) + sum(math.exp(x) for x in logits)
                for j, x in zip(seen, logits, strict=True):
                    assert probs[b, h, i, j].item() == pytest.approx(math.exp(x) / denominator, rel=1e-5, abs=1e-7)
                    want_out[b, h, i] += math.exp(x) / denominator * v[b, h, j]
                assert probs[b, h, i].sum().item() == pytest.approx(1 - math.exp(sinks[h].item()) / denominator)
    real = pad[:, None, :, None]  # (b, 1, i, 1): the queries compared
    torch.testing.assert_close(out * real, want_out, atol=1e-5, rtol=1e-5)
    # the weights sum to 1 - σ, σ the sink's share: d(1 - σ)/dt_h = -σ(1 - σ), summed over the real rows
    (probs * real).sum().backward()
    share = 1 - probs.detach().sum(-1)  # (b, h, i): the sink's weight
    torch.testing.assert_close(sinks.grad, -(share * (1 - share) * pad[:, None, :]).sum((0, 2)), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="eager"):
        pezoo.attend(q, k, v, ctx, [], normaliser=Sinks(sinks), backend="sdpa")
    with pytest.raises(ValueError, match="one logit per head"):
        Sinks(torch.zeros(2, 1))


def test_flex_applies_attention_sinks_as_eager_does():
    """flex takes the sinks as softmax times σ(lse − t) from its fused softmax's log-sum-exp;
    one query (the decoding step) and gradients on the CPU go the eager way."""
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 2, 9, 4) * 2 for _ in range(3))
    pos = torch.arange(9)[None]
    pad = torch.ones(2, 9, dtype=torch.bool)
    pad[1, :3] = False  # left padding
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos, key_padding_mask=pad)
    biases = [pezoo.LinearBias(torch.tensor([0.5, 0.25]))]
    sinks = Sinks(torch.tensor([0.5, -0.5]))
    want, _ = pezoo.attend(q, k, v, ctx, biases, normaliser=sinks)
    last = pezoo.AttentionContext(q_pos=pos[:, -1:], k_pos=pos, key_padding_mask=pad)  # one query
    with flex_compile(False):
        got, _ = pezoo.attend(q, k, v, ctx, biases, normaliser=sinks, backend="flex")
        one, _ = pezoo.attend(q[:, :, -1:], k, v, last, biases, normaliser=sinks, backend="flex")
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got[1, :, 3:], want[1, :, 3:], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(one, want[:, :, -1:], atol=1e-5, rtol=1e-4)
    plain, _ = pezoo.attend(q, k, v, ctx, biases)
    assert (plain - want)[0].abs().max() > 1e-2  # the sinks matter here

    class NotSoftmax(Normaliser):
        backends = ("eager", "flex")

        def __call__(self, scores, allowed):
            return torch.zeros_like(scores)

    with flex_compile(False), pytest.raises(ValueError, match="softmax_factor"):
        pezoo.attend(q, k, v, ctx, biases, normaliser=NotSoftmax(), backend="flex")


def test_flex_caps_in_its_score_mod_as_eager_does():
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 2, 9, 4) * 3 for _ in range(3))
    pos = torch.arange(9)[None]
    pad = torch.ones(2, 9, dtype=torch.bool)
    pad[1, 7:] = False
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos, key_padding_mask=pad)
    biases = [pezoo.LinearBias(torch.tensor([0.5, 0.25]))]
    want, _ = pezoo.attend(q, k, v, ctx, biases, transform=SoftCap(2.0))
    with flex_compile(False):
        got, _ = pezoo.attend(q, k, v, ctx, biases, transform=SoftCap(2.0), backend="flex")
        one, _ = pezoo.attend(q[:, :, -1:], k, v, pezoo.AttentionContext(q_pos=pos[:, -1:], k_pos=pos),
                              biases, transform=SoftCap(2.0), backend="flex")  # fmt: skip
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got[1, :, :7], want[1, :, :7], atol=1e-5, rtol=1e-4)
    full, _ = pezoo.attend(q, k, v, pezoo.AttentionContext(q_pos=pos, k_pos=pos), biases, transform=SoftCap(2.0))
    torch.testing.assert_close(one, full[:, :, -1:], atol=1e-5, rtol=1e-4)  # one query: the eager path


def test_each_hook_names_its_backends_and_the_others_refuse_it():
    assert hook_backends() is None
    assert hook_backends(SoftCap(1.0)) == ("eager", "flex")
    sb = pezoo.create("stick_breaking").normaliser(0, pezoo.AttentionContext(torch.zeros(1, 1), torch.zeros(1, 1)))
    assert hook_backends(SoftCap(1.0), sb) == ("eager",)  # both: the backends that take both
    check_backend("auto", SoftCap(1.0), sb)
    check_backend("flex", SoftCap(1.0), None)
    with pytest.raises(ValueError, match=r"sdpa backend cannot express SoftCap \(score transform\).*'eager' or 'flex'"):
        check_backend("sdpa", SoftCap(1.0), None)
    with pytest.raises(ValueError, match=r"flex backend cannot express .*StickBreakingWeights \(normaliser\)"):
        check_backend("flex", SoftCap(1.0), sb)
    for cap in (0, -1.0, math.inf, True, "1"):
        with pytest.raises(ValueError, match="finite cap > 0"):
            SoftCap(cap)  # type: ignore[arg-type]


def test_auto_picks_a_backend_that_takes_the_hooks():
    q = torch.zeros(1, 2, 4, 8)
    pos = torch.arange(4)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    assert pick_backend(q, ctx, []) == "sdpa"
    assert pick_backend(q, ctx, [], transform=SoftCap(1.0)) == "eager"  # on CPU: flex is not fused here
    assert pick_backend(q, ctx, [], normaliser=Normaliser()) == "eager"
    v = torch.randn(1, 2, 4, 8)
    eager, _ = pezoo.attend(q + 1, q + 1, v, ctx, transform=SoftCap(0.5))
    auto, _ = pezoo.attend(q + 1, q + 1, v, ctx, transform=SoftCap(0.5), backend="auto")
    torch.testing.assert_close(auto, eager)


class Halve(ScoreTransform):
    """Mixes nothing: halves every score, keeps the biases."""

    def __call__(self, scores: Tensor, bias: Tensor) -> Tensor:
        return scores / 2 + bias


class LooksAhead(ScoreTransform):
    """Breaks the hook's contract: each pair reads the next key's score (for the query's own key,
    a future one). (A sum over all later keys would not show: softmax cancels what a row shares.)"""

    def __call__(self, scores: Tensor, bias: Tensor) -> Tensor:
        return scores + scores.roll(-1, dims=2) + bias  # (b, i, j, h): j is axis 2


class WithTransform(pezoo.PositionalEncoding):
    name = "test_transform"
    uses_positions = False

    def __init__(self, transform: ScoreTransform) -> None:
        super().__init__()
        self.transform = transform

    def score_transform(self, layer, ctx):
        return self.transform

    def attention_backends(self):
        return self.transform.backends


def test_the_kit_passes_a_transform_within_one_pair_and_catches_one_that_looks_ahead():
    check_encoding(lambda: WithTransform(Halve()), DIMS)
    with pytest.raises(ConformanceError, match="no_future_leakage"):
        check_encoding(lambda: WithTransform(LooksAhead()), DIMS, checks=["no_future_leakage"])


class Undeclared(WithTransform):
    def attention_backends(self):
        return None  # claims every backend, though sdpa cannot run its transform


def test_the_kit_catches_an_encoding_that_does_not_declare_its_backends():
    with pytest.raises(ConformanceError, match=r"backend_agreement.*(flex|sdpa) backend cannot express"):
        check_encoding(lambda: Undeclared(Halve()), DIMS, checks=["backend_agreement"])


def test_wrappers_and_combinations_pass_the_hooks_on():
    rand = pezoo.create("randomized:alibi", n_heads=2)
    assert rand.attention_backends() is None
    both = pezoo.combine(pezoo.create("alibi", n_heads=2), pezoo.create("stick_breaking"))
    pos = torch.arange(3)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    assert both.attention_backends() == ("eager",)
    assert both.normaliser(0, ctx) is not None and both.score_transform(0, ctx) is None
    with pytest.raises(ValueError, match="both replace softmax"):
        pezoo.combine(pezoo.create("stick_breaking"), WithTransformNormaliser())
    check_encoding(lambda: pezoo.combine(pezoo.create("alibi", n_heads=2), pezoo.create("stick_breaking")), DIMS,
                   checks=["backend_agreement", "incremental_decoding", "unsupported_backends"])  # fmt: skip


class WithTransformNormaliser(pezoo.PositionalEncoding):
    name = "test_normaliser"

    def normaliser(self, layer, ctx):
        return Normaliser()


@pytest.mark.slow
def test_compiled_flex_lowers_soft_capping_and_fox_s_difference_bias():
    """One compile each on CPU (seconds): the cap and ``c_i − c_j`` inside the fused kernel's score_mod,
    and attention sinks from its log-sum-exp."""
    from pezoo.biases import DifferenceBias

    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 4, 160, 8) for _ in range(3))
    pos = torch.arange(160)[None]
    ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
    c = torch.randn(2, 4, 160).cumsum(-1) * -0.3  # (b, h, s): a forget gate's cumulative log, say
    biases = [DifferenceBias(c, c)]
    with torch.no_grad():
        for transform in (None, SoftCap(1.5)):
            want, _ = pezoo.attend(q, k, v, ctx, biases, transform=transform)
            with flex_compile(True):
                got, _ = pezoo.attend(q, k, v, ctx, biases, transform=transform, backend="flex")
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
        sinks = Sinks(torch.linspace(-1.0, 1.0, 4))  # the log-sum-exp of the fused kernel, then σ(lse − t)
        want, _ = pezoo.attend(q, k, v, ctx, biases, normaliser=sinks)
        with flex_compile(True):
            got, _ = pezoo.attend(q, k, v, ctx, biases, normaliser=sinks, backend="flex")
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
