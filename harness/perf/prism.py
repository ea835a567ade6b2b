"""`pezoo perf`: pRISM: scan scaling, components, share of the step (see :mod:`harness.perf`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import torch

from harness.perf.grid import PRISM_LENGTH_TARGETS, PerfGrid
from harness.perf.timing import synchronizer, time_interleaved
from harness.perf.train import basis_ms, build_for, ratio_basis, step_function, training_batch
from harness.tasks.data import Batch

if TYPE_CHECKING:
    from pezoo.encodings.prism import PRISM, PRISMLayer

COPY_OPTIONS: dict[str, Any] = {"copy_cursors": (0,)}
"""PRISM with a copy branch on the first query cursor of every head (the paper's setup for
Reverse and string copying)."""


def _scan_inputs(n: int, t: int, support: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Random gates (t, n, 4) as the GRU emits them, γ (n,), the centre one-hot (n, p), masks (t, p)."""
    from pezoo.encodings.prism.histogram import centre_one_hot, reachable_mask

    gen = torch.Generator().manual_seed(0)
    reset = torch.sigmoid(torch.randn(t, n, 1, generator=gen) - 2.0)
    moves = torch.softmax(torch.randn(t, n, 3, generator=gen), dim=-1)
    gates = torch.cat([reset, moves], dim=-1).to(device).requires_grad_()
    gamma = torch.full((n,), 2.0, device=device, requires_grad=True)
    h0 = centre_one_hot((n,), support, device=device)
    masks = reachable_mask(torch.arange(t, device=device), support)
    return gates, gamma, h0, masks


def scan_function(
    n: int, t: int, support: int, device: torch.device, *, backward: bool, windowed: bool = False, d_pe: int = 0
) -> Callable[[], None]:
    """One histogram scan of n cursors over t tokens at support P: the full-width reference
    (``pezoo.encodings.prism.histogram_scan``), or with ``windowed`` the scan the model runs
    by default (only the reachable bins, ``PRISMConfig.scan_window``); with ``windowed`` and
    ``d_pe`` exactly the model's: the fused scan, emitting each token's (n, d_pe) position
    stream (histogram times the offset table) instead of the histogram."""
    from pezoo.encodings.prism.histogram import histogram_scan, unchecked_histogram_step
    from pezoo.encodings.prism.scan import scan_emitting as _scan_emitting
    from pezoo.encodings.prism.streams import offset_table

    gates, gamma, h0, masks = _scan_inputs(n, t, support, device)
    weight = torch.randn(2 * support + 1, generator=torch.Generator().manual_seed(1)).to(device)  # (p,)
    table = offset_table(support, d_pe, device) if windowed and d_pe else None  # (p, f)
    weight_f = torch.randn(max(d_pe, 1), generator=torch.Generator().manual_seed(2)).to(device)  # (f,)

    def run() -> None:
        with torch.set_grad_enabled(backward):
            if table is not None:
                _, streams = _scan_emitting(
                    h0[None], gates[:, None], gamma, 1e-6, None, None, unchecked_histogram_step, table, windowed=True
                )  # (t, 1, n, f)
                if backward:
                    (streams.sum(dim=(0, 1, 2)) @ weight_f).backward()
                    gates.grad = gamma.grad = None
                return
            if windowed:
                _, hist = _scan_emitting(
                    h0, gates, gamma, 1e-6, None, masks, unchecked_histogram_step, None, windowed=True
                )
            else:
                hist = histogram_scan(h0, gates, gamma, 1e-6, None, masks)  # (t, n, p)
            if backward:  # a loss whose gradient reaches every bin of every step, at O(p) memory
                (hist.sum(dim=(0, 1)) @ weight).backward()
                gates.grad = gamma.grad = None

    return run


def measure_prism_scaling(grid: PerfGrid, device: torch.device) -> dict[str, list[dict[str, Any]]]:
    """Scan time over P (at t = prism_scan_tokens) and over t (at the middle P), forward and forward + backward."""
    n, t0 = grid.prism_cursors, grid.prism_scan_tokens
    sync = synchronizer(device)
    candidates: dict[str, Callable[[], object]] = {}
    for support in grid.prism_supports:
        for bwd in (False, True):
            candidates[f"P|{support}|{bwd}"] = scan_function(n, t0, support, device, backward=bwd)
    p_mid = grid.prism_supports[len(grid.prism_supports) // 2]
    token_counts = (t0, 2 * t0, 4 * t0)
    for t in token_counts:
        for bwd in (False, True):
            candidates[f"T|{t}|{bwd}"] = scan_function(n, t, p_mid, device, backward=bwd)
    timings = time_interleaved(candidates, repeats=grid.repeats, warmup=1, sync=sync)
    basis = ratio_basis(device)

    def rows(kind: str, values: Sequence[int], key: str) -> list[dict[str, Any]]:
        out = []
        for i, v in enumerate(values):
            fwd, both = timings[f"{kind}|{v}|False"], timings[f"{kind}|{v}|True"]
            row = {
                key: v,
                "forward_ms": basis_ms(fwd, basis),
                "forward_backward_ms": basis_ms(both, basis),
                "spread": both.spread,
                "basis": basis,
            }
            if i:
                prev_f, prev_b = timings[f"{kind}|{values[i - 1]}|False"], timings[f"{kind}|{values[i - 1]}|True"]
                row["forward_ratio"] = basis_ms(fwd, basis) / basis_ms(prev_f, basis)
                row["forward_backward_ratio"] = basis_ms(both, basis) / basis_ms(prev_b, basis)
            out.append(row)
        return out

    return {
        "by_support": [{**r, "tokens": t0, "cursors": n} for r in rows("P", grid.prism_supports, "support")],
        "by_tokens": [{**r, "support": p_mid, "cursors": n} for r in rows("T", token_counts, "tokens")],
    }


def _part_functions(
    pe: PRISM, layer: PRISMLayer, b: int, s: int, n: int, support: int, device: torch.device
) -> dict[str, Callable[[], None]]:
    """The parts :func:`prism_components` times, each a forward + backward on inputs drawn
    from seed 0: ``layer``'s ``gates``, the ``scan`` of ``n`` cursors at ``support``, and
    ``pe``'s position ``streams``."""
    from pezoo.encodings.prism.streams import fold_position_streams, normalise_streams

    cfg = pe.config
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(b, s, cfg.d_model, generator=gen).to(device).requires_grad_()  # (b, s, d)

    def gates() -> None:
        g, _ = layer.gates(layer.norm(x))  # (b, s, n, 4)
        g.sum().backward()

    # the scan's output: each token's raw stream per cursor (the histogram times the offset
    # table is part of the scan, which emits streams, not histograms)
    raw = torch.randn(s, b, 2 * cfg.n_heads * cfg.n_cursors, cfg.d_pe, generator=gen)
    raw = raw.to(device).requires_grad_()  # (s, b, 2hc, f)
    q = torch.randn(b, cfg.n_heads, s, cfg.d_model // cfg.n_heads, generator=gen).to(device)  # (b, h, s, e)

    def streams() -> None:
        g = normalise_streams(
            raw.permute(1, 0, 2, 3).unflatten(2, (2, cfg.n_heads, cfg.n_cursors)), cfg.stream_norm
        )  # (b, s, 2, h, c, f)
        g_q, g_k = g.permute(2, 0, 3, 1, 4, 5).unbind(0)  # (b, h, s, c, f)
        mu = torch.sigmoid(pe.mu_logit[cfg.layers[0]])
        q2, k2 = fold_position_streams(q, q, g_q, g_k, mu, pe.alpha[cfg.layers[0]].abs())
        (q2.sum() + k2.sum()).backward()

    windowed = cfg.scan_window and cfg.eps_support == "reachable"
    scan = scan_function(n, s, support, device, backward=True, windowed=windowed, d_pe=cfg.d_pe)
    return {"gates": gates, "scan": scan, "streams": streams}


def prism_components(
    preset: str, options: Mapping[str, Any], batch_size: int, device: torch.device, repeats: int, warmup: int
) -> dict[str, Any]:
    """Time one PRISM training step and its parts (forward + backward each) on the preset's batch.

    Parts: the GRU gates over the layer-normed residual stream; the histogram scan at the
    support the model uses (windowed when the model's is; it emits each token's stream, the
    histogram times the offset table); the position streams after it (Alg. 3 normalisation,
    the q/k fold). The NoPE step is timed alongside for the ratio.
    """
    from pezoo.encodings.prism import PRISM, PRISMLayer, support_for

    _, batch = training_batch(preset, batch_size, device)
    b, s = batch.inputs.shape
    model, opt = build_for(preset, "prism", "sdpa", device, **options)
    nope, nope_opt = build_for(preset, "nope", "sdpa", device)
    pe = model.pe
    if not isinstance(pe, PRISM):
        raise TypeError(f"the prism model's encoding is {type(pe).__name__}, not PRISM")
    cfg = pe.config
    support = support_for(s, cfg.min_support)
    layer = cast(PRISMLayer, next(iter(pe.prism_layers.values())))
    n = b * layer.n_scan
    candidates = {
        "step": step_function(model, opt, batch),
        "nope_step": step_function(nope, nope_opt, batch),
        **_part_functions(pe, layer, b, s, n, support, device),
    }
    timings = time_interleaved(candidates, repeats=repeats, warmup=warmup, sync=synchronizer(device))
    basis = ratio_basis(device)
    step = basis_ms(timings["step"], basis)
    n_prism = len(cfg.layers)
    parts = {
        name: {"ms": basis_ms(timings[name], basis) * n_prism, "share": basis_ms(timings[name], basis) * n_prism / step}
        for name in ("gates", "scan", "streams")
    }
    return {
        "preset": preset,
        "batch": [b, s],
        "support": support,
        "cursors_scanned": n,
        "prism_layers": n_prism,
        "step_ms": step,
        "nope_step_ms": basis_ms(timings["nope_step"], basis),
        "ratio_to_nope": step / basis_ms(timings["nope_step"], basis),
        "basis": basis,
        "parts": parts,
        "profile": profile_step(step_function(model, opt, batch)),
    }


def profile_step(step: Callable[[], object], top: int = 8) -> list[dict[str, Any]]:
    """The ops taking the most self CPU time in one call of ``step`` (torch.profiler), plus PRISM's regions."""
    from torch.profiler import profile

    step()
    with profile() as prof:
        step()
    averages = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in averages) or 1.0
    ranked = sorted(averages, key=lambda e: e.self_cpu_time_total, reverse=True)
    rows = [
        {
            "op": e.key,
            "self_ms": e.self_cpu_time_total / 1000.0,
            "share": e.self_cpu_time_total / total,
            "calls": e.count,
        }
        for e in ranked[:top]
    ]
    regions = [
        {"op": e.key, "total_ms": e.cpu_time_total / 1000.0, "calls": e.count}
        for e in averages
        if e.key.startswith("prism.")
    ]
    return rows + regions


def random_batch(batch_size: int, length: int, vocab_size: int, device: torch.device, seed: int = 0) -> Batch:
    """A (batch_size, length) training batch of random tokens, every position labelled with
    the next token: the cost of a step depends on the shape, not on the tokens."""
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab_size, (batch_size, length + 1), generator=gen)
    return Batch(
        inputs=tokens[:, :-1],
        labels=tokens[:, 1:],
        scales=torch.full((batch_size,), length),
        scored=torch.ones(batch_size, length, dtype=torch.bool),
    ).to(device)


def measure_prism_lengths(grid: PerfGrid, device: torch.device) -> list[dict[str, Any]]:
    """The PRISM training step, without and with its copy branch, against NoPE's, at each of
    ``grid.prism_lengths`` (the backbone and batch size of ``grid.prism_length_preset``)."""
    preset = grid.prism_length_preset
    models = {
        name: build_for(preset, pe, "sdpa", device, **options)
        for name, pe, options in (("nope", "nope", {}), ("prism", "prism", {}), ("copy", "prism", COPY_OPTIONS))
    }
    model, _ = models["nope"]
    batch_size = grid.batch_size or training_batch(preset, 0, device)[1].inputs.shape[0]
    basis, rows = ratio_basis(device), []
    for length in grid.prism_lengths:
        batch = random_batch(batch_size, length, model.embed.num_embeddings, device)
        candidates = {name: step_function(m, opt, batch) for name, (m, opt) in models.items()}
        timings = time_interleaved(candidates, repeats=grid.repeats, warmup=grid.warmup, sync=synchronizer(device))
        ms = {name: basis_ms(t, basis) for name, t in timings.items()}
        rows.append(
            {
                "preset": preset,
                "batch": [batch_size, length],
                "basis": basis,
                **{f"{name}_ms": value for name, value in ms.items()},
                "spread": max(t.spread for t in timings.values()),
                "prism_ratio": ms["prism"] / ms["nope"],
                "copy_ratio": ms["copy"] / ms["nope"],
                "copy_over_prism": ms["copy"] / ms["prism"],
                "meets_target": ms["prism"] / ms["nope"] <= PRISM_LENGTH_TARGETS["prism"]
                and ms["copy"] / ms["prism"] <= PRISM_LENGTH_TARGETS["copy"],
            }
        )
    return rows


def measure_prism(grid: PerfGrid, device: torch.device) -> dict[str, Any]:
    """Scan scaling, and the parts of the PRISM training step at the grid's first preset (default
    options and each of ``prism_options``)."""
    out: dict[str, Any] = measure_prism_scaling(grid, device)
    variants = {"default": {}, **grid.prism_options}
    preset = grid.presets[0] if grid.presets else "quick"
    out["components"] = [
        {"variant": label, **prism_components(preset, options, grid.batch_size, device, grid.repeats, grid.warmup)}
        for label, options in variants.items()
    ]
    if grid.prism_lengths:
        out["by_length"] = measure_prism_lengths(grid, device)
    return out
