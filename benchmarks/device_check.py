"""The GPU issue's measurements in one device call: before and after, same card, same process tree.

Run on a fresh GPU machine, from the repository root (no internet needed):

    pip install --no-deps --no-build-isolation -e . && python benchmarks/device_check.py --out "$OUT"

It writes ``$OUT/cuda-gpu-<card>-2.md`` (the report, to commit as
benchmarks/results/cuda-gpu-<card>-2.md: the GPU issue's second round) and
``$OUT/cuda-gpu-<card>-2.json``, rewritten after
every part, so a call cut short still brings back what was measured. Each part runs in a
subprocess of its own under its own timeout (a hang or a crash costs that part only), and
a part that would not end before ``--budget`` seconds is skipped, said so in the report.

"Before" is the same measurement with the training loop's device features switched off
(``PEZOO_ACCEL=off``: batches made in the loop, a loss read-back every step, the optimiser
as on CPU, no CUDA graphs; ``harness.training.accel.Accel``) and, for packing, one worker per GPU.

Parts (the issue's items):

* ``env``: card, torch, CUDA, commit, free memory.
* ``loop``, ``loop_gpu`` (items 1, 2, 4, 6): ``pezoo perf --sections gpu``: per encoding
  the bare step, the harness loop's step before/after, GPU busy fraction and launches per
  step, at the quick preset's shape (NoPE, RoPE, PRISM) and the gpu preset's (NoPE, PRISM).
* ``tests`` (item 2): tests/harness/test_gpu_loop.py on the GPU (graphed run vs eager
  within the stated tolerance; the CPU-side checks too).
* ``example`` (item 5): the card's example, ``pezoo bench --pe prism,randomized --task
  odds_first``: after, the whole command's wall time; before, its steps/s over a short run.
* ``pack`` (round 2, items 1 and 3): one board-preset sweep three ways: packed worker
  processes (``PEZOO_GROUP=processes``, the first round's "after"), the group (one
  process, a thread and a CUDA stream per run, the default), and the group with the whole
  step as one CUDA graph (``PEZOO_ACCEL=...,step``, ``harness.training.step_graph``):
  steps/s of the whole sweep, GPU utilisation sampled by nvidia-smi, the 270-run board
  projected from each; prints a ``harness.sweeps.speeds`` row for the group.
* ``stack_equal`` (round 2, item 1): runs of one shape trained alone, then stacked
  (``PEZOO_ACCEL=...,stack``, ``harness.training.stacked``), compared run by run: the final
  loss's relative difference and the exact-match cells that differ (not bit for bit: a
  batched kernel rounds otherwise). The ``pack`` part measures the stacked group's speed as
  a row of its own.
* ``stack_host`` (round 2, item 1): ``benchmarks/stack_overhead.py`` on the GPU: the host's
  cost per run-step of 8 tiny runs one at a time, in threads and stacked.
* ``group_equal`` (round 2, item 1): four runs trained alone, then together in one group,
  compared record for record (bit for bit expected: the same kernels); abacus/addition
  trained alone a second time (is the device itself repeatable for it?).
* ``prism_capture`` (item 2): where a capture of PRISM's step with the Triton scan fails,
  stage by stage, with the Triton compilations and module loads each stage made.

A part, or a bench it starts, that hangs writes every thread's stack before its timeout
(``faulthandler``), and the report shows where each thread waited.
* ``gpu20k`` (item 5): a ``gpu``-preset NoPE run, projected to 20k steps from its speed.

``--dry-run`` runs every part end to end on CPU at toy sizes, in this process (the bench
commands through click's test runner; only ``tests`` starts a subprocess): the test is
tests/harness/test_device_check.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu_busy import read_utilisation, sample_utilisation  # noqa: E402

# (part, timeout s on a GPU, timeout s in a dry run)
# in the order of what each tells (the gpu preset's loop last: a cut-short call loses it first)
PARTS: tuple[tuple[str, int, int], ...] = (
    ("env", 40, 60),
    ("pack", 300, 240),  # the principal measurement first: packed processes, the group, the stacked group
    ("stack_equal", 100, 120),  # runs stacked against the same runs alone (round 2's third call)
    ("stack_host", 60, 60),  # the host's cost per run-step alone, in threads, stacked (benchmarks/stack_overhead.py)
    ("group_equal", 110, 120),
    ("prism_capture", 60, 60),  # why PRISM's step with the kernels on is not captured (round 2)
    # the CUDA tests: the whole-step graph's, before it can be a default; host draws captured, no sync
    ("tests", 120, 120),
    ("example", 115, 120),
    ("prism_kernel", 80, 60),
    ("loop", 80, 120),
    ("gpu20k", 60, 120),
    ("loop_gpu", 120, 120),  # timed out at 70 s twice on an H200 (graph captures per bucket)
)

STEP_ACCEL = "prefetch,readback,fused,graphs,forced,spawn,step"
"""The loop's default GPU features plus the whole step as one graph (``harness.training.step_graph``),
measured beside the default before it becomes one."""

STACK_ACCEL = "prefetch,readback,fused,graphs,forced,spawn,stack"
"""The loop's default GPU features plus stacked passes (``harness.training.stacked``: runs of
one model shape take each step's forward and backward together), measured beside the default
before it becomes one."""

ROUND = "-2"
"""The report's suffix: the second round of the GPU issue (grouped runs), beside the first's."""

SCAN_ENV = "PEZOO_PRISM_SCAN"
"""Set to ``auto`` for the parts after ``prism_kernel`` when its tests pass on the card: the
"after" numbers are then PRISM on its kernels, as the default would be once they pass."""


# -- the parts (each runs in its own subprocess: ``--part NAME``) ---------------------------


def part_env(dry: bool) -> dict[str, Any]:
    import torch

    from harness.records.provenance import git_commit

    cuda = torch.cuda.is_available() and not dry
    card = torch.cuda.get_device_name(0) if cuda else "cpu (dry run)"
    free, total = torch.cuda.mem_get_info(0) if cuda else (0, 0)
    data = {
        "card": card,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "commit": _commit(git_commit()),
        "free_gib": round(free / 2**30, 1),
        "total_gib": round(total / 2**30, 1),
        "cpus": os.cpu_count(),
    }
    return {"data": data, "lines": [f"- {k}: {v}" for k, v in data.items()]}


def _commit(found: str) -> str:
    """The checkout's commit, or the caller's (``DEVICE_CHECK_COMMIT``) where the device's copy
    of the tree has no git history."""
    given = os.environ.get("DEVICE_CHECK_COMMIT")
    if found == "unknown" and given:
        return f"{given} (as the caller gave it: the copy there has no git history)"
    return found


def part_loop(
    dry: bool,
    preset: str = "quick",
    encodings: tuple[str, ...] = ("nope", "rope", "prism"),
    steps: int = 40,
    repeats: int = 5,
) -> dict[str, Any]:
    import torch

    from harness.perf import grid_from, run_perf
    from harness.perf.gpu import render_gpu

    device = torch.device("cpu" if dry else "cuda")
    if dry:
        grid = grid_from("quick", sections=("gpu",), presets=("smoke",), encodings=("nope",), repeats=1, warmup=1,
                         gpu_steps=2, batch_size=4)  # fmt: skip
    else:
        grid = grid_from("quick", sections=("gpu",), presets=(preset,), encodings=encodings, repeats=repeats,
                         warmup=3, gpu_steps=steps)  # fmt: skip
    report = run_perf(grid, device)
    return {"data": report["gpu"], "lines": render_gpu(report["gpu"])}


def part_tests(dry: bool) -> dict[str, Any]:
    # on the card, its CUDA tests only (the CPU ones ran in CI): graphed vs eager, the whole
    # step, PRISM's capture, forced exact match, models moved to the GPU
    select = ["-k", "accel_settings"] if dry else ["-k", "cuda or captured"]  # ("gpu" would match a file name)
    files = ["tests/harness/test_gpu_loop.py", "tests/harness/test_forced_exact.py"]
    files += [] if dry else ["tests/pezoo/test_custom_model_moves.py"]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files, *select],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
    return {"data": {"returncode": proc.returncode}, "lines": ["```", *tail, "```"]}


WATCHDOG = "PEZOO_DUMP_AFTER"
"""Seconds after which a part's process (or a bench it starts) writes every thread's stack
to stderr and exits (``faulthandler.dump_traceback_later``): a hang comes back with where
each thread waited. SIGABRT did not serve: the hung grouped PRISM bench of round 2's first
call ignored it for 120 s (a core dump of a process holding a CUDA context)."""

WATCHDOG_MARGIN = 5.0

_BENCH_BOOT = (
    "import faulthandler, sys; faulthandler.dump_traceback_later(float(sys.argv.pop(1)), exit=True); "
    "sys.argv[0] = 'pezoo'; from harness.cli import main; main()"
)


def hang_report(out: str, limit: int = 60) -> list[str] | None:
    """The thread stacks ``faulthandler`` wrote on a timeout, cut to each thread's innermost
    frames (most recent first, as it prints them), or None when ``out`` holds none."""
    lines = out.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Timeout (")), None)
    if start is None:
        return None
    kept: list[str] = []
    frames = 0
    for line in lines[start:]:
        if line.startswith(("Thread 0x", "Current thread", "Timeout (")):
            kept.append(line)
            frames = 0
        elif line.strip().startswith("File ") and frames < 8:
            kept.append(line)
            frames += 1
    return kept[:limit]


def _bench(
    args: list[str], store: Path, accel: str | None, timeout: float, dry: bool = False, group: str | None = None
) -> tuple[float, int, str]:
    """(wall s, return code, output tail) of ``pezoo bench args --store store``: a subprocess
    under ``timeout``, or in this process in a dry run (seconds, not a torch import each).
    ``accel``: ``PEZOO_ACCEL``; ``group``: ``PEZOO_GROUP`` (threads or processes)."""
    if dry:
        return _bench_here(args, store, accel, group)
    env = {**os.environ}
    if accel is not None:
        env["PEZOO_ACCEL"] = accel
    if group is not None:
        env["PEZOO_GROUP"] = group
    start = time.perf_counter()
    try:
        dump_after = str(max(1.0, timeout - WATCHDOG_MARGIN))  # a hang: its stacks, not just a timeout
        proc = subprocess.run(
            [sys.executable, "-c", _BENCH_BOOT, dump_after, "bench", *args, "--store", str(store)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        code, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, out = 124, f"timed out after {timeout:.0f} s: {exc.stdout or ''}"
    wall = time.perf_counter() - start
    stacks = hang_report(str(out))
    if stacks is not None:
        heading = f"hung: no end after {float(dump_after):.0f} s; where each thread waited:"
        return wall, 124, "\n".join([heading, *stacks])
    return wall, code, "\n".join(str(out).strip().splitlines()[-4:])


def _bench_here(args: list[str], store: Path, accel: str | None, group: str | None = None) -> tuple[float, int, str]:
    from click.testing import CliRunner

    from harness.cli import main as cli

    settings = {"PEZOO_ACCEL": accel, "PEZOO_GROUP": group}
    saved = {name: os.environ.get(name) for name in settings}
    for name, value in settings.items():
        if value is not None:
            os.environ[name] = value
    start = time.perf_counter()
    try:
        result = CliRunner().invoke(cli, ["bench", *args, "--store", str(store)])
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    out = result.output + (f"\n{result.exception!r}" if result.exception and result.exit_code != 0 else "")
    return time.perf_counter() - start, result.exit_code, "\n".join(out.strip().splitlines()[-4:])


def _speeds(store: Path) -> dict[str, Any]:
    """Finished runs' total steps, training and evaluation seconds in ``store``."""
    from harness.records.store import Store

    if not store.exists():
        return {"runs": 0, "steps": 0, "train_s": 0.0, "eval_s": 0.0, "steps_per_s": None, "slowest_steps_per_s": None}
    with Store(store) as s:
        runs = [r for r in s.runs() if r["status"] == "finished"]
    steps = sum(r["config"]["train"]["steps"] for r in runs)
    rates = [r["config"]["train"]["steps"] / r["train_seconds"] for r in runs if r["train_seconds"]]
    train_s = sum(r["train_seconds"] or 0.0 for r in runs)
    eval_s = sum(r["eval_seconds"] or 0.0 for r in runs)
    return {
        "runs": len(runs),
        "steps": steps,
        "train_s": round(train_s, 2),
        "eval_s": round(eval_s, 2),
        "steps_per_s": round(steps / train_s, 1) if train_s else None,
        "slowest_steps_per_s": round(min(rates), 1) if rates else None,
    }


def part_example(dry: bool, budget: float = 105.0) -> dict[str, Any]:
    """The card's example: before (features off, one worker) and after (defaults), each over
    300-step runs (a run's speed, the sweep's start-up and evaluation), the whole command
    projected from the after run (start-up and evaluation + the remaining steps at the
    slowest run's rate), then run whole when the projection fits what is left of ``budget``."""
    start = time.perf_counter()
    base = ["--pe", "prism,randomized", "--task", "odds_first"]
    base += ["--preset", "smoke", "--steps", "6", "--device", "cpu", "--workers", "1"] if dry else ["--device", "cuda"]
    full_steps = 6 if dry else preset_steps("quick")
    short = ["--steps", "4"] if dry else ["--steps", "300"]
    with tempfile.TemporaryDirectory() as tmp:
        stores = {k: Path(tmp) / f"{k}.sqlite" for k in ("before", "after", "whole")}
        b_wall, b_code, b_out = _bench([*base, *short, "--eval-samples", "10", *([] if dry else ["--workers", "1"])],
                                       stores["before"], "off", 40, dry)  # fmt: skip
        a_wall, a_code, a_out = _bench([*base, *short], stores["after"], None, 50, dry)
        before, after = _speeds(stores["before"]), _speeds(stores["after"])
        slowest = after["slowest_steps_per_s"]
        planned = len(base[1].split(","))  # one run per encoding
        complete = after["runs"] == planned  # an unfinished run's (the slowest's) speed is unknown
        projected = a_wall + (full_steps - int(short[1])) / slowest if slowest and complete else None
        left = budget - (time.perf_counter() - start)
        whole: dict[str, Any] = {"ran": False}
        if projected is not None and projected < left - 5:
            w_wall, w_code, _ = _bench(base, stores["whole"], None, left - 5, dry)
            whole = {"ran": True, **_speeds(stores["whole"]), "wall_s": round(w_wall, 1), "code": w_code}
    data = {"before": {**before, "wall_s": round(b_wall, 1), "code": b_code},
            "after": {**after, "wall_s": round(a_wall, 1), "code": a_code},
            "projected_whole_s": projected, "whole": whole}  # fmt: skip
    lines = [
        f"`pezoo bench {' '.join(base)}` ({full_steps} steps a run)",
        "",
        f"- before (PEZOO_ACCEL=off, one worker), {short[1]}-step runs: {before['steps_per_s']} steps/s a run, "
        f"slowest {before['slowest_steps_per_s']}; exit {b_code}",
        f"- after (defaults), {short[1]}-step runs: {after['steps_per_s']} steps/s a run, slowest {slowest}; "
        f"the command {a_wall:.1f} s; exit {a_code}",
        f"- the whole command projected from it: {'?' if projected is None else f'{projected:.0f} s'} "
        f"(target ≤ 60 s; {after['runs']} of {planned} short runs finished)",
        "- the whole command run: "
        + (f"{whole['wall_s']} s, exit {whole['code']}" if whole["ran"] else "not run (its projection does not fit)"),
    ]
    for code, out in ((b_code, b_out), (a_code, a_out)):
        if code:
            lines += ["", "```", out, "```"]
    return {"data": data, "lines": lines}


def preset_steps(preset: str) -> int:
    from harness.config.presets import PRESETS

    return int(PRESETS[preset]["train"]["steps"])


def board_projection(row: dict[str, Any], runs: int = 270, steps: int = 10_000) -> float | None:
    """Minutes the board (``runs`` runs of ``steps`` steps, each evaluated as the measured
    runs were) takes at a packed sweep's measured rates: per run ``steps / r + e`` seconds
    (``r`` a run's training steps/s, ``e`` its evaluation seconds), divided by the sweep's
    effective concurrency ``k = (Σ train s + Σ eval s) / wall`` (the wall includes the
    workers' start-up, which a 270-run sweep pays once: conservative)."""
    if not row.get("runs") or not row.get("steps_per_s") or not row.get("wall_s"):
        return None
    k = (row["train_s"] + row["eval_s"]) / row["wall_s"]
    per_run = steps / row["steps_per_s"] + row["eval_s"] / row["runs"]
    return runs * per_run / max(k, 1e-9) / 60


def part_pack(dry: bool) -> dict[str, Any]:
    """Items 1 and 3: one board-preset sweep two ways on one card: packed worker processes
    (``PEZOO_GROUP=processes``: they time-share the GPU) and the group (``threads``: one
    process, a thread and a stream per run, the default)."""
    if dry:
        sweep = ["--pe", "nope,rope", "--task", "copy", "--seeds", "1", "--preset", "smoke", "--steps", "5"]
        sweep += ["--device", "cpu", "--workers", "2"]
        sweeps = [("packed processes", sweep, None, "processes", 60),
                  ("grouped threads", sweep, None, "threads", 60),
                  ("grouped, stacked passes", sweep, STACK_ACCEL, "threads", 60),
                  ("grouped, whole-step graphs", sweep, STEP_ACCEL, "threads", 60)]  # fmt: skip
    else:
        # board-preset runs, shortened to 500 steps but evaluated as the board evaluates (scales
        # 1..40, 100 samples each), so the projection carries the evaluation's real cost; the
        # loop of before the first round (features off, 23 steps/s on an H200) is in that
        # round's report and not measured again. Two encodings × 2 tasks × 4 seeds: 16 runs, as
        # round 2's first call (4 × 2 × 2), but stacks of 8 runs of one shape, as a board's are
        # (an encoding's 5 tasks × 3 seeds in flight together)
        sweep = ["--pe", "nope,alibi", "--task", "copy,reverse", "--seeds", "4", "--preset", "board",
                 "--steps", "500", "--device", "cuda"]  # fmt: skip
        sweeps = [("packed processes", sweep, None, "processes", 75),
                  ("grouped threads", sweep, None, "threads", 70),
                  ("grouped, stacked passes", sweep, STACK_ACCEL, "threads", 70),
                  ("grouped, whole-step graphs", sweep, STEP_ACCEL, "threads", 70)]  # fmt: skip
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, args, accel, group, timeout in sweeps:
            store = Path(tmp) / f"{len(rows)}.sqlite"
            sampler = None if dry else sample_utilisation()
            wall, code, out = _bench(args, store, accel, timeout, dry, group)
            util = read_utilisation(sampler)
            speeds = _speeds(store)
            total_steps_per_s = speeds["steps"] / wall if wall else None
            rows[label] = {**speeds, "wall_s": round(wall, 1), "code": code, "gpu_util": util,
                           "sweep_steps_per_s": round(total_steps_per_s or 0, 1), "tail": out}  # fmt: skip
    lines = [f"after: `pezoo bench {' '.join(sweep)}`; the sweep's steps over its wall time:", ""]
    lines += [
        "| | runs | wall s | sweep steps/s | steps/s a run | eval s a run | GPU utilisation % (active window / all) |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, r in rows.items():
        u = r["gpu_util"] or {}
        eval_run = round(r["eval_s"] / r["runs"], 1) if r["runs"] else None
        lines.append(f"| {label} | {r['runs']} | {r['wall_s']} | {r['sweep_steps_per_s']} | {r['steps_per_s']} | "
                     f"{eval_run} | {u.get('active_pct')} / {u.get('all_pct')} |")  # fmt: skip
        if r["code"]:
            lines += ["", f"{label}: exit {r['code']}", "```", r["tail"], "```", ""]
    packed, grouped = rows["packed processes"], rows["grouped threads"]
    for label in ("grouped threads", "grouped, stacked passes", "grouped, whole-step graphs"):
        if packed["sweep_steps_per_s"] and rows[label]["sweep_steps_per_s"]:
            ratio = rows[label]["sweep_steps_per_s"] / packed["sweep_steps_per_s"]
            lines += ["", f"{label} over packed, the sweep's steps/s: {ratio:.2f}x (target >= 5x the 230 steps/s "
                          "eight packed processes trained on an H200)."]  # fmt: skip
    minutes = {label: board_projection(r) for label, r in rows.items()}
    for label, m in minutes.items():
        if m is not None:
            lines += ["", f"The 270-run board (10k steps each, evaluated as here), {label}: {m:.0f} min "
                          "(target <= 45 min)."]  # fmt: skip
    lines += ["", "harness/sweeps/speeds.py row (board model, grouped):",
              f'    RecordedSpeed("board", "cuda", None, {grouped["steps_per_s"]}, <eval s/unit>, "<card>, grouped, '
              'benchmarks/results/cuda-gpu-*-2.md")']  # fmt: skip
    stacked = rows["grouped, stacked passes"]
    if grouped["sweep_steps_per_s"] and stacked["sweep_steps_per_s"]:
        lines += ["", f"Stacked over grouped threads, the sweep's steps/s: "
                      f"{stacked['sweep_steps_per_s'] / grouped['sweep_steps_per_s']:.2f}x."]  # fmt: skip
    return {"data": {**rows, "board_minutes": minutes}, "lines": lines}


def part_stack_equal(dry: bool) -> dict[str, Any]:
    """Item 1 for stacked passes (``harness.training.stacked``): runs of one shape trained one
    at a time, then as one group with the ``stack`` feature, compared run by run. Not bit for
    bit (a batched kernel rounds otherwise, and the stack pads to its widest batch): the final
    loss's relative difference and the exact-match cells that differ, beside the same
    comparison for abacus/addition trained alone twice (the device's own repeatability)."""
    import torch

    from harness.config import preset_config
    from harness.execution.run import train_and_evaluate
    from harness.sweeps.executors import Grouped
    from harness.sweeps.executors.jobs import Job

    device = "cpu" if dry else "cuda"
    steps = 5 if dry else 300
    specs = [(pe, task, seed) for pe, task in (("nope", "copy"), ("randomized:ape{max_length=256}", "reverse"))
             for seed in (0, 1)]  # fmt: skip
    configs = [preset_config("smoke" if dry else "quick", pe=pe, task=task, seed=seed,
                             overrides={"train": {"steps": steps}, "eval": {"samples": 8 if dry else 50}})
               for pe, task, seed in specs]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        alone = {c.run_id(): train_and_evaluate(c, torch.device(device), Path(tmp) / f"a{i}.pt", notice=lambda m: None)
                 for i, c in enumerate(configs)}  # fmt: skip
        alone_s = time.perf_counter() - t0
        os.environ["PEZOO_ACCEL"] = STACK_ACCEL if not dry else "stack"
        try:
            group = Grouped([device] * len(configs))
            t0 = time.perf_counter()
            for i, cfg in enumerate(configs):
                group.submit(Job(i, cfg.to_dict(), cfg.run_id(), str(Path(tmp) / f"s{i}.pt")))
            together: dict[str, Any] = {}
            while len(together) < len(configs):
                together |= dict((job.run_id, answer) for job, answer in group.wait())
            group.close()
            stacked_s = time.perf_counter() - t0
            stacks = [(s.passes, s.member_steps, s.backend, s.dissolved) for s in group._stacks.all()]
        finally:
            os.environ.pop("PEZOO_ACCEL", None)
    lines = ["| run | alone: final loss | stacked: final loss | relative difference | EM cells differing (max diff) |",
             "|---|---|---|---|---|"]  # fmt: skip
    worst = 0.0
    for cfg in configs:
        a, g = alone[cfg.run_id()], together[cfg.run_id()]
        if not hasattr(g, "metrics") or g.status != "finished":
            lines.append(f"| {cfg.pe}/{cfg.task} s{cfg.seed} | {a.final_loss!r} | {g!s:.80} | | |")
            continue
        rel = abs(g.final_loss - a.final_loss) / max(abs(a.final_loss), 1e-12)
        worst = max(worst, rel)
        cells = [(x.exact, y.exact) for (_, x), (_, y) in zip(a.metrics, g.metrics, strict=True)]
        differ = [abs(x - y) for x, y in cells if x != y]
        lines.append(f"| {cfg.pe}/{cfg.task} s{cfg.seed} | {a.final_loss:.6g} | {g.final_loss:.6g} | {rel:.1e} | "
                     f"{len(differ)} of {len(cells)} ({max(differ, default=0):.2f}) |")  # fmt: skip
    lines += ["", f"stacks (passes, member steps, backend, dissolved): {stacks}; one at a time {alone_s:.1f} s, "
                  f"stacked {stacked_s:.1f} s; largest relative difference of a final loss {worst:.1e}."]  # fmt: skip
    data = {"alone_s": alone_s, "stacked_s": stacked_s, "worst_rel": worst, "stacks": stacks}
    return {"data": data, "lines": lines}


def part_stack_host(dry: bool) -> dict[str, Any]:
    """Item 1: what a stacked pass saves the host (``benchmarks/stack_overhead.py``): 8 tiny
    runs one at a time, in threads and stacked, ms per run-step."""
    from stack_overhead import measure, render

    result = measure("cpu", runs=2, steps=6) if dry else measure("cuda", runs=8, steps=200)
    return {"data": result, "lines": render(result).splitlines()}


def part_group_equal(dry: bool) -> dict[str, Any]:
    """Item 1: a run trained in a group gives the record it gives alone. Four runs (no draws,
    randomized positions, Abacus's offsets, RoPE) trained one at a time, then together in
    one group (a thread and a stream each), compared record for record."""
    import torch

    from harness.config import preset_config
    from harness.execution.run import train_and_evaluate
    from harness.sweeps.executors import Grouped
    from harness.sweeps.executors.jobs import Job

    device = "cpu" if dry else "cuda"
    steps = 5 if dry else 300
    specs = [("nope", "copy"), ("randomized:ape{max_length=256}", "copy"), ("abacus", "addition"), ("rope", "reverse")]
    configs = [preset_config("smoke" if dry else "quick", pe=pe, task=task, seed=0,
                             overrides={"train": {"steps": steps}, "eval": {"samples": 8 if dry else 50}})
               for pe, task in specs]  # fmt: skip

    def summary(result: Any) -> tuple[Any, ...]:
        metrics = tuple((s, m.length, m.exact, m.tokens_right) for s, m in result.metrics)
        return result.status, result.final_loss, metrics

    with tempfile.TemporaryDirectory() as tmp:
        alone = {}
        t0 = time.perf_counter()
        for i, cfg in enumerate(configs):
            result = train_and_evaluate(cfg, torch.device(device), Path(tmp) / f"a{i}.pt", notice=lambda m: None)
            alone[cfg.run_id()] = summary(result)
        alone_s = time.perf_counter() - t0
        # Abacus/addition gave another record in the group than alone on an H100 (the first
        # call of round 2): trained alone twice, does it give one record? If not, the
        # difference is the device's run-to-run nondeterminism, not the group's
        abacus = configs[2]
        again = summary(train_and_evaluate(abacus, torch.device(device), Path(tmp) / "again.pt", notice=lambda m: None))
        group = Grouped([device] * len(configs))
        t0 = time.perf_counter()
        for i, cfg in enumerate(configs):
            group.submit(Job(i, cfg.to_dict(), cfg.run_id(), str(Path(tmp) / f"g{i}.pt")))
        together: dict[str, Any] = {}
        while len(together) < len(configs):
            together |= {job.run_id: summary(answer) if hasattr(answer, "metrics") else (str(answer),)
                         for job, answer in group.wait()}  # fmt: skip
        group.close()
        group_s = time.perf_counter() - t0
    lines = ["| run | alone: final loss | group: final loss | metrics equal |", "|---|---|---|---|"]
    equal = 0
    for cfg in configs:
        a, g = alone[cfg.run_id()], together[cfg.run_id()]
        same = a == g
        equal += same
        shown = g[1] if len(g) > 1 else g[0]
        lines.append(f"| {cfg.pe}/{cfg.task} | {a[1]!r} | {shown!r} | {'yes' if same else 'NO'} |")
    lines += ["", f"{equal} of {len(configs)} runs gave the same record in the group as alone (bit for bit); "
                  f"one at a time {alone_s:.1f} s, together {group_s:.1f} s."]  # fmt: skip
    repeatable = again == alone[abacus.run_id()]
    verdict = "the same record as the first" if repeatable else (
        "NOT the record of the first: the device does not repeat this run, grouped or not")
    lines += ["", f"{abacus.pe}/{abacus.task} trained alone a second time: final loss {again[1]!r}, {verdict}."]
    data = {"equal": equal, "runs": len(configs), "alone_s": alone_s, "group_s": group_s, "repeatable": repeatable}
    return {"data": data, "lines": lines}


def part_gpu20k(dry: bool) -> dict[str, Any]:
    args = ["--pe", "nope", "--task", "copy"]
    args += ["--preset", "smoke", "--steps", "5", "--device", "cpu"] if dry else ["--preset", "gpu", "--steps", "2000",
                                                                               "--device", "cuda"]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "gpu.sqlite"
        wall, code, _ = _bench(args, store, None, 55, dry)
        speeds = _speeds(store)
    rate = speeds["steps_per_s"]
    projected = 20_000 / rate + speeds["eval_s"] if rate else None
    data = {**speeds, "wall_s": round(wall, 1), "code": code, "projected_20k_s": projected}
    lines = [
        f"`pezoo bench {' '.join(args)}`: {rate} steps/s; a 20k-step run projects to "
        f"{'?' if projected is None else f'{projected / 60:.1f} min'} (target ≤ 2 min); exit {code}"
    ]
    return {"data": data, "lines": lines}


def part_loop_gpu(dry: bool) -> dict[str, Any]:
    """The loop at the gpu preset's shape (d 512, 5 layers, batch 100): NoPE and PRISM."""
    return part_loop(dry, "gpu", ("nope", "prism"), steps=20, repeats=3)


def part_prism_kernel(dry: bool) -> dict[str, Any]:
    """PRISM's Triton scan compiled on the card: its tests (against the torch scan and the dense
    reference, forward and backward), then its step time against the torch scan and NoPE
    (benchmarks/prism_triton.py). Its default stays the torch loop until this passes."""
    if dry:
        return {"data": {}, "lines": ["not on CPU: the kernels' interpreter tests run in the suite"]}
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/pezoo/prism/test_prism_triton_scan.py",
         "tests/pezoo/prism/test_prism_fused_scan.py", "-k", "triton or cuda"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=40,
    )  # fmt: skip
    table = Path(tempfile.mkdtemp()) / "prism_triton.md"
    bench = subprocess.run(
        [sys.executable, "benchmarks/prism_triton.py", "--time-limit", "35", "--out", str(table)],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=45,
    )  # fmt: skip
    tail = (tests.stdout + tests.stderr).strip().splitlines()[-6:]
    lines = ["tests:", "```", *tail, "```", ""]
    lines += (
        table.read_text().splitlines()
        if table.exists()
        else ["```", *(bench.stdout + bench.stderr).splitlines()[-8:], "```"]
    )
    return {"data": {"tests_returncode": tests.returncode, "bench_returncode": bench.returncode}, "lines": lines}


def part_prism_capture(dry: bool) -> dict[str, Any]:
    """Item 2: where a CUDA graph capture of PRISM's step fails with the Triton scan on. Round
    2's first call: the loop's capture raised cudaErrorStreamCaptureInvalidated. Each stage
    says whether it captured and which Triton compilations and module loads (forbidden
    while a stream captures) happened in it, in which thread, capturing or not."""
    if dry:
        return {"data": {}, "lines": ["not on CPU: a CUDA graph needs a GPU"]}
    import random
    import threading
    import warnings

    import torch

    import harness.tasks
    from harness.config import preset_config
    from harness.tasks.data import Batch, collate, sample_training_batch
    from harness.training.graphs import _Pass, capture, pad_to, plain_loss
    from harness.training.step_graph import GraphedStep
    from harness.training.train import build_model, make_optimizer
    from pezoo.encodings.prism.fused_scan import set_scan_backend

    set_scan_backend("triton")
    stage = ["setup"]
    events: list[tuple[str, str, bool, str]] = []

    def note(kind: str) -> None:
        events.append((kind, stage[0], torch.cuda.is_current_stream_capturing(), threading.current_thread().name))

    patched = []
    try:  # Triton's first module load of a compiled kernel, and its compilations
        import triton.compiler.compiler as tcc

        loads = tcc.CompiledKernel._init_handles

        def init_handles(self: Any, *a: Any, **k: Any) -> Any:
            if getattr(self, "module", None) is None:
                note("module load")
            return loads(self, *a, **k)

        tcc.CompiledKernel._init_handles = init_handles
        patched.append("CompiledKernel._init_handles")
        import triton.runtime.jit as tjit

        if hasattr(tjit.JITFunction, "compile"):
            compiles = tjit.JITFunction.compile

            def compile_(self: Any, *a: Any, **k: Any) -> Any:
                note("compile")
                return compiles(self, *a, **k)

            tjit.JITFunction.compile = compile_
            patched.append("JITFunction.compile")
    except Exception as exc:  # another Triton: the stages still say what captured
        patched.append(f"(not patched: {type(exc).__name__}: {exc})")

    device = torch.device("cuda")
    cfg = preset_config("quick", pe="prism", task="odds_first", seed=0)
    model = build_model(cfg, device)
    host = pad_to(collate(sample_training_batch(harness.tasks.create("odds_first"), random.Random(0), 64, 1, 10)), 24)
    batch = Batch(*(t.to(device) for t in (host.inputs, host.labels, host.scales, host.scored)))
    results: list[tuple[str, str]] = []

    def run(name: str, body: Any) -> None:
        stage[0] = name
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                outcome = body()
            said = [str(w.message).splitlines()[0] for w in caught if "graph" in str(w.message)]
            results.append((name, said[0] if said else (outcome or "ok")))
        except Exception as exc:
            results.append((name, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"))
        try:
            torch.cuda.synchronize()
        except Exception as exc:
            results.append((f"{name}: after", f"{type(exc).__name__}: {exc}"))

    def eager() -> None:
        for _ in range(2):
            model.zero_grad(set_to_none=True)
            plain_loss(model, "fp32", batch, None)[0].backward()

    def forward_only() -> None:
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph):
            plain_loss(model, "fp32", batch, None)

    def forward_backward(mode: str) -> Any:
        def body() -> None:
            model.zero_grad(set_to_none=True)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, capture_error_mode=mode):
                plain_loss(model, "fp32", batch, None)[0].backward()

        return body

    def loop_capture() -> str:
        graphed = capture(_Pass(model, "fp32", False), (batch.inputs, batch.labels, batch.scales, batch.scored))
        return "captured" if graphed is not None else "not captured"

    def whole_step() -> str:
        opt = make_optimizer(model, cfg, fused=True)
        stepper = GraphedStep(model, "fp32", opt, cfg.train.grad_clip)
        model.zero_grad(set_to_none=True)
        plain_loss(model, "fp32", batch, None)[0].backward()
        opt.step()  # the optimiser's state, made eagerly
        return "captured and replayed" if stepper(batch, host) is not None else "not captured"

    run("eager forward+backward x2", eager)
    run("capture: forward only (global mode)", forward_only)
    run("capture: forward+backward (global mode)", forward_backward("global"))
    run("capture: forward+backward (thread_local mode)", forward_backward("thread_local"))
    run("the loop's capture (make_graphed_callables)", loop_capture)
    run("the whole step (harness.training.step_graph)", whole_step)
    lines = [f"Triton hooks: {', '.join(patched)}", "", "| stage | outcome | Triton events (kind, capturing, thread) |",
             "|---|---|---|"]  # fmt: skip
    for name, outcome in results:
        seen = [f"{k} ({'capturing' if c else 'not capturing'}, {t})" for k, st, c, t in events if st == name]
        lines.append(f"| {name} | {outcome} | {'; '.join(seen) or '-'} |")
    return {"data": {"stages": results, "events": events}, "lines": lines}


PART_FUNCTIONS = {
    "env": part_env,
    "loop": part_loop,
    "loop_gpu": part_loop_gpu,
    "prism_kernel": part_prism_kernel,
    "prism_capture": part_prism_capture,
    "tests": part_tests,
    "example": part_example,
    "pack": part_pack,
    "group_equal": part_group_equal,
    "stack_equal": part_stack_equal,
    "stack_host": part_stack_host,
    "gpu20k": part_gpu20k,
}


# -- the orchestrator ----------------------------------------------------------------------


def _write(out: Path, results: dict[str, Any], started: float) -> Path:
    card = results.get("env", {}).get("data", {}).get("card", "unknown")
    slug = re.sub(r"[^a-z0-9]+", "-", card.lower()).strip("-") or "unknown"
    env = results.get("env", {}).get("data", {})
    lines = [
        f"# The harness on a GPU: {card}",
        "",
        f"torch {env.get('torch')} · CUDA {env.get('cuda')} · commit {env.get('commit')} · "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))} · benchmarks/device_check.py",
    ]
    for name, _, _ in PARTS:
        if name not in results:
            continue
        r = results[name]
        lines += ["", f"## {name} ({r.get('seconds', 0):.0f} s)", ""]
        lines += r.get("lines") or [f"not measured: {r.get('error')}"]
    md = out / f"cuda-gpu-{slug}{ROUND}.md"
    md.write_text("\n".join(lines) + "\n")
    (out / f"cuda-gpu-{slug}{ROUND}.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    return md


def orchestrate(out: Path, dry: bool, budget: float, only: list[str] | None) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    results: dict[str, Any] = {}
    md = out / "none"
    for name, gpu_timeout, dry_timeout in PARTS:
        if only and name not in only:
            continue
        timeout = dry_timeout if dry else gpu_timeout
        left = budget - (time.time() - started)
        if left < min(timeout, 20):
            results[name] = {"error": f"skipped: {left:.0f} s of the budget left, the part needs up to {timeout}"}
            md = _write(out, results, started)
            continue
        timeout = min(timeout, left)
        part_json = out / f".part-{name}.json"
        t0 = time.time()
        if dry:  # in this process: no torch import per part (the dry run is a test)
            try:
                results[name] = PART_FUNCTIONS[name](dry)
            except Exception as exc:  # the report still comes back, saying what failed
                results[name] = {"error": f"{type(exc).__name__}: {exc}"}
            results[name]["seconds"] = time.time() - t0
            md = _write(out, results, started)
            continue
        cmd = [sys.executable, __file__, "--part", name, "--part-out", str(part_json), *(["--dry-run"] if dry else [])]
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        env[WATCHDOG] = str(max(1.0, timeout - WATCHDOG_MARGIN))
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
            stacks = hang_report(proc.stdout + proc.stderr)
            if proc.returncode == 0 and part_json.exists():
                results[name] = json.loads(part_json.read_text())
            elif stacks is not None:
                results[name] = {"error": f"timed out after {env[WATCHDOG]} s", "lines": [
                    f"not measured: no end after {env[WATCHDOG]} s; where each thread waited:", "```", *stacks, "```"]}
            else:
                tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
                results[name] = {"error": f"exit {proc.returncode}", "lines": ["```", tail, "```"]}
        except subprocess.TimeoutExpired:
            results[name] = {"error": f"timed out after {timeout:.0f} s"}
        results[name]["seconds"] = time.time() - t0
        part_json.unlink(missing_ok=True)
        if name == "prism_kernel" and results[name].get("data", {}).get("tests_returncode") == 0:
            os.environ[SCAN_ENV] = "auto"  # the kernels passed on this card: the parts after use them
            note = f"The kernels passed here: the parts below run {SCAN_ENV}=auto."
            results[name]["lines"] = [*results[name].get("lines", []), "", note]
        md = _write(out, results, started)
        print(f"{name}: {results[name].get('error', 'done')} ({results[name]['seconds']:.0f} s)", flush=True)
    return md


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"), help="where the report goes")
    parser.add_argument("--dry-run", action="store_true", help="every part on CPU at toy sizes")
    parser.add_argument("--budget", type=float, default=540.0, help="seconds for all parts together")
    parser.add_argument("--only", help="comma-separated parts to run (default: all)")
    parser.add_argument("--part", choices=list(PART_FUNCTIONS), help=argparse.SUPPRESS)
    parser.add_argument("--part-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.part:
        if os.environ.get(WATCHDOG):
            import faulthandler

            faulthandler.dump_traceback_later(float(os.environ[WATCHDOG]), exit=True)
        result = PART_FUNCTIONS[args.part](args.dry_run)
        Path(args.part_out).write_text(json.dumps(result, default=str))
        return 0
    only = [p.strip() for p in args.only.split(",")] if args.only else None
    unknown = sorted(set(only or ()) - set(PART_FUNCTIONS))
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; valid: {', '.join(PART_FUNCTIONS)}")
    md = orchestrate(Path(args.out), args.dry_run, args.budget, only)
    print(md.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
