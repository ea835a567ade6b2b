"""Performance of the zoo: what choosing an encoding costs in time and memory (`pezoo perf`).

Axis letters: b batch, s sequence, d model width, h heads, n cursors, p histogram bins
(2P+1), f stream width, t scanned tokens.

Four measurements, each run side by side in one process on the current device:

* ``train``: one optimiser step (forward, backward, AdamW) of the backbone that the
  benchmark trains (``harness.train.build_model`` at a preset's size), per encoding and
  attention backend, on a fixed batch at the preset's largest training length; median
  time, spread, tokens/s, and the ratio to ``nope`` on its fastest backend.
* ``memory``: peak memory of one forward pass at batch 1 and long sequences, each in its
  own subprocess (so one measurement cannot inflate another and an out-of-memory kill
  stays contained): CUDA peak allocator bytes on GPU, the peak resident set (VmHWM,
  reset after a warm-up pass) on CPU, both minus the memory held before the pass.
* ``alloc``: peak memory at the allocator of a forward + backward pass per encoding,
  backend and length (S = 1k … 8k by default), all lengths of one (encoding, backend) in
  one subprocess: ``torch.cuda.max_memory_allocated`` on CUDA, the profiler's memory
  events (``profile_memory=True``: every CPU allocator call with the running total) on
  CPU, both above the bytes allocated when the pass starts; ratio to NoPE in the same
  run. Unlike RSS it is exact to the byte and does not move between runs. On CPU, flex
  has no backward pass, so its rows are the forward pass (under ``no_grad``).
* ``decode``: greedy decoding (``harness.evaluate.greedy_decode``) to a fixed total
  length with the KV cache / recurrent state and by recomputing the prefix.
* ``prism``: the PRISM histogram scan over t tokens at supports P (ratio per doubling
  of P and of t), the GRU gates, the position streams, each forward + backward, and
  their share of one PRISM training step.

Timing protocol: every measured callable is warmed up first, then the repetitions are
interleaved (one call of each candidate per round, the order rotated every round), so
load from other processes affects every candidate alike; the median and the
interquartile range over rounds are reported. Ratios are taken on process CPU time when
torch runs single-threaded on a CPU (the default: it is the work done, which a loaded
machine inflates far less than wall-clock time) and on wall-clock time otherwise
(:func:`ratio_basis`). Only ratios within one run are meant to be compared.
"""

from __future__ import annotations

import gc
import itertools
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import click
import torch
import torch.nn.functional as F
from tabulate import tabulate

import pezoo
from harness.backbone import Backbone, BackboneConfig
from harness.config import PRESETS, preset_config
from harness.data import IGNORE, collate
from harness.provenance import provenance
from harness.tasks import create as create_task
from pezoo.encodings.prism import PAPER_OPTIONS

SCHEMA_VERSION = 1

SECTIONS = ("train", "memory", "alloc", "decode", "prism")

DEFAULT_SECTIONS = ("train", "memory", "decode", "prism")
"""What a plain ``pezoo perf`` runs; ``alloc`` (minutes of flex compiles on CPU) is asked for
with ``--sections alloc`` or ``--full``."""

ALLOC_TARGETS: dict[str, float] = {"alibi": 1.2, "hard_alibi": 1.2, "t5": 1.2}
"""Largest accepted allocator peak on flex at the longest length, as a multiple of NoPE's."""

TARGET_ENCODINGS = (
    "nope",
    "ape",
    "learned_ape",
    "rope",
    "alibi",
    "hard_alibi",
    "randomized",
    "randomized:rope",
    "randomized:alibi",
    "t5",
    "learned_prf",
    "prism",
)
"""The encodings the issue sets step-time targets for (plus T5), in table order."""

STEP_TARGETS: dict[str, float] = {
    **dict.fromkeys(
        ("ape", "learned_ape", "rope", "alibi", "hard_alibi", "randomized", "randomized:rope", "randomized:alibi"),
        1.15,
    ),
    "learned_prf": 2.0,
    "prism": 2.5,
}
"""Largest accepted training-step time as a multiple of NoPE on its fastest backend."""

PRESET_TASKS = {"quick": "copy", "ruoss": "reverse_string", "smoke": "copy"}
"""The task whose batches time a preset's training step (decoder presets: copy; encoder: a
fixed-output-length task)."""


# --------------------------------------------------------------------------------------
# The grid
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PerfGrid:
    """What `pezoo perf` measures (strict keys: see :func:`grid_from`).

    Attributes:
        sections: which of ``SECTIONS`` to run.
        repeats: interleaved timing rounds per measurement (after ``warmup`` calls each).
        warmup: untimed calls per candidate before the rounds.
        threads: torch intra-op threads (0: leave torch's default). 1 by default: on a
            shared CPU, OpenMP threads that spin-wait on busy cores make multi-threaded
            timings several times slower and far noisier.
        presets: presets whose backbone the training step is timed at.
        encodings: encodings of the training-step table.
        backends: attention backends of the training-step table (empty: every backend
            that can train on the device).
        batch_size: training batch (0: the preset's own).
        memory_lengths: sequence lengths of the memory table (batch 1).
        memory_encodings, memory_backends: the memory table's rows.
        memory_dims: (d_model, n_layers, n_heads) of the memory backbone.
        memory_cap_gib: address-space cap of each CPU memory subprocess; a measurement
            needing more is reported as not feasible instead of taking the machine down.
        alloc_lengths: sequence lengths of the allocator-peak table.
        alloc_encodings, alloc_backends: its rows and backends.
        alloc_batch: its batch size.
        decode_length: total tokens (prompt + generated) of the decoding measurement.
        decode_prompt: prompt tokens.
        decode_batch: sequences decoded together.
        decode_encodings: encodings of the decoding table.
        decode_window: 0, or decode under a sliding context of this many tokens (dropping
            the oldest 20 when full: ``EvalConfig.window``), cached and uncached alike.
        prism_supports: supports P of the scan scaling table.
        prism_scan_tokens: tokens t scanned at each P (and the base of the t doubling).
        prism_cursors: cursors n scanned together (batch × cursors flattened).
        prism_options: extra PRISM options (besides the defaults) whose step is profiled,
            by label; ``{"paper": PAPER_OPTIONS}`` adds the paper's cursor counts.
    """

    sections: tuple[str, ...] = DEFAULT_SECTIONS
    repeats: int = 7
    warmup: int = 2
    threads: int = 1
    presets: tuple[str, ...] = ("quick", "ruoss")
    encodings: tuple[str, ...] = TARGET_ENCODINGS
    backends: tuple[str, ...] = ()
    batch_size: int = 0
    memory_lengths: tuple[int, ...] = (2048,)
    memory_encodings: tuple[str, ...] = ("nope", "alibi", "hard_alibi")
    memory_backends: tuple[str, ...] = ("sdpa", "flex")
    memory_dims: tuple[int, int, int] = (64, 5, 8)
    memory_cap_gib: float = 8.0
    alloc_lengths: tuple[int, ...] = (1024, 2048, 4096, 8192)
    alloc_encodings: tuple[str, ...] = ("nope", "alibi", "hard_alibi", "t5")
    alloc_backends: tuple[str, ...] = ("sdpa", "flex")
    alloc_batch: int = 1
    decode_length: int = 500
    decode_prompt: int = 12
    decode_batch: int = 1
    decode_encodings: tuple[str, ...] = ("nope", "rope", "alibi")
    decode_window: int = 0
    prism_supports: tuple[int, ...] = (256, 512, 1024, 2048, 4096)
    prism_scan_tokens: int = 32
    prism_cursors: int = 32
    prism_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.sections) - set(SECTIONS))
        if unknown:
            raise ValueError(f"unknown perf section(s) {', '.join(unknown)}; valid: {', '.join(SECTIONS)}")
        if self.repeats < 1 or self.warmup < 0:
            raise ValueError(f"need repeats >= 1 and warmup >= 0, got {self.repeats}, {self.warmup}")
        if self.decode_batch < 1 or self.alloc_batch < 1:
            raise ValueError(f"need decode_batch and alloc_batch >= 1, got {self.decode_batch}, {self.alloc_batch}")
        if 0 < self.decode_window <= 20 or self.decode_window < 0:
            raise ValueError(f"the decoding window must exceed its 20-token jump, got {self.decode_window}")


GRIDS: dict[str, PerfGrid] = {
    # a few minutes on 2 CPU cores
    "default": PerfGrid(),
    # about a minute: the smallest grid that still says something
    "quick": PerfGrid(
        repeats=5,
        presets=("quick",),
        encodings=("nope", "ape", "rope", "alibi", "hard_alibi", "randomized:rope", "learned_prf", "prism"),
        memory_lengths=(512,),
        memory_encodings=("nope", "alibi"),
        memory_backends=("sdpa",),
        decode_length=200,
        decode_encodings=("nope",),
        prism_supports=(256, 512, 1024),
    ),
    # the whole grid of the issue (tens of minutes on CPU)
    "full": PerfGrid(
        sections=SECTIONS,
        repeats=11,
        memory_lengths=(512, 2048, 8192),
        memory_encodings=(
            "nope",
            "ape",
            "learned_ape",
            "rope",
            "alibi",
            "hard_alibi",
            "t5",
            "learned_prf",
            "prism",
        ),
        memory_backends=("eager", "sdpa", "flex"),
        decode_batch=8,
        decode_encodings=("nope", "ape", "rope", "alibi", "hard_alibi", "t5", "learned_prf", "prism"),
        prism_options={"paper": dict(PAPER_OPTIONS)},
    ),
}


def grid_from(base: str | PerfGrid, **overrides: Any) -> PerfGrid:
    """``base`` (a name of :data:`GRIDS` or a grid) with fields replaced; None values are ignored.

    An unknown key is an error naming the valid ones.
    """
    grid = GRIDS[base] if isinstance(base, str) else base
    valid = {f.name for f in fields(PerfGrid)}
    unknown = sorted(set(overrides) - valid)
    if unknown:
        raise TypeError(f"unknown perf option(s) {', '.join(unknown)}; valid: {', '.join(sorted(valid))}")
    return replace(grid, **{k: v for k, v in overrides.items() if v is not None})


# --------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Summary of one candidate's timed rounds, in milliseconds."""

    median_ms: float
    q1_ms: float
    q3_ms: float
    min_ms: float
    rounds: int
    cpu_ms: float = math.nan

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median."""
        return (self.q3_ms - self.q1_ms) / self.median_ms if self.median_ms > 0 else 0.0

    @classmethod
    def of(cls, samples_ms: Sequence[float], cpu_samples_ms: Sequence[float] = ()) -> Timing:
        """Summary of wall-clock samples (and, optionally, the process CPU time of the same calls)."""
        xs = sorted(samples_ms)
        if len(xs) >= 2:
            q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
        else:
            q1 = q3 = xs[0]
        cpu = statistics.median(cpu_samples_ms) if cpu_samples_ms else math.nan
        return cls(statistics.median(xs), q1, q3, xs[0], len(xs), cpu)


def synchronizer(device: torch.device) -> Callable[[], None]:
    """What makes a timed region end when the device's work has ended."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def time_interleaved(
    candidates: Mapping[str, Callable[[], object]],
    *,
    repeats: int,
    warmup: int,
    sync: Callable[[], None] = lambda: None,
) -> dict[str, Timing]:
    """Time every candidate ``repeats`` times, one call of each per round.

    Each candidate is called ``warmup`` times first (compilation, allocator growth,
    lazy initialisation). The order of the candidates is rotated every round, so no
    candidate always runs right after the same other one.
    """
    names = list(candidates)
    for name in names:
        for _ in range(warmup):
            candidates[name]()
    sync()
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            sync()
            start, start_cpu = time.perf_counter(), time.process_time()
            candidates[name]()
            sync()
            wall[name].append((time.perf_counter() - start) * 1000.0)
            cpu[name].append((time.process_time() - start_cpu) * 1000.0)
    return {name: Timing.of(wall[name], cpu[name]) for name in names}


# --------------------------------------------------------------------------------------
# Training step
# --------------------------------------------------------------------------------------


def training_backends(device: torch.device) -> tuple[str, ...]:
    """Backends that can run a training step on ``device`` through their own kernels.

    On CPU ``flex`` has no backward pass (it defers to ``sdpa``) and ``xformers``
    refuses CPU tensors, so only ``eager`` and ``sdpa`` differ there.
    """
    if device.type != "cuda":
        return ("eager", "sdpa")
    from pezoo.backends import xformers_available

    return ("eager", "sdpa", "flex", *(("xformers",) if xformers_available() else ()))


def training_batch(preset: str, batch_size: int, device: torch.device) -> tuple[Any, Any]:
    """(run config of ``nope`` at ``preset``, a fixed batch at the preset's largest training scale)."""
    cfg = preset_config(preset, pe="nope", task=PRESET_TASKS.get(preset, "copy"), seed=0)
    task = create_task(cfg.task)
    rng = random.Random(f"perf/{preset}")
    scale = max(n for n in cfg.train_lengths() if task.has_scale(n))
    n = batch_size or cfg.train.batch_size
    batch = collate([task.sample(scale, rng) for _ in range(n)], cfg.protocol).to(device)
    return cfg, batch


def step_function(model: Backbone, optimizer: torch.optim.Optimizer, batch: Any) -> Callable[[], float]:
    """One training step (forward, loss, backward, clipping, optimiser) on a fixed batch."""

    def step() -> float:
        logits = model(batch.inputs, scale_hint=batch.scales)  # (b, s, v)
        loss = F.cross_entropy(logits.flatten(0, 1), batch.labels.flatten(), ignore_index=IGNORE)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return 0.0

    return step


def build_for(preset: str, pe: str, backend: str, device: torch.device, **pe_options: Any) -> tuple[Backbone, Any]:
    """The benchmark's own model and optimiser for (preset, encoding, backend)."""
    from harness.train import build_model, make_optimizer

    cfg = preset_config(
        preset,
        pe=pe,
        task=PRESET_TASKS.get(preset, "copy"),
        seed=0,
        overrides={"backbone": {"backend": backend}},
    )
    if pe_options:
        cfg = replace(cfg, pe_options=dict(pe_options))
    model = build_model(cfg, device)
    model.train()
    return model, make_optimizer(model, cfg)


def ratio_basis(device: torch.device) -> str:
    """Which time ratios are taken on: ``cpu`` (process CPU time) on a single-threaded CPU, else ``wall``.

    A single-threaded process's CPU time is the work it did, whatever else the machine
    is running, so it estimates the idle-machine wall-clock time far more stably than
    wall-clock time on a loaded machine does; with several threads it would also count
    spin-waiting, and on a GPU it is not the device's time.
    """
    return "cpu" if device.type == "cpu" and torch.get_num_threads() == 1 else "wall"


def basis_ms(t: Timing, basis: str) -> float:
    return t.cpu_ms if basis == "cpu" else t.median_ms


def measure_train(grid: PerfGrid, device: torch.device) -> list[dict[str, Any]]:
    """Training-step rows for every (preset, encoding, backend) of ``grid``."""
    rows: list[dict[str, Any]] = []
    backends = grid.backends or training_backends(device)
    basis = ratio_basis(device)
    for preset in grid.presets:
        _, batch = training_batch(preset, grid.batch_size, device)
        candidates: dict[str, Callable[[], object]] = {}
        for pe, backend in itertools.product(grid.encodings, backends):
            model, opt = build_for(preset, pe, backend, device)
            candidates[f"{pe}|{backend}"] = step_function(model, opt, batch)
        timings = time_interleaved(candidates, repeats=grid.repeats, warmup=grid.warmup, sync=synchronizer(device))
        b, s = batch.inputs.shape
        nope = [basis_ms(t, basis) for key, t in timings.items() if key.startswith("nope|")]
        reference = min(nope) if nope else math.nan
        for key, t in timings.items():
            pe, backend = key.split("|")
            rows.append(
                {
                    "preset": preset,
                    "pe": pe,
                    "backend": backend,
                    "batch": [b, s],
                    "median_ms": t.median_ms,
                    "spread": t.spread,
                    "cpu_ms": t.cpu_ms,
                    "basis": basis,
                    "tokens_per_s": b * s / (t.median_ms / 1000.0),
                    "ratio_to_nope": basis_ms(t, basis) / reference,
                    "target": STEP_TARGETS.get(pe),
                }
            )
        del candidates
        gc.collect()
    return rows


def best_backend_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (preset, encoding) the row of its fastest backend, with whether it meets its target."""
    best: dict[tuple[str, str], Mapping[str, Any]] = {}
    for row in rows:
        key = (row["preset"], row["pe"])
        if key not in best or row["ratio_to_nope"] < best[key]["ratio_to_nope"]:
            best[key] = row
    out = []
    for row in best.values():
        target = row["target"]
        out.append({**row, "meets_target": None if target is None else bool(row["ratio_to_nope"] <= target)})
    return out


# --------------------------------------------------------------------------------------
# Peak memory, one subprocess per measurement
# --------------------------------------------------------------------------------------


def _proc_status_kib(field_name: str) -> int | None:
    """A ``VmRSS``/``VmHWM``-style field of /proc/self/status in KiB, or None off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    """Reset this process's peak resident set (Linux: ``5`` to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def memory_backbone(pe: str, backend: str, dims: Sequence[int]) -> Backbone:
    """The memory table's model: a causal decoder of ``dims`` = (d_model, n_layers, n_heads)."""
    d, n_layers, n_heads = dims
    cfg = BackboneConfig(d_model=d, n_layers=n_layers, n_heads=n_heads, backend=backend, causal=True)
    torch.manual_seed(0)
    return Backbone(cfg, pezoo.create(pe, dims=pezoo.ModelDims(d, n_heads, n_layers)))


def memory_child(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Run one memory measurement in *this* process (the subprocess side of :func:`measure_memory_one`).

    Builds the model, runs a warm-up forward pass (at the full length for ``flex``, whose
    kernel is compiled per shape; 128 tokens otherwise), then measures one forward pass
    at batch 1 and ``spec["length"]`` tokens. Returns peak and baseline in MiB.
    """
    device = torch.device(spec["device"])
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    model = memory_backbone(spec["pe"], spec["backend"], spec["dims"]).to(device).eval()
    length = int(spec["length"])
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(1, model.cfg.vocab_size, (1, length), generator=gen).to(device)  # (b, s)
    warm = tokens if spec["backend"] == "flex" else tokens[:, : min(length, 128)]
    with torch.no_grad():
        model(warm)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
        else:
            reset = _reset_peak_rss()
            base = (_proc_status_kib("VmRSS") or 0) * 1024
        start = time.perf_counter()
        model(tokens)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            peak, how = torch.cuda.max_memory_allocated(device), "cuda max_memory_allocated"
        elif reset and _proc_status_kib("VmHWM") is not None:
            peak, how = (_proc_status_kib("VmHWM") or 0) * 1024, "VmHWM (peak RSS) after reset"
        else:  # no resettable peak: the process's lifetime peak (includes the warm-up)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            how = "ru_maxrss (lifetime peak)"
    return {
        "peak_mib": (peak - base) / 2**20,
        "baseline_mib": base / 2**20,
        "seconds": time.perf_counter() - start,
        "how": how,
    }


def _memory_child_main() -> None:
    """Entry point of the measurement subprocess: spec JSON in argv[1], result JSON on stdout."""
    spec = json.loads(sys.argv[1])
    if spec["device"] == "cpu" and spec.get("cap_bytes"):
        cap = int(spec["cap_bytes"])
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    try:
        result = {"ok": True, **memory_child(spec)}
    except (MemoryError, RuntimeError) as exc:  # torch reports a failed allocation as RuntimeError
        result = {"ok": False, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    print("PERF-RESULT " + json.dumps(result), flush=True)


def measure_memory_one(
    pe: str, backend: str, length: int, *, dims: Sequence[int], device: torch.device, cap_gib: float, threads: int
) -> dict[str, Any]:
    """Peak memory of one forward pass, measured in a fresh subprocess."""
    spec = {
        "pe": pe,
        "backend": backend,
        "length": length,
        "dims": list(dims),
        "device": str(device),
        "threads": threads,
        "cap_bytes": int(cap_gib * 2**30),
    }
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1"}  # compile in-process, under the same cap
    code = "from harness.perf import _memory_child_main; _memory_child_main()"
    row: dict[str, Any] = {"pe": pe, "backend": backend, "length": length}
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("PERF-RESULT ")]
    if not lines:
        tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return {**row, "ok": False, "error": tail[:300]}
    result = json.loads(lines[-1].removeprefix("PERF-RESULT "))
    if not result["ok"] and device.type == "cpu":
        result["error"] = f"not feasible under the {cap_gib:g} GiB cap ({result['error']})"
    return {**row, **result}


def measure_memory(grid: PerfGrid, device: torch.device) -> list[dict[str, Any]]:
    """Memory rows for every (encoding, backend, length) of ``grid``, with the ratio to NoPE on the same backend."""
    rows = [
        measure_memory_one(
            pe,
            backend,
            length,
            dims=grid.memory_dims,
            device=device,
            cap_gib=grid.memory_cap_gib,
            threads=grid.threads,
        )
        for length in grid.memory_lengths
        for backend in grid.memory_backends
        for pe in grid.memory_encodings
    ]
    nope = {(r["backend"], r["length"]): r.get("peak_mib") for r in rows if r["pe"] == "nope" and r["ok"]}
    for r in rows:
        ref = nope.get((r["backend"], r["length"]))
        r["ratio_to_nope"] = r["peak_mib"] / ref if r["ok"] and ref else None
    return rows


# --------------------------------------------------------------------------------------
# Peak memory at the allocator
# --------------------------------------------------------------------------------------


def allocator_peak(fn: Callable[[], object], device: torch.device) -> tuple[int, str]:
    """Run ``fn`` once; (peak bytes allocated above the level at its start, how it was measured).

    CUDA: ``max_memory_allocated`` after a peak reset. CPU: the profiler's memory events
    (``profile_memory=True``), whose ``total_allocated`` is the allocator's running total
    since profiling started, so its maximum is the peak above the start.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base, "cuda max_memory_allocated"
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    peak = 0
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.tag == _EventType.Allocation and node.extra_fields.device.type == device.type:
            peak = max(peak, node.extra_fields.total_allocated)
    return peak, "profiler memory events (CPU allocator)"


def alloc_child(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """All lengths of one (encoding, backend) in *this* process (the subprocess side of :func:`measure_alloc_one`).

    Per length: a warm-up pass (flex compiles here; its compiled kernels are reused by the
    later lengths), then the measured pass: forward + backward (parameter gradients
    cleared before, so every encoding allocates them alike), or the forward pass alone
    under ``no_grad`` where the backend has no backward of its own on this device (flex
    on CPU). The first length that fails (out of memory under the cap) ends the loop.
    """
    device = torch.device(spec["device"])
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    model = memory_backbone(spec["pe"], spec["backend"], spec["dims"]).to(device)
    train = spec["backend"] in training_backends(device)
    batch = int(spec["batch"])
    rows = []
    for i, length in enumerate(spec["lengths"]):
        gen = torch.Generator().manual_seed(length)
        tokens = torch.randint(1, model.cfg.vocab_size, (batch, length), generator=gen).to(device)  # (b, s)

        def one_pass(tokens: torch.Tensor = tokens) -> None:
            model.zero_grad(set_to_none=True)
            if train:
                model(tokens).float().mean().backward()
            else:
                with torch.no_grad():
                    model(tokens)

        row: dict[str, Any] = {"length": length, "pass": "forward+backward" if train else "forward"}
        try:
            with warnings.catch_warnings(record=True) as caught:  # e.g. flex falling back to its unfused form
                warnings.simplefilter("always")
                if spec["backend"] == "flex" or device.type == "cuda" or i == 0:
                    one_pass()  # compile / warm up outside the measurement
                gc.collect()
                start = time.perf_counter()
                peak, how = allocator_peak(one_pass, device)
            row.update(ok=True, peak_mib=peak / 2**20, how=how, seconds=time.perf_counter() - start)
            row["warnings"] = sorted({str(w.message)[:300] for w in caught if issubclass(w.category, RuntimeWarning)})
        except (MemoryError, RuntimeError) as exc:  # torch reports a failed allocation as RuntimeError
            row.update(ok=False, error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        model.zero_grad(set_to_none=True)
        rows.append(row)
        if not row["ok"]:
            break
    return rows


def _alloc_child_main() -> None:
    """Entry point of the allocator subprocess: spec JSON in argv[1], result JSON on stdout."""
    spec = json.loads(sys.argv[1])
    if spec["device"] == "cpu" and spec.get("cap_bytes"):
        cap = int(spec["cap_bytes"])
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    print("PERF-RESULT " + json.dumps(alloc_child(spec)), flush=True)


def measure_alloc_one(
    pe: str,
    backend: str,
    lengths: Sequence[int],
    *,
    dims: Sequence[int],
    batch: int,
    device: torch.device,
    cap_gib: float,
    threads: int,
) -> list[dict[str, Any]]:
    """Allocator peaks of one (encoding, backend) at every length, in one fresh subprocess."""
    spec = {
        "pe": pe,
        "backend": backend,
        "lengths": sorted(lengths),
        "dims": list(dims),
        "batch": batch,
        "device": str(device),
        "threads": threads,
        "cap_bytes": int(cap_gib * 2**30),
    }
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1"}  # compile in-process, under the same cap
    code = "from harness.perf import _alloc_child_main; _alloc_child_main()"
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("PERF-RESULT ")]
    results = json.loads(lines[-1].removeprefix("PERF-RESULT ")) if lines else []
    done = {r["length"] for r in results}
    if not lines:  # killed: every length it did not report failed with the process
        tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        results = [{"length": n, "ok": False, "error": tail[:300]} for n in spec["lengths"]]
    else:
        failed = next((r for r in results if not r["ok"]), None)
        results += [
            {"length": n, "ok": False, "error": f"not run: S={failed['length']} already failed"}
            for n in spec["lengths"]
            if n not in done and failed is not None
        ]
    for r in results:
        if not r["ok"] and device.type == "cpu" and not r["error"].startswith("not run"):
            r["error"] = f"not feasible under the {cap_gib:g} GiB cap ({r['error']})"
    return [{"pe": pe, "backend": backend, **r} for r in results]


def measure_alloc(grid: PerfGrid, device: torch.device) -> list[dict[str, Any]]:
    """Allocator rows for every (encoding, backend, length) of ``grid``, ratio to NoPE at the same backend and S."""
    rows = [
        row
        for backend in grid.alloc_backends
        for pe in grid.alloc_encodings
        for row in measure_alloc_one(
            pe,
            backend,
            grid.alloc_lengths,
            dims=grid.memory_dims,
            batch=grid.alloc_batch,
            device=device,
            cap_gib=grid.memory_cap_gib,
            threads=grid.threads,
        )
    ]
    nope = {(r["backend"], r["length"]): r["peak_mib"] for r in rows if r["pe"] == "nope" and r["ok"]}
    longest = max(grid.alloc_lengths, default=0)
    for r in rows:
        ref = nope.get((r["backend"], r["length"]))
        r["ratio_to_nope"] = r["peak_mib"] / ref if r["ok"] and ref else None
        target = ALLOC_TARGETS.get(r["pe"]) if r["backend"] == "flex" and r["length"] == longest else None
        r["target"] = target
        r["meets_target"] = None if target is None or r["ratio_to_nope"] is None else r["ratio_to_nope"] <= target
    return rows


# --------------------------------------------------------------------------------------
# Greedy decoding with and without the cache
# --------------------------------------------------------------------------------------


def measure_decode(grid: PerfGrid, device: torch.device) -> list[dict[str, Any]]:
    """Greedy decoding to ``decode_length`` tokens, cached vs recomputing the prefix, per encoding.

    The model is the ``quick`` backbone, untrained; the EOS row of its tied embedding is
    zeroed so that its logit is exactly 0 while 63 others are O(1) draws of either sign,
    and decoding runs the whole length (the generated length is checked and reported).
    """
    from harness.evaluate import greedy_decode
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


# --------------------------------------------------------------------------------------
# PRISM: scan scaling, components, share of the step
# --------------------------------------------------------------------------------------


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
    n: int, t: int, support: int, device: torch.device, *, backward: bool, windowed: bool = False
) -> Callable[[], None]:
    """One histogram scan of n cursors over t tokens at support P: the full-width reference
    (``pezoo.encodings.prism.histogram_scan``), or with ``windowed`` the scan the model runs
    by default (only the reachable bins, ``PRISMConfig.scan_window``)."""
    from pezoo.encodings.prism.encoding import _scan_emitting
    from pezoo.encodings.prism.histogram import histogram_scan, histogram_step

    gates, gamma, h0, masks = _scan_inputs(n, t, support, device)
    weight = torch.randn(2 * support + 1, generator=torch.Generator().manual_seed(1)).to(device)  # (p,)

    def run() -> None:
        with torch.set_grad_enabled(backward):
            if windowed:
                _, hist = _scan_emitting(h0, gates, gamma, 1e-6, None, masks, histogram_step, None, windowed=True)
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


def prism_components(
    preset: str, options: Mapping[str, Any], batch_size: int, device: torch.device, repeats: int, warmup: int
) -> dict[str, Any]:
    """Time one PRISM training step and its parts (forward + backward each) on the preset's batch.

    Parts: the GRU gates over the layer-normed residual stream; the histogram scan at the
    support the model uses (windowed when the model's is); the position streams (histograms times the offset table,
    Alg. 3 normalisation, the q/k fold). The NoPE step is timed alongside for the ratio.
    """
    from pezoo.encodings.prism.encoding import support_for
    from pezoo.encodings.prism.streams import fold_position_streams, normalise_streams, offset_table

    _, batch = training_batch(preset, batch_size, device)
    b, s = batch.inputs.shape
    model, opt = build_for(preset, "prism", "sdpa", device, **options)
    nope, nope_opt = build_for(preset, "nope", "sdpa", device)
    pe = model.pe
    layer = next(iter(pe.prism_layers.values()))
    cfg = pe.config
    support = support_for(s, cfg.min_support)
    n = b * layer.n_scan
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(b, s, cfg.d_model, generator=gen).to(device).requires_grad_()  # (b, s, d)

    def gates() -> None:
        g, _ = layer.gates(layer.norm(x))  # (b, s, n, 4)
        g.sum().backward()

    hist = torch.softmax(torch.randn(s, b, 2 * cfg.n_heads * cfg.n_cursors, 2 * support + 1, generator=gen), -1)
    hist = hist.to(device).requires_grad_()  # (s, b, 2hc, p)
    q = torch.randn(b, cfg.n_heads, s, cfg.d_model // cfg.n_heads, generator=gen).to(device)  # (b, h, s, e)

    def streams() -> None:
        table = offset_table(support, cfg.d_pe, device)  # (p, f)
        g = normalise_streams(
            (hist @ table).permute(1, 0, 2, 3).unflatten(2, (2, cfg.n_heads, cfg.n_cursors)), cfg.stream_norm
        )  # (b, s, 2, h, c, f)
        g_q, g_k = g.permute(2, 0, 3, 1, 4, 5).unbind(0)  # (b, h, s, c, f)
        mu = torch.sigmoid(pe.mu_logit[cfg.layers[0]])
        q2, k2 = fold_position_streams(q, q, g_q, g_k, mu, pe.alpha[cfg.layers[0]].abs())
        (q2.sum() + k2.sum()).backward()

    candidates = {
        "step": step_function(model, opt, batch),
        "nope_step": step_function(nope, nope_opt, batch),
        "gates": gates,
        "scan": scan_function(
            n, s, support, device, backward=True, windowed=cfg.scan_window and cfg.eps_support == "reachable"
        ),
        "streams": streams,
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
    return out


# --------------------------------------------------------------------------------------
# The whole run, its tables and its JSON
# --------------------------------------------------------------------------------------


def run_perf(grid: PerfGrid, device: torch.device, *, log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Every section of ``grid`` on ``device``: the JSON-ready report."""
    if grid.threads:
        torch.set_num_threads(grid.threads)
    report: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "provenance": {
            **provenance(device),
            "threads": torch.get_num_threads(),
            "load_average_before": _load_average(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
        "grid": {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in asdict(grid).items()},
    }
    measure = {
        "train": measure_train,
        "memory": measure_memory,
        "alloc": measure_alloc,
        "decode": measure_decode,
        "prism": measure_prism,
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
    if "memory" in report:
        lines += ["", *_render_memory(report["memory"], report["grid"])]
    if "alloc" in report:
        lines += ["", *_render_alloc(report["alloc"], report["grid"])]
    if "decode" in report:
        lines += ["", *_render_decode(report["decode"])]
    if "prism" in report:
        lines += ["", *_render_prism(report["prism"])]
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


def _render_memory(rows: Sequence[Mapping[str, Any]], grid: Mapping[str, Any]) -> list[str]:
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
                cells.append(f"{r['peak_mib']:.0f}{ratio}")
        table.append([pe, *cells])
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
                cells.append(f"{r['peak_mib']:.1f}{ratio}{verdict}")
        table.append([pe, *cells])
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
    def ratio(r: Mapping[str, Any], key: str) -> str:
        return f"{r[key]:.2f}" if key in r else ""

    by_p = prism["by_support"]
    out = [
        f"PRISM histogram scan, {by_p[0]['cursors']} cursors × {by_p[0]['tokens']} tokens, ms of "
        f"{BASIS_WORDS[by_p[0]['basis']]} (target: ≤ 2.3× per doubling of P)",
        tabulate(
            [
                [
                    r["support"],
                    _fmt_ms(r["forward_ms"]),
                    ratio(r, "forward_ratio"),
                    _fmt_ms(r["forward_backward_ms"], r["spread"]),
                    ratio(r, "forward_backward_ratio"),
                ]
                for r in by_p
            ],
            headers=["P", "forward", "× per doubling", "forward+backward", "× per doubling"],
            tablefmt="github",
            disable_numparse=True,
        ),
        "",
        f"PRISM histogram scan at P = {prism['by_tokens'][0]['support']}, ms (linear in t: ≈ 2× per doubling)",
        tabulate(
            [
                [
                    r["tokens"],
                    _fmt_ms(r["forward_ms"]),
                    ratio(r, "forward_ratio"),
                    _fmt_ms(r["forward_backward_ms"], r["spread"]),
                    ratio(r, "forward_backward_ratio"),
                ]
                for r in prism["by_tokens"]
            ],
            headers=["tokens", "forward", "× per doubling", "forward+backward", "× per doubling"],
            tablefmt="github",
            disable_numparse=True,
        ),
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


# --------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------


def _names(value: str | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(v.strip() for v in value.split(",") if v.strip())


def _ints(value: str | None) -> tuple[int, ...] | None:
    names = _names(value)
    try:
        return None if names is None else tuple(int(v) for v in names)
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None


@click.command("perf")
@click.option("--quick", "size", flag_value="quick", help="Smaller grid (about a minute on an idle CPU).")
@click.option(
    "--full", "size", flag_value="full", help="The whole grid: S up to 8192, all backends and sections (long on CPU)."
)
@click.option(
    "--sections", help=f"Comma-separated subset of {','.join(SECTIONS)} (default: {','.join(DEFAULT_SECTIONS)})."
)
@click.option("--pe", "encodings", help="Encodings of the training-step table (comma-separated).")
@click.option("--presets", help="Presets whose backbone the training step is timed at (comma-separated).")
@click.option("--backends", help="Attention backends of the training-step table (default: all that train here).")
@click.option("--batch-size", type=int, help="Training batch size (default: the preset's).")
@click.option("--repeats", type=int, help="Timed rounds per measurement.")
@click.option("--threads", type=int, help="torch threads (0: torch's default; default 1).")
@click.option("--memory-lengths", help="Sequence lengths of the memory table (comma-separated).")
@click.option("--memory-pe", help="Encodings of the memory table.")
@click.option("--memory-backends", help="Backends of the memory table.")
@click.option("--memory-cap-gib", type=float, help="Address-space cap per CPU memory measurement.")
@click.option("--alloc-lengths", help="Sequence lengths of the allocator-peak table (comma-separated).")
@click.option("--alloc-pe", help="Encodings of the allocator-peak table.")
@click.option("--alloc-backends", help="Backends of the allocator-peak table.")
@click.option("--alloc-batch", type=int, help="Batch size of the allocator-peak table (default 1).")
@click.option("--decode-length", type=int, help="Total tokens of the decoding measurement.")
@click.option("--decode-batch", type=int, help="Sequences decoded together (default 1; evaluation decodes batches).")
@click.option("--decode-pe", help="Encodings of the decoding table.")
@click.option(
    "--decode-window", type=int, help="Decode under a sliding context of this many tokens (the turing preset: 500)."
)
@click.option("--prism-supports", help="Supports P of the PRISM scan table (comma-separated).")
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda[:N].")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Also write the report here as JSON.")
def perf_command(size, sections, encodings, presets, backends, batch_size, repeats, threads, memory_lengths,
                 memory_pe, memory_backends, memory_cap_gib, alloc_lengths, alloc_pe, alloc_backends, alloc_batch,
                 decode_length, decode_batch, decode_pe, decode_window,
                 prism_supports, device, json_path) -> None:  # fmt: skip
    """Time and memory of every encoding side by side: training step, peak memory, cached
    decoding, PRISM's scan. Prints the tables (and writes JSON with --json).

    Ratios are measured in one run with the candidates interleaved; compare them within
    a run, not across runs or machines.
    """
    from harness.provenance import resolve_device

    try:
        dev = resolve_device(device)
        grid = grid_from(
            size or "default",
            sections=_names(sections),
            encodings=_names(encodings),
            presets=_names(presets),
            backends=_names(backends),
            batch_size=batch_size,
            repeats=repeats,
            threads=threads,
            memory_lengths=_ints(memory_lengths),
            memory_encodings=_names(memory_pe),
            memory_backends=_names(memory_backends),
            memory_cap_gib=memory_cap_gib,
            alloc_lengths=_ints(alloc_lengths),
            alloc_encodings=_names(alloc_pe),
            alloc_backends=_names(alloc_backends),
            alloc_batch=alloc_batch,
            decode_length=decode_length,
            decode_batch=decode_batch,
            decode_encodings=_names(decode_pe),
            decode_window=decode_window,
            prism_supports=_ints(prism_supports),
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    for name in grid.presets:
        if name not in PRESETS:
            message = pezoo.base.unknown_name_message("preset", name, list(PRESETS))
            raise click.BadParameter(message, param_hint="--presets")
    valid = pezoo.available()
    for name in (*grid.encodings, *grid.memory_encodings, *grid.alloc_encodings, *grid.decode_encodings):
        if name not in valid:
            raise click.BadParameter(pezoo.base.unknown_name_message("encoding", name, valid))
    for name in (*grid.backends, *grid.memory_backends, *grid.alloc_backends):
        if name not in pezoo.BACKENDS:
            raise click.BadParameter(pezoo.base.unknown_name_message("attention backend", name, sorted(pezoo.BACKENDS)))
    if grid.decode_length <= grid.decode_prompt:
        raise click.BadParameter(f"--decode-length must exceed the prompt ({grid.decode_prompt} tokens)")
    report = run_perf(grid, dev, log=lambda msg: click.echo(msg, err=True))
    click.echo(render(report))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
