"""docs/tasks.md is generated from the registry and must match what the generator writes now."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import harness.tasks as tasks
from harness.tasks import catalogue

DOC = Path(__file__).resolve().parents[3] / "docs" / "tasks.md"


def test_docs_match_the_registry():
    assert DOC.read_text(encoding="utf-8") == catalogue.render(), (
        "docs/tasks.md is stale: run `python -m harness.tasks.catalogue > docs/tasks.md`"
    )


def test_every_task_has_a_section_with_its_label():
    text = catalogue.render()
    for name in tasks.available():
        section = text.split(f"### `{name}`\n", 1)[1].split("\n### ", 1)[0]
        task = tasks.create(name)
        assert f"`{task.pe_solvability}`" in section and task.source in section and task.metric in section


def test_module_entry_point_writes_the_page():
    out = subprocess.run(
        [sys.executable, "-m", "harness.tasks.catalogue"], capture_output=True, text=True, check=True, encoding="utf-8"
    )
    assert out.stdout == catalogue.render()
