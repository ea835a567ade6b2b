"""How long is the path of one short run? Count the distinct project functions one
``pezoo bench`` calls, and the files they live in.

    python benchmarks/trace_run_path.py                 # the default command, below
    python benchmarks/trace_run_path.py --by-file       # and the count per file
    python benchmarks/trace_run_path.py --list          # and every function, by file
    python benchmarks/trace_run_path.py -- --pe alibi --task reverse --steps 2 --test-len 12

The command runs in this process (``--workers 1``) on a fresh store in a temporary folder.
``harness.cli`` and everything it imports at the top is imported first; the profiler
(``sys.setprofile``, and ``threading.setprofile`` for the progress threads) starts after.
A *project function* is a named Python function (``def``; not module or class bodies,
lambdas or comprehensions) whose file lies under pezoo/, harness/ or leaderboard/; it counts once,
however often it is called. The script also says how often the run parsed its encoding
spec (``pezoo.spec.parse_pe``) and built an encoding (``pezoo.create``), counting
outermost calls only (a combination such as ``randomized:ape`` parses and builds its
parts inside one such call). Modules imported lazily during the run still execute their
top level, which is not counted, but any function they call is.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from collections import Counter
from inspect import CO_OPTIMIZED
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pezoo", "harness", "leaderboard")
DEFAULT = ["--pe", "rope", "--task", "copy", "--preset", "quick", "--steps", "2", "--test-len", "12", "--workers", "1"]


def project_file(filename: str) -> str | None:
    """``filename`` relative to the repository when it is a module of a project package, else None."""
    try:
        rel = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    return str(rel) if rel.parts and rel.parts[0] in PACKAGES else None


COUNTED = {("pezoo/spec.py", "parse_pe"): "spec parses", ("pezoo/registry.py", "create"): "encoding builds"}


def trace(argv: list[str]) -> tuple[set[tuple[str, str]], Counter[str]]:
    """The (file, qualified name) of every project function ``pezoo bench ARGV`` calls,
    and how often the functions of ``COUNTED`` were called from outside themselves."""
    from harness.cli import main  # the imports: not traced

    seen: set[tuple[str, str]] = set()
    counts: Counter[str] = Counter()
    files: dict[str, str | None] = {}

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        if code.co_name.startswith("<") or not code.co_flags & CO_OPTIMIZED:  # <lambda>, ...; module, class bodies
            return
        name = code.co_filename
        if name not in files:
            files[name] = project_file(name)
        rel = files[name]
        if rel is not None:
            key = (rel, getattr(code, "co_qualname", code.co_name))
            seen.add(key)
            if key in COUNTED and not _inside(frame.f_back, code):
                counts[COUNTED[key]] += 1

    with tempfile.TemporaryDirectory() as tmp:
        args = ["bench", *argv, "--store", str(Path(tmp) / "runs.sqlite")]
        threading.setprofile(profile)
        sys.setprofile(profile)
        try:
            main(args, standalone_mode=False)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
    return seen, counts


def _inside(frame: FrameType | None, code: Any) -> bool:
    """Whether ``frame`` or one of its callers runs ``code`` (a nested call of a counted function)."""
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--by-file", action="store_true", help="also print the count per file")
    parser.add_argument("--list", action="store_true", help="also print every function, by file")
    parser.add_argument("bench_args", nargs="*", help=f"pezoo bench's arguments (default: {' '.join(DEFAULT)})")
    args = parser.parse_args()
    seen, counts = trace(args.bench_args or DEFAULT)
    per_file = Counter(f for f, _ in seen)
    if args.by_file or args.list:
        for f, n in per_file.most_common():
            print(f"{n:4d}  {f}")
            if args.list:
                for _, q in sorted(x for x in seen if x[0] == f):
                    print(f"        {q}")
    print(f"{len(seen)} functions in {len(per_file)} files")
    print(", ".join(f"{what}: {counts[what]}" for what in COUNTED.values()))


if __name__ == "__main__":
    main()
