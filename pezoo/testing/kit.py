"""The conformance kit's test bed: :class:`KitModel` (a tiny pre-LN decoder that applies every
hook), :class:`KitConfig` (the settings of one kit run), the error a failed check raises,
and how the checks build the model and its inputs.

Axis letters: b batch, s sequence, d model width, h heads, v vocab.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import Tensor, nn

from pezoo.attention import BACKENDS, SelfAttention
from pezoo.backends import xformers_available
from pezoo.context import AttentionContext
from pezoo.interface import PositionalEncoding
from pezoo.registry import ModelDims

__all__ = [
    "ConformanceError",
    "Factory",
    "KitConfig",
    "KitModel",
    "build_model",
    "fail",
    "quiet_flex_warnings",
    "random_tokens",
    "scale_hints",
    "usable_backends",
]

Factory = Callable[[], PositionalEncoding]


@dataclass(frozen=True)
class KitConfig:
    """Settings of one kit run (every field has a default; unknown keys are an error).

    Attributes:
        dims: the model shape the factory builds the encoding for.
        length: the base sequence length s.
        batch: batch size b.
        vocab: vocabulary of the kit model.
        extrapolation_factor: the extrapolation check runs at this many times ``length``.
        backends: backends compared with eager; None = :func:`usable_backends`.
        compile_flex: compile flex (slow on CPU, ~30 s per compile) or use its unfused form.
        device: where to run.
        atol: absolute tolerance for fp32 comparisons.
        seed: base seed.
    """

    dims: ModelDims = field(default_factory=lambda: ModelDims(d_model=32, n_heads=4, n_layers=2))
    length: int = 12
    batch: int = 2
    vocab: int = 16
    extrapolation_factor: int = 10
    backends: tuple[str, ...] | None = None
    compile_flex: bool = False
    device: str = "cpu"
    atol: float = 2e-5
    seed: int = 0


def usable_backends(device: str | torch.device = "cpu", pe: PositionalEncoding | None = None) -> list[str]:
    """Registered backends that can run on ``device`` (xformers only with CUDA and the package)
    and, given ``pe``, that run that encoding (its :meth:`~pezoo.PositionalEncoding.attention_backends`,
    and ``auto``, which picks one of them)."""
    takes = None if pe is None else pe.attention_backends()
    names = []
    for name in sorted(BACKENDS):
        if name == "xformers" and not (torch.device(device).type == "cuda" and xformers_available()):
            continue
        if takes is not None and name not in takes and name != "auto":
            continue
        names.append(name)
    return names


class KitModel(nn.Module):
    """A tiny pre-LN decoder that applies every hook of ``pe`` (the kit's test bed).

    Args:
        pe: the encoding.
        dims: model shape (d_model, n_heads, n_layers).
        vocab: vocabulary size.
        backend: attention backend of every layer (change with :meth:`set_backend`).
    """

    def __init__(self, pe: PositionalEncoding, dims: ModelDims, vocab: int, backend: str = "eager") -> None:
        super().__init__()
        self.pe, self.dims = pe, dims
        self.embed = nn.Embedding(vocab, dims.d_model)
        self.ln_attn = nn.ModuleList(nn.LayerNorm(dims.d_model) for _ in range(dims.n_layers))
        self.attn = nn.ModuleList(
            SelfAttention(dims.d_model, dims.n_heads, layer=layer, backend=backend, head_dim=dims.head_dim)
            for layer in range(dims.n_layers)
        )
        self.ln_mlp = nn.ModuleList(nn.LayerNorm(dims.d_model) for _ in range(dims.n_layers))
        self.mlp = nn.ModuleList(
            nn.Sequential(
                nn.Linear(dims.d_model, 2 * dims.d_model), nn.GELU(), nn.Linear(2 * dims.d_model, dims.d_model)
            )
            for _ in range(dims.n_layers)
        )
        self.head = nn.Linear(dims.d_model, vocab)

    def set_backend(self, backend: str) -> None:
        for attn in self.attn:
            cast(SelfAttention, attn).backend = backend

    def forward(
        self,
        tokens: Tensor,
        positions: Tensor,
        *,
        state: dict[str, Any] | None = None,
        key_padding_mask: Tensor | None = None,
        scale_hint: Tensor | None = None,
    ) -> Tensor:
        """tokens (b, s) continuing ``state`` (or a full pass) at ``positions`` (b|1, total) -> (b, s, v)."""
        state_kept = state is not None
        state = {} if state is None else state
        start, s = state.get("kit_length", 0), tokens.shape[1]
        ctx = AttentionContext(
            q_pos=positions[:, start : start + s],
            k_pos=positions[:, : start + s],
            causal=True,
            state=state,
            key_padding_mask=key_padding_mask,
            scale_hint=scale_hint,
            state_kept=state_kept,
        )
        x = self.pe.embed(self.embed(tokens), ctx.q_pos)  # (b, s, d)
        x = self.pe.embed_tokens(x, tokens, ctx)
        for layer in range(self.dims.n_layers):
            self.pe.observe(layer, x, ctx)
            a, _ = self.attn[layer](self.ln_attn[layer](x), self.pe, ctx)
            x = x + a
            x = x + self.mlp[layer](self.ln_mlp[layer](x))
        state["kit_length"] = start + s
        return self.head(x)  # (b, s, v)


class ConformanceError(AssertionError):
    """A kit check failed; the message names the check and what differed."""


def fail(check: str, message: str) -> None:
    raise ConformanceError(f"[{check}] {message}")


def finite(check: str, what: str, t: Tensor) -> None:
    """Fail ``check`` if ``t`` holds a NaN or an inf, naming ``what``."""
    if not torch.isfinite(t).all():
        bad = "NaN" if torch.isnan(t).any() else "inf"
        fail(check, f"{what} contains {bad}")


def build_model(factory: Factory, cfg: KitConfig, seed: int) -> KitModel:
    """The kit model around ``factory()``; the encoding is built under ``seed``, the rest
    of the model always under the same seed (so two builds differ only in the encoding)."""
    torch.manual_seed(seed)
    pe = factory()
    if not isinstance(pe, PositionalEncoding):
        fail("factory", f"the factory returned {type(pe).__name__}, not a PositionalEncoding")
    torch.manual_seed(cfg.seed + 10_000)
    return KitModel(pe, cfg.dims, cfg.vocab).to(cfg.device)


def random_tokens(cfg: KitConfig, length: int, batch: int | None = None, seed: int = 0) -> Tensor:
    g = torch.Generator().manual_seed(cfg.seed + seed)
    return torch.randint(cfg.vocab, (cfg.batch if batch is None else batch, length), generator=g).to(cfg.device)


def scale_hints(cfg: KitConfig, batch: int, length: int) -> Tensor:
    """A per-example instance scale (differs across the batch, like a mixed-scale batch)."""
    return (torch.arange(batch) % 3 + max(length // 2, 1)).to(cfg.device)


@contextmanager
def quiet_flex_warnings() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*flex_attention has no backward pass on CPU.*")
        yield
