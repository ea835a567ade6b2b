"""torch's one global RNG, shared by every thread of a process.

A run seeds it and draws its model's initialisation from it (``harness.training.train.
build_model``), then trains from a generator of its own; checks that build an encoding
only to look at it fork it (``harness.config.pe_spec``). When runs train side by side in
one process's threads (``harness.sweeps.executors.grouped``), one thread's seeding or
restoring would land in the middle of another's initialisation: whoever seeds, draws from
or restores the global RNG holds :data:`GLOBAL_RNG` while doing so.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

GLOBAL_RNG = threading.RLock()
"""Held while torch's global CPU RNG is seeded, drawn from or restored."""


@contextlib.contextmanager
def forked_global_rng() -> Iterator[None]:
    """``torch.random.fork_rng`` of the CPU RNG under :data:`GLOBAL_RNG`: the block's draws
    leave the global state as it was, and no other thread's draws land in between."""
    with GLOBAL_RNG, torch.random.fork_rng(devices=[]):
        yield
