"""Hybrid layers (Yang et al. 2025, "Rope to Nope and Back Again", RNoPE-SWA; Llama 4's iRoPE):
each layer's attention written out here — RoPE with a sliding window or chunks on R layers,
plain global attention (with Llama 4's temperature, if asked) on N layers — against the hooks."""

from __future__ import annotations

import cmath
import math
import os

import pytest
import torch

import pezoo
from pezoo import AttentionContext
from pezoo.biases import PositionRanges
from pezoo.encodings.hybrid import ChunkMask, chunk_blocks, layer_kinds
from pezoo.testing import check_encoding
from pezoo.testing.kit import quiet_flex_warnings

DIMS = pezoo.ModelDims(d_model=32, n_heads=4, n_layers=4)  # head dim 8


def rotate(x, pos, base=10000.0):
    """RoPE (Su et al. 2021): pair (2i, 2i+1) as a complex number times e^{i pos θ_i}."""
    e = len(x)
    out = []
    for i in range(e // 2):
        z = complex(float(x[2 * i]), float(x[2 * i + 1])) * cmath.exp(1j * pos * base ** (-2 * i / e))
        out += [z.real, z.imag]
    return out


def reference_layer(q, k, v, pos, kind, window=None, local="window", temperature=None, global_base=None):
    """One row's attention (h, s, e) at positions ``pos`` for a layer of ``kind``, element by
    element (a G layer: RoPE at ``global_base``, global; an N layer's queries times
    ``temperature(pos)``, if given)."""
    h, s, e = q.shape
    out = torch.zeros(h, s, v.shape[-1], dtype=torch.float64)
    for head in range(h):
        for i in range(s):
            pi = pos[i]
            if kind == "R":
                qi = rotate(q[head, i], pi)
            elif kind == "G":
                qi = rotate(q[head, i], pi, global_base)
            else:
                factor = 1.0 if temperature is None else temperature(pi)
                qi = [factor * float(x) for x in q[head, i]]
            keys = []
            for j in range(i + 1):
                pj = pos[j]
                if kind == "R" and window is not None:
                    if local == "window" and not pi - pj < window:
                        continue
                    if local == "chunk" and pj // window != pi // window:
                        continue
                if kind == "R":
                    kj = rotate(k[head, j], pj)
                elif kind == "G":
                    kj = rotate(k[head, j], pj, global_base)
                else:
                    kj = [float(x) for x in k[head, j]]
                keys.append((j, sum(a * b for a, b in zip(qi, kj, strict=True)) / math.sqrt(e)))
            top = max(z for _, z in keys)
            weights = [(j, math.exp(z - top)) for j, z in keys]
            total = sum(w for _, w in weights)
            for j, w in weights:
                out[head, i] += w / total * v[head, j].double()
    return out


def run(pe, layer, q, k, v, pos, backend="eager"):
    ctx = AttentionContext(q_pos=pos, k_pos=pos)
    q2, k2 = pe.qk(layer, q, k, ctx)
    with quiet_flex_warnings():
        out, _ = pezoo.attend(q2, k2, v, ctx, pe.bias(layer, q2, k2, ctx), scale=1 / math.sqrt(8), backend=backend)
    return out


@pytest.mark.parametrize("backend", ["eager", "sdpa", "flex"])
@pytest.mark.parametrize(("local", "window"), [("window", 3), ("chunk", 4), ("window", None)])
def test_every_layer_attends_as_its_kind_says(local, window, backend):
    torch.manual_seed(0)
    pe = pezoo.create("hybrid", dims=DIMS, window=window, local=local)
    assert pe.kinds == "RRRN"
    q, k, v = (torch.randn(1, 4, 9, 8) for _ in range(3))
    positions = [0, 1, 2, 3, 4, 5, 6, 7, 8] if local == "window" else [2, 3, 4, 5, 6, 7, 8, 9, 10]
    pos = torch.tensor([positions])
    for layer in range(4):
        want = reference_layer(q[0], k[0], v[0], positions, pe.kinds[layer], window, local)
        got = run(pe, layer, q, k, v, pos, backend)[0].double()
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5, msg=f"layer {layer}")


@pytest.mark.parametrize("backend", ["eager", "sdpa", "flex"])
def test_g_layers_rotate_at_their_own_base_and_attend_globally(backend):
    """Gemma 3's layout: local RoPE layers (a window, base 10⁴) and a global RoPE layer of its own base."""
    torch.manual_seed(3)
    pe = pezoo.create("hybrid", dims=DIMS, pattern="RRRG", window=3, global_base=500.0)
    assert pe.kinds == "RRRG"
    q, k, v = (torch.randn(1, 4, 9, 8) for _ in range(3))
    positions = list(range(9))
    pos = torch.tensor([positions])
    for layer in range(4):
        want = reference_layer(q[0], k[0], v[0], positions, pe.kinds[layer], window=3, global_base=500.0)
        got = run(pe, layer, q, k, v, pos, backend)[0].double()
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5, msg=f"layer {layer}")


def test_llama4_temperature_acts_on_the_nope_layers_only():
    torch.manual_seed(1)
    pe = pezoo.create("hybrid", dims=DIMS, nope_temperature="llama4", floor_scale=3)

    def llama4(p):
        return 1 + 0.1 * math.log(math.floor((p + 1) / 3) + 1)

    q, k, v = (torch.randn(1, 4, 8, 8) for _ in range(3))
    positions = list(range(8))
    pos = torch.tensor([positions])
    for layer in range(4):
        kind = pe.kinds[layer]
        want = reference_layer(q[0], k[0], v[0], positions, kind, temperature=llama4 if kind == "N" else None)
        torch.testing.assert_close(run(pe, layer, q, k, v, pos)[0].double(), want, atol=1e-5, rtol=1e-5)


def test_beam_temperature_is_a_power_of_the_position_on_the_nope_layers():
    """Reflection AI's Beam (transformers' compute_attention_scaling): q · (1 + (pos + 1)/F)^β on its
    NoPE layers, not floored; at F = 3, β = 0.5 it grows from the first position."""
    torch.manual_seed(1)
    pe = pezoo.create("hybrid", dims=DIMS, nope_temperature="beam", attn_scale=0.5, floor_scale=3)
    q, k, v = (torch.randn(1, 4, 8, 8) for _ in range(3))
    positions = list(range(8))
    pos = torch.tensor([positions])
    for layer in range(4):
        kind = pe.kinds[layer]
        beam = (lambda p: (1 + (p + 1) / 3) ** 0.5) if kind == "N" else None
        want = reference_layer(q[0], k[0], v[0], positions, kind, temperature=beam)
        torch.testing.assert_close(run(pe, layer, q, k, v, pos)[0].double(), want, atol=1e-5, rtol=1e-5)


def test_each_kind_rotates_its_own_fraction_of_each_head():
    """Laguna's layout: the R layers rotate every feature, the G layers the first half of each
    head at frequencies over those 4 features (base^(-2i/4)), the rest passing through."""
    torch.manual_seed(5)
    pe = pezoo.create("hybrid", dims=DIMS, pattern="RRRG", global_base=500.0, global_rotary_fraction=0.5)
    q, k = torch.randn(1, 4, 5, 8), torch.randn(1, 4, 5, 8)
    ctx = AttentionContext(q_pos=torch.tensor([[0, 1, 2, 3, 4]]), k_pos=torch.tensor([[0, 1, 2, 3, 4]]))
    for layer, (rotated, base) in ((0, (8, 10000.0)), (3, (4, 500.0))):
        for x, got in zip((q, k), pe.qk(layer, q, k, ctx), strict=True):
            want = [[rotate(x[0, h, i, :rotated], i, base) + x[0, h, i, rotated:].tolist() for i in range(5)]
                    for h in range(4)]  # fmt: skip
            torch.testing.assert_close(got[0].double(), torch.tensor(want, dtype=torch.float64), atol=1e-5, rtol=1e-5)


def test_global_layers_rotate_heads_of_their_own_width():
    """Gemma 4's layout: R layers' heads 8 wide, every feature rotated; G layers' heads 16 wide
    under p-RoPE with p = 1/4 in the rotate-half layout (transformers' ``proportional`` type):
    pair (i, i + 8) turns by pos · base^(-2i/16) for the ⌊p · 16/2⌋ = 2 highest frequencies,
    the other six pairs not at all. Written out per feature here."""
    torch.manual_seed(6)
    pe = pezoo.create("hybrid", dims=DIMS, pattern="RRRG", layout="half", global_base=500.0, global_head_dim=16,
                      global_scaling={"rope_type": "p_rope", "p": 0.25})  # fmt: skip
    ctx = AttentionContext(q_pos=torch.tensor([[0, 1, 2, 3, 4]]), k_pos=torch.tensor([[0, 1, 2, 3, 4]]))

    def rotate_half(x, pos, base, kept):
        e = len(x)
        out = [float(v) for v in x]
        for i in range(kept):
            z = complex(float(x[i]), float(x[i + e // 2])) * cmath.exp(1j * pos * base ** (-2 * i / e))
            out[i], out[i + e // 2] = z.real, z.imag
        return out

    for layer, width, base, kept in ((0, 8, 10000.0, 4), (3, 16, 500.0, 2)):
        q, k = torch.randn(1, 4, 5, width), torch.randn(1, 4, 5, width)
        for x, got in zip((q, k), pe.qk(layer, q, k, ctx), strict=True):
            want = [[rotate_half(x[0, h, i], i, base, kept) for i in range(5)] for h in range(4)]
            torch.testing.assert_close(got[0].double(), torch.tensor(want, dtype=torch.float64), atol=1e-5, rtol=1e-5)


def test_scaling_scales_the_rope_layers_rotation_only():
    """Linear scaling (position interpolation, Chen et al. 2023) by 2: an R layer rotates
    position p by the angles of p / 2; an N layer leaves q and k alone."""
    torch.manual_seed(2)
    pe = pezoo.create("hybrid", dims=DIMS, scaling={"rope_type": "linear", "factor": 2.0})
    q, k = torch.randn(1, 4, 5, 8), torch.randn(1, 4, 5, 8)
    ctx = AttentionContext(q_pos=torch.tensor([[0, 1, 2, 3, 4]]), k_pos=torch.tensor([[0, 1, 2, 3, 4]]))
    q2, k2 = pe.qk(0, q, k, ctx)
    for x, got in ((q, q2), (k, k2)):
        want = [[rotate(x[0, h, i], i / 2) for i in range(5)] for h in range(4)]
        torch.testing.assert_close(got[0].double(), torch.tensor(want, dtype=torch.float64), atol=1e-5, rtol=1e-5)
    q3, k3 = pe.qk(3, q, k, ctx)
    assert torch.equal(q3, q) and torch.equal(k3, k)


def test_the_pattern_repeats_as_llama4_places_its_nope_layers():
    """transformers' Llama4TextConfig: layer l uses RoPE iff (l + 1) % no_rope_layer_interval != 0."""
    for n_layers in (4, 8, 10):
        want = "".join("R" if (layer + 1) % 4 != 0 else "N" for layer in range(n_layers))
        assert layer_kinds("RRRN", n_layers) == want
        pe = pezoo.create("hybrid", head_dim=8, n_heads=4, n_layers=n_layers)
        assert pe.kinds == want and [pe.is_rope(layer) for layer in range(n_layers)] == [c == "R" for c in want]
    assert pezoo.create("hybrid", head_dim=8, n_heads=4, n_layers=2).kinds == "RN"  # too few layers for RRRN
    assert pezoo.create("hybrid", head_dim=8, n_heads=4, n_layers=1).kinds == "N"  # one layer: the global one
    assert pezoo.create("hybrid", head_dim=8, n_heads=4, n_layers=3, pattern="NR").kinds == "NRN"


@pytest.mark.parametrize(
    "options",
    [
        {"window": 3},
        {"window": 4, "local": "chunk"},
        {"window": 5, "nope_temperature": "llama4", "floor_scale": 4, "layout": "half"},
        {"pattern": "RRRG", "window": 3, "global_base": 1e6, "global_scaling": {"rope_type": "linear", "factor": 8.0}},
    ],
    ids=["rnope-swa", "chunked", "irope", "gemma3"],
)
def test_windowed_and_chunked_hybrids_pass_the_conformance_kit(options):
    """Every check, the cached decode equal to the full pass included, with the local masks on."""
    check_encoding(lambda: pezoo.create("hybrid", dims=DIMS, **options), DIMS, length=10, extrapolation_factor=4)


def test_chunk_block_summaries_are_sound():
    """Per (query block, key block): 'any' False only where no pair shares a chunk, 'all' True
    only where every pair does (brute force over random position ranges)."""
    g = torch.Generator().manual_seed(0)
    size = torch.tensor(5.0)
    for _ in range(200):
        q = torch.sort(torch.randint(0, 40, (2,), generator=g)).values.float()
        k = torch.sort(torch.randint(0, 40, (2,), generator=g)).values.float()
        ranges = PositionRanges(q[:1][None], q[1:][None], k[:1][None], k[1:][None])
        any_allowed, all_allowed = (bool(t.flatten()[0]) for t in chunk_blocks(size, ranges))
        pairs = [(a // 5 == b // 5) for a in range(int(q[0]), int(q[1]) + 1) for b in range(int(k[0]), int(k[1]) + 1)]
        assert any_allowed == any(pairs) and all_allowed == all(pairs)


def test_chunk_mask_membership_and_errors():
    pos = torch.arange(9)[None]
    allowed = ChunkMask(3).allowed(AttentionContext(q_pos=pos, k_pos=pos))[0, 0]
    for i in range(9):
        for j in range(9):
            assert bool(allowed[i, j]) == (i // 3 == j // 3)
    with pytest.raises(ValueError, match="chunk must be an integer >= 1"):
        ChunkMask(0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"pattern": "RRX"}, r"pattern is a string of R \(RoPE, local\), N \(NoPE, global\) and G"),
        ({"pattern": ""}, r"pattern is a string of R"),
        ({"pattern": "NNNN"}, r"without an R \(RoPE\) layer"),
        ({"pattern": "RRRRRN"}, r"gives 'RRRR', without an N \(NoPE\) or G \(global RoPE\) layer.*pattern='RRRN'"),
        ({"global_base": 1e6}, r"global_base, global_scaling, global_rotary_fraction and global_head_dim set the G "
                               r"layers' RoPE, and pattern 'RRRN'"),
        ({"global_rotary_fraction": 0.5}, r"global_head_dim set the G layers' RoPE, and pattern 'RRRN'"),
        ({"global_head_dim": 16}, r"global_head_dim set the G layers' RoPE, and pattern 'RRRN'"),
        ({"pattern": "RG", "global_head_dim": 0}, r"global_head_dim must be an integer >= 1"),
        ({"rotary_fraction": 1.5}, r"rotary_fraction must be in \(0, 1\]"),
        ({"pattern": "RG", "global_base": 0.5}, r"base"),
        ({"window": 0}, r"window must be an integer >= 1"),
        ({"local": "block"}, r"local must be one of 'window', 'chunk'"),
        ({"nope_temperature": "ssmax"}, r"nope_temperature must be one of None, 'llama4', 'ministral3', 'beam'"),
        ({"layout": "pairs"}, r"layout must be one of 'interleaved', 'half'"),
        ({"floor_scale": 0}, r"floor_scale must be an integer >= 1"),
    ],
)
def test_bad_options_are_errors_naming_them(options, message):
    with pytest.raises(ValueError, match=message):
        pezoo.create("hybrid", **{"head_dim": 8, "n_heads": 4, "n_layers": 4, **options})


def test_a_layer_outside_the_model_is_named():
    pe = pezoo.create("hybrid", dims=DIMS)
    pos = torch.arange(3)[None]
    with pytest.raises(ValueError, match="n_layers=4"):
        pe.qk(4, torch.randn(1, 4, 3, 8), torch.randn(1, 4, 3, 8), AttentionContext(q_pos=pos, k_pos=pos))


def test_spec_and_paper_setup():
    from pezoo.setups import paper_options
    from pezoo.spec import parse_pe

    spec = parse_pe("hybrid{pattern=RRRN,local=chunk,window=8192,nope_temperature=llama4}")
    assert spec.name == "hybrid" and spec.options["pattern"] == "RRRN" and spec.options["window"] == 8192
    assert paper_options("hybrid", "copy", DIMS) == {"pattern": "RRRN", "local": "window"}
    assert paper_options("hybrid", "copy", pezoo.ModelDims(32, 4, 2)) == {"pattern": "RN", "local": "window"}


@pytest.mark.parametrize("options", [{"window": 3}, {"window": 4, "local": "chunk", "nope_temperature": "llama4"}])
def test_in_a_hugging_face_model_a_left_padded_batch_generates_each_row_alone(options):
    transformers = pytest.importorskip("transformers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import pezoo.hf

    ids_config = {"vocab_size": 32, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=64, **ids_config)  # fmt: skip
    torch.manual_seed(0)
    model = pezoo.hf.use_encoding(transformers.LlamaForCausalLM(cfg).eval(), "hybrid", **options)
    assert model.pezoo_encoding.kinds == "RN"
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14]]
    ids = torch.tensor([[0] * (7 - len(p)) + p for p in prompts])
    batch = model.generate(ids, attention_mask=(ids != 0).long(), max_new_tokens=4, do_sample=False)
    for row, prompt in enumerate(prompts):
        alone = model.generate(torch.tensor([prompt]), max_new_tokens=4, do_sample=False)
        assert batch[row, 7:].tolist() == alone[0, len(prompt) :].tolist()
    with torch.no_grad():  # the cached decode equals the full pass's logits
        full = model(batch, attention_mask=(batch != 0).long()).logits[:, -1]
        cached = model(batch[:, :-1], attention_mask=(batch[:, :-1] != 0).long(), use_cache=True)
        step = model(batch[:, -1:], attention_mask=(batch != 0).long(), past_key_values=cached.past_key_values)
    torch.testing.assert_close(step.logits[:, -1], full, atol=1e-4, rtol=1e-4)
