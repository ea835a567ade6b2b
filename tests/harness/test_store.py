"""The results store: claims (one process trains a run at a time), the schema-1 migration,
and what opening a store says when it is read-only, full, damaged or not a store at all."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from harness.cli import main
from harness.config import preset_config
from harness.evaluation.evaluate import LengthMetrics
from harness.execution.run import execute
from harness.records.frames import load
from harness.records.store import (
    ClaimLostError,
    NotAStoreError,
    Owner,
    Store,
    StoreAccessError,
    StoreCorruptError,
    StoreError,
    StoreFullError,
)
from harness.records.store.schema import SCHEMA_VERSION

# the smoke preset evaluates 8 samples per scale
METRICS = [("train" if n <= 5 else "test", LengthMetrics(n, float(n), 8, 4, 8, 2)) for n in range(1, 9)]
PROVENANCE = {"commit": "t", "device": "cpu", "torch": "t", "pezoo": "p"}
DONE = {"final_loss": 0.1, "train_seconds": 1.0, "eval_seconds": 1.0, "n_params": {"total": 1, "pe": 0}}


def smoke(pe="rope", seed=0):
    return preset_config("smoke", pe=pe, task="copy", seed=seed)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat: the process's start time in clock ticks after boot."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except OSError:
        return None


def owner_of(pid: int, **changes) -> Owner:
    """An owner on this machine for process ``pid`` (as that process would record itself)."""
    return replace(Owner.this_process(), pid=pid, start=start_ticks(pid), **changes)


@pytest.fixture
def other_process():
    """A live process on this machine that is not this one."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # exited and reaped: its pid names no process
    return proc.pid


# -- claims -----------------------------------------------------------------------------


def test_a_run_held_by_a_live_process_is_refused_and_left_alone(tmp_path, other_process):
    cfg = smoke()
    with Store(tmp_path / "s.sqlite") as store:
        them = owner_of(other_process.pid)
        assert store.claim(cfg, {"commit": "them"}, them).taken
        before = store.run(cfg.run_id())
        claim = store.claim(cfg, {"commit": "us"})
        assert claim.status == "busy" and not claim.taken
        assert claim.holder.startswith(f"claimed by {socket.gethostname()}:{other_process.pid} since ")
        assert store.run(cfg.run_id()) == before  # not reset, not re-owned
        # our result for a run we do not hold is refused, and nothing is written
        with pytest.raises(ClaimLostError, match=f"{other_process.pid}"):
            store.finish(cfg.run_id(), METRICS, **DONE)
        assert store.mark(cfg.run_id(), "failed", "boom") is False
        assert store.run(cfg.run_id()) == before and store.metrics(cfg.run_id()) == []
        # the holder records it
        assert store.finish(cfg.run_id(), METRICS, **DONE, owner=them) is True
        assert store.status(cfg.run_id()) == "finished"


def test_a_finished_run_is_never_reset_and_keeps_its_metrics(tmp_path):
    cfg = smoke()
    with Store(tmp_path / "s.sqlite") as store:
        store.start(cfg, {"commit": "t"})
        assert store.finish(cfg.run_id(), METRICS, **DONE) is True
        finished = store.run(cfg.run_id()), store.metrics(cfg.run_id())
        assert len(finished[1]) == 8 and finished[0]["owner"] is None  # the claim is released
        assert store.claim(cfg, {"commit": "again"}).status == "finished"
        with pytest.raises(StoreError, match="finished"):
            store.start(cfg, {"commit": "again"})
        assert store.finish(cfg.run_id(), METRICS[:2], **{**DONE, "final_loss": 9.0}) is False
        assert store.mark(cfg.run_id(), "failed", "boom") is False
        assert store.mark(cfg.run_id(), "interrupted", "killed") is False
        assert (store.run(cfg.run_id()), store.metrics(cfg.run_id())) == finished


@pytest.mark.parametrize(
    "who",
    ["dead pid", "pid reused by another process", "before a reboot", "unknown (schema 1)", "zombie"],
)
def test_a_claim_whose_process_is_gone_is_taken_over(tmp_path, other_process, who):
    cfg = smoke()
    path = tmp_path / "s.sqlite"
    zombie = None
    if who == "dead pid":
        gone = replace(Owner.this_process(), pid=dead_pid(), start=None)
    elif who == "pid reused by another process":  # the pid runs, but started after the claim
        gone = owner_of(other_process.pid)
        gone = replace(gone, start=(gone.start or 0) - 1) if gone.start is not None else None
        if gone is None:
            pytest.skip("no /proc: process start times are unknown")
    elif who == "before a reboot":
        gone = owner_of(other_process.pid, boot="an-earlier-boot")
    elif who == "zombie":  # killed, not yet reaped by its parent
        zombie = subprocess.Popen([sys.executable, "-c", "pass"])
        deadline = time.time() + 30
        while not Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            assert time.time() < deadline
            time.sleep(0.05)
        gone = owner_of(zombie.pid)
    else:
        gone = owner_of(other_process.pid)
    with Store(path) as store:
        assert store.claim(cfg, {"commit": "gone"}, gone).taken
    if who == "before a reboot":  # its last heartbeat came before this machine booted
        with sqlite3.connect(path) as db:
            db.execute("UPDATE runs SET heartbeat=?", (boot_time() - 60,))
    if who == "unknown (schema 1)":
        with sqlite3.connect(path) as db:  # a running row as a schema-1 pezoo left it: no owner
            db.execute("UPDATE runs SET owner=NULL, heartbeat=NULL")
    with Store(path) as store:
        claim = store.claim(cfg, {"commit": "us"})
        assert claim.taken and claim.holder.startswith("claimed by")  # says whose claim it took over
        assert store.run(cfg.run_id())["owner"]["pid"] == os.getpid()
        assert store.finish(cfg.run_id(), METRICS, **DONE) is True
    if zombie is not None:
        zombie.wait()


def test_held_by_others_lists_the_runs_other_live_processes_train(tmp_path, other_process):
    mine, theirs, gone, done = (smoke(seed=s) for s in range(4))
    with Store(tmp_path / "s.sqlite") as store:
        assert store.claim(mine, {"commit": "us"}).taken
        assert store.claim(theirs, {"commit": "them"}, owner_of(other_process.pid)).taken
        assert store.claim(gone, {"commit": "gone"}, owner_of(dead_pid())).taken
        assert store.claim(done, {"commit": "them"}, owner_of(other_process.pid)).taken
        store.finish(done.run_id(), METRICS, **DONE, owner=owner_of(other_process.pid))
        # ours, a dead process's and a finished run are not held elsewhere
        assert store.held_by_others() == {theirs.run_id(): f"{socket.gethostname()}:{other_process.pid}"}


def test_lapsed_lists_the_running_runs_whose_process_is_gone(tmp_path, other_process):
    mine, theirs, gone, failed = (smoke(seed=s) for s in range(4))
    with Store(tmp_path / "s.sqlite") as store:
        assert store.claim(mine, {"commit": "us"}).taken
        assert store.claim(theirs, {"commit": "them"}, owner_of(other_process.pid)).taken
        assert store.claim(gone, {"commit": "gone"}, owner_of(dead_pid())).taken
        assert store.claim(failed, {"commit": "us"}).taken
        store.mark(failed.run_id(), "failed", "boom")
        assert store.lapsed() == {gone.run_id()}
        assert store.status(gone.run_id()) == "running"  # reading it changes nothing


def boot_time() -> float:
    """When this machine booted (``btime`` in /proc/stat)."""
    try:
        text = Path("/proc/stat").read_text()
    except OSError:
        pytest.skip("no /proc/stat: the boot time is unknown")
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith("btime ")))


def test_a_live_claim_from_another_machine_of_the_same_name_stands(tmp_path):
    # cloned VMs, containers named alike: the same host name, another boot id, a fresh heartbeat
    cfg = smoke()
    twin = replace(Owner.this_process(), pid=4242, start=123, boot="another-machine-s-boot-id")
    with Store(tmp_path / "s.sqlite") as store:
        assert store.claim(cfg, {"commit": "twin"}, twin).taken
        claim = store.claim(cfg, {"commit": "us"})
        assert claim.status == "busy" and f"{socket.gethostname()}:4242" in claim.holder
        assert store.run(cfg.run_id())["owner"]["boot"] == "another-machine-s-boot-id"
        assert store.held_by_others() == {cfg.run_id(): f"{socket.gethostname()}:4242"}
        store.lease_seconds = 0.2  # its heartbeat stops: the lease lapses, as for any other machine
        time.sleep(0.3)
        assert store.claim(cfg, {"commit": "us"}).taken


def test_claims_from_another_machine_lapse_with_their_heartbeat(tmp_path):
    cfg = smoke()
    remote = Owner("some-other-host.example", 4242, 123, "their-boot", "pid:[1]")
    with Store(tmp_path / "s.sqlite") as store:
        assert store.claim(cfg, {"commit": "remote"}, remote).taken
        claim = store.claim(cfg, {"commit": "us"})
        assert claim.status == "busy" and "some-other-host.example:4242" in claim.holder
        assert "last heartbeat" in claim.holder
        store.heartbeat(remote)
        store.lease_seconds = 0.2
        time.sleep(0.3)
        assert store.claim(cfg, {"commit": "us"}).taken  # no heartbeat for longer than the lease


def test_keep_alive_refreshes_this_process_claims(tmp_path):
    cfg = smoke()
    with Store(tmp_path / "s.sqlite") as store:
        store.start(cfg, {"commit": "t"})
        first = store.run(cfg.run_id())["heartbeat"]
        with store.keep_alive(every=0.05):
            time.sleep(0.5)
        assert store.run(cfg.run_id())["heartbeat"] > first + 0.1


def test_execute_skips_a_run_another_process_trains(tmp_path, other_process):
    cfg = smoke()
    notices = []
    with Store(tmp_path / "s.sqlite") as store:
        store.claim(cfg, {"commit": "them"}, owner_of(other_process.pid))
        before = store.run(cfg.run_id())
        outcome = execute(cfg, store, torch.device("cpu"), notice=notices.append)
        assert outcome.status == "claimed" and str(other_process.pid) in outcome.error
        assert store.run(cfg.run_id()) == before
    assert any("skipped" in n for n in notices)
    assert not (tmp_path / "checkpoints").exists()  # nothing was trained


# -- schema 1 -> 2 ----------------------------------------------------------------------

SCHEMA_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (run_id TEXT PRIMARY KEY, pe TEXT NOT NULL, task TEXT NOT NULL, seed INTEGER NOT NULL,
    preset TEXT NOT NULL, config TEXT NOT NULL, status TEXT NOT NULL, error TEXT, provenance TEXT NOT NULL,
    n_params INTEGER, pe_params INTEGER, final_loss REAL, train_seconds REAL, eval_seconds REAL,
    started_at REAL NOT NULL, finished_at REAL);
CREATE TABLE metrics (run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE, split TEXT NOT NULL,
    length INTEGER NOT NULL, token_length REAL NOT NULL, n INTEGER NOT NULL, exact_match REAL NOT NULL,
    token_accuracy REAL NOT NULL, PRIMARY KEY (run_id, length));
CREATE TABLE diagnostics (run_id TEXT PRIMARY KEY REFERENCES runs(run_id) ON DELETE CASCADE, body TEXT NOT NULL);
INSERT INTO meta VALUES ('schema_version', '1');
"""


def schema_1_store(path: Path) -> str:
    """A store as pezoo wrote it before claims (schema 1), with one finished run; its run id."""
    cfg = smoke()
    db = sqlite3.connect(path)
    db.executescript(SCHEMA_1)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(
        "INSERT INTO runs VALUES (?, 'rope', 'copy', 0, 'smoke', ?, 'finished', NULL, ?,"
        " 1, 0, 0.1, 1.0, 1.0, 5.0, 6.0)",
        (cfg.run_id(), json.dumps(cfg.to_dict()), json.dumps({"commit": "old"})),
    )
    db.executemany(
        "INSERT INTO metrics VALUES (?, 'test', ?, ?, 4, 0.5, 0.25)", [(cfg.run_id(), n, float(n)) for n in range(1, 9)]
    )
    db.commit()
    db.close()
    return cfg.run_id()


def test_a_schema_1_store_is_read_as_it_is_and_migrated_by_a_writer(tmp_path):
    path = tmp_path / "old.sqlite"
    run_id = schema_1_store(path)
    before = digest(path)
    df = load(path)  # a reader: no migration
    assert len(df) == 8 and set(df["status"]) == {"finished"}
    with Store(path, readonly=True) as store:
        assert store.run(run_id)["owner"] is None
    assert digest(path) == before
    with Store(path) as store:  # a writer migrates, in place
        assert store.status(run_id) == "finished" and len(store.metrics(run_id)) == 8
        assert store.claim(smoke(), {"commit": "new"}).status == "finished"
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (str(SCHEMA_VERSION),)
        columns = [r[1] for r in db.execute("PRAGMA table_info(runs)")]
    assert columns[-2:] == ["owner", "heartbeat"]
    assert load(path).equals(df)


# -- a store written by the code before the store was split ----------------------------

SCHEMA_2_DUMP = Path(__file__).parent / "stores" / "schema-2.sql"
"""``sqlite3 .dump`` of a store written through the ``Store`` API of the single-module
harness/store.py (schema 2): one finished run with diagnostics, one running run whose
process is gone, one failed run."""


def test_a_store_written_before_the_split_opens_and_reads_as_it_did(tmp_path):
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA_2_DUMP.read_text())
    done, running, failed = smoke(seed=0).run_id(), smoke("alibi", 1).run_id(), smoke("nope", 2).run_id()
    before = digest(path)
    with Store(path, readonly=True) as store:
        assert [r["status"] for r in store.runs()] == ["finished", "running", "failed"]
        record = store.record(done)
        assert record is not None and record.problems() == []
        assert [m.length for _, m in record.metrics] == list(range(1, 9))
        assert (record.n_params, record.pe_params, record.final_loss) == (1000, 10, 0.125)
        assert record.diagnostics is not None and record.diagnostics["tokens"] == ["1", "2"]
        assert store.record(running) is None and store.record(failed) is None
    assert digest(path) == before  # a reader changes nothing
    with Store(path) as store:  # a writer: the claim of the gone process is taken over, then finished
        assert store.lapsed() == {running}
        assert store.claim(smoke(seed=0), PROVENANCE).status == "finished"
        assert store.claim(smoke("alibi", 1), PROVENANCE).taken
        assert store.finish(running, METRICS, **DONE) is True
        assert store.record(running).problems() == []
        assert store.record(done).to_dict()["timings"]["finished_at"] == record.finished_at


# -- opening: what is wrong -------------------------------------------------------------


def finished_store(path: Path, runs: int = 3) -> None:
    with Store(path) as store:
        for seed in range(runs):
            cfg = smoke(seed=seed)
            store.start(cfg, PROVENANCE)
            store.finish(cfg.run_id(), METRICS, **DONE)


SWEEP = 'preset = "smoke"\npe = ["rope"]\ntask = "copy"\nseeds = 2\n'


def read_commands(store: Path, out: Path) -> dict[str, list[str]]:
    """The commands that only read a store."""
    sweep = out.parent / "sweep.toml"
    if not sweep.exists():
        sweep.write_text(SWEEP)
    return {
        "results": ["results", "--store", str(store), "--format", "csv"],
        "sweep plan": ["sweep", "plan", str(sweep), "--store", str(store)],
        "leaderboard export": ["leaderboard", "export", "--store", str(store), "--out", str(out)],
    }


BENCH = ["bench", "--pe", "rope", "--task", "copy", "--preset", "smoke", "--device", "cpu", "--steps", "3"]


def test_a_sqlite_file_that_is_not_a_store_is_refused_unchanged(tmp_path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE notes (body TEXT)")
        db.execute("INSERT INTO notes VALUES ('mine')")
    db.close()
    before = digest(path)
    for name, args in read_commands(path, tmp_path / "out").items():
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1, (name, result.output)
        assert "not a pezoo store" in result.output and "notes" in result.output, name
    result = CliRunner().invoke(main, [*BENCH, "--store", str(path)])
    assert result.exit_code == 1 and "not a pezoo store" in result.output
    with pytest.raises(NotAStoreError):
        Store(path)
    assert digest(path) == before  # no tables added, not switched to WAL
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
def test_a_store_s_own_sqlite_files_are_refused_as_stores(tmp_path, suffix):
    """An idle store keeps an empty -wal beside it, which a typo or tab completion offers
    as --store. Taken for a new store, its runs were wiped at the real store's next
    checkpoint, and two processes on the pair left the real store unreadable."""
    path = tmp_path / "pezoo.sqlite"
    finished_store(path)
    companion = tmp_path / f"pezoo.sqlite{suffix}"
    companion.write_bytes(b"")
    before = digest(path)
    result = CliRunner().invoke(main, [*BENCH, "--store", str(companion)])
    assert result.exit_code == 1, result.output
    assert f"SQLite's {suffix} file of the store {path}" in result.output
    assert f"Point --store at {path}" in result.output
    for name, args in read_commands(companion, tmp_path / "out").items():
        assert "is SQLite's" in CliRunner().invoke(main, args).output, name
    assert companion.read_bytes() == b"" and digest(path) == before
    with Store(path) as store:
        assert len(store.runs()) == 3
    lone = tmp_path / "elsewhere.sqlite-wal"  # no database beside it: a name like any other
    with Store(lone) as store:
        assert store.runs() == []


def test_switching_a_new_store_to_wal_waits_when_another_opener_holds_it():
    """SQLite answers "database is locked" at once, without the busy timeout, to a
    journal-mode switch racing other processes opening the same new store; it is retried
    until the timeout, as every other write waits. Other errors are not retried."""
    from harness.records.store.connection import _wal_mode

    class Racing:
        def __init__(self, failures, error="database is locked"):
            self.failures, self.error, self.calls = failures, error, 0

        def execute(self, sql):
            assert sql == "PRAGMA journal_mode=WAL"
            self.calls += 1
            if self.calls <= self.failures:
                raise sqlite3.OperationalError(self.error)

    db = Racing(3)
    _wal_mode(db)
    assert db.calls == 4
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        _wal_mode(Racing(1, "disk I/O error"))
    stuck = Racing(10**9)
    start = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        _wal_mode(stuck, timeout=0.3)
    assert 0.3 <= time.monotonic() - start < 5 and stuck.calls > 1


def test_a_store_damaged_past_its_first_pages_is_refused_before_training(tmp_path):
    path = tmp_path / "s.sqlite"
    finished_store(path, runs=60)  # several pages of runs and metrics
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) // page > 8
    for p in range(len(data) // page - 3, len(data) // page):  # the last b-tree pages, far past the header
        data[p * page + 8 : (p + 1) * page - 8] = bytes((i * 37 + p) % 251 for i in range(page - 16))
    path.write_bytes(bytes(data))
    before = digest(path)
    with pytest.raises(StoreCorruptError, match="corrupt") as err:
        Store(path)
    message = str(err.value)
    assert "backup" in message and "delete" not in message.lower() and "move it aside" not in message
    result = CliRunner().invoke(main, [*BENCH, "--store", str(path)])
    assert result.exit_code == 1 and "corrupt" in result.output and "backup" in result.output
    assert not (tmp_path / "checkpoints").exists()  # refused before any training
    assert digest(path) == before


def test_a_full_disk_is_a_typed_error_and_writes_nothing(tmp_path):
    cfg = smoke()
    with Store(tmp_path / "s.sqlite") as store:
        store.start(cfg, {"commit": "t"})
        pages = store._db.execute("PRAGMA page_count").fetchone()[0]
        store._db.execute(f"PRAGMA max_page_count={pages}")  # SQLite then fails writes as on a full disk
        big = [("test", LengthMetrics(n, float(n), 4, 2, 4, 1)) for n in range(1, 2000)]
        with pytest.raises(StoreFullError, match="disk is full"):
            store.finish(cfg.run_id(), big, **DONE)
        assert store.status(cfg.run_id()) == "running" and store.metrics(cfg.run_id()) == []


@contextlib.contextmanager
def tmpfs(size: str):
    """A small tmpfs (root only); skips where mounting is not allowed."""
    where = Path(tempfile.mkdtemp(prefix="pezoo-tmpfs-"))
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                                           capture_output=True).returncode:  # fmt: skip
        where.rmdir()
        pytest.skip("needs to mount a tmpfs (root)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
        where.rmdir()


def fill(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError:
        pass
    finally:
        os.close(fd)


def test_a_real_full_disk_and_a_read_only_filesystem_say_so(tmp_path):
    with tmpfs("512k") as disk:
        path = disk / "s.sqlite"
        finished_store(path)
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        with pytest.raises(StoreAccessError, match="read-only filesystem"):
            Store(path)
        for name, args in read_commands(path, tmp_path / "out").items():
            result = CliRunner().invoke(main, args)
            assert result.exit_code == 0, (name, result.output)
        subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)
        fill(disk / "filler")
        result = CliRunner().invoke(main, [*BENCH, "--store", str(path)])
        assert result.exit_code == 1 and "disk is full" in result.output, result.output
        with pytest.raises(StoreFullError):
            Store(disk / "new.sqlite")
        assert len(load(path)) == 3 * 8  # the store still holds every finished run


@pytest.fixture
def shared_dir():
    """A folder another user may enter (the read-only tests run as ``nobody`` when root,
    because root writes read-only files anyway)."""
    folder = Path(tempfile.mkdtemp(prefix="pezoo-perm-"))
    folder.chmod(0o777)
    yield folder
    for p in [folder, *folder.rglob("*")]:
        p.chmod(0o777)
    shutil.rmtree(folder)


@contextlib.contextmanager
def unprivileged():
    if os.geteuid() != 0:
        yield
        return
    try:
        os.seteuid(65534)
    except PermissionError:
        pytest.skip("runs as root and cannot drop privileges")
    try:
        yield
    finally:
        os.seteuid(0)


@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_read_only_store_is_read_and_says_why_it_cannot_be_written(shared_dir, what):
    folder = shared_dir / "runs"
    folder.mkdir()
    path = folder / "pezoo.sqlite"
    finished_store(path)
    out = shared_dir / "out"
    out.mkdir()
    for p in (path, out):
        p.chmod(0o777)
    if what == "file":
        path.chmod(0o444)
        folder.chmod(0o777)
        expected = "the file is read-only"
    else:
        path.chmod(0o666)
        folder.chmod(0o555)
        expected = f"its folder {folder} is not writable"
    before = digest(path)
    with unprivileged():
        with pytest.raises(StoreAccessError, match=expected):
            Store(path)
        result = CliRunner().invoke(main, [*BENCH, "--store", str(path)])
        assert result.exit_code == 1 and expected in result.output
        assert "move it aside" not in result.output and "not a readable" not in result.output
        for name, args in read_commands(path, out).items():
            result = CliRunner().invoke(main, args)
            assert result.exit_code == 0, (name, result.output)
        assert len(load(path)) == 3 * 8
        # refusing and reading left no side file this user cannot write: SQLite made read-only
        # -wal/-shm files beside a read-only store, which then blocked the advised fix
        for side in folder.glob("pezoo.sqlite-*"):
            assert os.access(side, os.W_OK), side
    assert digest(path) == before
    assert len(list(out.glob("*.jsonl"))) == 1  # export read the read-only store
    if what == "file":  # the fix the message gives works
        path.chmod(0o666)
        with unprivileged():
            Store(path).close()


def test_a_store_under_a_file_says_the_file_is_not_a_folder(tmp_path):
    """`pezoo leaderboard import --store a-file/x.sqlite` said "opening it failed
    (FileExistsError: [Errno 17] File exists: 'a-file')"."""
    blocker = tmp_path / "a-file"
    blocker.write_text("kept")
    for path in (blocker / "pezoo.sqlite", blocker / "runs" / "pezoo.sqlite"):
        with pytest.raises(StoreAccessError) as err:
            Store(path)
        assert str(err.value) == f"results store {path} cannot be created: {blocker} is not a folder"
    assert blocker.read_text() == "kept" and sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_a_store_this_user_may_not_read_says_permission_denied(shared_dir):
    path = shared_dir / "pezoo.sqlite"
    finished_store(path)
    path.chmod(0o000)
    with unprivileged():
        if os.access(path, os.R_OK, effective_ids=os.access in os.supports_effective_ids):
            pytest.skip("this user reads any file")
        for readonly in (True, False):
            with pytest.raises(StoreAccessError, match="permission denied: this user cannot read it") as err:
                Store(path, readonly=readonly)
            assert "can read it" not in str(err.value)
        result = CliRunner().invoke(main, ["results", "--store", str(path)])
        assert result.exit_code == 1 and "permission denied" in result.output


_FILLS_PAST_THE_LIMIT = """
from pathlib import Path
from harness.config import preset_config
from harness.records.files import WriteError, write_atomically
from harness.records.store import Store, StoreError

with Store("s.sqlite") as store:
    try:
        for seed in range(2000):
            store.claim(preset_config("smoke", pe="rope", task="copy", seed=seed), {"commit": "x" * 2000})
    except StoreError as exc:
        print("store:", exc)
try:
    write_atomically(Path("big.bin"), lambda f: f.write(b"x" * 200_000))
except WriteError as exc:
    print("write:", exc)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE as on Linux")
def test_a_write_stopped_by_the_file_size_limit_says_so(tmp_path):
    # the third probe: `ulimit -f` read "I/O error ... (disk I/O error); is the disk healthy?"
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", _FILLS_PAST_THE_LIMIT], cwd=tmp_path, env=env, preexec_fn=limit,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    store, write = done.stdout.splitlines()
    assert store.startswith("store: ") and "file size limit (ulimit -f: 64 KiB)" in store, store
    assert "is the disk healthy" not in store and "Nothing half-written was kept" in store
    assert write.startswith("write: could not write") and "file size limit (ulimit -f: 64 KiB)" in write
