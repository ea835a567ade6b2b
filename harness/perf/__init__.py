"""Performance of the zoo: what choosing an encoding costs in time and memory (`pezoo perf`).

Axis letters: b batch, s sequence, d model width, h heads, n cursors, p histogram bins
(2P+1), f stream width, t scanned tokens.

The measurements, each run side by side in one process on the current device:

* ``train``: one optimiser step (forward, backward, AdamW) of the backbone that the
  benchmark trains (``harness.training.train.build_model`` at a preset's size), per encoding and
  attention backend, on a fixed batch at the preset's largest training length; median
  time, spread, tokens/s, and the ratio to ``nope`` on its fastest backend.
* ``precision``: the benchmark's own training step (``harness.training.loss.training_loss`` and
  optimiser) in fp32 and in bf16 (``--precision``: also fp16), per encoding on the backend
  the preset trains with, interleaved; the ratio to the same encoding's fp32 step, and
  the matrix product alone in each precision in the same rounds (the device's ratio then).
* ``memory``: peak memory of one forward pass at batch 1 and long sequences, each in its
  own subprocess (so one measurement cannot inflate another and an out-of-memory kill
  stays contained): CUDA peak allocator bytes on GPU, the peak resident set (VmHWM,
  reset after a warm-up pass) on CPU, both minus the memory held before the pass.
* ``alloc``: peak memory at the allocator of a forward + backward pass per encoding,
  backend and length (S = 1k … 8k by default), all lengths of one (encoding, backend) in
  one subprocess: ``torch.cuda.max_memory_allocated`` on CUDA, the profiler's memory
  events (``profile_memory=True``: every CPU allocator call with the running total) on
  CPU, both above the bytes allocated when the pass starts; ratio to NoPE in the same
  run. Unlike RSS it is exact to the byte and does not move between runs. On CPU, flex
  has no backward pass, so its rows are the forward pass (under ``no_grad``).
* ``decode``: greedy decoding (``harness.evaluation.evaluate.greedy_decode``) to a fixed total
  length with the KV cache / recurrent state and by recomputing the prefix.
* ``prism``: the PRISM histogram scan over t tokens at supports P (ratio per doubling
  of P and of t), the GRU gates, the position streams, each forward + backward, and
  their share of one PRISM training step.
* ``compile``: ``torch.compile`` against eager per encoding: the training step over
  several lengths (the benchmark's backbone with ``dynamic=True``, a user's decoder with
  plain ``torch.compile(model)``), graphs compiled after each length, compile times, and
  the compiled model's loss and gradients against eager's.

Timing protocol: every measured callable is warmed up first, then the repetitions are
interleaved (one call of each candidate per round, the order rotated every round), so
load from other processes affects every candidate alike; the median and the
interquartile range over rounds are reported. Ratios are taken on process CPU time when
torch runs single-threaded on a CPU (the default: it is the work done, which a loaded
machine inflates far less than wall-clock time) and on wall-clock time otherwise
(:func:`ratio_basis`). Only ratios within one run are meant to be compared.

One module per section (everything is re-exported here):

    grid       what is measured: sections, targets, ``PerfGrid`` and the named grids
    timing     the interleaved timing protocol
    train      one training step per encoding and backend
    precision  the training step in each precision
    gpu        the harness's training step against the bare step (``--sections gpu``)
    memory     peak memory (RSS), one subprocess per measurement
    alloc      peak memory at the allocator
    decode     greedy decoding with and without the cache
    prism      PRISM's scan scaling, components, and share of the step
    compile    ``torch.compile`` against eager, per encoding
    report     the whole run, its tables and its JSON
    command    the ``pezoo perf`` command
"""

from __future__ import annotations

from harness.perf.alloc import _alloc_child_main, alloc_child, allocator_peak, measure_alloc, measure_alloc_one  # noqa: F401
from harness.perf.command import _ints, _names, perf_command  # noqa: F401
from harness.perf.compile import COMPILE_MODELS, GraphCounter, UserDecoder, measure_compile, measure_compile_one  # noqa: F401
from harness.perf.decode import measure_decode  # noqa: F401
from harness.perf.grid import (  # noqa: F401
    ALLOC_TARGETS,
    COMPILE_TARGET,
    DEFAULT_SECTIONS,
    GRIDS,
    PRECISION_TARGETS,
    PRESET_TASKS,
    SCHEMA_VERSION,
    SECTIONS,
    STEP_TARGETS,
    TARGET_ENCODINGS,
    PerfGrid,
    grid_from,
)
from harness.perf.memory import (  # noqa: F401
    _memory_child_main,
    _proc_status_kib,
    _reset_peak_rss,
    measure_memory,
    measure_memory_one,
    memory_backbone,
    memory_child,
)
from harness.perf.precision import measure_precision, precision_step  # noqa: F401
from harness.perf.prism import (  # noqa: F401
    _scan_inputs,
    measure_prism,
    measure_prism_scaling,
    prism_components,
    profile_step,
    scan_function,
)
from harness.perf.report import (  # noqa: F401
    BASIS_WORDS,
    DECODE_HEADERS,
    _fmt_ms,
    _load_average,
    _render_alloc,
    _render_decode,
    _render_memory,
    _render_prism,
    _render_train,
    render,
    run_perf,
)
from harness.perf.timing import Timing, synchronizer, time_interleaved  # noqa: F401
from harness.perf.train import (  # noqa: F401
    basis_ms,
    best_backend_rows,
    build_for,
    measure_train,
    ratio_basis,
    step_function,
    training_backends,
    training_batch,
)
