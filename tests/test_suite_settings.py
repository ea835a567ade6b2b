"""The suite's own settings (tests/conftest.py): deterministic hypothesis, a memory cap."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memory_cap import MEMORY_CAP_GB, memory_cap_bytes

SEEN: list[list[int]] = []


@settings(max_examples=5)
@given(st.integers())
def _draws(n):
    SEEN[-1].append(n)


def test_hypothesis_draws_the_same_examples_on_every_run(request):
    """Two runs of one test draw the same examples, and none is kept in a database that
    would make the next run differ (unless --hypothesis-profile=explore asks for that)."""
    if request.config.getoption("hypothesis_profile", None) not in (None, "deterministic"):
        pytest.skip("an exploring profile was asked for")
    assert settings.default.derandomize and settings.default.database is None
    runs = []
    for _ in range(2):
        SEEN.append([])
        _draws()
        runs.append(SEEN[-1])
    assert runs[0] == runs[1]


def test_the_test_process_has_a_memory_cap(monkeypatch):
    """A test that starts to build something huge gets MemoryError at once (the fuzz test's
    7.5-billion-element list filled a 24 GB machine until the OOM killer ended pytest)."""
    cap = memory_cap_bytes()
    if cap is None:
        pytest.skip("PEZOO_TEST_MEMORY_CAP_GB=0 turned the cap off")
    soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
    assert soft != resource.RLIM_INFINITY and soft <= cap  # checked before allocating anything
    with pytest.raises(MemoryError):
        bytearray(soft + 1)  # refused by the kernel before a byte is touched


def test_the_cap_reaches_subprocesses_and_leaves_torch_working():
    soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
    code = (
        "import resource, torch\n"
        "x = torch.randn(256, 256) @ torch.randn(256, 256)\n"
        "print(resource.getrlimit(resource.RLIMIT_DATA)[0], float(x.abs().sum()) > 0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    limit, works = out.stdout.split()
    assert int(limit) == soft and works == "True"


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, int(MEMORY_CAP_GB * 2**30)), ("", int(MEMORY_CAP_GB * 2**30)), ("2", 2 * 2**30), ("0", None)],
)
def test_the_cap_is_set_by_an_environment_variable(value, expected):
    environ = {} if value is None else {"PEZOO_TEST_MEMORY_CAP_GB": value}
    assert memory_cap_bytes(environ) == expected
