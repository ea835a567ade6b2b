"""Train a board sweep on a lent GPU for a fixed time, grouped, and bring back what finished.

    pip install --no-deps --no-build-isolation -e . && \
        python benchmarks/board_gpu.py --sweep leaderboard/later/board-addition.toml --budget 540 --out "$OUT"

For the GPU issue's measured headline (one 10-minute GPU run trains and evaluates >= 60 board
runs) and for the board's GPU work (addition, whose column costs 35-40 hours on the 2-core
CPU; a retrain of one CPU table to compare the two devices):

- the published runs (``leaderboard/results``, the LM track's under ``lm/``) are imported
  into the store first (``pezoo leaderboard import``), so a fresh machine skips what earlier
  device calls brought back and were committed: a sweep longer than one call's budget (the
  LM rerun, the frontier's rows) goes on where the last call left it; ``--fresh`` trains
  published runs again (a retrain to compare devices);
- ``pezoo bench --sweep SWEEP`` runs in a subprocess, on CUDA, with the default executor
  (the group: runs side by side in one process, ``harness.sweeps.executors.grouped``),
  into a store of its own under ``.boardgpu/`` (ignored by git; kept between calls on a
  warm machine, so a second call resumes the runs the first left);
- at ``--budget`` seconds it is interrupted as a user's Ctrl-C interrupts it: the runs in
  flight are marked interrupted and keep their checkpoints, the finished ones are in the
  store;
- the finished runs not published yet are exported as results files (``pezoo leaderboard
  export`` into a copy of the published folder, whose new files come back) into
  ``OUT/results/``, and ``OUT/board-gpu-summary.json`` says how many finished in how long,
  the sweep's training steps per second and the GPU's utilisation (nvidia-smi, every
  500 ms).

At home: ``pezoo leaderboard check OUT/results`` and, for a task the board lacks (addition),
copy the file into leaderboard/results/; a retrain of a published table (its run ids are
the published ones: the device is provenance, not config) is compared with
``pezoo leaderboard compare``, never published beside it.

``--dry-run`` does the same on CPU with a two-run smoke sweep, or with ``--sweep`` (tests/harness/test_board_gpu.py).

Options this script does not know go to ``pezoo bench``: a sweep longer than one call
(the LM rerun, a new column) should add ``--order seeds-first``, so what one call finishes
gives every row its first seed before any row its second.

The language-modelling track's sweep runs the same way, its corpora carried as snapshots of
the home machine's (``pezoo lm corpus en code --save .lmcorpora``) and named by
``PEZOO_LM_SNAPSHOTS=.lmcorpora``; its runs come back under ``OUT/results/lm/`` (docs/lm.md).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu_busy import read_utilisation, sample_utilisation  # noqa: E402

WORK = ROOT / ".boardgpu"

DRY_SWEEP = """preset = "smoke"
[[grid]]
task = ["copy"]
pe = ["nope", "rope"]
seeds = [0]
"""


def sweep_for(budget: float, sweep: Path, store: Path, device: str, extra: list[str]) -> dict[str, Any]:
    """Run ``pezoo bench --sweep`` until it ends or ``budget`` seconds pass (then Ctrl-C, as a
    user would); its wall time, return code and output tail."""
    cmd = [sys.executable, "-m", "harness.cli", "bench", "--sweep", str(sweep), "--store", str(store)]
    cmd += ["--device", device, *extra]
    start = time.perf_counter()
    log = (store.parent / f"{store.stem}.log").open("w")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    stopped = False
    try:
        proc.wait(timeout=budget)
    except subprocess.TimeoutExpired:
        stopped = True
        proc.send_signal(signal.SIGINT)  # the driver marks runs in flight interrupted, checkpoints kept
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    finally:
        log.close()
    tail = (store.parent / f"{store.stem}.log").read_text(errors="replace").strip().splitlines()[-6:]
    return {"wall_s": round(time.perf_counter() - start, 1), "code": proc.returncode, "stopped": stopped, "tail": tail}


def finished(store: Path) -> dict[str, Any]:
    """The store's finished runs: how many, their training steps and seconds."""
    from harness.records.store import Store

    if not store.exists():
        return {"runs": 0, "steps": 0, "train_s": 0.0, "eval_s": 0.0, "stacked": 0}
    with Store(store) as s:
        runs = [r for r in s.runs() if r["status"] == "finished"]
    return {
        "runs": len(runs),
        "steps": sum(r["config"]["train"]["steps"] for r in runs),
        "train_s": round(sum(r["train_seconds"] or 0.0 for r in runs), 1),
        "eval_s": round(sum(r["eval_seconds"] or 0.0 for r in runs), 1),
        # runs some of whose steps shared a stacked pass (PEZOO_ACCEL=...,stack; harness.training.stacked)
        "stacked": sum(1 for r in runs if "stacked" in (r.get("provenance") or {})),
    }


class _Done(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def _cli(*args: str) -> _Done:
    """``pezoo ARGS`` in this process (the leaderboard's import and export: no second start of
    Python, harness and the board's readers, seconds of a lent device each): its exit code and
    what it printed, as a subprocess would give them."""
    import click

    from harness.cli import main as pezoo

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            pezoo.main(list(args), prog_name="pezoo", standalone_mode=False)
            code = 0
        except click.ClickException as exc:
            exc.show()  # "Error: ..." on stderr, as the command line shows it
            code = exc.exit_code
        except click.exceptions.Exit as exc:
            code = exc.exit_code
        except Exception as exc:  # an unforeseen crash costs this step's result, not the call's summary
            print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
            code = 1
    return _Done(code, out.getvalue(), err.getvalue())


def import_published(store: Path, published: Path) -> dict[str, Any]:
    """``pezoo leaderboard import``: the published runs into ``store`` as finished (skipped by the sweep)."""
    if not published.is_dir():
        return {"code": None, "tail": f"no published results at {published}"}
    proc = _cli("leaderboard", "import", "--results", str(published), "--store", str(store))
    return {"code": proc.returncode, "tail": (proc.stdout + proc.stderr)[-500:]}


def export(store: Path, out: Path, published: Path | None = None, scratch: Path | None = None) -> dict[str, Any]:
    """The store's finished runs as results files under ``out``; with ``published``, only those
    not published there: exported into ``scratch``, a copy of the published folder (export
    writes what its folder lacks, in new files), whose new files are moved to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    if published is None or scratch is None or not published.is_dir():
        proc = _cli("leaderboard", "export", "--store", str(store), "--out", str(out))
    else:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.copytree(published, scratch)
        before = {p.relative_to(scratch) for p in scratch.rglob("*") if p.is_file()}
        proc = _cli("leaderboard", "export", "--store", str(store), "--out", str(scratch))
        if proc.returncode == 0:
            for path in sorted(p for p in scratch.rglob("*") if p.is_file()):
                name = path.relative_to(scratch)
                if name not in before:  # a new results file (board, lm/) or a new run's diagnostics
                    (out / name).parent.mkdir(parents=True, exist_ok=True)
                    shutil.move(path, out / name)
        else:  # the published folder did not read back: bring back every finished run rather than none
            proc = _cli("leaderboard", "export", "--store", str(store), "--out", str(out))
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*.jsonl"))  # an LM sweep's: lm/*.jsonl
    return {"code": proc.returncode, "files": files, "tail": proc.stdout[-500:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", type=Path, help="the sweep file (default: the addition column)")
    parser.add_argument("--budget", type=float, default=540.0, help="seconds of sweeping")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "benchmarks/results")))
    parser.add_argument("--tag", default=None, help="the store's name under .boardgpu/ (default: the sweep's)")
    parser.add_argument("--work", type=Path, default=WORK, help="where the stores and logs stay between calls")
    parser.add_argument("--dry-run", action="store_true", help="on CPU: --sweep, else a two-run smoke sweep")
    parser.add_argument("--published", type=Path, default=ROOT / "leaderboard" / "results",
                        help="the published results: imported first (skipped), never exported again")  # fmt: skip
    parser.add_argument("--fresh", action="store_true", help="train published runs again (no import)")
    args, extra = parser.parse_known_args(argv)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    if args.dry_run:
        sweep = args.sweep or work / "dry.toml"
        if args.sweep is None:
            sweep.write_text(DRY_SWEEP)
        device = "cpu"
    else:
        sweep = args.sweep or ROOT / "leaderboard" / "later" / "board-addition.toml"
        device = "cuda"
    store = work / f"{args.tag or sweep.stem}.sqlite"
    published = None if args.fresh else args.published
    imported = import_published(store, published) if published is not None else None
    before = finished(store)
    sampler = None if args.dry_run else sample_utilisation()
    run = sweep_for(args.budget, sweep, store, device, extra)
    busy = read_utilisation(sampler)
    after = finished(store)
    new = {k: round(after[k] - before[k], 1) for k in after}
    train_s = new["train_s"]
    summary = {
        "sweep": str(sweep.relative_to(ROOT) if sweep.is_relative_to(ROOT) else sweep),
        "budget_s": args.budget,
        **run,
        "imported": imported,
        "finished_before": before["runs"],
        "finished_now": after["runs"],
        "finished_in_this_call": new["runs"],
        "stacked_in_this_call": new["stacked"],
        "sweep_steps_per_s": round(new["steps"] / run["wall_s"], 1) if run["wall_s"] else None,
        "steps_per_s_a_run": round(new["steps"] / train_s, 1) if train_s else None,
        "gpu_util": busy,
        "export": export(store, args.out / "results", published, work / "export"),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "board-gpu-summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
