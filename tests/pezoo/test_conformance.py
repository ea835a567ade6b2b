"""The conformance kit on every registered encoding, and the kit itself catching broken ones."""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

import pezoo
from pezoo import AttentionBias, AttentionContext, LinearBias, PositionalEncoding
from pezoo.testing import CHECKS, ConformanceError, check_encoding, graph_breaks

DIMS = pezoo.ModelDims(d_model=32, n_heads=4, n_layers=2)

KNOWN_FAILURES: dict[tuple[str, str], str] = {}  # (encoding, check) -> reason; keep it empty


def _cases():
    for name in pezoo.available():
        for check in CHECKS:
            reason = KNOWN_FAILURES.get((name, check))
            marks = [pytest.mark.xfail(raises=ConformanceError, strict=True, reason=reason)] if reason else []
            yield pytest.param(name, check, marks=marks, id=f"{name}-{check}")


@pytest.mark.parametrize(("name", "check"), list(_cases()))
def test_every_registered_encoding_passes(name, check):
    check_encoding(lambda: pezoo.create(name, dims=DIMS), DIMS, checks=[check])


WIDE_HEADS = pezoo.ModelDims(d_model=32, n_heads=4, n_layers=2, head_dim=16)
"""Heads twice d / h wide (as Gemma's, Qwen3's, gpt-oss's): q, k and v are 64 wide in a 32-wide model."""


def _sized_by_head_dim() -> list[str]:
    """The registered encodings one of whose parts takes ``head_dim`` (directly or inside a
    wrapper or combination: every part is built with the same shape)."""
    takes = {name for name in pezoo.available() if "+" not in name and ":" not in name
             and "head_dim" in inspect.signature(pezoo.registry.ENCODINGS[name]).parameters}  # fmt: skip
    return [name for name in pezoo.available() if takes & set(name.replace("+", ":").split(":"))]


@pytest.mark.parametrize("name", _sized_by_head_dim())
def test_encodings_sized_by_head_width_pass_with_heads_wider_than_d_over_h(name):
    """ModelDims' head_dim reaches the encoding, and SelfAttention splits q/k/v into heads of it."""
    check_encoding(lambda: pezoo.create(name, dims=WIDE_HEADS), WIDE_HEADS,
                   checks=["hook_shapes", "incremental_decoding", "backend_agreement"])  # fmt: skip


def test_unknown_options_and_checks_are_errors():
    with pytest.raises(TypeError, match=r"unknown option.*lenght.*valid"):
        check_encoding(lambda: pezoo.create("nope"), DIMS, lenght=3)
    with pytest.raises(TypeError, match="unknown check"):
        check_encoding(lambda: pezoo.create("nope"), DIMS, checks=["speed"])


# --------------------------------------------------------------------------------------
# broken encodings: each must fail exactly the check that guards against its bug
# --------------------------------------------------------------------------------------


class LeaksTheFuture(PositionalEncoding):
    name = "test_leaks"

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        return x + x.mean(dim=1, keepdim=True)  # every token sees the whole sequence


class ForgetsTheCache(PositionalEncoding):
    """Rotates q/k by their index within the call, not by ctx positions."""

    name = "test_forgets"

    def qk(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor]:
        angle = torch.arange(q.shape[2], dtype=q.dtype)[:, None] * 0.5  # (i, 1)
        return q * angle.cos() + q.roll(1, -1) * angle.sin(), k * angle.cos() + k.roll(1, -1) * angle.sin()


class HidesItsWeights(PositionalEncoding):
    name = "test_hides"

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.offset = [torch.randn(d_model)]  # not registered: missing from the state dict

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        return x + self.offset[0]


class UsesOsEntropy(PositionalEncoding):
    name = "test_entropy"

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        g = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
        return x + torch.randn(x.shape, generator=g).to(x.dtype)


class OverflowsInHalf(PositionalEncoding):
    name = "test_overflow"

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        return x + torch.tensor(70000.0).to(x.dtype)  # > fp16 max


class FixedTable(PositionalEncoding):
    name = "test_table"

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(50, d_model))  # no max_position declared

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        return x + self.table[pos]


class SteeperWhenMaterialised(LinearBias):
    def materialize(self, ctx, n_heads, dtype):
        return 2 * super().materialize(ctx, n_heads, dtype)  # flex reads slopes, eager this


class DisagreesAcrossBackends(PositionalEncoding):
    name = "test_disagrees"

    def bias(self, layer, q, k, ctx):
        return [SteeperWhenMaterialised(torch.full((q.shape[1],), 0.5))]


class NaNGradient(PositionalEncoding):
    name = "test_nan_grad"

    def __init__(self) -> None:
        super().__init__()
        self.p = nn.Parameter(torch.zeros(()))

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        return x + self.p.sqrt() * 0  # d/dp sqrt(p) at 0 is inf; inf * 0 = NaN


class MismatchedHeads(PositionalEncoding):
    name = "test_mismatch"

    def qk(self, layer, q, k, ctx):
        return q, torch.cat([k, k], dim=-1)


class HoldsALambda(PositionalEncoding):
    name = "test_lambda"

    def __init__(self) -> None:
        super().__init__()
        self.shift = lambda x: x  # a lambda does not pickle

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        return self.shift(x)


class Float32Table(PositionalEncoding):
    """Builds its table in float32 whatever the module's dtype (PRISM's bug in issue 18)."""

    name = "test_fp32_table"

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, d_model)

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        table = torch.ones(x.shape[-1], x.shape[-1])  # float32, not x.dtype
        return x + self.proj(x) @ table


class KeepsATensorAttribute(PositionalEncoding):
    name = "test_stray"

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.offset = torch.randn(d_model)  # a plain attribute: .to(device) leaves it behind

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        return x + self.offset.to(x.dtype)


class DerivedBufferWithoutReset(PositionalEncoding):
    """A derived, non-persistent table with no ``reset_parameters``: garbage after ``to_empty``
    (ALiBi's slopes before issue 18's follow-up)."""

    name = "test_derived_buffer"

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.register_buffer("scale", torch.linspace(0.5, 1.5, d_model), persistent=False)

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        return x * self.scale.to(x.dtype)


class CountsTokensWithinTheCall(PositionalEncoding):
    """Numbers every token by its index in the current call instead of carrying the count
    in ``ctx.state`` (an Abacus that forgets a number continuing across decoding calls)."""

    name = "test_counts_in_call"

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(64, d_model))

    def embed_tokens(self, x: Tensor, tokens: Tensor, ctx: AttentionContext) -> Tensor:
        return x + self.table[torch.arange(tokens.shape[1])]


class ReadsLaterTokens(PositionalEncoding):
    """Embeds each token with the number of copies of it in the whole sequence."""

    name = "test_reads_later"

    def embed_tokens(self, x: Tensor, tokens: Tensor, ctx: AttentionContext) -> Tensor:
        same = (tokens[:, :, None] == tokens[:, None, :]).sum(-1)  # (b, s), future included
        return x + same[..., None].to(x.dtype)


class WidensInEmbedTokens(PositionalEncoding):
    name = "test_widens_tokens"

    def embed_tokens(self, x: Tensor, tokens: Tensor, ctx: AttentionContext) -> Tensor:
        return torch.cat([x, x], dim=-1)


class NeedsATokenToReduce(PositionalEncoding):
    """Centres the positions on the call's first one: with no tokens there is none (xPos's
    centre and PRISM's GRU raised on an empty sequence)."""

    name = "test_needs_a_token"

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        return x + (pos - pos.amin(-1, keepdim=True))[..., None].to(x.dtype)


BROKEN = [
    (lambda: CountsTokensWithinTheCall(DIMS.d_model), "incremental_decoding"),
    (ReadsLaterTokens, "no_future_leakage"),
    (WidensInEmbedTokens, "hook_shapes"),
    (LeaksTheFuture, "no_future_leakage"),
    (ForgetsTheCache, "incremental_decoding"),
    (lambda: HidesItsWeights(DIMS.d_model), "state_dict_round_trip"),
    (UsesOsEntropy, "deterministic"),
    (OverflowsInHalf, "half_precision"),
    (lambda: FixedTable(DIMS.d_model), "extrapolation"),
    (DisagreesAcrossBackends, "backend_agreement"),
    (NaNGradient, "gradients_finite"),
    (MismatchedHeads, "hook_shapes"),
    (HoldsALambda, "copy_and_pickle"),
    (lambda: Float32Table(DIMS.d_model), "float64"),
    (lambda: KeepsATensorAttribute(DIMS.d_model), "device_move"),
    (lambda: DerivedBufferWithoutReset(DIMS.d_model), "meta_init"),
    (NeedsATokenToReduce, "empty_inputs"),
]


# hooks that return, declare or write the wrong thing: each fails hook_shapes (or
# deterministic) with a sentence naming the hook and what it did, where before each passed
# every check or failed in torch's words ("too many values to unpack", "expected m1 and m2
# to have the same dtype", "'NoneType' object has no attribute 'shape'")


class ReturnsOnlyQ(PositionalEncoding):
    def qk(self, layer, q, k, ctx):
        return q  # unpacked along the batch: with batch 2 it "worked"


class RotatesInFloat64(PositionalEncoding):
    def qk(self, layer, q, k, ctx):
        return q.double(), k.double()


class WidensWithoutSayingSo(PositionalEncoding):
    """Concatenates a stream to q and k but leaves ctx.head_dim unset: attend's default scale
    becomes 1/sqrt(2e)."""

    def qk(self, layer, q, k, ctx):
        return torch.cat([q, q], -1), torch.cat([k, k], -1)


class ScalesTheResidualInObserve(PositionalEncoding):
    def observe(self, layer, x, ctx):
        x.mul_(0.5)  # "reads" the stream: every check passed, the model changed


class ScalesQInBias(PositionalEncoding):
    def bias(self, layer, q, k, ctx):
        q.mul_(2.0)  # the attention that follows uses the scaled q
        return []


class ShiftsInPlaceInEmbed(PositionalEncoding):
    def embed(self, x, pos):
        return x.add_(1.0)


class ReturnsTheBiasTensor(PositionalEncoding):
    def bias(self, layer, q, k, ctx):
        return torch.zeros(q.shape[0], q.shape[1], q.shape[2], k.shape[2])  # printed whole before


@dataclass(frozen=True, eq=False)
class Float32Distance(AttentionBias):
    def materialize(self, ctx, n_heads, dtype):
        return -(ctx.q_pos[:, None, :, None] - ctx.k_pos[:, None, None, :]).abs().float()  # not `dtype`


class MaterialisesInFloat32(PositionalEncoding):
    def bias(self, layer, q, k, ctx):
        return [Float32Distance()]


class PositionsOnMeta(PositionalEncoding):
    def positions(self, batch, length, device="cpu"):
        return torch.arange(length, device="meta")[None]


class EmbedsNothing(PositionalEncoding):
    def embed(self, x, pos):
        x = x + 1  # the forgotten return


class NamesABackendThatIsNot(PositionalEncoding):
    def attention_backends(self):
        return ("eagre",)


class NamesABackendAsAString(PositionalEncoding):
    def attention_backends(self):
        return "eager"  # read letter by letter: "runs on e, a, g, e, r"


class SizesOneLayerOnly(PositionalEncoding):
    def qk_head_dims(self, head_dim, n_layers):
        return [head_dim]


class DrawsPositionsAtEvaluation(PositionalEncoding):
    """Random positions in eval mode too, without saying so (random_at_eval stays False)."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(1024, d_model))

    def positions(self, batch, length, device="cpu"):
        return torch.randperm(4 * length + 4)[:length].sort().values[None].to(device)

    def embed(self, x, pos):
        return x + self.table[pos]


BROKEN_HOOKS = [
    (ReturnsOnlyQ, "hook_shapes", r"qk\(0, q, k, ctx\) must return the pair \(q, k\), got a torch.float32 tensor"),
    (RotatesInFloat64, "hook_shapes", r"qk\(0, q, k, ctx\) turned torch.float32 q, k into torch.float64"),
    (WidensWithoutSayingSo, "hook_shapes", r"qk\(0, q, k, ctx\) widened q/k from 8 to 16 but left ctx.head_dim"),
    (ScalesTheResidualInObserve, "hook_shapes", r"observe\(0, x, ctx\) changed its input x in place"),
    (ScalesQInBias, "hook_shapes", r"bias\(0, q, k, ctx\) changed its input q in place"),
    (ShiftsInPlaceInEmbed, "hook_shapes", r"embed\(x, pos\) changed its input x in place"),
    (
        ReturnsTheBiasTensor,
        "hook_shapes",
        r"bias\(0, q, k, ctx\) must return a list of AttentionBias, got a "
        r"torch.float32 tensor of shape \(2, 4, 1, 1\) on cpu$",
    ),
    (
        MaterialisesInFloat32,
        "hook_shapes",
        r"Float32Distance.materialize\(ctx, 4, torch.bfloat16\) returned torch.float32",
    ),
    (PositionsOnMeta, "hook_shapes", r"positions\(2, 1\) returned a tensor on meta, not on the inputs' device cpu"),
    (EmbedsNothing, "hook_shapes", r"embed\(x, pos\) must return a tensor, got NoneType None"),
    (NamesABackendThatIsNot, "hook_shapes", r"attention_backends\(\) names 'eagre', no registered backend"),
    (NamesABackendAsAString, "hook_shapes", r"attention_backends\(\) must return None or a tuple of backend names"),
    (SizesOneLayerOnly, "hook_shapes", r"qk_head_dims\(8, 2\) must return one entry per layer \(2\)"),
    (
        lambda: DrawsPositionsAtEvaluation(DIMS.d_model),
        "deterministic",
        r"eval-mode positions or outputs differ between two global RNG states, but random_at_eval is False",
    ),
]


@pytest.mark.parametrize(
    ("factory", "check", "message"),
    BROKEN_HOOKS,
    ids=[f.__name__ if isinstance(f, type) else "DrawsPositionsAtEvaluation" for f, _, _ in BROKEN_HOOKS],
)
def test_the_kit_names_the_hook_that_returned_or_did_the_wrong_thing(factory, check, message):
    with pytest.raises(ConformanceError, match=rf"^\[{check}\] {message}"):
        check_encoding(factory, DIMS, checks=[check])


def test_the_kit_refuses_what_is_no_factory_dims_or_list_of_checks():
    rope = pezoo.create("rope", dims=DIMS)
    with pytest.raises(TypeError, match=r"takes a factory.*got RoPE"):  # was "raised NotImplementedError: ... forward"
        check_encoding(rope, DIMS)
    with pytest.raises(TypeError, match=r"dims must be a pezoo.ModelDims, got dict"):
        check_encoding(lambda: rope, {"d_model": 32, "n_heads": 4, "n_layers": 2})
    with pytest.raises(TypeError, match=r"checks=\['hook_shapes'\], not a string"):  # was: unknown checks _, a, e, ...
        check_encoding(lambda: rope, DIMS, checks="hook_shapes")


@pytest.mark.parametrize(
    "options",
    [{"copy_cursors": (0,)}, {"copy_cursors": (0,), "copy_key": "learned"}, {"layers": (0, 1), "n_cursors": 3}],
    ids=["copy", "copy-learned-keys", "two-layers"],
)
def test_prism_meta_init_with_its_cursor_orders(options):
    """PRISM's cursor-order buffers differ with the copy branch and layer setup; each comes back
    after to_empty (and the orthogonal W_hh's trivialisation base has its state-dict key)."""
    check_encoding(lambda: pezoo.create("prism", dims=DIMS, **options), DIMS, checks=["meta_init"])


@pytest.mark.parametrize(("factory", "check"), BROKEN, ids=[check for _, check in BROKEN])
def test_the_kit_catches_a_broken_encoding(factory, check):
    with pytest.raises(ConformanceError, match=rf"^\[{check}\]"):
        check_encoding(factory, DIMS, checks=[check])


# --------------------------------------------------------------------------------------
# the out-of-tree example package (docs/add-an-encoding.md)
# --------------------------------------------------------------------------------------

PLUGIN = Path(__file__).resolve().parents[2] / "examples" / "pezoo-example-plugin"


@pytest.mark.slow
def test_example_plugin_registers_through_its_entry_point_and_passes_the_kit(tmp_path):
    """Install the example into a scratch directory (not the shared venv), then run its own
    tests in a fresh interpreter that sees that directory: entry points are read from the
    installed distribution's metadata, exactly as for a user's ``pip install``."""
    source, target = tmp_path / "src", tmp_path / "site"
    shutil.copytree(PLUGIN, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*pip, "--target", str(target), str(source)], check=True, capture_output=True, text=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
    tests = source / "tests"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(source), str(tests)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "3 passed" in result.stdout


def test_graph_breaks_are_reported():
    """RoPE's forward compiles as one graph; the report counts graphs and breaks."""
    report = graph_breaks(lambda: pezoo.create("rope", dims=DIMS), DIMS, length=6)
    assert report.graph_breaks == 0 and report.graphs == 1 and report.reasons == ()
