"""`pezoo perf --sections compile`: torch.compile against eager per encoding.

Run here with ``compile_backend="eager"`` (dynamo's tracing, guards and recompiles, no code
generation) at the smoke preset's size, so the section's bookkeeping is tested in seconds;
what inductor makes of it is measured by the command itself (docs/performance.md).
"""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.perf import grid_from, measure_compile, render

TOY = grid_from(
    "quick",
    sections=("compile",),
    repeats=1,
    warmup=0,
    compile_encodings=("rope", "prism"),
    compile_lengths=(4, 6, 9),
    compile_preset="smoke",
    compile_batch=3,
    compile_backend="eager",
)


@pytest.fixture(scope="module")
def rows():
    import torch

    return measure_compile(TOY, torch.device("cpu"))


def test_rows_cover_models_and_encodings(rows):
    assert [(r["model"], r["pe"]) for r in rows] == [
        ("backbone", "rope"),
        ("backbone", "prism"),
        ("decoder", "rope"),
        ("decoder", "prism"),
    ]
    for r in rows:
        assert "error" not in r, r
        assert r["lengths"] == [4, 6, 9] and len(r["first_call_s"]) == 3
        assert math.isfinite(r["ratio"]) and r["ratio"] > 0
        assert r["meets_target"] == (r["ratio"] <= r["target"])


def test_compiled_copy_matches_eager_on_the_first_batch(rows):
    for r in rows:
        assert r["loss_diff"] < 1e-5, r
        assert r["grad_rel_diff"] < 1e-4, r


def test_graphs_stop_growing_after_the_shape_regime_is_known(rows):
    """dynamic=True (backbone): every graph at the first length; plain compile (decoder): by the second."""
    for r in rows:
        settled = 0 if r["model"] == "backbone" else 1
        counts = r["graphs_after_length"]
        assert counts[settled] > 0
        assert counts[settled:] == [counts[settled]] * (len(counts) - settled), r
        assert r["graphs"] == counts[-1], "the timed rounds compiled again"
        assert r["recompiles_after_second_length"] == 0


def test_the_report_renders_a_compile_table(rows):
    text = render({"provenance": _provenance(), "grid": {}, "compile": rows})
    assert "compiled / eager" in text
    for r in rows:
        assert f"| {r['model']} " in text and f"| {r['pe']} " in text


def test_unknown_compile_model_is_rejected():
    with pytest.raises(ValueError, match="compile model"):
        grid_from(TOY, compile_models=("backbone", "gpt2"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--compile-pe", "ropee"], "Did you mean 'rope'"),
        (["--compile-models", "gpt2"], "unknown compile model"),
        (["--compile-lengths", "8,x"], "comma-separated integers"),
    ],
)
def test_cli_rejects_bad_compile_options(args, message):
    result = CliRunner().invoke(main, ["perf", "--sections", "compile", *args])
    assert result.exit_code != 0 and message in result.output


def _provenance():
    return {
        "device": "cpu",
        "torch": "x",
        "pezoo": "x",
        "commit": "0" * 40,
        "threads": 1,
        "load_average_before": None,
        "load_average_after": None,
    }
