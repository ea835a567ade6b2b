"""Suite-wide settings.

One torch thread everywhere (this process and, through OMP_NUM_THREADS, every subprocess
a test starts): the models here are tiny, and on a 2-core machine two processes with two
OpenMP threads each spin against each other (measured: a tiny decode took 11 s with two
threads under load, 0.15 s with one). It also makes CPU results bit-identical between
the in-process and subprocess paths.
"""

from __future__ import annotations

import os

import torch

os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)
