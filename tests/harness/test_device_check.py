"""benchmarks/device_check.py, the GPU session's one prepared call: its dry run goes end to end
on CPU and writes the report; a part that runs past its timeout costs only that part."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "device_check.py"


def _module():
    spec = importlib.util.spec_from_file_location("device_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_dry_run_goes_end_to_end_on_cpu(tmp_path):
    dc = _module()
    # every part but ``tests`` (pytest inside pytest): in this process, toy sizes
    assert (
        dc.main(["--dry-run", "--out", str(tmp_path), "--only", "env,loop,loop_gpu,example,pack,group_equal,gpu20k"])
        == 0
    )
    report = (tmp_path / "cuda-gpu-cpu-dry-run-2.md").read_text()
    for heading in ("## env", "## loop", "## example", "## pack", "## group_equal", "## gpu20k"):
        assert heading in report
    assert "not measured" not in report and "smoke/nope" in report
    assert "exit 0" in report and "270-run board" in report
    assert "grouped threads over packed" in report and "whole-step graphs over packed" in report
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
