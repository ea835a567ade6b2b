"""The ``Executor`` interface every executor implements: ``submit(job)`` hands one run to a
free slot (at most ``capacity`` in flight), ``wait()`` blocks until at least one submitted
run is over and returns what happened to it (a ``RunResult``, or a ``WorkerLost`` when the
process or node running it died), and ``close()``. Also ``ExecutorError``, raised by an
executor that cannot be set up, and ``first_line``, how executors and the driver tell an
exception in one line.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from harness.sweeps.executors.jobs import Completion, Job


class ExecutorError(RuntimeError):
    """An executor cannot be set up (Ray missing or unreachable, no GPU where one is asked)."""


class Executor(ABC):
    """Runs jobs somewhere and reports each one's end; see the module docstring.

    Attributes:
        name: ``in-process``, ``local`` (process pool) or ``ray``; stored with each run.
        capacity: how many jobs may be in flight at once.
        device_type: ``cuda`` when runs get a GPU, else ``cpu``.
        live_notices: True when notices reach the driver while the run goes on (then
            the driver does not repeat the ``RunResult.notices``).
    """

    name: str
    capacity: int
    device_type: str
    live_notices: bool = False

    @abstractmethod
    def submit(self, job: Job) -> None: ...

    @abstractmethod
    def wait(self) -> list[Completion]:
        """Block until at least one submitted job is over; return every one that is."""

    @abstractmethod
    def close(self, *, cancel: bool = False) -> None:
        """Release workers; ``cancel`` stops jobs still in flight (driver interrupted)."""


def first_line(exc: BaseException) -> str:
    """``exc`` as one line of at most 500 characters: its type and its message's first line."""
    text = str(exc).strip() or type(exc).__name__
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), text)
    return f"{type(exc).__name__}: {line}"[:500]
