"""PRISM tests run single-threaded: the scan is many small ops, and on a shared CPU torch's
OpenMP threads spin-wait on each other (measured 5-10x slower with 2 threads under load)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
