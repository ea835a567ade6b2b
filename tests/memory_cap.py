"""The memory cap of the test process (``RLIMIT_DATA``), set by tests/conftest.py.

Private writable memory, which is what Python objects and torch's CPU tensors live in, is
capped at :data:`MEMORY_CAP_GB` GiB, or ``PEZOO_TEST_MEMORY_CAP_GB`` (``0``: no cap).
Subprocesses a test starts inherit the cap, each with its own.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Mapping

MEMORY_CAP_GB = 8.0
"""The default cap on the test process's private writable memory, in GiB."""


def memory_cap_bytes(environ: Mapping[str, str] = os.environ) -> int | None:
    """The cap in bytes: ``PEZOO_TEST_MEMORY_CAP_GB`` (``0``: none), else :data:`MEMORY_CAP_GB`."""
    value = environ.get("PEZOO_TEST_MEMORY_CAP_GB", "").strip()
    try:
        gib = float(value) if value else MEMORY_CAP_GB
    except ValueError:
        raise ValueError(f"PEZOO_TEST_MEMORY_CAP_GB must be a number of GiB (0: no cap), got {value!r}") from None
    return None if gib <= 0 else int(gib * 2**30)


def cap_memory() -> None:
    """Lower the soft ``RLIMIT_DATA`` to :func:`memory_cap_bytes` (never raise a lower one)."""
    cap = memory_cap_bytes()
    if cap is None:
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft == resource.RLIM_INFINITY or soft > cap:
        resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))
