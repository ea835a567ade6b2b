"""Who holds a run: the process training it (:class:`Owner`), whether that process is
still alive, and what :meth:`harness.records.store.Store.claim` found (:class:`Claim`).

A process on this machine is alive while its pid runs with the same start time; a process
on another machine while its heartbeat (refreshed every :data:`HEARTBEAT_SECONDS`) is
younger than :data:`LEASE_SECONDS`.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

HEARTBEAT_SECONDS = 30.0
"""How often :meth:`Store.keep_alive` refreshes the heartbeat of this process's claims."""

LEASE_SECONDS = 300.0
"""A claim held from another machine lapses when its heartbeat is older than this."""


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


_BOOT_ID = _read("/proc/sys/kernel/random/boot_id")  # changes at every boot (Linux)


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks after boot) of a process, from ``/proc/<pid>/stat``
    (fields 3 and 22); None without procfs."""
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return None
    fields = text.rpartition(")")[2].split()  # the command name (field 2) may hold spaces
    return fields[0], int(fields[19])


@dataclass(frozen=True)
class Owner:
    """The process holding a claim.

    Attributes:
        host: the machine's name (``socket.gethostname()``).
        pid: the process id.
        start: when the process started (clock ticks after boot), to tell it from a later
            process given the same pid; None where unknown (no procfs).
        boot: the machine's boot id, to tell a claim from before a reboot; None if unknown.
        pidns: the pid namespace: pids compare only inside one (containers); None if unknown.
    """

    host: str
    pid: int
    start: int | None = None
    boot: str | None = None
    pidns: str | None = None

    @classmethod
    def this_process(cls) -> Owner:
        pid = os.getpid()
        stat_ = _proc_stat(pid)
        try:
            pidns = os.readlink("/proc/self/ns/pid")
        except OSError:
            pidns = None
        return cls(socket.gethostname(), pid, stat_[1] if stat_ else None, _BOOT_ID, pidns)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> Owner | None:
        if not text:
            return None
        try:
            d = json.loads(text)
            return cls(str(d["host"]), int(d["pid"]), d.get("start"), d.get("boot"), d.get("pidns"))
        except (ValueError, KeyError, TypeError):
            return None

    def alive(self, heartbeat: float | None, now: float, lease: float) -> bool:
        """Whether the claim still stands: on this machine (same boot, same pid namespace),
        the process runs and is the one that claimed; elsewhere, its heartbeat is recent.

        A claim with this machine's name but another boot id is either this machine's
        from before its last boot, or another machine's that has the same name (cloned
        VMs, containers named alike): it is taken for the former only when its last
        heartbeat is older than this boot; otherwise the lease decides, as for any
        other machine."""
        here = Owner.this_process()
        if (self.host, self.boot, self.pidns) == (here.host, here.boot, here.pidns):
            return _process_alive(self.pid, self.start)
        if heartbeat is None:
            return False
        if self.host == here.host and self.boot is not None and here.boot is not None and self.boot != here.boot:
            booted = _boot_time()
            if booted is not None and heartbeat < booted:
                return False  # claimed before this machine last booted
        return now - heartbeat < lease


def _boot_time() -> float | None:
    """When this machine booted (Unix time; ``btime`` in ``/proc/stat``), or None."""
    text = _read("/proc/stat")
    for line in (text or "").splitlines():
        if line.startswith("btime "):
            try:
                return float(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def _process_alive(pid: int, start: int | None) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    stat_ = _proc_stat(pid)
    if stat_ is None:
        return True
    state, ticks = stat_
    if state in ("Z", "X"):
        return False  # killed, not yet reaped by its parent
    return start is None or ticks == start


@dataclass(frozen=True)
class Claim:
    """What :meth:`Store.claim` (or :meth:`Store.check`) found.

    Attributes:
        run_id: the run.
        status: ``taken`` (this process holds it now), ``finished`` (the store holds it
            finished: nothing to do) or ``busy`` (another process holds it).
        holder: for ``busy``, who holds it ("claimed by host:pid since ..."); for
            ``taken``, the stale claim of a process that is gone, if one was taken over.
        deaths: for ``taken``, how many processes in a row died while training the run
            (killed, or crashed: a segfault, the OOM killer) without its checkpoint moving
            on in between; 0 when no dead process's claim was taken over.
    """

    run_id: str
    status: str
    holder: str | None = None
    deaths: int = 0

    @property
    def taken(self) -> bool:
        return self.status == "taken"


_DEATHS = re.compile(r"^processes died while training it: (\d+) in a row, at checkpoint step (-?\d+)")


def death_noted(error: str | None) -> bool:
    """Whether a running row's ``error`` is a note of processes that died training it."""
    return bool(_DEATHS.match(error or ""))


def count_death(before: str | None, step: int | None) -> tuple[int, str]:
    """(deaths, note) once one more process died holding a run whose running row says
    ``before`` (the note of the deaths before, or nothing) and whose checkpoint is at
    ``step`` now (None: unknown, counted as no progress)."""
    match = _DEATHS.match(before or "")
    deaths, at = (int(match[1]), int(match[2])) if match else (0, -1)  # -1: step unknown
    if step is not None and at >= 0 and step > at:  # progress since the last death: a kill, not a crash loop
        deaths = 0
    now = at if step is None else step
    return deaths + 1, f"processes died while training it: {deaths + 1} in a row, at checkpoint step {now}"


def describe(owner: Owner | None, since: float | None, heartbeat: float | None, now: float) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if since else "an unknown time"
    if owner is None:
        return f"claimed by an unknown process since {when}"
    text = f"claimed by {owner.host}:{owner.pid} since {when}"
    if heartbeat is not None and owner.host != socket.gethostname():
        text += f" (last heartbeat {now - heartbeat:.0f}s ago)"
    return text
