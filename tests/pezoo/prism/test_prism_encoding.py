"""The ``prism`` encoding behind the interface: decoding equals the full pass, the folded
q/k give Eq. 9's score, streams are histograms times the sinusoid table, options are strict."""

from __future__ import annotations

import dataclasses
import inspect
import math

import pytest
import torch
from torch import nn

import pezoo
from pezoo.encodings.prism import PRISM, PRISMConfig, support_for
from pezoo.encodings.prism import encoding as prism_encoding
from pezoo.encodings.prism.streams import (
    cursor_scores,
    fold_position_streams,
    normalise_streams,
    position_scores,
    stack_factors,
)

D, H, LAYERS = 32, 4, 3


class TinyDecoder(nn.Module):
    """A minimal pre-LN attention stack that calls the hooks the way a backbone does."""

    def __init__(self, pe: pezoo.PositionalEncoding, backend: str = "eager") -> None:
        super().__init__()
        self.pe = pe
        self.embed = nn.Embedding(20, D)
        self.norms = nn.ModuleList(nn.LayerNorm(D) for _ in range(LAYERS))
        self.attn = nn.ModuleList(pezoo.SelfAttention(D, H, layer=i, backend=backend) for i in range(LAYERS))

    def forward(self, tokens: torch.Tensor, state: dict | None = None) -> torch.Tensor:
        """A full pass without ``state`` (dropped after it: PRISM may add its scores as a bias),
        else continuing ``state``."""
        state_kept = state is not None
        state = {} if state is None else state
        start, s = state.get("length", 0), tokens.shape[1]
        pos = torch.arange(start + s)[None]
        ctx = pezoo.AttentionContext(q_pos=pos[:, start:], k_pos=pos, state=state, state_kept=state_kept)
        x = self.embed(tokens) * math.sqrt(D)
        for layer, (norm, attn) in enumerate(zip(self.norms, self.attn, strict=True)):
            self.pe.observe(layer, x, ctx)
            x = x + attn(norm(x), self.pe, ctx)[0]
        state["length"] = start + s
        return x


def build(backend: str = "eager", **options) -> TinyDecoder:
    torch.manual_seed(0)
    pe = pezoo.create("prism", dims=pezoo.ModelDims(d_model=D, n_heads=H, n_layers=LAYERS), **options)
    return TinyDecoder(pe, backend).eval()


VARIANTS = [
    {},
    {"copy_cursors": (0,)},
    {"copy_cursors": (1,), "copy_key": "learned", "n_cursors": 3},
    {"layers": (0, 2), "eps_support": "full", "stream_norm": "constant", "copy_every": 5},
    {"copy_cursors": (0,), "max_support": 4, "scan_checkpoint": 3},
]


@pytest.mark.parametrize("options", VARIANTS, ids=lambda o: ",".join(o) or "default")
def test_incremental_decoding_equals_full_forward(options):
    model = build(**options)
    tokens = torch.randint(0, 20, (2, 21), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(tokens)
        state: dict = {}
        chunks = [model(tokens[:, :4], state)] + [model(tokens[:, t : t + 1], state) for t in range(4, 21)]
    # 21 tokens: the support grew from 16 to 32 during decoding (or stays at a fixed window's P)
    assert state[model.pe.state_key(0)]["support"] == options.get("max_support", 32)
    torch.testing.assert_close(torch.cat(chunks, 1), full, rtol=0, atol=2e-5)


def test_result_does_not_depend_on_the_support():
    tokens = torch.randint(0, 20, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        small = build(copy_cursors=(0,), min_support=12)(tokens)
        large = build(copy_cursors=(0,), min_support=100)(tokens)
    torch.testing.assert_close(small, large, rtol=0, atol=1e-5)


def test_support_grows_with_the_sequence():
    assert [support_for(n, 16) for n in (1, 16, 17, 100, 2048, 2049)] == [16, 16, 32, 128, 2048, 4096]


def test_backends_agree():
    tokens = torch.randint(0, 20, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        eager, sdpa = build("eager")(tokens), build("sdpa")(tokens)
    torch.testing.assert_close(sdpa, eager, rtol=0, atol=1e-5)


def test_folded_dot_product_is_the_hybrid_score():
    """q'·k'/√e = μ q·k/√e + (1-μ) Σ_c |α_c| ⟨g_q^c, g_k^c⟩ / √(C·d_pe)  (Eq. 9, Alg. 4)."""
    g = torch.Generator().manual_seed(4)
    b, h, s, e, c, f = 2, 3, 5, 8, 2, 6
    q, k = torch.randn(b, h, s, e, generator=g), torch.randn(b, h, s, e, generator=g)
    gq, gk = torch.randn(b, h, s, c, f, generator=g), torch.randn(b, h, s, c, f, generator=g)
    mu, alpha = torch.rand(h, generator=g), torch.rand(h, c, generator=g)
    q2, k2 = fold_position_streams(q, k, gq, gk, mu, alpha)
    got = q2 @ k2.transpose(-1, -2) / math.sqrt(e)
    for bi in range(b):
        for hi in range(h):
            for i in range(s):
                for j in range(s):
                    content = (q[bi, hi, i] @ k[bi, hi, j]).item() / math.sqrt(e)
                    position = sum(
                        alpha[hi, ci].item() * (gq[bi, hi, i, ci] @ gk[bi, hi, j, ci]).item() for ci in range(c)
                    ) / math.sqrt(c * f)
                    expected = mu[hi].item() * content + (1 - mu[hi].item()) * position
                    assert got[bi, hi, i, j].item() == pytest.approx(expected, abs=1e-4)


def test_position_scores_are_the_position_term_of_eq9():
    """(1-μ) Σ_c |α_c| ⟨g_q^c, g_k^c⟩ / √(C·d_pe), written out, and the fold's position part."""
    g = torch.Generator().manual_seed(5)
    b, h, s, e, c, f = 2, 3, 5, 8, 2, 6
    gq, gk = torch.randn(b, h, s, c, f, generator=g), torch.randn(b, h, s, c, f, generator=g)
    mu, alpha = torch.rand(h, generator=g), torch.rand(h, c, generator=g)
    got = position_scores(cursor_scores(gq, gk), mu, alpha, f)
    assert got.shape == (b, h, s, s)
    for bi in range(b):
        for hi in range(h):
            for i in range(s):
                for j in range(s):
                    position = sum(
                        alpha[hi, ci].item() * (gq[bi, hi, i, ci] @ gk[bi, hi, j, ci]).item() for ci in range(c)
                    ) / math.sqrt(c * f)
                    assert got[bi, hi, i, j].item() == pytest.approx((1 - mu[hi].item()) * position, abs=1e-5)
    zero = torch.zeros(b, h, s, e)  # the fold with q = k = 0 leaves the position part alone
    q2, k2 = fold_position_streams(zero, zero, gq, gk, mu, alpha)
    torch.testing.assert_close(q2 @ k2.transpose(-1, -2) / math.sqrt(e), got, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["l2", "constant"])
def test_cursor_scores_normalise_the_products_as_alg3_normalises_the_streams(mode):
    g = torch.Generator().manual_seed(7)
    raw = torch.randn(5, 2, 6, 2, 8, generator=g, dtype=torch.float64)  # (s, b, 2h, c, f)
    g_q, g_k = normalise_streams(raw, mode).unflatten(2, (2, 3)).permute(2, 1, 3, 0, 4, 5)  # (b, h, s, c, f)
    e_q, e_k = raw.unflatten(2, (2, 3)).permute(2, 1, 3, 0, 4, 5)
    n_q, n_k = stack_factors(raw, mode).unflatten(2, (2, 3)).permute(2, 1, 3, 0)  # (b, h, s)
    expected = torch.einsum("bhicf,bhjcf->bhcij", g_q, g_k)
    torch.testing.assert_close(cursor_scores(e_q, e_k, n_q, n_k), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("options", [*VARIANTS, {"layers": (0, 1), "d_pe": 64}], ids=lambda o: ",".join(o) or "default")
def test_scores_as_a_bias_equal_the_widened_q_k(options, monkeypatch):
    """A full pass whose state is dropped adds the position term as a bias (forced here at
    every width); one whose state is kept widens q/k. Outputs and every gradient agree in
    float64."""
    monkeypatch.setattr(prism_encoding, "scores_as_bias", lambda q, k, streams, ctx: not ctx.state_kept)
    model = build(**options).double()
    tokens = torch.randint(0, 20, (2, 13), generator=torch.Generator().manual_seed(6))
    results = []
    for state in (None, {}):
        model.zero_grad()
        out = model(tokens, state)
        out.square().mean().backward()
        results.append((out.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (bias_out, bias_grads), (wide_out, wide_grads) = results
    torch.testing.assert_close(bias_out, wide_out, rtol=1e-10, atol=1e-10)
    assert bias_grads.keys() == wide_grads.keys()
    for name, grad in wide_grads.items():
        torch.testing.assert_close(bias_grads[name], grad, rtol=1e-9, atol=1e-10, msg=name)


def test_when_the_scores_go_as_a_bias(monkeypatch):
    chosen: list[bool] = []
    decide = prism_encoding.scores_as_bias
    monkeypatch.setattr(prism_encoding, "scores_as_bias", lambda *a: chosen.append(decide(*a)) or chosen[-1])
    model = build(d_pe=64)  # a bias while the (i, j) scores are smaller than q and k's 64-wide streams
    with torch.no_grad():
        model(torch.zeros(1, 20, dtype=torch.long))  # 20 · 20 < 40 · 64
        assert chosen == [True] * LAYERS
        chosen.clear()
        model(torch.zeros(1, 128, dtype=torch.long))  # 128 · 128 = 256 · 64: widened
        assert chosen == [False] * LAYERS
        chosen.clear()
        state: dict = {}
        model(torch.zeros(1, 5, dtype=torch.long), state)  # kept for decoding: the cache holds widened keys
        model(torch.zeros(1, 1, dtype=torch.long), state)
        assert chosen == [False] * (2 * LAYERS)
    q = torch.zeros(1, H, 4, 8)
    streams = torch.zeros(1, H, 4, 2, 64)
    pos = torch.arange(4)[None]
    dropped = pezoo.AttentionContext(q_pos=pos, k_pos=pos, state_kept=False)
    assert prism_encoding.scores_as_bias(q, q, streams, dropped)
    assert not prism_encoding.scores_as_bias(q.to("meta"), q.to("meta"), streams, dropped)  # not CPU: fused kernels
    cached = pezoo.AttentionContext(q_pos=pos[:, 2:], k_pos=pos, state_kept=False)  # keys cached before
    assert not prism_encoding.scores_as_bias(q[:, :, 2:], q, streams, cached)
    assert not prism_encoding.scores_as_bias(q, q, streams, pezoo.AttentionContext(q_pos=pos, k_pos=pos))
    narrow = torch.zeros(1, H, 4, 8, 32)  # d_pe 32 (the default): slower as scores, measured
    assert not prism_encoding.scores_as_bias(q, q, narrow, dropped)
    pos = torch.arange(40)[None]  # C·d_pe = 128 < 4 · 40 tokens: the per-layer work on the scores outgrows the saving
    long = torch.zeros(1, H, 40, 8)
    assert not prism_encoding.scores_as_bias(long, long, streams, pezoo.AttentionContext(pos, pos, state_kept=False))
    assert prism_encoding.scores_as_bias(long[:, :, :32], long[:, :, :32], streams, dropped)  # 128 = 4 · 32


def test_streams_are_normalised_superpositions_of_sinusoids():
    model = build(copy_cursors=(0,))
    tokens = torch.randint(0, 20, (1, 7), generator=torch.Generator().manual_seed(5))
    pe = model.pe
    ctx = pezoo.AttentionContext(q_pos=torch.arange(7)[None], k_pos=torch.arange(7)[None])
    with torch.no_grad(), pe.recording() as rec:
        pe.observe(0, model.embed(tokens) * math.sqrt(D), ctx)
    g_q, g_k = ctx.scratch[pe.state_key(0)].normalised()  # (b, h, s, c, f)
    hist = rec[0]["hist"]  # (b, 2, h, c, s, p)
    support, f = hist.shape[-1] // 2, pe.config.d_pe
    for side, streams in ((0, g_q), (1, g_k)):
        for hi in range(H):
            for t in range(7):
                raw = []
                for ci in range(pe.config.n_cursors):
                    e = [0.0] * f
                    for bin_ in range(2 * support + 1):
                        w = hist[0, side, hi, ci, t, bin_].item()
                        for m in range(f // 2):
                            angle = (bin_ - support) / 10000 ** (2 * m / f)
                            e[2 * m] += w * math.sin(angle)
                            e[2 * m + 1] += w * math.cos(angle)
                    raw.append(e)
                norm = math.sqrt(sum(v * v for e in raw for v in e))
                expected = torch.tensor(raw) * math.sqrt(f) / norm
                torch.testing.assert_close(streams[0, hi, t], expected, rtol=0, atol=1e-4)


def test_recorded_gates_and_fixed_key_cursors():
    model = build(copy_cursors=(0,))
    tokens = torch.randint(0, 20, (2, 6), generator=torch.Generator().manual_seed(6))
    with torch.no_grad(), model.pe.recording() as rec:
        model(tokens)
    (entry,) = rec
    gates, hist = entry["gates"], entry["hist"]  # (b, 2, h, c, s, 4), (b, 2, h, c, s, p)
    assert ((gates >= 0) & (gates <= 1)).all()
    torch.testing.assert_close(gates[..., 1:].sum(-1), torch.ones(gates.shape[:-1]))
    torch.testing.assert_close(hist.sum(-1), torch.ones(hist.shape[:-1]), rtol=0, atol=1e-5)
    support = hist.shape[-1] // 2
    for t in range(6):  # key cursor 0 of every head is increment-only: one-hot at offset t + 1
        assert (gates[:, 1, :, 0, t] == torch.tensor([0.0, 1.0, 0.0, 0.0])).all()
        assert (hist[:, 1, :, 0, t, support + t + 1] == 1).all()
    # the learned cursors start near the uniform prior of the paper's Fig. 11
    learned = gates[:, 0]
    assert (learned[..., 0] - 0.5).abs().max() < 0.15 and (learned[..., 1:] - 1 / 3).abs().max() < 0.15


def test_copy_branch_copies_key_positions():
    """Null logit -inf-like and flat copy scores: token t copies uniformly from j <= t, so
    its query cursor sits uniformly on offsets 1..t+1 (the absolute keys' bins)."""
    model = build(copy_cursors=(0,), copy_null_bias=-50.0)
    copy = model.pe.prism_layers["0"].copy
    nn.init.zeros_(copy.query.weight)
    nn.init.zeros_(copy.null.weight)
    tokens = torch.randint(0, 20, (1, 5), generator=torch.Generator().manual_seed(7))
    with torch.no_grad(), model.pe.recording() as rec:
        model(tokens)
    hist = rec[0]["hist"][0, 0, :, 0]  # query cursor 0 of each head: (h, s, p)
    support = hist.shape[-1] // 2
    for t in range(5):
        expected = torch.zeros(2 * support + 1)
        expected[support + 1 : support + t + 2] = 1 / (t + 1)
        torch.testing.assert_close(hist[:, t], expected.expand(H, -1), rtol=0, atol=1e-4)


def test_layers_use_the_most_recent_prism_layer():
    pe = PRISM(d_model=D, n_heads=H, n_layers=5, layers=(1, 3))
    assert [pe.source_layer(i) for i in range(5)] == [None, 1, 1, 3, 3]
    ctx = pezoo.AttentionContext(q_pos=torch.arange(3)[None], k_pos=torch.arange(3)[None])
    q = k = torch.randn(1, H, 3, D // H)
    assert pe.qk(0, q, k, ctx)[0] is q  # below the first PRISM layer: untouched
    with pytest.raises(RuntimeError, match="observe"):
        pe.qk(2, q, k, ctx)


def test_wrong_heads_layout_or_layer_name_the_mistake():
    """Used to be torch's broadcast error for the heads and the layout, an IndexError for the layer."""
    pe = PRISM(d_model=D, n_heads=H, n_layers=2)
    ctx = pezoo.AttentionContext(q_pos=torch.arange(6)[None], k_pos=torch.arange(6)[None])
    pe.observe(0, torch.randn(2, 6, D), ctx)
    q = torch.randn(2, H, 6, D // H)
    assert pe.qk(0, q, q, ctx)[0].shape[:3] == (2, H, 6)
    twice = torch.randn(2, 2 * H, 6, D // H)
    with pytest.raises(ValueError, match=f"built for n_heads={H}, got q with {2 * H} heads"):
        pe.qk(0, twice, twice, ctx)
    swapped = q.transpose(1, 2)  # (b, s, h, e)
    with pytest.raises(ValueError, match=rf"{H} queries on axis 2 of q for 6 positions.*\(b, h, s, e\)"):
        pe.qk(0, swapped, swapped, ctx)
    with pytest.raises(ValueError, match="new keys only"):
        pe.qk(0, q, torch.randn(2, H, 7, D // H), ctx)
    for hook in (pe.qk, pe.bias):
        with pytest.raises(ValueError, match=r"built for n_layers=2 \(layers 0\.\.1\), got layer 5"):
            hook(5, q, q, ctx)
    with pytest.raises(ValueError, match="got layer 2"):
        pe.observe(2, torch.randn(2, 6, D), ctx)


def test_gradients_reach_every_learned_part():
    model = build(copy_cursors=(0,))
    model.train()
    model(torch.randint(0, 20, (2, 6))).pow(2).mean().backward()
    pe = model.pe
    layer = pe.prism_layers["0"]
    for name, p in [
        ("gamma", layer.gamma_raw),
        ("gate head", layer.gates.head.weight),
        ("gru", layer.gates.gru.weight_ih_l0),
        ("copy", layer.copy.key.weight),
        ("alpha", pe.alpha),
        ("mu", pe.mu_logit),
    ]:
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_options_are_strict_and_documented():
    dims = pezoo.ModelDims(d_model=D, n_heads=H, n_layers=LAYERS)
    with pytest.raises(TypeError, match="valid options"):
        pezoo.create("prism", dims=dims, n_cursor=3)
    for bad in ({"d_pe": 7}, {"layers": (5,)}, {"copy_cursors": (2,)}, {"stream_norm": "ln"}, {"gamma_init": 1.0}):
        with pytest.raises(ValueError):
            pezoo.create("prism", dims=dims, **bad)
    keywords = {n for n, p in inspect.signature(PRISM).parameters.items() if p.kind is p.KEYWORD_ONLY}
    assert keywords == {f.name for f in dataclasses.fields(PRISMConfig)}
    # the same defaults: the paper card reads a run's unset options off PRISMConfig's
    config_defaults = {n: p.default for n, p in inspect.signature(PRISMConfig).parameters.items()}
    for name, parameter in inspect.signature(PRISM).parameters.items():
        if parameter.kind is parameter.KEYWORD_ONLY:
            assert parameter.default == config_defaults[name], name


def test_training_helpers():
    pe = pezoo.create("prism", dims=pezoo.ModelDims(d_model=D, n_heads=H, n_layers=LAYERS), regulariser="frobenius")
    (group,) = pe.optimizer_groups()
    assert group["params"] == [pe.alpha] and group["lr"] == 0.03 and group["betas"] == (0.8, 0.92)
    w = pe.prism_layers["0"].gates.gru.weight_hh_l0
    assert pe.regularisation().item() == pytest.approx(1e-3 * w.pow(2).sum().item(), rel=1e-5)
    ortho = pezoo.create("prism", dims=pezoo.ModelDims(d_model=D, n_heads=H, n_layers=LAYERS))
    w = ortho.prism_layers["0"].gates.gru.weight_hh_l0  # (3g, g) with orthonormal columns
    torch.testing.assert_close(w.T @ w, torch.eye(w.shape[1]), rtol=0, atol=1e-5)
    assert ortho.regularisation().item() == 0.0
    assert not any(k.endswith(("unpermute", "copy_keys_in_scan")) for k in ortho.state_dict())


@pytest.mark.parametrize("options", [{}, {"copy_cursors": (0,)}, {"copy_every": 3, "min_support": 4}],
                         ids=["default", "copy", "small-support"])  # fmt: skip
def test_windowed_scan_equals_the_full_width_scan(options):
    """scan_window (the default) only touches reachable bins; outputs, gradients and the
    decoding state must equal the plain full-width scan's, also when a decoding call
    continues from a saved state and the support grows between calls (P 8 -> 16)."""
    tokens = torch.randint(0, 20, (2, 11), generator=torch.Generator().manual_seed(3))
    runs = {}
    for window in (True, False):
        model = build(scan_window=window, **options)
        model.train()
        out = model(tokens)
        out.square().mean().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        state: dict = {}
        with torch.no_grad():
            model(tokens[:, :7], state)
            step = model(tokens[:, 7:], state)
        runs[window] = (out.detach(), grads, step, state[model.pe.state_key(0)]["hist"])
    (out_w, grads_w, step_w, hist_w), (out_f, grads_f, step_f, hist_f) = runs[True], runs[False]
    torch.testing.assert_close(out_w, out_f, rtol=1e-5, atol=1e-6)
    assert grads_w.keys() == grads_f.keys() and grads_w
    for name in grads_w:
        torch.testing.assert_close(grads_w[name], grads_f[name], rtol=1e-4, atol=1e-6, msg=name)
    torch.testing.assert_close(step_w, step_f, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(hist_w, hist_f, rtol=1e-5, atol=1e-7)


def test_eps_zero_is_rejected():
    """At ε = 0 an empty bin's log(h + ε) is -inf and every gate gradient NaN."""
    with pytest.raises(ValueError, match="eps must be > 0"):
        pezoo.create("prism", dims=pezoo.ModelDims(d_model=D, n_heads=H, n_layers=LAYERS), eps=0.0)


@pytest.mark.parametrize("options", VARIANTS, ids=lambda o: ",".join(o) or "default")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16], ids=str)
def test_dtype_moves(options, dtype):
    """After .to(dtype) the model runs, returns that dtype, stays close to fp32 and decodes
    token by token like the full pass (the filter runs in fp32 under fp16 / bf16)."""
    tokens = torch.randint(0, 20, (2, 9), generator=torch.Generator().manual_seed(5))
    model = build(**options)
    with torch.no_grad():
        want = model(tokens)
        moved = model.to(dtype)
        got = moved(tokens)
        state: dict = {}
        steps = torch.cat([moved(tokens[:, :4], state), *(moved(tokens[:, t : t + 1], state) for t in range(4, 9))], 1)
    assert got.dtype == dtype and torch.isfinite(got).all()
    tol = {torch.float64: 1e-4, torch.float16: 0.05, torch.bfloat16: 0.3}[dtype]
    scale = want.abs().max().item()
    assert (got.float() - want).abs().max().item() <= tol * scale
    assert (steps.float() - got.float()).abs().max().item() <= tol * scale
    assert moved.pe.prism_layers["0"].unpermute.dtype == torch.long  # index buffers keep their dtype


def test_a_bf16_stream_into_an_fp32_prism_without_autocast():
    """Every other encoding takes a bf16 residual stream with fp32 weights and returns bf16;
    PRISM's GRU refused mixed dtypes. The gates now read the stream in the module's dtype."""
    torch.manual_seed(0)
    pe = pezoo.create("prism", dims=pezoo.ModelDims(d_model=D, n_heads=H, n_layers=LAYERS)).eval()
    x = torch.randn(2, 6, D)
    q = torch.randn(2, H, 6, D // H)
    pos = torch.arange(6)[None]
    outs = {}
    for dtype in (torch.float32, torch.bfloat16):
        ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos)
        with torch.no_grad():
            pe.observe(0, x.to(dtype), ctx)
            outs[dtype] = pe.qk(0, q.to(dtype), q.to(dtype), ctx)
    assert all(t.dtype == torch.bfloat16 for t in outs[torch.bfloat16])
    for got, want in zip(outs[torch.bfloat16], outs[torch.float32], strict=True):
        torch.testing.assert_close(got.float(), want, atol=0.05, rtol=0.05)
