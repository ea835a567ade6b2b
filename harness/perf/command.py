"""`pezoo perf`: the command (see :mod:`harness.perf`)."""

from __future__ import annotations

import json
from pathlib import Path

import click
import torch

import pezoo
from harness.config import LM_PRESETS, PRESETS
from harness.config.limits import MAX_BATCH, MAX_TOKENS
from harness.perf.grid import (
    DEFAULT_SECTIONS,
    MAX_CAP_GIB,
    MAX_REPEATS,
    MAX_SUPPORT,
    MAX_THREADS,
    SECTIONS,
    PerfGrid,
    grid_from,
)
from harness.perf.report import render, run_perf
from harness.records.files import check_regular, open_regular, unwritable_folder, write_atomically
from pezoo.backends import xformers_available


def _check_names(grid: PerfGrid, device: torch.device) -> None:
    """Refuse a preset, encoding or attention backend of ``grid`` that is not registered
    (naming close matches), or that ``pezoo perf`` cannot time here; click errors naming the
    option."""
    for name in (*grid.presets, grid.prism_length_preset):
        _check_preset(name)
    valid = pezoo.available()
    for option, names in (
        ("--pe", grid.encodings),
        ("--memory-pe", grid.memory_encodings),
        ("--alloc-pe", grid.alloc_encodings),
        ("--decode-pe", grid.decode_encodings),
        ("--compile-pe", grid.compile_encodings),
    ):
        for name in names:
            if name not in valid:
                raise click.BadParameter(pezoo.base.unknown_name_message("encoding", name, valid), param_hint=option)
    for option, names in (
        ("--backends", grid.backends),
        ("--memory-backends", grid.memory_backends),
        ("--alloc-backends", grid.alloc_backends),
    ):
        for name in names:
            if (problem := _backend_problem(name, device)) is not None:
                raise click.BadParameter(problem, param_hint=option)


def _check_preset(name: str) -> None:
    """Refuse a preset that is not registered, or a language-modelling one: its runs train on
    a corpus's byte windows, not on a task's batches, and timing one was a traceback."""
    if name not in PRESETS:
        raise click.BadParameter(pezoo.base.unknown_name_message("preset", name, list(PRESETS)), param_hint="--presets")
    if name in LM_PRESETS:
        timed = ", ".join(p for p in PRESETS if p not in LM_PRESETS)
        raise click.BadParameter(
            f"preset {name!r} is a language-modelling preset, whose runs train on a corpus, not on a task's "
            f"batches; pezoo perf times the backbones of {timed}",
            param_hint="--presets",
        )


def _backend_problem(name: str, device: torch.device) -> str | None:
    """Why attention backend ``name`` cannot be timed on ``device``, or None. xformers off CUDA
    was a traceback in the training-step table and a row "not feasible under the memory cap"."""
    if name not in pezoo.BACKENDS:
        return pezoo.base.unknown_name_message("attention backend", name, sorted(pezoo.BACKENDS))
    if name == "xformers" and (device.type != "cuda" or not xformers_available()):
        reason = "no CUDA device is in use" if device.type != "cuda" else "the xformers package does not load here"
        return f"the xformers backend runs on CUDA tensors only, and {reason}; time sdpa, flex or auto instead"
    return None


def _names(value: str | None, option: str) -> tuple[str, ...] | None:
    """The comma-separated items of ``value`` (None: the option was not given). An empty
    list is refused: ``--pe ''`` was a ZeroDivisionError after the banner, ``--memory-lengths ,,``
    an empty table."""
    if value is None:
        return None
    items = tuple(v.strip() for v in value.split(",") if v.strip())
    if not items:
        raise click.BadParameter(f"an empty list ({value!r}); leave {option} out for its default", param_hint=option)
    return items


def _ints(value: str | None, option: str) -> tuple[int, ...] | None:
    names = _names(value, option)
    try:
        return None if names is None else tuple(int(v) for v in names)
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}", param_hint=option) from None


def _json_problem(path: Path) -> str | None:
    """Why the report may not be written to ``path``, checked before anything is measured
    (a missing folder was a traceback after all the measuring), or None. An existing file is
    replaced only when it is a perf report itself: --json once overwrote a results store."""
    if path.exists():
        try:
            check_regular(path)
            with open_regular(path) as f:
                head = f.read(4096).decode("utf-8", errors="replace").lstrip()
        except OSError as exc:
            return f"--json {path}: {exc}"
        if head and not (head.startswith("{") and '"schema_version"' in head and '"provenance"' in head):
            return f"--json {path} exists and is no pezoo perf report: not overwritten (choose another path)"
    return unwritable_folder(path.parent)


@click.command("perf")
@click.option("--quick", is_flag=True, help="Smaller grid (about a minute on an idle CPU).")
@click.option("--full", is_flag=True, help="The whole grid: S up to 8192, all backends and sections (long on CPU).")
@click.option(
    "--sections", help=f"Comma-separated subset of {','.join(SECTIONS)} (default: {','.join(DEFAULT_SECTIONS)})."
)
@click.option("--pe", "encodings", help="Encodings of the training-step table (comma-separated).")
@click.option("--presets", help="Presets whose backbone the training step is timed at (comma-separated).")
@click.option("--backends", help="Attention backends of the training-step table (default: all that train here).")
@click.option(
    "--precision",
    "precisions",
    help="Precisions the precision section times against fp32 (comma-separated of bf16,fp16; default bf16).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1, MAX_BATCH),
    help=f"Training batch size, 1 to {MAX_BATCH} (default: the preset's).",
)
@click.option("--repeats", type=int, help=f"Timed rounds per measurement (at most {MAX_REPEATS:,}).")
@click.option("--threads", type=int, help=f"torch threads, 0 to {MAX_THREADS} (0: torch's default; default 1).")
@click.option("--memory-lengths", help="Sequence lengths of the memory table (comma-separated).")
@click.option("--memory-pe", help="Encodings of the memory table.")
@click.option("--memory-backends", help="Backends of the memory table.")
@click.option(
    "--memory-cap-gib",
    type=float,
    help=f"Address-space cap per CPU memory measurement, in GiB (at most {MAX_CAP_GIB:,.0f}).",
)
@click.option("--alloc-lengths", help="Sequence lengths of the allocator-peak table (comma-separated).")
@click.option("--alloc-pe", help="Encodings of the allocator-peak table.")
@click.option("--alloc-backends", help="Backends of the allocator-peak table.")
@click.option("--alloc-batch", type=int, help="Batch size of the allocator-peak table (default 1).")
@click.option("--decode-length", type=int, help=f"Total tokens of the decoding measurement (at most {MAX_TOKENS:,}).")
@click.option("--decode-batch", type=int, help="Sequences decoded together (default 1; evaluation decodes batches).")
@click.option("--decode-pe", help="Encodings of the decoding table.")
@click.option(
    "--decode-window",
    type=int,
    help="Decode under a sliding context of this many tokens (the turing preset: 500); 0: no window.",
)
@click.option("--prism-supports", help=f"Supports P of the PRISM scan table (comma-separated; 1 to {MAX_SUPPORT:,}).")
@click.option("--prism-lengths", help="Sequence lengths of the PRISM step table (comma-separated; default 64,128,256).")
@click.option("--compile-pe", help="Encodings of the compile table (default: every registered encoding).")
@click.option("--compile-models", help="What the compile table compiles: backbone, decoder (default both).")
@click.option(
    "--compile-lengths",
    help=f"Sequence lengths of the compile table's training steps (default 8,16,32,64; at most {MAX_TOKENS:,}).",
)
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda[:N].")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Also write the report here as JSON.")
def perf_command(quick, full, sections, encodings, presets, backends, precisions, batch_size, repeats, threads,
                 memory_lengths, memory_pe, memory_backends, memory_cap_gib, alloc_lengths, alloc_pe, alloc_backends,
                 alloc_batch, decode_length, decode_batch, decode_pe, decode_window,
                 prism_supports, prism_lengths, compile_pe, compile_models, compile_lengths, device,
                 json_path) -> None:  # fmt: skip
    """Time and memory of every encoding side by side: training step, peak memory, cached
    decoding, PRISM's scan. Prints the tables (and writes JSON with --json).

    Ratios are measured in one run with the candidates interleaved; compare them within
    a run, not across runs or machines.
    """
    from harness.records.provenance import resolve_device

    if quick and full:  # one destination for both once let the last given win silently
        raise click.UsageError("--quick and --full choose two different grids: give one of them")
    try:
        dev = resolve_device(device)
        grid = grid_from(
            "quick" if quick else "full" if full else "default",
            sections=_names(sections, "--sections"),
            encodings=_names(encodings, "--pe"),
            presets=_names(presets, "--presets"),
            backends=_names(backends, "--backends"),
            precisions=_names(precisions, "--precision"),
            batch_size=batch_size,
            repeats=repeats,
            threads=threads,
            memory_lengths=_ints(memory_lengths, "--memory-lengths"),
            memory_encodings=_names(memory_pe, "--memory-pe"),
            memory_backends=_names(memory_backends, "--memory-backends"),
            memory_cap_gib=memory_cap_gib,
            alloc_lengths=_ints(alloc_lengths, "--alloc-lengths"),
            alloc_encodings=_names(alloc_pe, "--alloc-pe"),
            alloc_backends=_names(alloc_backends, "--alloc-backends"),
            alloc_batch=alloc_batch,
            decode_length=decode_length,
            decode_batch=decode_batch,
            decode_encodings=_names(decode_pe, "--decode-pe"),
            decode_window=decode_window,
            prism_supports=_ints(prism_supports, "--prism-supports"),
            prism_lengths=_ints(prism_lengths, "--prism-lengths"),
            compile_encodings=_names(compile_pe, "--compile-pe"),
            compile_models=_names(compile_models, "--compile-models"),
            compile_lengths=_ints(compile_lengths, "--compile-lengths"),
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    _check_names(grid, dev)
    if json_path is not None and not json_path.strip():  # was ignored: the report measured, and written nowhere
        why = "an empty path; give the file to write the report to, or leave --json out"
        raise click.BadParameter(why, param_hint="--json")
    if json_path and (problem := _json_problem(Path(json_path))):
        raise click.UsageError(problem)
    report = run_perf(grid, dev, log=lambda msg: click.echo(msg, err=True))
    click.echo(render(report))
    if json_path:
        text = json.dumps(report, indent=2) + "\n"
        try:
            write_atomically(Path(json_path), lambda f: f.write(text.encode("utf-8")))
        except OSError as exc:  # WriteError: names the file and the cause (a full disk)
            raise click.ClickException(str(exc)) from None
