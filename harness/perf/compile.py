"""`pezoo perf`: ``torch.compile`` against eager, per encoding (see :mod:`harness.perf`).

Axis letters: b batch, s sequence, d model width, v vocabulary.

Two models, each at the ``quick`` preset's size (d 128, 3 layers, 4 heads; batch 64):

* ``backbone``: the benchmark's own model (``harness.training.train.build_model``) compiled with
  ``torch.compile(model, dynamic=True)``;
* ``decoder``: a decoder written as a user would (:class:`UserDecoder`: pezoo's hooks and
  :func:`pezoo.attend`, docs/use-in-your-model.md) compiled with plain
  ``torch.compile(model)``, which compiles the first length with static shapes and
  recompiles once with dynamic ones.

Per encoding, two copies of the model with the same initial weights, one compiled: a
training step (forward, cross-entropy on random targets, backward, clipping, the
optimiser) at every length of ``compile_lengths`` in turn. First the loss and gradients of
the two copies on the same first batch are compared (the compiled copy compiles there);
then the compiled copy's first step at each length is timed (the first length's time
includes that comparison pass) with the graphs compiled so far counted; then the
interleaved timing of one round of steps over all lengths, eager and compiled
alternating. Dynamo's caches are reset between encodings, so each encoding compiles
alone (the recompile limit counts per code object, which every encoding's model shares).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import pezoo
from harness.config import preset_config
from harness.perf.grid import COMPILE_TARGET, PerfGrid
from harness.perf.timing import Timing, synchronizer, time_interleaved
from harness.perf.train import basis_ms, build_for, ratio_basis

COMPILE_MODELS = ("backbone", "decoder")
"""What the compile section compiles: the benchmark's backbone, or :class:`UserDecoder`."""


class UserDecoder(nn.Module):
    """A causal decoder written as a user would: pezoo's hooks and ``pezoo.attend`` (32 lines).

    Args:
        pe: the encoding, built for (d, heads, layers).
        vocab, d, heads, layers: the model's shape.
    """

    def __init__(self, pe: pezoo.PositionalEncoding, vocab: int, d: int, heads: int, layers: int) -> None:
        super().__init__()
        self.pe, self.heads, self.layers = pe, heads, layers
        self.emb = nn.Embedding(vocab, d)
        self.ln = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers))
        self.proj = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.mlp = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)) for _ in range(layers)
        )
        self.out = nn.Linear(d, vocab)

    def forward(self, tokens: Tensor, scale_hint: Tensor | None = None) -> Tensor:
        b, s = tokens.shape
        pos = self.pe.positions(b, s, tokens.device)  # (b|1, s)
        ctx = pezoo.AttentionContext(q_pos=pos, k_pos=pos, state_kept=False, scale_hint=scale_hint)
        x = self.pe.embed_tokens(self.pe.embed(self.emb(tokens), pos), tokens, ctx)  # (b, s, d)
        e = x.shape[-1] // self.heads
        for layer in range(self.layers):
            self.pe.observe(layer, x, ctx)
            q, k, v = self.qkv[layer](self.ln[layer](x)).view(b, s, 3, self.heads, e).permute(2, 0, 3, 1, 4)
            q, k = self.pe.qk(layer, q, k, ctx)  # (b, h, s, e'), e' >= e
            a, _ = pezoo.attend(q, k, v, ctx, self.pe.bias(layer, q, k, ctx), backend="sdpa")  # (b, h, s, e)
            x = x + self.proj[layer](a.transpose(1, 2).reshape(b, s, -1))
            x = x + self.mlp[layer](x)
        return self.out(x)  # (b, s, v)


class GraphCounter:
    """A dynamo backend that counts the graphs it is given and hands each to ``inner``."""

    def __init__(self, inner: Callable[..., Any]) -> None:
        self.inner, self.graphs = inner, 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Tensor]) -> Any:
        self.graphs += 1
        return self.inner(gm, example_inputs)


def _build(model_kind: str, preset: str, pe: str, device: torch.device) -> tuple[nn.Module, torch.optim.Optimizer, int]:
    """(model, its optimiser, vocabulary size), initialised from seed 0 (two calls: the same weights)."""
    cfg = preset_config(preset, pe="nope", task="copy", seed=0).backbone
    if model_kind == "backbone":
        return (*build_for(preset, pe, "sdpa", device), cfg.vocab_size)
    torch.manual_seed(0)
    dims = pezoo.ModelDims(cfg.d_model, cfg.n_heads, cfg.n_layers)
    model = UserDecoder(pezoo.create(pe, dims=dims), cfg.vocab_size, cfg.d_model, cfg.n_heads, cfg.n_layers)
    model.to(device).train()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), cfg.vocab_size


def _batches(
    lengths: Sequence[int], batch: int, vocab: int, device: torch.device
) -> list[tuple[Tensor, Tensor, Tensor]]:
    """(tokens (b, s), targets (b, s), scale hint (b,)) per length, fixed by the length."""
    out = []
    for s in lengths:
        gen = torch.Generator().manual_seed(s)
        tokens = torch.randint(1, vocab, (batch, s), generator=gen)
        targets = torch.randint(1, vocab, (batch, s), generator=gen)
        out.append((tokens.to(device), targets.to(device), torch.full((batch,), float(s), device=device)))
    return out


def _loss(model: Callable[..., Tensor], tokens: Tensor, targets: Tensor, hint: Tensor) -> Tensor:
    logits = model(tokens, scale_hint=hint)  # (b, s, v)
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def _step(model: Callable[..., Tensor], params: list[nn.Parameter], opt: torch.optim.Optimizer, batch: tuple) -> None:
    loss = _loss(model, *batch)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()


def _first_pass_difference(
    runs: Sequence[tuple[Callable[..., Tensor], list[nn.Parameter]]], batch: tuple[Tensor, ...]
) -> tuple[float, float]:
    """(|loss difference|, largest gradient difference relative to the largest gradient) of
    the eager and the compiled copy, each (model, its parameters), on ``batch``, before any
    optimiser step (the same weights). Randomized PE draws from the same seed in both."""
    losses, grads = [], []
    for model, params in runs:
        torch.manual_seed(0)
        for p in params:
            p.grad = None
        loss = _loss(model, *batch)
        loss.backward()
        losses.append(float(loss.detach()))
        grads.append([p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params])
    scale = max(float(g.abs().max()) for g in grads[0]) or 1.0
    worst = max(float((a - b).abs().max()) for a, b in zip(grads[0], grads[1], strict=True))
    return abs(losses[0] - losses[1]), worst / scale


_Training = tuple[Callable[..., Tensor], list[nn.Parameter], torch.optim.Optimizer]
"""(model, its parameters, its optimiser): what :func:`_step` trains."""


def _first_calls(
    compiled: _Training, batches: list, counter: GraphCounter, sync: Callable[[], None], start: float
) -> tuple[list[float], list[int]]:
    """(seconds of the compiled model's first step at each length, the first counted from
    ``start``; graphs compiled after each)."""
    first_calls, graphs = [], []
    for i, b in enumerate(batches):
        t0 = time.perf_counter()
        _step(*compiled, b)
        sync()
        first_calls.append(time.perf_counter() - t0 if i else time.perf_counter() - start)
        graphs.append(counter.graphs)
    return first_calls, graphs


def _time_both(
    eager: _Training, compiled: _Training, batches: list, repeats: int, warmup: int, sync: Callable[[], None]
) -> dict[str, Timing]:
    """Eager and compiled steps over every length, interleaved (``time_interleaved``)."""

    def run_eager() -> None:
        for b in batches:
            _step(*eager, b)

    def run_compiled() -> None:
        for b in batches:
            _step(*compiled, b)

    return time_interleaved({"eager": run_eager, "compiled": run_compiled}, repeats=repeats, warmup=warmup, sync=sync)


def measure_compile_one(
    model_kind: str,
    pe: str,
    *,
    preset: str,
    lengths: Sequence[int],
    batch: int,
    repeats: int,
    warmup: int,
    device: torch.device,
    backend: str = "inductor",
) -> dict[str, Any]:
    """One encoding: compile time and graphs per length, compiled vs eager numbers and step times."""
    torch._dynamo.reset()
    eager, eager_opt, vocab = _build(model_kind, preset, pe, device)
    twin, twin_opt, _ = _build(model_kind, preset, pe, device)
    counter = GraphCounter(torch._dynamo.lookup_backend(backend))
    dynamic = True if model_kind == "backbone" else None  # the user's decoder: plain torch.compile(model)
    compiled = torch.compile(twin, backend=counter, dynamic=dynamic)
    batches = _batches(lengths, batch, vocab, device)
    sync = synchronizer(device)

    twin_params, eager_params = list(twin.parameters()), list(eager.parameters())
    start = time.perf_counter()
    loss_diff, grad_diff = _first_pass_difference([(eager, eager_params), (compiled, twin_params)], batches[0])
    first_calls, graphs = _first_calls((compiled, twin_params, twin_opt), batches, counter, sync, start)
    timings = _time_both(
        (eager, eager_params, eager_opt), (compiled, twin_params, twin_opt), batches, repeats, warmup, sync
    )
    graphs_after_timing = counter.graphs
    basis = ratio_basis(device)
    ratio = basis_ms(timings["compiled"], basis) / basis_ms(timings["eager"], basis)
    row = {
        "model": model_kind,
        "pe": pe,
        "dynamic": dynamic,
        "backend": backend,
        "lengths": list(lengths),
        "batch": batch,
        "eager_ms": timings["eager"].median_ms,
        "compiled_ms": timings["compiled"].median_ms,
        "eager_cpu_ms": timings["eager"].cpu_ms,
        "compiled_cpu_ms": timings["compiled"].cpu_ms,
        "spread": max(timings["eager"].spread, timings["compiled"].spread),
        "basis": basis,
        "ratio": ratio,
        "target": COMPILE_TARGET,
        "meets_target": bool(ratio <= COMPILE_TARGET),
        "first_call_s": first_calls,
        "graphs_after_length": graphs,
        "graphs": graphs_after_timing,
        "recompiles_after_second_length": graphs_after_timing - graphs[min(1, len(graphs) - 1)],
        "loss_diff": loss_diff,
        "grad_rel_diff": grad_diff,
        "rounds": timings["eager"].rounds,
    }
    torch._dynamo.reset()
    gc.collect()
    return row


def measure_compile(
    grid: PerfGrid, device: torch.device, *, log: Callable[[str], None] = lambda _: None
) -> list[dict[str, Any]]:
    """Rows of :func:`measure_compile_one` for every (model, encoding) of ``grid``."""
    encodings = grid.compile_encodings or tuple(pezoo.available())
    rows = []
    for model_kind in grid.compile_models:
        for pe in encodings:
            log(f"  compile: {model_kind} {pe}")
            try:
                rows.append(
                    measure_compile_one(
                        model_kind,
                        pe,
                        preset=grid.compile_preset,
                        lengths=grid.compile_lengths,
                        batch=grid.compile_batch,
                        repeats=grid.repeats,
                        warmup=grid.warmup,
                        device=device,
                        backend=grid.compile_backend,
                    )
                )
            except Exception as exc:  # one encoding failing to compile is a result, not the end of the run
                rows.append({"model": model_kind, "pe": pe, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
                torch._dynamo.reset()
    return rows
