"""`pezoo perf`: the whole run, its tables and its JSON (see :mod:`harness.perf`)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import torch
from tabulate import tabulate

from harness.perf.alloc import measure_alloc
from harness.perf.compile import measure_compile
from harness.perf.decode import measure_decode
from harness.perf.gpu import measure_gpu, render_gpu
from harness.perf.grid import ALLOC_TARGETS, COMPILE_TARGET, PRISM_LENGTH_TARGETS, SCHEMA_VERSION, SECTIONS, PerfGrid
from harness.perf.memory import measure_memory
from harness.perf.precision import measure_precision
from harness.perf.prism import measure_prism
from harness.perf.train import best_backend_rows, measure_train
from harness.records.provenance import provenance
from harness.training.precision import use_tf32


def run_perf(grid: PerfGrid, device: torch.device, *, log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Every section of ``grid`` on ``device``: the JSON-ready report."""
    if grid.threads:
        torch.set_num_threads(grid.threads)
    tf32 = use_tf32(device)  # on CUDA, float32 matmuls as the harness trains them (harness.training.precision)
    report: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "provenance": {
            **provenance(device),
            "threads": torch.get_num_threads(),
            "tf32": tf32,
            "load_average_before": _load_average(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
        "grid": {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in asdict(grid).items()},
    }
    measure = {
        "train": measure_train,
        "precision": measure_precision,
        "memory": measure_memory,
        "alloc": measure_alloc,
        "decode": measure_decode,
        "prism": measure_prism,
        "compile": lambda grid, device: measure_compile(grid, device, log=log),
        "gpu": measure_gpu,
    }
    seconds = {}
    for section in SECTIONS:
        if section in grid.sections:
            log(f"measuring {section} ...")
            start = time.perf_counter()
            report[section] = measure[section](grid, device)
            seconds[section] = time.perf_counter() - start
    report["provenance"]["load_average_after"] = _load_average()
    report["provenance"]["seconds"] = seconds
    return report


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _fmt_ms(ms: float, spread: float | None = None) -> str:
    text = f"{ms:.1f}" if ms < 1000 else f"{ms:.0f}"
    return text if spread is None else f"{text} ±{100 * spread / 2:.0f}%"


def render(report: Mapping[str, Any]) -> str:
    """The report as text: provenance, then one table per section (GitHub markdown)."""
    prov = report["provenance"]
    lines = [
        f"pezoo perf · {prov['device']} · torch {prov['torch']} · pezoo {prov['pezoo']} · commit {prov['commit'][:12]}",
        f"threads {prov['threads']} · load average before {prov.get('load_average_before')} "
        f"after {prov.get('load_average_after')} · medians of interleaved rounds, ± half the IQR",
    ]
    if "train" in report:
        lines += ["", *_render_train(report["train"])]
    if "precision" in report:
        lines += ["", *_render_precision(report["precision"])]
    if "memory" in report:
        lines += ["", *_render_memory(report["memory"], report["grid"])]
    if "alloc" in report:
        lines += ["", *_render_alloc(report["alloc"], report["grid"])]
    if "decode" in report:
        lines += ["", *_render_decode(report["decode"])]
    if "prism" in report:
        lines += ["", *_render_prism(report["prism"])]
    if "compile" in report:
        lines += ["", *_render_compile(report["compile"])]
    if "gpu" in report:
        lines += ["", *render_gpu(report["gpu"])]
    return "\n".join(lines)


BASIS_WORDS = {"cpu": "process CPU time (1 thread)", "wall": "wall-clock time"}


def _render_train(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    out = []
    for preset in dict.fromkeys(r["preset"] for r in rows):
        mine = [r for r in rows if r["preset"] == preset]
        backends = list(dict.fromkeys(r["backend"] for r in mine))
        best = {r["pe"]: r for r in best_backend_rows(mine)}
        table = []
        for pe in dict.fromkeys(r["pe"] for r in mine):
            by_backend = {r["backend"]: r for r in mine if r["pe"] == pe}
            b = best[pe]
            target = b["target"]
            verdict = "" if target is None else f"≤ {target:g}× {'yes' if b['meets_target'] else 'NO'}"
            table.append(
                [
                    pe,
                    *(
                        _fmt_ms(by_backend[k]["median_ms"], by_backend[k]["spread"]) if k in by_backend else ""
                        for k in backends
                    ),
                    b["backend"],
                    f"{b['ratio_to_nope']:.2f}",
                    f"{b['tokens_per_s']:,.0f}",
                    verdict,
                ]
            )
        b, s = mine[0]["batch"]
        out.append(
            f"training step (forward + backward + optimiser), preset {preset}, batch {b}×{s} tokens: wall-clock ms "
            f"per backend; ratio to nope on its fastest backend, on {BASIS_WORDS[mine[0]['basis']]}"
        )
        out.append(
            tabulate(
                table,
                headers=["encoding", *backends, "fastest", f"× nope ({mine[0]['basis']})", "tokens/s", "target"],
                tablefmt="github",
                disable_numparse=True,
            )
        )
    return out


def _render_precision(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    out = []
    for preset in dict.fromkeys(r["preset"] for r in rows):
        mine = [r for r in rows if r["preset"] == preset]
        precisions = list(dict.fromkeys(r["precision"] for r in mine))
        others = [p for p in precisions if p != "fp32"]
        table = []
        for pe in dict.fromkeys(r["pe"] for r in mine):
            by = {r["precision"]: r for r in mine if r["pe"] == pe}
            verdicts = [
                f"{p} ≤ {by[p]['target']:g}× {'yes' if by[p]['meets_target'] else 'NO'}"
                for p in others
                if by[p]["target"] is not None
            ]
            table.append(
                [
                    pe,
                    *(_fmt_ms(by[p]["median_ms"], by[p]["spread"]) for p in precisions),
                    *(f"{by[p]['ratio_to_fp32']:.2f}" for p in others),
                    ", ".join(verdicts),
                ]
            )
        b, s = mine[0]["batch"]
        out.append(
            f"training step per precision (autocast over float32 weights), preset {preset}, batch {b}×{s} tokens: "
            f"wall-clock ms; ratio to the same encoding's fp32 step on {BASIS_WORDS[mine[0]['basis']]}"
        )
        out.append(
            tabulate(
                table,
                headers=["encoding", *precisions, *(f"{p} / fp32 ({mine[0]['basis']})" for p in others), "target"],
                tablefmt="github",
                disable_numparse=True,
            )
        )
        if "matmul_ratio_to_fp32" in mine[0]:  # reports from before the reference had none
            m, k, n = mine[0]["matmul_shape"]
            rates = {r["precision"]: r for r in mine}
            out.append(
                f"the matrix product alone in the same rounds ({m}×{k} @ {k}×{n}): "
                + ", ".join(f"{p} {rates[p]['matmul_gflops']:.0f} GFLOP/s" for p in precisions)
                + "; "
                + ", ".join(f"{p} / fp32 {rates[p]['matmul_ratio_to_fp32']:.2f}" for p in others)
                + " (a step ratio's floor as matrix work takes over the step)"
            )
    return out


def _peak_table(rows: Sequence[Mapping[str, Any]], digits: int) -> tuple[list[tuple[str, int]], list[list[str]]]:
    """(the (backend, length) columns, one row per encoding) of a memory section: each cell
    the peak in MiB with its ratio to nope and, where the row has one, the target verdict;
    ✗ where the measurement failed, blank where it was not taken."""
    columns = list(dict.fromkeys((r["backend"], r["length"]) for r in rows))
    table = []
    for pe in dict.fromkeys(r["pe"] for r in rows):
        cells = []
        for backend, length in columns:
            r = next((r for r in rows if (r["pe"], r["backend"], r["length"]) == (pe, backend, length)), None)
            if r is None:
                cells.append("")
            elif not r["ok"]:
                cells.append("✗")
            else:
                ratio = "" if r["ratio_to_nope"] is None or pe == "nope" else f" ({r['ratio_to_nope']:.2f}×)"
                verdict = "" if r.get("meets_target") is None else (" ✓" if r["meets_target"] else " NO")
                cells.append(f"{r['peak_mib']:.{digits}f}{ratio}{verdict}")
        table.append([pe, *cells])
    return columns, table


def _render_memory(rows: Sequence[Mapping[str, Any]], grid: Mapping[str, Any]) -> list[str]:
    columns, table = _peak_table(rows, digits=0)
    d, n_layers, h = grid["memory_dims"]
    out = [
        f"peak memory of one forward pass, MiB above the pre-pass baseline (batch 1, d {d}, {n_layers} layers, "
        f"{h} heads; × nope on the same backend; ✗ not feasible)",
        tabulate(
            table, headers=["encoding", *(f"{b} S={s}" for b, s in columns)], tablefmt="github", disable_numparse=True
        ),
    ]
    failed = [r for r in rows if not r["ok"]]
    out += [f"  ✗ {r['pe']} {r['backend']} S={r['length']}: {r['error']}" for r in failed]
    return out


def _render_alloc(rows: Sequence[Mapping[str, Any]], grid: Mapping[str, Any]) -> list[str]:
    columns, table = _peak_table(rows, digits=1)
    d, n_layers, h = grid["memory_dims"]
    passes = {b: next((r["pass"] for r in rows if r["backend"] == b and r.get("pass")), "?") for b, _ in columns}
    how = next((r["how"] for r in rows if r.get("how")), "?")
    out = [
        f"peak allocated memory, MiB above the start of the pass ({how}; batch {grid['alloc_batch']}, d {d}, "
        f"{n_layers} layers, {h} heads; × nope on the same backend and length; ✓/NO: target "
        f"≤ {', '.join(f'{k} {v:g}×' for k, v in ALLOC_TARGETS.items())} on flex at the longest length; ✗ failed)",
        "pass per backend: " + ", ".join(f"{b} {p}" for b, p in passes.items()),
        tabulate(
            table, headers=["encoding", *(f"{b} S={s}" for b, s in columns)], tablefmt="github", disable_numparse=True
        ),
    ]
    failed = [r for r in rows if not r["ok"]]
    out += [f"  ✗ {r['pe']} {r['backend']} S={r['length']}: {r['error']}" for r in failed]
    out += [f"  ! {r['pe']} {r['backend']} S={r['length']}: {w}" for r in rows for w in r.get("warnings", ())]
    return out


DECODE_HEADERS = ["encoding", "generated", "cached s", "recompute s", "cached tok/s", "recompute tok/s", "speedup",
                  "same tokens"]  # fmt: skip


def _render_decode(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    if not rows:
        return []
    r0 = rows[0]
    table = [
        [
            r["pe"],
            r["generated"],
            f"{r['cached_ms'] / 1000:.2f}",
            f"{r['uncached_ms'] / 1000:.2f}",
            f"{r['cached_tokens_per_s']:,.0f}",
            f"{r['uncached_tokens_per_s']:,.0f}",
            f"{r['speedup']:.1f}×",
            "yes" if r["same_tokens"] else "NO",
        ]
        for r in rows
    ]
    window = f", sliding window {r0['window']} (jumps of 20)" if r0.get("window") else ""
    return [
        f"greedy decoding, quick backbone, batch {r0['batch']}{window}, prompt {r0['prompt']} + generated tokens "
        f"(target: cached ≥ 10× faster; speedup on {BASIS_WORDS[r0['basis']]})",
        tabulate(
            table,
            headers=DECODE_HEADERS,
            tablefmt="github",
            disable_numparse=True,
        ),
    ]


def _render_prism(prism: Mapping[str, Any]) -> list[str]:
    by_p = prism["by_support"]
    out = [
        f"PRISM histogram scan, {by_p[0]['cursors']} cursors × {by_p[0]['tokens']} tokens, ms of "
        f"{BASIS_WORDS[by_p[0]['basis']]} (target: ≤ 2.3× per doubling of P)",
        _scan_table(by_p, "support", "P"),
        "",
        f"PRISM histogram scan at P = {prism['by_tokens'][0]['support']}, ms (linear in t: ≈ 2× per doubling)",
        _scan_table(prism["by_tokens"], "tokens", "tokens"),
    ]
    if prism.get("by_length"):
        rows = prism["by_length"]
        b = rows[0]["batch"][0]
        out += [
            "",
            f"PRISM training step at longer sequences, preset {rows[0]['preset']}'s backbone, batch {b}, random "
            f"tokens, sdpa, ms of {BASIS_WORDS[rows[0]['basis']]} "
            f"(targets: prism ≤ {PRISM_LENGTH_TARGETS['prism']}× nope, copy ≤ {PRISM_LENGTH_TARGETS['copy']}× prism)",
            _length_table(rows),
        ]
    for comp in prism.get("components", []):
        b, s = comp["batch"]
        out += [
            "",
            f"PRISM training step ({comp['variant']} options), preset {comp['preset']}, batch {b}×{s}, "
            f"P = {comp['support']}, {comp['cursors_scanned']} cursors scanned per PRISM layer: "
            f"{_fmt_ms(comp['step_ms'])} ms = {comp['ratio_to_nope']:.2f}× nope ({_fmt_ms(comp['nope_step_ms'])} ms), "
            f"{BASIS_WORDS[comp['basis']]}",
            tabulate(
                [[name, _fmt_ms(p["ms"]), f"{100 * p['share']:.0f}%"] for name, p in comp["parts"].items()],
                headers=["part (forward + backward)", "ms", "share of the step"],
                tablefmt="github",
                disable_numparse=True,
            ),
        ]
    return out


def _scan_table(rows: Sequence[Mapping[str, Any]], key: str, header: str) -> str:
    """The PRISM scan's forward and forward+backward times per ``key`` (column ``header``),
    each with its ratio per doubling."""

    def ratio(r: Mapping[str, Any], key: str) -> str:
        return f"{r[key]:.2f}" if key in r else ""

    return tabulate(
        [
            [
                r[key],
                _fmt_ms(r["forward_ms"]),
                ratio(r, "forward_ratio"),
                _fmt_ms(r["forward_backward_ms"], r["spread"]),
                ratio(r, "forward_backward_ratio"),
            ]
            for r in rows
        ],
        headers=[header, "forward", "× per doubling", "forward+backward", "× per doubling"],
        tablefmt="github",
        disable_numparse=True,
    )


def _length_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """PRISM's training step against nope's, and with its copy, per sequence length, each
    against its target."""
    return tabulate(
        [
            [
                r["batch"][1],
                _fmt_ms(r["nope_ms"]),
                f"{_fmt_ms(r['prism_ms'])} ({r['prism_ratio']:.2f}×)",
                f"{_fmt_ms(r['copy_ms'])} ({r['copy_ratio']:.2f}×)",
                f"{r['copy_over_prism']:.2f}",
                f"±{100 * r['spread'] / 2:.0f}%",
                "✓" if r["meets_target"] else "✗",
            ]
            for r in rows
        ],
        headers=["tokens", "nope", "prism (× nope)", "+ copy (× nope)", "copy / prism", "spread", "target"],
        tablefmt="github",
        disable_numparse=True,
    )


COMPILE_HEADERS = ["model", "encoding", "eager ms", "compiled ms", "compiled / eager", "target", "graphs per length",
                   "compile s (1st, 2nd length)", "later lengths' 1st step s", "|Δ loss|", "Δ grad (rel.)"]  # fmt: skip


def _render_compile(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One row per (model, encoding): step times, ratio, graphs compiled after each length, compile times."""
    ok = [r for r in rows if "error" not in r]
    if not ok:
        return [f"  ✗ {r['model']} {r['pe']}: {r['error']}" for r in rows]
    r0 = ok[0]
    table = []
    for r in ok:
        first = r["first_call_s"]
        later = first[2:]
        table.append(
            [
                r["model"],
                r["pe"],
                _fmt_ms(r["eager_ms"]),
                _fmt_ms(r["compiled_ms"]),
                f"{r['ratio']:.2f}",
                f"≤ {r['target']:g}× {'yes' if r['meets_target'] else 'NO'}",
                ", ".join(str(g) for g in r["graphs_after_length"])
                + (
                    ""
                    if r["graphs"] == r["graphs_after_length"][-1]
                    else f" (+{r['graphs'] - r['graphs_after_length'][-1]} later)"
                ),
                ", ".join(f"{t:.1f}" for t in first[:2]),
                ", ".join(f"{t:.2f}" for t in later),
                f"{r['loss_diff']:.1e}",
                f"{r['grad_rel_diff']:.1e}",
            ]
        )
    out = [
        f"torch.compile against eager: one training step at each of the lengths {', '.join(map(str, r0['lengths']))} "
        f"(batch {r0['batch']}) per round; ratio on {BASIS_WORDS[r0['basis']]}, target ≤ {COMPILE_TARGET:g}×; "
        "backbone: torch.compile(model, dynamic=True), decoder: a user's decoder on pezoo's hooks, "
        "torch.compile(model); graphs: compiled so far after each length's first step; |Δ loss|, Δ grad: "
        "compiled against eager on the first batch",
        tabulate(table, headers=COMPILE_HEADERS, tablefmt="github", disable_numparse=True),
    ]
    out += [f"  ✗ {r['model']} {r['pe']}: {r['error']}" for r in rows if "error" in r]
    return out
