"""benchmarks/device_check.py, the GPU session's one prepared call: its dry run goes end to end
on CPU and writes the report; a part that runs past its timeout costs only that part."""

from __future__ import annotations

import pytest
from benchmark_scripts import load


def _module():
    return load("device_check")


@pytest.mark.slow
def test_dry_run_goes_end_to_end_on_cpu(tmp_path):
    dc = _module()
    # every part but ``tests`` (pytest inside pytest): in this process, toy sizes
    parts = "env,loop,loop_gpu,example,pack,stack_equal,stack_host,group_equal,gpu20k"
    assert dc.main(["--dry-run", "--out", str(tmp_path), "--only", parts]) == 0
    report = (tmp_path / "cuda-gpu-cpu-dry-run-2.md").read_text()
    for part in parts.split(","):
        assert f"## {part} " in report
    assert "not measured" not in report and "smoke/nope" in report
    assert "exit 0" in report and "270-run board" in report
    assert "grouped threads over packed" in report and "whole-step graphs over packed" in report
    assert "stacked passes over packed" in report and "Stacked over grouped threads" in report
    assert "nope/copy s1" in report and "dissolved): [(" in report and "'eager', None)" in report
    assert "4 of 4 runs gave the same record in the group as alone" in report
    assert "trained alone a second time" in report and "the same record as the first" in report
    assert (tmp_path / "cuda-gpu-cpu-dry-run-2.json").exists()


def test_a_part_past_its_timeout_is_reported_and_the_rest_goes_on(tmp_path, monkeypatch):
    dc = _module()
    monkeypatch.setattr(dc, "PARTS", (("env", 0.01, 0.01), ("loop", 1, 1)))
    md = dc.orchestrate(tmp_path, dry=False, budget=0.5, only=None)
    text = md.read_text()
    assert "## env" in text and "timed out after 0 s" in text
    assert "## loop" in text and "skipped:" in text  # the budget was spent


def test_unknown_part_is_refused():
    with pytest.raises(SystemExit):
        _module().main(["--only", "lopp"])


def test_a_hung_process_comes_back_with_where_its_threads_waited():
    """A part or bench that hangs (the grouped PRISM bench of round 2's first call) reports
    each thread's innermost frames instead of a bare timeout; the bench's watchdog boot
    hands its arguments to the CLI unchanged."""
    import subprocess
    import sys

    dc = _module()
    hang = (
        "import faulthandler, threading, time; faulthandler.dump_traceback_later(0.5, exit=True); "
        "lock = threading.Lock(); lock.acquire(); threading.Thread(target=lock.acquire, name='waiter').start(); "
        "time.sleep(30)"
    )
    proc = subprocess.run([sys.executable, "-c", hang], capture_output=True, text=True, timeout=25, check=False)
    assert proc.returncode != 0
    stacks = dc.hang_report(proc.stdout + proc.stderr)
    assert stacks is not None and stacks[0].startswith("Timeout (")
    assert sum(line.startswith(("Thread 0x", "Current thread")) for line in stacks) >= 2  # both threads
    assert any("threading.py" in line for line in stacks)  # the waiter's frame
    assert dc.hang_report("an ordinary failure\nTraceback ...") is None

    boot = subprocess.run([sys.executable, "-c", dc._BENCH_BOOT, "60", "bench", "--help"], cwd=dc.ROOT,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert boot.returncode == 0 and "--time-limit" in boot.stdout
