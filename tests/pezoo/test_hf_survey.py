"""benchmarks/hf_survey.py, the search for causal LMs pezoo.hf could adapt with a reading it
has: it finds a model's reading, tells it from a reading that drops part of the model, and
leaves pezoo.hf's families as they were; run as a script, each type in a process of its own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("transformers")
from benchmark_scripts import BENCHMARKS, load

from pezoo.hf.families import FAMILIES


def test_a_model_is_matched_to_its_reading_and_a_reading_dropping_its_norms_is_not():
    survey = load("hf_survey")
    before = dict(FAMILIES)
    mistral = survey.survey("mistral")  # Llama's layout, as if pezoo.hf did not know it
    assert mistral["candidate"] and mistral["diff"] <= survey.AGREE
    assert mistral["readings"]["llama"] <= survey.AGREE
    qwen3 = survey.survey("qwen3")  # q and k normed per head: Llama's reading drops the norms
    assert qwen3["candidate"] and FAMILIES[qwen3["best"]].project is FAMILIES["qwen3"].project
    assert qwen3["readings"]["llama"] > 1e-3
    assert FAMILIES == before


def test_the_script_tries_each_type_in_a_capped_process_and_writes_the_rows(tmp_path):
    out = tmp_path / "rows.json"
    args = ["--types", "mistral,no_such_type", "--json", str(out), "--memory-gib", "2"]
    done = subprocess.run([sys.executable, str(BENCHMARKS / "hf_survey.py"), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "mistral: CANDIDATE, best reading" in done.stdout and "no_such_type: not built here" in done.stdout
    assert "1 candidate(s) of 2 type(s)" in done.stdout
    assert [row["model_type"] for row in json.loads(out.read_text())] == ["mistral", "no_such_type"]
