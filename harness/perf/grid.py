"""`pezoo perf`: what it measures: sections, targets, :class:`PerfGrid` and the named grids."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from pezoo.encodings.prism import PAPER_OPTIONS

SCHEMA_VERSION = 1

SECTIONS = ("train", "precision", "memory", "alloc", "decode", "prism", "compile", "gpu")

DEFAULT_SECTIONS = ("train", "precision", "memory", "decode", "prism")
"""What a plain ``pezoo perf`` runs; ``alloc`` (minutes of flex compiles on CPU) and ``compile``
(an inductor compilation per encoding: tens of minutes on CPU) are asked for with
``--sections`` or ``--full``."""

COMPILE_TARGET = 1.2
"""Largest accepted compiled training step time, as a multiple of the same step in eager mode."""

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

FRONTIER_ENCODINGS = (
    "fox",
    "stick_breaking",
    "dape",
    "dape:alibi",
    "ssmax",
    "ssmax:nope",
    "pope",
    "p_rope",
    "fope",
    "hybrid",
)
"""Encodings of issue 64 (forgetting attention, stick-breaking, DAPE, SSMax, PoPE, p-RoPE, FoPE,
hybrid layers), timed by the full grid beside the targeted ones; no targets (``--pe`` times
them in any grid)."""

STEP_TARGETS: dict[str, float] = {
    **dict.fromkeys(
        ("ape", "learned_ape", "rope", "alibi", "hard_alibi", "randomized", "randomized:rope", "randomized:alibi"),
        1.15,
    ),
    "learned_prf": 2.0,
    "prism": 2.5,
}
"""Largest accepted training-step time as a multiple of NoPE on its fastest backend."""

PRECISION_TARGETS: dict[str, float] = {"*": 0.45, "prism": 0.7}
"""Largest accepted bf16 training step as a multiple of the same encoding's fp32 step ("*": every
encoding not named)."""

PRISM_LENGTH_TARGETS: dict[str, float] = {"prism": 2.0, "copy": 1.5}
"""The PRISM step at longer sequences: ``prism`` ≤ 2.0× NoPE's step, and PRISM with its copy
branch ≤ 1.5× PRISM without it (both measured side by side at each length)."""

PRESET_TASKS = {"quick": "copy", "ruoss": "reverse_string", "smoke": "copy"}
"""The task whose batches time a preset's training step (decoder presets: copy; encoder: a
fixed-output-length task)."""


MAX_THREADS = 1024
"""Most torch threads a measurement may ask for (a machine's cores, not a typo's millions)."""

MAX_REPEATS = 1_000
"""Most timed rounds per measurement: the grids take 5 to 11; a typo's millions would time for
days instead of saying so."""

MAX_CAP_GIB = 2.0**20
"""Largest memory cap, in GiB (1 PiB, beyond any machine's address space): a larger one overflowed
the address-space limit in bytes (``1e308``: a traceback after the sections before it; ``1e10``:
every memory row "not feasible")."""

MAX_SUPPORT = 65_536
"""Largest PRISM support P of the scan table: 16x the default grid's largest (4096); the
full-width scan at P holds 32 cursors x 32 tokens x (2P + 1) bins, 0.5 GB here."""


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
        precisions: precisions (``harness.training.precision``) whose training step the
            ``precision`` section times against fp32, on the backend the preset trains with.
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
        prism_lengths: sequence lengths at which the PRISM training step (without and
            with its copy branch) is timed against NoPE's at ``prism_length_preset``'s
            backbone and batch size (random tokens: the step's cost does not depend on them).
        prism_length_preset: the preset of that table.
        prism_options: extra PRISM options (besides the defaults) whose step is profiled,
            by label; ``{"paper": PAPER_OPTIONS}`` adds the paper's cursor counts.
        compile_models: what the compile section compiles: ``"backbone"`` (the benchmark's
            model, ``dynamic=True``), ``"decoder"`` (a user's decoder on pezoo's hooks,
            plain ``torch.compile(model)``).
        compile_encodings: its encodings (empty: every registered encoding).
        compile_lengths: the sequence lengths one round of training steps runs through.
        compile_preset: the preset whose model size (and vocabulary) it uses.
        compile_batch: its batch size.
        gpu_steps: harness training steps the ``gpu`` section times (and profiles) per
            encoding, after a warm-up, against the bare step (``harness.perf.gpu``).
        compile_backend: the ``torch.compile`` backend (``"inductor"``, what users get; tests
            use ``"eager"``: dynamo's tracing and recompiles without code generation).
    """

    sections: tuple[str, ...] = DEFAULT_SECTIONS
    repeats: int = 7
    warmup: int = 2
    threads: int = 1
    presets: tuple[str, ...] = ("quick", "ruoss")
    encodings: tuple[str, ...] = TARGET_ENCODINGS
    backends: tuple[str, ...] = ()
    precisions: tuple[str, ...] = ("bf16",)
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
    prism_lengths: tuple[int, ...] = (64, 128, 256)
    prism_length_preset: str = "quick"
    prism_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    compile_models: tuple[str, ...] = ("backbone", "decoder")
    compile_encodings: tuple[str, ...] = ()
    compile_lengths: tuple[int, ...] = (8, 16, 32, 64)
    compile_preset: str = "quick"
    compile_batch: int = 64
    compile_backend: str = "inductor"
    gpu_steps: int = 30

    def __post_init__(self) -> None:
        unknown = sorted(set(self.sections) - set(SECTIONS))
        if unknown:
            raise ValueError(f"unknown perf section(s) {', '.join(unknown)}; valid: {', '.join(SECTIONS)}")
        if self.repeats < 1 or self.warmup < 0:
            raise ValueError(f"need --repeats >= 1 (and warmup rounds >= 0), got {self.repeats} (warmup {self.warmup})")
        if self.repeats > MAX_REPEATS:
            raise ValueError(f"--repeats must be at most {MAX_REPEATS:,} timed rounds, got {self.repeats:,}")
        from harness.config.limits import MAX_BATCH, MAX_TOKENS

        _within("threads (0: torch's default)", self.threads, 0, MAX_THREADS)
        _within("the training batch size (0: the preset's)", self.batch_size, 0, MAX_BATCH)
        _within("the decoding batch", self.decode_batch, 1, MAX_BATCH)
        _within("the allocator-peak batch", self.alloc_batch, 1, MAX_BATCH)
        _within("the decoding prompt", self.decode_prompt, 1, MAX_TOKENS - 1)
        _within(f"the decoding length (beyond its {self.decode_prompt}-token prompt)", self.decode_length,
                self.decode_prompt + 1, MAX_TOKENS)  # fmt: skip
        for what, values, least, most in (
            ("PRISM support", self.prism_supports, 1, MAX_SUPPORT),
            ("PRISM step length", self.prism_lengths, 1, MAX_TOKENS),
            ("memory length", self.memory_lengths, 1, MAX_TOKENS),
            ("allocator-peak length", self.alloc_lengths, 1, MAX_TOKENS),
            ("compile length", self.compile_lengths, 1, MAX_TOKENS),
        ):
            for value in values:
                _within(f"{'an' if what[0] in 'aeiou' else 'a'} {what}", value, least, most)
        from harness.training.precision import PRECISIONS

        unknown = sorted(set(self.precisions) - set(PRECISIONS))
        if unknown:
            raise ValueError(f"unknown precision(s) {', '.join(unknown)}; valid: {', '.join(PRECISIONS)}")
        unknown = sorted(set(self.compile_models) - {"backbone", "decoder"})
        if unknown:
            raise ValueError(f"unknown compile model(s) {', '.join(unknown)}; valid: backbone, decoder")
        if not self.compile_lengths or min(self.compile_lengths) < 1 or self.compile_batch < 1:
            raise ValueError(
                f"need compile lengths and a batch >= 1, got {self.compile_lengths} and {self.compile_batch}"
            )
        if not (math.isfinite(self.memory_cap_gib) and self.memory_cap_gib > 0):  # nan: a traceback; 0: no cap at all
            raise ValueError(f"the memory cap must be a finite number of GiB > 0, got {self.memory_cap_gib}")
        if self.memory_cap_gib > MAX_CAP_GIB:
            raise ValueError(
                f"the memory cap must be at most {MAX_CAP_GIB:,.0f} GiB (1 PiB), got {self.memory_cap_gib:g}"
            )
        if 0 < self.decode_window <= 20 or self.decode_window < 0:
            raise ValueError(f"the decoding window must exceed its 20-token jump, got {self.decode_window}")


def _within(what: str, value: int, least: int, most: int) -> None:
    """ValueError saying the bounds unless ``least <= value <= most``."""
    if not least <= value <= most:
        raise ValueError(f"{what} must be from {least:,} to {most:,}, got {value:,}")


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
        prism_lengths=(64,),
    ),
    # the whole grid of the issue (tens of minutes on CPU)
    "full": PerfGrid(
        sections=SECTIONS,
        repeats=11,
        encodings=(*TARGET_ENCODINGS, *FRONTIER_ENCODINGS),
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
