"""`pezoo perf`: greedy decoding with and without the cache (see :mod:`harness.perf`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.perf.grid import PerfGrid
from harness.perf.timing import synchronizer, time_interleaved
from harness.perf.train import basis_ms, build_for, ratio_basis


def measure_decode(grid: PerfGrid, device: torch.device) -> list[dict[str, Any]]:
    """Greedy decoding to ``decode_length`` tokens, cached vs recomputing the prefix, per encoding.

    The model is the ``quick`` backbone, untrained; the EOS row of its tied embedding is
    zeroed so that its logit is exactly 0 while 63 others are O(1) draws of either sign,
    and decoding runs the whole length (the generated length is checked and reported).
    """
    from harness.evaluation.evaluate import greedy_decode
    from harness.tasks.vocab import BOS_ID, EOS_ID

    max_new = grid.decode_length - grid.decode_prompt
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(2, 60, (grid.decode_batch, grid.decode_prompt), generator=gen)
    prompts[:, 0] = BOS_ID
    prompts = prompts.to(device)
    candidates: dict[str, Callable[[], object]] = {}
    outputs: dict[str, torch.Tensor] = {}
    for pe in grid.decode_encodings:
        model, _ = build_for("quick", pe, "sdpa", device)
        model.eval()
        with torch.no_grad():
            model.embed.weight[EOS_ID] = 0.0
        for cached in (True, False):

            def run(model=model, cached=cached, key=f"{pe}|{cached}") -> None:
                outputs[key] = greedy_decode(model, prompts, max_new, use_cache=cached, window=grid.decode_window)

            candidates[f"{pe}|{cached}"] = run
    rounds = max(1, min(grid.repeats, 3))
    timings = time_interleaved(candidates, repeats=rounds, warmup=0, sync=synchronizer(device))
    basis = ratio_basis(device)
    rows = []
    for pe in grid.decode_encodings:
        fast, slow = timings[f"{pe}|True"], timings[f"{pe}|False"]
        out = outputs[f"{pe}|True"]
        generated = int((out != EOS_ID).all(dim=0).sum())
        n_tokens = grid.decode_batch * generated
        rows.append(
            {
                "pe": pe,
                "batch": grid.decode_batch,
                "prompt": grid.decode_prompt,
                "window": grid.decode_window,
                "generated": generated,
                "cached_ms": fast.median_ms,
                "uncached_ms": slow.median_ms,
                "cached_tokens_per_s": n_tokens / (fast.median_ms / 1000.0),
                "uncached_tokens_per_s": n_tokens / (slow.median_ms / 1000.0),
                "speedup": basis_ms(slow, basis) / basis_ms(fast, basis),
                "basis": basis,
                "same_tokens": bool(torch.equal(out, outputs[f"{pe}|False"])),
                "rounds": fast.rounds,
            }
        )
    return rows
