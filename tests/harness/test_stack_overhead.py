"""benchmarks/stack_overhead.py: the host's cost per run-step alone, in threads and stacked,
measured side by side; a short run on CPU goes end to end and every run-step was stacked."""

from __future__ import annotations

from benchmark_scripts import load


def test_a_short_measurement_goes_end_to_end_on_cpu():
    bench = load("stack_overhead")
    result = bench.measure("cpu", runs=2, steps=6)
    assert result["member_steps"] == 12 and result["dissolved"] is None and result["backend"] == "eager"
    ms = result["ms_per_run_step"]
    assert all(ms[k] > 0 for k in ("alone", "threads", "stacked", "stacked_pass"))
    assert ms["stacked_pass"] <= ms["stacked"]  # the passes run one at a time under the lock: a share of the wall
    text = bench.render(result)
    assert "| one at a time |" in text and "passes for 12 run-steps, eager attention" in text
