"""The flex backend (and auto): agreement with eager, the block mask, fallbacks.

All but one test use the unfused flex implementation (no compile); ``test_compiled``
compiles once (~30 s on CPU) and is marked slow.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import pezoo.backends.flex as flex_backend
from pezoo import AttentionContext, BlockMask, DenseBias, LinearBias, RelativeFunctionBias, WindowMask, attend
from pezoo.backends import flex_block_mask, flex_compile, native_lowering, pick_backend


def _case(seed: int, b: int = 2, h: int = 4, i: int = 40, e: int = 8, f: int = 6, sparse: bool = False):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (
        torch.randn(b, h, i, e, generator=g),
        torch.randn(b, h, i, e, generator=g),
        torch.randn(b, h, i, f, generator=g),
    )
    pos = torch.randperm(300, generator=g)[:i].sort().values[None] if sparse else torch.arange(i)[None]
    return q, k, v, pos


def _toy_function(q_pos, k_pos, head, weight):
    """A RelativeFunctionBias fn reading both absolute positions and a per-head parameter."""
    return -weight[head] * torch.log1p((q_pos - k_pos).abs()) + 0.01 * q_pos


def _toy_dense(q_pos, k_pos, weight):
    return -weight.view(1, -1, 1, 1) * torch.log1p((q_pos - k_pos).abs()) + 0.01 * q_pos


BIASES = {
    "none": lambda h, b, i: [],
    "alibi": lambda h, b, i: [LinearBias(torch.rand(h) + 0.1)],
    "windows": lambda h, b, i: [WindowMask(torch.tensor([1.0, 2.0, 9.0, math.inf]))],
    "dense": lambda h, b, i: [DenseBias(torch.randn(b, h, i, i))],
    "alibi+windows": lambda h, b, i: [LinearBias(torch.rand(h)), WindowMask(torch.tensor([1.0, 30.0, 3.0, math.inf]))],
    "function": lambda h, b, i: [RelativeFunctionBias(_toy_function, (torch.rand(h) + 0.1,))],
    "blocks": lambda h, b, i: [BlockMask(7)],  # xPos's blockwise causal attention, blocks of 7 positions
    "blocks+alibi": lambda h, b, i: [BlockMask(30), LinearBias(torch.rand(h) + 0.1)],
    "function+windows": lambda h, b, i: [
        RelativeFunctionBias(_toy_function, (torch.rand(h),), dense_fn=_toy_dense),
        WindowMask(torch.tensor([2.0, 30.0, 3.0, math.inf])),
    ],
}


def test_relative_function_bias_materialises_the_formula():
    """Both materialisations (fn on a grid, dense_fn) equal the formula per (b, h, i, j)."""
    weight = torch.tensor([0.5, 2.0, 0.0])
    q_pos, k_pos = torch.tensor([[5, 9], [7, 8]]), torch.tensor([[0, 2, 5, 9], [1, 2, 7, 8]])
    ctx = AttentionContext(q_pos=q_pos, k_pos=k_pos)
    for bias in (
        RelativeFunctionBias(_toy_function, (weight,)),
        RelativeFunctionBias(_toy_function, (weight,), dense_fn=_toy_dense),
    ):
        dense = bias.materialize(ctx, 3, torch.float64)
        assert dense.shape == (2, 3, 2, 4) and dense.dtype == torch.float64
        for b in range(2):
            for h in range(3):
                for i in range(2):
                    for j in range(4):
                        pi, pj = q_pos[b, i].item(), k_pos[b, j].item()
                        want = -weight[h].item() * math.log(1 + abs(pi - pj)) + 0.01 * pi
                        assert dense[b, h, i, j].item() == pytest.approx(want, rel=1e-6)


def test_relative_function_bias_is_a_native_flex_lowering():
    bias = RelativeFunctionBias(_toy_function, (torch.ones(2),))
    assert native_lowering("flex", [bias])
    ctx = AttentionContext(q_pos=torch.arange(5)[None], k_pos=torch.arange(5)[None])
    assert not native_lowering("xformers", [bias], ctx)  # no xformers class: a dense tensor bias


@pytest.mark.parametrize("bias", list(BIASES))
@pytest.mark.parametrize("sparse", [False, True], ids=["arange", "random-positions"])
@pytest.mark.parametrize("padded", [False, True], ids=["", "padded"])
def test_flex_equals_eager(bias, sparse, padded):
    q, k, v, pos = _case(0, sparse=sparse)
    live = torch.ones(2, 40, dtype=torch.bool)
    if padded:
        live[1, 31:] = False
    ctx = AttentionContext(q_pos=pos, k_pos=pos, key_padding_mask=live if padded else None)
    biases = BIASES[bias](4, 2, 40)
    want, _ = attend(q, k, v, ctx, biases)
    with flex_compile(False), torch.no_grad():
        got, _ = attend(q, k, v, ctx, biases, backend="flex")
    # compare only rows of real queries (flex gives 0 on fully masked rows, eager unmasks them)
    torch.testing.assert_close(got.permute(0, 2, 1, 3)[live], want.permute(0, 2, 1, 3)[live])


@pytest.mark.parametrize("function", [False, True], ids=["alibi", "function"])
def test_flex_with_cached_keys_and_non_causal(function):
    q, k, v, pos = _case(1, i=30)
    first = RelativeFunctionBias(_toy_function, (torch.rand(4),)) if function else LinearBias(torch.rand(4))
    biases = [first, WindowMask(torch.tensor([2.0, 5.0, 7.0, math.inf]))]
    ctx = AttentionContext(q_pos=pos[:, 20:], k_pos=pos)  # 10 new queries after 20 cached keys
    want, _ = attend(q[:, :, 20:], k, v, ctx, biases)
    with flex_compile(False), torch.no_grad():
        got, _ = attend(q[:, :, 20:], k, v, ctx, biases, backend="flex")
    torch.testing.assert_close(got, want)
    ctx = AttentionContext(q_pos=pos, k_pos=pos, causal=False)
    want, _ = attend(q, k, v, ctx, biases)
    with flex_compile(False), torch.no_grad():
        got, _ = attend(q, k, v, ctx, biases, backend="flex")
    torch.testing.assert_close(got, want)


@settings(max_examples=30, deadline=None)
@given(
    i=st.integers(1, 70),
    cached=st.integers(0, 30),
    windows=st.lists(st.sampled_from([1.0, 2.0, 5.0, 17.0, math.inf]), min_size=3, max_size=3),
    sparse=st.booleans(),
    causal=st.booleans(),
    pad_from=st.integers(0, 100),
    seed=st.integers(0, 1000),
)
def test_block_mask_is_exact(i, cached, windows, sparse, causal, pad_from, seed):
    """Every block with an allowed pair is visited; blocks marked full have no masked pair."""
    j = i + cached
    g = torch.Generator().manual_seed(seed)
    k_pos = (torch.randperm(4 * j, generator=g)[:j].sort().values if sparse else torch.arange(j))[None]
    pad = (torch.arange(j) < max(pad_from, 1))[None].expand(2, -1).clone()
    pad[0] = True
    ctx = AttentionContext(q_pos=k_pos[:, cached:], k_pos=k_pos, causal=causal, key_padding_mask=pad)
    w = torch.tensor(windows)
    size = 5 + seed % 40  # a BlockMask's positions per block
    bm = flex_block_mask(ctx, [w], 3, i, j, lambda *a: None, block=16, position_blocks=[torch.tensor(float(size))])
    # brute force, from the definitions
    d = (ctx.q_pos[:, :, None] - ctx.k_pos[:, None, :]).float()[:, None]  # (1, 1, i, j)
    ok = (d < w.view(1, -1, 1, 1)) & (d > -w.view(1, -1, 1, 1)) & pad[:, None, None, :]  # (2, 3, i, j)
    ok = ok & (ctx.k_pos[:, None, None, :] // size >= ctx.q_pos[:, None, :, None] // size - 1)
    if causal:
        ok = ok & (torch.arange(j)[None, :] <= torch.arange(i)[:, None] + cached)
    nqb, nkb = -(-i // 16), -(-j // 16)
    for b in range(2):
        for h in range(3):
            for qb in range(nqb):
                bb, hh = min(b, bm.kv_num_blocks.shape[0] - 1), min(h, bm.kv_num_blocks.shape[1] - 1)
                partial = set(bm.kv_indices[bb, hh, qb, : bm.kv_num_blocks[bb, hh, qb]].tolist())
                full = set(bm.full_kv_indices[bb, hh, qb, : bm.full_kv_num_blocks[bb, hh, qb]].tolist())
                assert not partial & full
                for kb in range(nkb):
                    tile = ok[b, h, qb * 16 : (qb + 1) * 16, kb * 16 : (kb + 1) * 16]
                    if tile.any():
                        assert kb in partial | full, (b, h, qb, kb)
                    if kb in full:
                        assert tile.all() and tile.shape == (16, 16), (b, h, qb, kb)


def test_single_query_goes_through_sdpa_and_matches():
    q, k, v, pos = _case(2, i=25)
    ctx = AttentionContext(q_pos=pos[:, -1:], k_pos=pos)
    biases = [WindowMask(torch.tensor([1.0, 4.0, 8.0, math.inf]))]
    want, _ = attend(q[:, :, -1:], k, v, ctx, biases)
    got, _ = attend(q[:, :, -1:], k, v, ctx, biases, backend="flex")
    torch.testing.assert_close(got, want)


def test_cpu_gradients_fall_back_with_a_warning():
    q, k, v, pos = _case(3, i=12)
    q.requires_grad_(True)
    ctx = AttentionContext(q_pos=pos, k_pos=pos)
    biases = [LinearBias(torch.rand(4))]
    (g_eager,) = torch.autograd.grad(attend(q, k, v, ctx, biases)[0].sum(), q)
    flex_backend._WARNED.discard("flex-cpu-grad")
    with pytest.warns(RuntimeWarning, match="no backward pass on CPU"):
        out, _ = attend(q, k, v, ctx, biases, backend="flex")
    (g_flex,) = torch.autograd.grad(out.sum(), q)
    torch.testing.assert_close(g_flex, g_eager)


def test_failed_compilation_falls_back_to_unfused_flex(monkeypatch):
    def broken_kernel(*args, **kwargs):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setitem(flex_backend._FLEX, "compiled", broken_kernel)  # what torch.compile returned
    monkeypatch.setitem(flex_backend._FLEX, "static", broken_kernel)  # and with static shapes
    monkeypatch.setitem(flex_backend._FLEX, "failed", False)
    monkeypatch.setitem(flex_backend._FLEX, "failed_keys", {})
    monkeypatch.setitem(flex_backend._FLEX, "static_keys", {})
    monkeypatch.setitem(flex_backend._FLEX, "compile", True)
    flex_backend._WARNED.discard("flex-compile")
    q, k, v, pos = _case(4, i=10)
    ctx = AttentionContext(q_pos=pos, k_pos=pos)
    want, _ = attend(q, k, v, ctx)
    with pytest.warns(RuntimeWarning, match="no C.. compiler"), torch.no_grad():
        got, _ = attend(q, k, v, ctx, backend="flex")
    torch.testing.assert_close(got, want)
    assert flex_backend.flex_compile_enabled()  # only this configuration is marked failed


def _kernel(calls: list, label: str, fails_for: tuple[int, ...] = ()):
    """A stand-in for a compiled flex kernel: records (label, length), raises for some lengths."""

    def kernel(q, k, v, **kwargs):
        calls.append((label, q.shape[2]))
        if q.shape[2] in fails_for:
            raise RuntimeError("CppCompileError: 'cur_kvSplitSize8' was not declared in this scope")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.nn.attention.flex_attention.flex_attention(q, k, v, **kwargs)

    return kernel


def _fresh_flex_state(monkeypatch, compiled, static):
    monkeypatch.setitem(flex_backend._FLEX, "compiled", compiled)
    monkeypatch.setitem(flex_backend._FLEX, "static", static)
    monkeypatch.setitem(flex_backend._FLEX, "failed", False)
    monkeypatch.setitem(flex_backend._FLEX, "failed_keys", {})
    monkeypatch.setitem(flex_backend._FLEX, "static_keys", {})
    monkeypatch.setitem(flex_backend._FLEX, "compile", True)
    monkeypatch.setattr(flex_backend, "_WARNED", set())  # every test sees its own warnings


def _run_sparse(i: int, biases) -> None:
    q, k, v, _ = _case(i, i=i)
    g = torch.Generator().manual_seed(i)  # randomized-PE positions, per example, as in the failing case
    pos = torch.stack([torch.randperm(4 * i, generator=g)[:i].sort().values for _ in range(q.shape[0])])
    ctx = AttentionContext(q_pos=pos, k_pos=pos)
    with torch.no_grad():
        got, _ = attend(q, k, v, ctx, biases, backend="flex")
    torch.testing.assert_close(got, attend(q, k, v, ctx, biases)[0], rtol=1e-4, atol=1e-5)


def test_a_shape_the_dynamic_compile_fails_on_is_compiled_with_static_shapes(monkeypatch):
    """torch 2.13's CPU compiler breaks on some shapes only: those get a static-shape kernel, the rest keep theirs."""
    calls = []
    _fresh_flex_state(monkeypatch, _kernel(calls, "dynamic", fails_for=(140,)), _kernel(calls, "static"))
    biases = [LinearBias(torch.rand(4))]
    _run_sparse(130, biases)
    with pytest.warns(RuntimeWarning, match=r"cur_kvSplitSize8.*static shapes for this configuration"):
        _run_sparse(140, biases)
    assert calls == [("dynamic", 130), ("dynamic", 140), ("static", 140)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # warned once: not again
        _run_sparse(140, biases)  # straight to the static kernel, no second failing compile
        _run_sparse(150, biases)  # a new shape still gets the dynamic kernel
    assert calls[3:] == [("static", 140), ("dynamic", 150)]
    assert flex_backend.flex_compile_enabled()


def test_a_shape_both_compiles_fail_on_runs_unfused_alone(monkeypatch):
    calls = []
    fails = (140,)
    _fresh_flex_state(monkeypatch, _kernel(calls, "dynamic", fails), _kernel(calls, "static", fails))
    biases = [LinearBias(torch.rand(4))]
    _run_sparse(130, biases)
    with pytest.warns(RuntimeWarning, match=r"cur_kvSplitSize8.*unfused flex for this configuration only"):
        _run_sparse(140, biases)
    assert calls == [("dynamic", 130), ("dynamic", 140), ("static", 140)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        _run_sparse(140, biases)  # unfused: no compiled kernel is called
        _run_sparse(150, biases)
        _run_sparse(130, biases)
    assert calls[3:] == [("dynamic", 150), ("dynamic", 130)]
    assert flex_backend.flex_compile_enabled()


def test_compile_is_switched_off_after_several_failing_configurations(monkeypatch):
    def broken_kernel(*args, **kwargs):
        raise RuntimeError("no C++ compiler")

    _fresh_flex_state(monkeypatch, broken_kernel, broken_kernel)
    flex_backend._WARNED.discard("flex-compile")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(130, 130 + flex_backend.FLEX_MAX_FAILED_KEYS):
            q, k, v, pos = _case(i, i=i)
            with torch.no_grad():
                attend(q, k, v, AttentionContext(q_pos=pos, k_pos=pos), backend="flex")
    assert not flex_backend.flex_compile_enabled()


def test_native_lowering_and_auto_on_cpu():
    windows, alibi, dense = WindowMask(torch.ones(2)), LinearBias(torch.ones(2)), DenseBias(torch.zeros(1))
    assert native_lowering("flex", [windows, alibi, dense, BlockMask(24)])
    assert not native_lowering("sdpa", [windows]) and native_lowering("sdpa", [])
    q = torch.zeros(1, 2, 5, 4)
    ctx = AttentionContext(q_pos=torch.arange(5)[None], k_pos=torch.arange(5)[None])
    assert pick_backend(q, ctx, [windows]) == "sdpa"  # CPU: flex costs a compile and cannot train
    assert pick_backend(q, ctx, [windows], return_probs=True) == "eager"
    _, probs = attend(q, q, q, ctx, [windows], backend="auto", return_probs=True)
    assert probs is not None


@pytest.mark.slow
def test_compiled_relative_function_bias():
    """One compile of a score_mod calling a RelativeFunctionBias fn (positions shifted from 0)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        q, k, v, pos = _case(6, i=160, f=4)
        ctx = AttentionContext(q_pos=pos + 7, k_pos=pos + 7)
        biases = [RelativeFunctionBias(_toy_function, (torch.rand(4),), dense_fn=_toy_dense)]
        want, _ = attend(q, k, v, ctx, biases)
        with flex_compile(True), torch.no_grad():
            got, _ = attend(q, k, v, ctx, biases, backend="flex")
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.slow
def test_compiled():
    """One compile: ALiBi score_mod + Hard-ALiBi block mask over several blocks, v dim != q/k dim."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a compile failure must not pass silently
        for i in (160, 40):  # several blocks; then shorter than one block (the value-dim workaround)
            q, k, v, pos = _case(5, i=i, f=4)
            ctx = AttentionContext(q_pos=pos, k_pos=pos)
            biases = [LinearBias(torch.rand(4)), WindowMask(torch.tensor([1.0, 3.0, 50.0, math.inf]))]
            want, _ = attend(q, k, v, ctx, biases)
            with flex_compile(True), torch.no_grad():
                got, _ = attend(q, k, v, ctx, biases, backend="flex")
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.slow
def test_compiled_block_mask():
    """One compile: xPos's blockwise causal attention over three tiles, blocks of 50
    positions, so some key tiles are skipped, some full and some partial."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        q, k, v, pos = _case(7, i=300, f=4)
        ctx = AttentionContext(q_pos=pos, k_pos=pos)
        biases = [BlockMask(50), LinearBias(torch.rand(4))]
        want, _ = attend(q, k, v, ctx, biases)
        with flex_compile(True), torch.no_grad():
            got, _ = attend(q, k, v, ctx, biases, backend="flex")
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.slow
def test_compiled_second_length_with_randomized_positions():
    """Two compiles (~1 min on CPU): torch 2.13's dynamic recompile fails here; the static retry must work."""
    from torch.nn.attention.flex_attention import flex_attention

    saved = dict(flex_backend._FLEX)
    flex_backend._FLEX.update(compiled=torch.compile(flex_attention), static=None, failed_keys={}, static_keys={})
    try:
        biases = [LinearBias(torch.rand(4))]
        with flex_compile(True), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i in (256, 384):
                _run_sparse(i, biases)  # compares with eager
        assert not flex_backend._FLEX["failed_keys"]  # no configuration fell back to the unfused kernel
    finally:
        flex_backend._FLEX.update(saved)
