"""Run the LM track's sweep (leaderboard/lm/sweep.toml) on a lent GPU for a fixed time, and
bring back what finished.

    export PEZOO_LM_SNAPSHOTS=.lmcorpora PEZOO_COMMIT=<sha>
    python benchmarks/lm_gpu_sweep.py --out "$OUT" --budget 480 --home .lmhome

A lent machine holds a session's device time (minutes) and a different Python than the
machine the sweep started on, so:

- the corpora come as snapshots of the home machine's (``pezoo lm corpus en code --save
  .lmcorpora``, carried with the call): the same bytes and corpus hash as the runs trained
  at home, whatever the GPU machine's standard library;
- first the CUDA tests of the LM loop (``tests/harness/lm``): the graphed pass against the
  eager one for every encoding of the sweep; if they fail, the sweep trains without graphs;
- then ``--workers`` sweeps side by side on one store per task (``LmStore.hold`` keeps them
  off each other's runs), the home stores' records (``--home``: their ``runs.jsonl`` copied
  into a carried folder) seeding them so what home trained is skipped, in the order of
  ``ORDER``, until ``--budget`` seconds have passed;
  a run cut off leaves its checkpoint in ``.lmgpu/`` for the next call on the same machine
  (``.gitignore`` names it: the device keeps ignored outputs between calls, and removes
  what it takes for untracked files the home tree lacks, as it did to a first call's store
  ignored only in ``.git/info/exclude``, which does not travel);
- finally each store's finished records (``TASK.runs.jsonl``), the trained runs' weights in
  as many 15 MiB tar parts as the call may bring back, the GPU's utilisation and the logs
  go to ``--out``. At home: ``python benchmarks/lm_gpu_sweep.py --merge OUT_DIR`` adds the
  records to the home stores (``--stores``) and unpacks the weights beside them: only
  regular files named ``TASK/RUN.pt``, every part checked before anything is written, so a
  member with an absolute path, ``..``, a link or a device is refused, never extracted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "leaderboard" / "lm" / "sweep.toml"
WORK = ROOT / ".lmgpu"
PART_BYTES = 15 * 2**20
MAX_PARTS = 4  # the call brings back 8 files: 2 record files, the log, the summary and these

TASKS = ("lm_en", "lm_code")
"""The tasks whose records and weights come back (a weights member is ``TASK/RUN.pt``)."""


ORDER = ("lm_en", "lm_code", "lm_en", "lm_code")
"""Each worker's sweeps, in turn: the second passes pick up the variants left while another
worker still trained their rope run."""


def seed_stores(home: Path) -> int:
    """Start each task's store with the home machine's records (``home/TASK.runs.jsonl``), so
    the sweeps skip what was trained there; the records already present."""
    n = 0
    for task in dict.fromkeys(ORDER):
        src, store = home / f"{task}.runs.jsonl", WORK / task
        if src.exists() and not (store / "runs.jsonl").exists():
            store.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, store / "runs.jsonl")
            n += len(src.read_text().splitlines())
    return n


def cuda_tests(log: Path) -> bool:
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "tests/harness/lm/test_lm_runs.py",
           "-k", "cuda"]  # fmt: skip
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=150)
        text, ok = done.stdout + done.stderr, done.returncode == 0
    except subprocess.TimeoutExpired as exc:
        text, ok = f"timed out: {exc}", False
    log.write_text(text)
    print(text[-3000:], flush=True)
    return ok


def sample_gpu() -> subprocess.Popen | None:
    """nvidia-smi sampling the GPU's utilisation every 500 ms (None without it)."""
    query = ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits", "-lms", "500"]
    try:
        return subprocess.Popen(query, stdout=subprocess.PIPE, text=True)
    except OSError:
        return None


def run(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    WORK.mkdir(exist_ok=True)
    start = time.time()
    summary: dict = {"commit": os.environ.get("PEZOO_COMMIT", "unknown"), "workers": args.workers}
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    if not args.skip_tests:
        summary["cuda_tests_passed"] = cuda_tests(WORK / "cuda_tests.log")
        if not summary["cuda_tests_passed"]:
            env["PEZOO_ACCEL"] = "readback"  # train eagerly: the graphed pass did not pass its test
    summary["accel"] = env.get("PEZOO_ACCEL", "default (graphs, readback)")
    home = {r for t in dict.fromkeys(ORDER) for r in _run_ids(args.home / f"{t}.runs.jsonl")} if args.home else set()
    summary["home_records"] = seed_stores(args.home) if args.home else 0
    chain = "; ".join(
        f"{sys.executable} -m harness.cli lm sweep {SWEEP} --task {task} --store {WORK / task} --device {args.device}"
        for task in ORDER
    )
    smi = sample_gpu()
    workers = []
    for w in range(args.workers):
        log = open(WORK / f"worker{w}.log", "a")
        shell = ["sh", "-c", chain]
        workers.append(
            subprocess.Popen(shell, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        )
        time.sleep(2)  # staggered: not all on the same first run's lock at once
    deadline = start + args.budget
    while time.time() < deadline and any(p.poll() is None for p in workers):
        time.sleep(2)
    for p in workers:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    lines = []
    if smi is not None:
        smi.terminate()
        lines = smi.communicate()[0].splitlines()
    samples = [line.split(",") for line in lines if line.count(",") == 1]
    util = [float(a) for a, _ in samples if a.strip().replace(".", "").isdigit()]
    summary["gpu_busy_mean_percent"] = round(sum(util) / len(util), 1) if util else None
    summary["gpu_samples"] = len(util)
    summary["seconds"] = round(time.time() - start, 1)
    pack(out, summary, home)


def _run_ids(path: Path) -> set[str]:
    return {json.loads(line)["run_id"] for line in path.read_text().splitlines()} if path.exists() else set()


def pack(out: Path, summary: dict, home: set[str]) -> None:
    weights: list[Path] = []
    rope: set[str] = set()
    for task in TASKS:
        store = WORK / task
        runs = store / "runs.jsonl"
        records = [json.loads(line) for line in runs.read_text().splitlines()] if runs.exists() else []
        records = [r for r in records if r["run_id"] not in home]  # what this machine trained
        summary[task] = [
            {"pe": r["config"]["pe"], "options": r["config"].get("pe_options"), "seed": r["config"]["seed"],
             "run_id": r["run_id"], "variant": r["config"].get("eval_pe_options"),
             "train_seconds": r["train_seconds"], "train_steps": r["train_steps"], "eval_seconds": r["eval_seconds"]}
            for r in records
        ]  # fmt: skip
        if records:
            lines = [json.dumps(r, sort_keys=True) for r in records]
            (out / f"{task}.runs.jsonl").write_text("\n".join(lines) + "\n")
        found = sorted((store / "weights").glob("*.pt")) if (store / "weights").is_dir() else []
        rope |= {r["run_id"] for r in records if r["config"]["pe"] == "rope" and not r["config"].get("eval_pe_options")}
        weights += found
    # every task's rope weights first: its variants are what a later evaluation at home needs
    weights.sort(key=lambda p: p.stem not in rope)
    parts: list[list[Path]] = []
    part: list[Path] = []
    size = 0
    for w in weights:
        if size + w.stat().st_size > PART_BYTES and part:
            parts.append(part)
            part, size = [], 0
        part.append(w)
        size += w.stat().st_size
    if part:
        parts.append(part)
    summary["weights_brought"] = sum(len(p) for p in parts[:MAX_PARTS])
    summary["weights_left"] = sum(len(p) for p in parts[MAX_PARTS:])
    for i, files in enumerate(parts[:MAX_PARTS]):
        with tarfile.open(out / f"weights{i}.tar", "w") as tar:
            for w in files:
                tar.add(w, arcname=f"{w.parent.parent.name}/{w.name}")
    with open(out / "logs.txt", "w") as logs:
        for log in sorted(WORK.glob("*.log")):
            logs.write(f"==> {log.name}\n{log.read_text()[-20000:]}\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k not in TASKS}, indent=1))
    for task in TASKS:
        print(task, len(summary[task]), "records")


def weights_plan(part: Path, stores: Path) -> list[tuple[tarfile.TarInfo, Path]]:
    """Each member of the weights part ``part`` and where it goes (``stores/TASK/weights/RUN.pt``).

    SystemExit naming the part and the member when any member is not a regular file named
    ``TASK/RUN.pt`` with TASK one of :data:`TASKS`: an absolute path, ``..``, a deeper path, a
    link or a device would land outside its place (tarfile's ``data`` filter is asked too,
    where this Python has it). Nothing is written: the whole part is checked before any of it is."""
    plan = []
    try:
        with tarfile.open(part) as tar:
            members = tar.getmembers()
    except (tarfile.TarError, OSError) as exc:
        raise SystemExit(f"{part}: not a readable tar ({exc}); nothing merged") from None
    for member in members:
        task, _, name = member.name.partition("/")
        plain = name not in ("", ".", "..") and "/" not in name and "\\" not in name and name.endswith(".pt")
        refused = None if member.isfile() and task in TASKS and plain else "not a regular file TASK/RUN.pt"
        data_filter = getattr(tarfile, "data_filter", None)
        if refused is None and data_filter is not None:
            try:
                data_filter(member, str(stores))
            except tarfile.FilterError as exc:
                refused = f"{type(exc).__name__}: {exc}"
        if refused is not None:
            raise SystemExit(f"{part}: member {member.name!r} refused ({refused}); nothing merged")
        plan.append((member, stores / task / "weights" / name))
    return plan


def merge(folder: Path, stores: Path) -> None:
    """Add the records brought back to the home stores (``stores/TASK``), skipping any run the
    store already holds, and unpack the weights beside them. Every weights part and record is
    checked before anything is written (:func:`weights_plan`); a weights file already at home is
    kept."""
    sys.path.insert(0, str(ROOT))
    from harness.lm.record import LmRecord, LmStore

    parts = {part: weights_plan(part, stores) for part in sorted(folder.glob("weights*.tar"))}
    brought: dict[str, list[LmRecord]] = {}
    for task in TASKS:
        src = folder / f"{task}.runs.jsonl"
        if src.exists():
            try:
                brought[task] = [LmRecord.from_dict(json.loads(line)) for line in src.read_text().splitlines()]
            except (ValueError, KeyError, TypeError) as exc:
                raise SystemExit(
                    f"{src}: not a file of LM records ({type(exc).__name__}: {exc}); nothing merged"
                ) from None
    for task, records in brought.items():
        store = LmStore(stores / task)
        have = store.finished()
        added = 0
        for record in records:
            if record.run_id not in have:
                store.add(record)
                have.add(record.run_id)
                added += 1
        print(f"{task}: {added} records added to {store.folder}")
    for part, plan in parts.items():
        with tarfile.open(part) as tar:
            for member, target in plan:
                if target.exists() or target.is_symlink():
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                data = tar.extractfile(member)
                assert data is not None  # a regular file (weights_plan)
                tmp = target.with_name(f".{target.name}.tmp")
                with open(tmp, "wb") as f:
                    shutil.copyfileobj(data, f)
                os.replace(tmp, target)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="lm-gpu-out")
    p.add_argument("--budget", type=float, default=480, help="seconds of sweeping (tests and packing apart)")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--skip-tests", action="store_true")
    p.add_argument("--device", default="cuda")
    p.add_argument("--home", type=Path, help="a folder of the home stores' records (TASK.runs.jsonl), carried")
    p.add_argument("--merge", type=Path, help="at home: a folder brought back, merged into --stores")
    p.add_argument("--stores", type=Path, default=Path("/work/lmruns"))
    args = p.parse_args()
    if args.merge:
        merge(args.merge, args.stores)
    else:
        run(args)


if __name__ == "__main__":
    main()
