"""Suite-wide settings.

One torch thread everywhere (this process and, through OMP_NUM_THREADS, every subprocess
a test starts): the models here are tiny, and on a 2-core machine two processes with two
OpenMP threads each spin against each other (measured: a tiny decode took 11 s with two
threads under load, 0.15 s with one). It also makes CPU results bit-identical between
the in-process and subprocess paths.

Hypothesis is derandomized by default, not only in CI. The README's test command is what
CI runs *and* what every fresh clone runs; a suite that passes or fails by the luck of a
random draw is wrong in both places (it did: a fuzz test drew ``eval.test_max =
7_508_565_006`` on two fresh clones and ran out of memory). So the default profile,
``deterministic``, seeds every test from a hash of the test itself and keeps no example
database: the same examples on every machine and every run. Looking for new failures is
opt-in, ``python -m pytest --hypothesis-profile=explore`` (random seeds, the local
``.hypothesis/`` database, more examples where a test does not set its own count); a
failure it finds becomes an explicit ``@example`` on that test, so it stays covered in the
deterministic runs.

The test process has a memory cap (``RLIMIT_DATA``: private writable memory, which is
what Python objects and torch's CPU tensors live in): a test that starts to build
something huge gets ``MemoryError`` at once instead of filling the machine until the
kernel's OOM killer ends the whole run. Subprocesses the tests start inherit it, each with
a cap of its own. ``RLIMIT_DATA`` rather than ``RLIMIT_AS``: address space that is only
reserved (mapped without write access, as Chromium and the CUDA driver reserve theirs) or
shared (Ray's object store in /dev/shm) does not count against it. The heaviest test
files peak at 0.58 GiB of it per process (measured on CPU, Ray's tests included;
docs/harness.md, "Reliability"), so the default cap of 8 GiB (tests/memory_cap.py) leaves
13x room; ``PEZOO_TEST_MEMORY_CAP_GB`` sets another (``0``: none).

The README's test command runs the suite on every CPU (pytest-xdist, ``-n logical``): one
process per CPU, each importing this file, so one torch thread and a memory cap per
worker, and each test file on one worker (``--dist loadfile``, pyproject.toml). Tests that
start Ray take :func:`one_ray_at_a_time` first: two files' Ray instances never run side by
side (``ray.init()`` could join the other file's cluster, and two of them would crowd the
machine's memory and the cluster test's deadlines).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch
from hypothesis import settings
from memory_cap import cap_memory  # tests/ is on sys.path here, as for every test module

os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)

settings.register_profile("deterministic", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, max_examples=1000, print_blob=True)
settings.load_profile("deterministic")  # --hypothesis-profile=explore replaces it (pytest_configure runs later)

cap_memory()


@pytest.fixture(scope="module")
def one_ray_at_a_time(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Hold an exclusive lock, shared by every worker of this run (a file beside their temp
    folders), for as long as the module that asked for it keeps Ray running."""
    try:
        import fcntl
    except ImportError:  # not POSIX: Ray's tests here need /proc anyway
        yield
        return
    with open(tmp_path_factory.getbasetemp().parent / "pezoo-ray.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
