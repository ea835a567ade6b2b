"""`pezoo perf` at toy sizes: every section runs and its output has the right shape.

No wall-clock assertions: timings are whatever the machine gives; only structure,
bookkeeping (ratios, counts, verdicts) and the command's behaviour are checked.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from click.testing import CliRunner

from harness.cli import main
from harness.perf import (
    SECTIONS,
    PerfGrid,
    Timing,
    allocator_peak,
    best_backend_rows,
    grid_from,
    measure_decode,
    measure_memory_one,
    render,
    run_perf,
    time_interleaved,
)

MEASURED_HERE = tuple(s for s in SECTIONS if s not in ("compile", "gpu"))
"""Every section but ``compile``, whose inductor compilations take minutes per encoding on a
CPU: tests/harness/test_perf_compile.py covers it with dynamo's eager backend; and ``gpu``,
which trains a few steps per encoding: test_gpu_section_runs_on_cpu has it on its own."""

TOY = grid_from(
    "quick",
    sections=MEASURED_HERE,
    repeats=2,
    warmup=1,
    presets=("smoke",),
    encodings=("nope", "alibi", "prism"),
    backends=("eager", "sdpa"),
    memory_lengths=(48,),
    memory_encodings=("nope", "alibi"),
    memory_backends=("sdpa",),
    alloc_lengths=(64, 32),
    alloc_encodings=("nope", "alibi"),
    alloc_backends=("sdpa",),
    decode_length=18,
    decode_prompt=6,
    decode_batch=2,
    decode_encodings=("nope", "prism"),
    prism_supports=(16, 32),
    prism_scan_tokens=4,
    prism_cursors=4,
    prism_lengths=(8, 12),
    prism_length_preset="smoke",
)


@pytest.fixture(scope="module")
def toy_report():
    return run_perf(TOY, torch.device("cpu"))


def test_timing_summary_is_median_and_quartiles():
    t = Timing.of([5.0, 1.0, 4.0, 2.0, 3.0], [10.0, 30.0, 20.0])
    # inclusive quartiles of 1..5 are 2 and 4
    assert (t.median_ms, t.q1_ms, t.q3_ms, t.min_ms, t.rounds, t.cpu_ms) == (3.0, 2.0, 4.0, 1.0, 5, 20.0)
    assert t.spread == pytest.approx(2.0 / 3.0)


def test_time_interleaved_warms_up_then_rotates_the_order():
    calls: list[str] = []
    candidates = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    timings = time_interleaved(candidates, repeats=4, warmup=2)
    assert calls[:6] == ["a", "a", "b", "b", "c", "c"]
    rounds = [calls[6 + 3 * r : 9 + 3 * r] for r in range(4)]
    assert rounds == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert {name: t.rounds for name, t in timings.items()} == {"a": 4, "b": 4, "c": 4}


def test_best_backend_and_verdicts():
    rows = [
        {"preset": "p", "pe": "nope", "backend": "x", "ratio_to_nope": 1.0, "target": None},
        {"preset": "p", "pe": "nope", "backend": "y", "ratio_to_nope": 1.3, "target": None},
        {"preset": "p", "pe": "rope", "backend": "x", "ratio_to_nope": 1.2, "target": 1.15},
        {"preset": "p", "pe": "rope", "backend": "y", "ratio_to_nope": 1.1, "target": 1.15},
        {"preset": "p", "pe": "prism", "backend": "x", "ratio_to_nope": 2.6, "target": 2.5},
    ]
    best = {r["pe"]: r for r in best_backend_rows(rows)}
    assert (best["nope"]["backend"], best["nope"]["meets_target"]) == ("x", None)
    assert (best["rope"]["backend"], best["rope"]["meets_target"]) == ("y", True)
    assert best["prism"]["meets_target"] is False


def test_grid_keys_are_strict():
    with pytest.raises(TypeError, match=r"valid: .*repeats"):
        grid_from("default", repeat=3)
    with pytest.raises(ValueError, match="unknown perf section"):
        PerfGrid(sections=("train", "speed"))


def test_train_rows_cover_the_grid(toy_report):
    rows = toy_report["train"]
    assert {(r["pe"], r["backend"]) for r in rows} == {(p, b) for p in TOY.encodings for b in TOY.backends}
    nope = [r["ratio_to_nope"] for r in rows if r["pe"] == "nope"]
    assert min(nope) == 1.0  # the reference is nope on its fastest backend
    for r in rows:
        b, s = r["batch"]
        assert r["tokens_per_s"] == pytest.approx(b * s / (r["median_ms"] / 1000))
        assert r["median_ms"] > 0 and r["spread"] >= 0
    assert {r["pe"]: r["target"] for r in rows} == {"nope": None, "alibi": 1.15, "prism": 2.5}


def test_memory_rows_measure_each_length_in_a_subprocess(toy_report):
    rows = toy_report["memory"]
    assert [(r["pe"], r["backend"], r["length"]) for r in rows] == [("nope", "sdpa", 48), ("alibi", "sdpa", 48)]
    assert all(r["ok"] and r["peak_mib"] >= 0 and r["baseline_mib"] > 0 for r in rows), rows


def test_an_infeasible_memory_measurement_is_reported_not_raised():
    row = measure_memory_one(
        "nope", "sdpa", 64, dims=(64, 1, 8), device=torch.device("cpu"), cap_gib=0.05, threads=1
    )  # 50 MiB of address space, less than torch already maps: the first allocation fails
    assert row["ok"] is False and row["error"]


def test_allocator_peak_is_the_largest_live_set_on_cpu():
    def fn():
        a = torch.empty(1_000_000)  # 4 MB live
        b = torch.empty(500_000)  # 6 MB live: the peak
        del a
        c = torch.empty(250_000)  # 3 MB live
        return b, c

    kept = torch.empty(2_000_000)  # allocated before the pass: not counted
    peak, how = allocator_peak(fn, torch.device("cpu"))
    assert peak == 6_000_000 and "profiler" in how
    del kept


def test_alloc_rows_cover_every_length_with_ratios_to_nope(toy_report):
    rows = toy_report["alloc"]
    assert [(r["pe"], r["backend"], r["length"]) for r in rows] == [
        ("nope", "sdpa", 32),
        ("nope", "sdpa", 64),
        ("alibi", "sdpa", 32),
        ("alibi", "sdpa", 64),
    ]
    assert all(r["ok"] and r["peak_mib"] > 0 and r["pass"] == "forward+backward" for r in rows), rows
    nope = {r["length"]: r["peak_mib"] for r in rows if r["pe"] == "nope"}
    for r in rows:
        assert r["ratio_to_nope"] == pytest.approx(r["peak_mib"] / nope[r["length"]])
        assert r["target"] is None  # targets are set for flex only
    alibi = {r["length"]: r["peak_mib"] for r in rows if r["pe"] == "alibi"}
    assert alibi[64] > nope[64]  # sdpa materialises ALiBi's (h, S, S) bias


def test_decode_rows_generate_the_whole_length_identically(toy_report):
    rows = toy_report["decode"]
    assert [r["pe"] for r in rows] == ["nope", "prism"]
    for r in rows:
        assert r["generated"] == TOY.decode_length - TOY.decode_prompt
        assert r["same_tokens"] is True  # the cache changes the cost, not the tokens
        assert r["speedup"] > 0 and math.isfinite(r["speedup"])


def test_prism_step_by_length(toy_report):
    rows = toy_report["prism"]["by_length"]
    assert [r["batch"][1] for r in rows] == [8, 12]
    for r in rows:
        assert r["prism_ratio"] == pytest.approx(r["prism_ms"] / r["nope_ms"])
        assert r["copy_over_prism"] == pytest.approx(r["copy_ms"] / r["prism_ms"])
        assert r["meets_target"] == (r["prism_ratio"] <= 2.0 and r["copy_over_prism"] <= 1.5)
    assert "PRISM training step at longer sequences" in render(toy_report)


def test_random_batch_is_seeded_and_labels_the_next_token():
    from harness.perf.prism import random_batch

    a, b = random_batch(3, 5, 11, torch.device("cpu")), random_batch(3, 5, 11, torch.device("cpu"))
    assert torch.equal(a.inputs, b.inputs) and a.inputs.shape == (3, 5)
    assert torch.equal(a.inputs[:, 1:], a.labels[:, :-1])
    assert int(a.inputs.max()) < 11 and bool(a.scored.all())


def test_prism_rows(toy_report):
    prism = toy_report["prism"]
    assert [r["support"] for r in prism["by_support"]] == [16, 32]
    assert "forward_backward_ratio" not in prism["by_support"][0]
    r = prism["by_support"][1]
    assert r["forward_backward_ratio"] == pytest.approx(
        r["forward_backward_ms"] / prism["by_support"][0]["forward_backward_ms"]
    )
    assert [r["tokens"] for r in prism["by_tokens"]] == [4, 8, 16]
    (comp,) = prism["components"]
    assert comp["variant"] == "default" and set(comp["parts"]) == {"gates", "scan", "streams"}
    assert comp["ratio_to_nope"] == pytest.approx(comp["step_ms"] / comp["nope_step_ms"])
    assert any(p["op"] == "prism.scan" for p in comp["profile"])


def test_report_is_json_with_provenance_and_renders(toy_report):
    again = json.loads(json.dumps(toy_report))
    assert again["schema_version"] == 1
    assert set(MEASURED_HERE) <= set(again)
    prov = again["provenance"]
    assert prov["commit"] and prov["device"].startswith("cpu") and prov["torch"] == torch.__version__
    assert prov["threads"] == 1
    text = render(toy_report)
    headers = ("training step", "peak memory", "peak allocated", "greedy decoding", "PRISM histogram scan", "| prism")
    for header in headers:
        assert header in text


def test_cli_prints_the_table_and_writes_json(tmp_path):
    out = tmp_path / "perf.json"
    args = ["perf", "--sections", "train", "--presets", "smoke", "--pe", "nope,rope", "--backends", "sdpa"]
    result = CliRunner().invoke(main, [*args, "--repeats", "1", "--device", "cpu", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "| rope" in result.output and "preset smoke" in result.output
    report = json.loads(out.read_text())
    assert [r["pe"] for r in report["train"]] == ["nope", "rope"] and "memory" not in report
    again = CliRunner().invoke(main, [*args, "--repeats", "1", "--device", "cpu", "--json", str(out)])
    assert again.exit_code == 0, again.output  # a report of its own is replaced


def test_cli_never_writes_its_json_over_a_file_that_is_no_report(tmp_path):
    # round six: --json overwrote a results store after measuring (the runs gone); a FIFO there
    # would block; each is refused before anything is measured
    import os

    store = tmp_path / "runs.sqlite"
    store.write_bytes(b"SQLite format 3\x00" + bytes(100))
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    args = ["perf", "--sections", "train", "--presets", "smoke", "--pe", "nope", "--backends", "sdpa", "--repeats", "1"]
    for out, said in ((store, "is no pezoo perf report: not overwritten"), (fifo, "FIFO")):
        result = CliRunner().invoke(main, [*args, "--device", "cpu", "--json", str(out)])
        assert result.exit_code == 2 and said in result.output and "| nope" not in result.output, result.output
    assert store.read_bytes().startswith(b"SQLite format 3")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pe", "ropee"], "Did you mean 'rope'"),
        (["--sections", "speed"], "unknown perf section"),
        (["--memory-lengths", "a,b"], "comma-separated integers"),
        # round six: empty lists were a ZeroDivisionError or IndexError after the banner, or empty tables
        (["--pe", ""], "--pe: an empty list"),
        (["--pe", ","], "--pe: an empty list"),
        (["--sections", "decode", "--decode-pe", ""], "--decode-pe: an empty list"),
        (["--sections", "prism", "--prism-supports", ",,"], "--prism-supports: an empty list"),
        (["--sections", "memory", "--memory-lengths", ",,"], "--memory-lengths: an empty list"),
        (["--sections", ""], "--sections: an empty list"),
        (["--precision", ""], "--precision: an empty list"),
    ],
)
def test_cli_rejects_bad_options(args, message):
    result = CliRunner().invoke(main, ["perf", *args])
    assert result.exit_code != 0 and message in result.output


TINY = ["--repeats", "1", "--device", "cpu", "--presets", "smoke", "--pe", "nope", "--backends", "sdpa",
        "--decode-pe", "nope", "--decode-length", "20", "--prism-supports", "2", "--prism-lengths", "8"]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [  # the third probe: tracebacks (one an 800 GB allocation), nan in a table, a run past a minute
        (["--sections", "decode", "--threads", "-1"], "threads (0: torch's default) must be from 0 to 1,024"),
        (["--sections", "prism", "--prism-supports", "0"], "a PRISM support must be from 1 to 65,536, got 0"),
        (["--sections", "decode", "--decode-length", "100000000000"], "must be from 13 to 65,536"),
        (["--sections", "train", "--batch-size", "0"], "0 is not in the range 1<=x<=4096"),
        (["--sections", "train", "--batch-size", "100000000"], "100000000 is not in the range 1<=x<=4096"),
        # round four: nan and inf were tracebacks, 0 and -1 measured with no cap at all
        (["--sections", "memory", "--memory-cap-gib", "nan"], "memory cap must be a finite number of GiB > 0, got nan"),
        (["--sections", "memory", "--memory-cap-gib", "inf"], "memory cap must be a finite number of GiB > 0, got inf"),
        (["--sections", "memory", "--memory-cap-gib", "0"], "memory cap must be a finite number of GiB > 0, got 0.0"),
    ],
    ids=["threads -1", "support 0", "decode length 1e11", "batch 0", "batch 1e8", "cap nan", "cap inf", "cap 0"],
)
def test_cli_refuses_sizes_out_of_bounds_saying_the_bounds(args, message):
    result = CliRunner().invoke(main, ["perf", *TINY, *args])
    assert result.exit_code == 2 and message in result.output, result.output
    rest = result.output.replace(message, "")  # the refusal may quote a nan it was given
    assert "Traceback" not in rest and "nan" not in rest


@pytest.mark.parametrize(
    ("args", "message"),
    [  # the fifth probe: tracebacks after the banner (or after whole sections), and runs of days
        (["--presets", "lm_smoke"], "Invalid value for --presets: preset 'lm_smoke' is a language-modelling preset"),
        (["--backends", "xformers"], "Invalid value for --backends: the xformers backend runs on CUDA tensors only"),
        (["--memory-backends", "xformers"], "Invalid value for --memory-backends: the xformers backend runs on CUDA"),
        (["--alloc-backends", "flexx"], "Invalid value for --alloc-backends: unknown attention backend 'flexx'"),
        (["--memory-pe", "alibii"], "Invalid value for --memory-pe: unknown encoding 'alibii'"),
        (["--memory-cap-gib", "1e308"], "the memory cap must be at most 1,048,576 GiB (1 PiB), got 1e+308"),
        (["--memory-cap-gib", "1e10"], "the memory cap must be at most 1,048,576 GiB (1 PiB), got 1e+10"),
        (["--repeats", "1000000000"], "--repeats must be at most 1,000 timed rounds, got 1,000,000,000"),
        (["--compile-lengths", "8,100000000"], "a compile length must be from 1 to 65,536, got 100,000,000"),
        (["--json", ""], "Invalid value for --json: an empty path"),
        (["--quick", "--full"], "--quick and --full choose two different grids"),  # the last given won silently
    ],
    ids=[
        "lm preset",
        "xformers train",
        "xformers memory",
        "alloc backend",
        "memory pe",
        "cap 1e308",
        "cap 1e10",
        "repeats 1e9",
        "compile length 1e8",
        "json empty",
        "quick and full",
    ],
)
def test_cli_refuses_before_measuring_what_it_cannot_measure(args, message, monkeypatch):
    monkeypatch.setattr("harness.perf.command.run_perf", lambda *a, **k: pytest.fail("measured"))
    result = CliRunner().invoke(main, ["perf", *TINY, *args])
    assert result.exit_code == 2 and message in result.output, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)


def test_windowed_decode_rows_generate_the_same_tokens_cached_and_not(toy_report):
    grid = grid_from(TOY, decode_length=60, decode_window=24, decode_encodings=("rope",), repeats=1)
    [row] = measure_decode(grid, torch.device("cpu"))
    assert row["window"] == 24 and row["generated"] == 60 - TOY.decode_prompt
    assert row["same_tokens"] is True  # rebuilding the cache after each drop equals recomputing each context
    assert "sliding window 24" in render({"provenance": toy_report["provenance"], "grid": {}, "decode": [row]})
    with pytest.raises(ValueError, match="exceed its 20-token jump"):
        grid_from(TOY, decode_window=20)


def test_precision_rows_time_each_encoding_in_fp32_and_bf16_with_ratios_and_targets(toy_report):
    rows = toy_report["precision"]
    assert [(r["pe"], r["precision"]) for r in rows] == [(pe, p) for pe in TOY.encodings for p in ("fp32", "bf16")]
    by = {(r["pe"], r["precision"]): r for r in rows}
    for pe in TOY.encodings:
        assert by[pe, "fp32"]["ratio_to_fp32"] == 1.0 and by[pe, "fp32"]["target"] is None
        bf16 = by[pe, "bf16"]
        assert bf16["ratio_to_fp32"] == pytest.approx(bf16["cpu_ms"] / by[pe, "fp32"]["cpu_ms"])
        assert bf16["target"] == (0.7 if pe == "prism" else 0.45)
        assert bf16["meets_target"] == (bf16["ratio_to_fp32"] <= bf16["target"])
    # the matrix product alone, timed in the same rounds: one reference per preset and precision
    for p in ("fp32", "bf16"):
        assert len({(r["matmul_gflops"], r["matmul_ratio_to_fp32"]) for r in rows if r["precision"] == p}) == 1
    assert all(r["matmul_ratio_to_fp32"] == 1.0 for r in rows if r["precision"] == "fp32")
    assert all(
        r["matmul_gflops"] > 0 and r["matmul_shape"] == [rows[0]["batch"][0] * rows[0]["batch"][1], 32, 128]
        for r in rows
    )
    text = render(toy_report)
    assert "training step per precision" in text and "matrix product alone" in text


def test_cli_rejects_an_unknown_precision():
    result = CliRunner().invoke(main, ["perf", "--sections", "precision", "--precision", "fp64"])
    assert result.exit_code != 0 and "unknown precision" in result.output


def test_gpu_section_runs_on_cpu():
    """`pezoo perf --sections gpu` on CPU: bare step, the loop's step with and without its
    device features, ATen calls per step (CUDA: kernel launches and the busy fraction)."""
    grid = grid_from(
        "quick",
        sections=("gpu",),
        presets=("smoke",),
        encodings=("nope",),
        repeats=1,
        warmup=1,
        gpu_steps=2,
        batch_size=4,
    )
    report = run_perf(grid, torch.device("cpu"))
    rows = report["gpu"]
    assert [(r["preset"], r["pe"]) for r in rows] == [("smoke", "nope")]
    row = rows[0]
    assert row["bare_ms"] > 0 and row["harness_ms"] > 0 and row["before_ms"] > 0
    assert row["ratio"] == row["harness_ms"] / row["bare_ms"]
    assert row["busy"] is None and row["bare_busy"] is None  # no device kernels to count on CPU
    assert row["launches"] > row["bare_launches"] > 10  # ATen calls: the loop's length groups run more
    off = {"prefetch": 0, "readback": 1, "fused": False, "graphs": False, "forced": False, "spawn": False}
    off["step"] = off["stack"] = False
    assert row["accel"] == off
    text = render(report)
    assert "smoke/nope" in text and "loop/bare" in text and "features: none" in text
