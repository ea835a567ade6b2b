"""Shared fixtures: one real tiny smoke-preset bench, exported through the CLI, built into a site."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from leaderboard_fixtures import run_tiny_bench

from harness.cli import main


@pytest.fixture(scope="session")
def smoke_store(tmp_path_factory) -> Path:
    """A store with six real (tiny) runs: two presets, two encodings, two tasks, two seeds."""
    path = tmp_path_factory.mktemp("smoke") / "store.sqlite"
    run_tiny_bench(path)
    return path


@pytest.fixture(scope="session")
def smoke_results(smoke_store, tmp_path_factory) -> Path:
    """The smoke store published with `pezoo leaderboard export` (read-only: copy before changing)."""
    out = tmp_path_factory.mktemp("published") / "results"
    result = CliRunner().invoke(main, ["leaderboard", "export", "--store", str(smoke_store), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="session")
def smoke_site(smoke_results, tmp_path_factory) -> Path:
    """The site built with `pezoo leaderboard build` from the published smoke results."""
    root = tmp_path_factory.mktemp("board")
    results = root / "results"
    shutil.copytree(smoke_results, results)
    result = CliRunner().invoke(main, ["leaderboard", "build", "--results", str(results), "--out", str(root / "site")])
    assert result.exit_code == 0, result.output
    return root / "site"
