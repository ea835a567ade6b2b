"""The training loss of a step, eager or replayed as CUDA graphs over length buckets.

Axis letters: b batch, s sequence, v vocab.

A step of a small model on a GPU is launch-bound: a hundred-odd kernels of microseconds
each, every one launched by Python. A CUDA graph records a pass's kernels once and
replays them with one launch. A graph has fixed shapes, so a batch is right-padded to its
*length bucket* (:func:`bucket_width`: the next multiple of ``quantum`` tokens) and each
bucket gets its own graph, forward and backward (``torch.cuda.make_graphed_callables``).

Padding does not change the loss (:func:`padded_loss_inputs`): the added tokens are
``PAD`` with ``IGNORE`` labels, a causal model's real tokens never attend to them, and the
loss is the sum over labelled tokens over their count. An encoder's tokens do attend to
padding, so its buckets are exact widths (``quantum`` 1); packed rows have one width.
The graphed pass is the plain padded pass (no length groups, no MLP skipping of padding:
those need the host to see the lengths, a sync per step), so its loss equals the eager
one to float rounding only; tests/harness/test_graphs.py states the tolerance.

Everything here but :class:`GraphedLoss` is device-agnostic and tested on CPU.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.tasks.data import IGNORE, Batch
from harness.tasks.vocab import PAD_ID
from harness.training.backbone import Backbone
from harness.training.precision import autocast_dtype
from pezoo import PositionalEncoding

LossFn = Callable[[Batch, "Batch | None"], tuple[Tensor, Tensor]]
"""(batch on the device, the same batch on the host or None) -> (loss to minimise, task loss)."""

QUANTUM = 8
"""Bucket granularity in tokens: at most 7 padding tokens per row, a graph per 8 widths."""


def bucket_width(width: int, quantum: int = QUANTUM) -> int:
    """The smallest multiple of ``quantum`` that holds ``width`` tokens (``width`` >= 1)."""
    if width < 1 or quantum < 1:
        raise ValueError(f"width and quantum must be >= 1, got {width} and {quantum}")
    return -(-width // quantum) * quantum


def pad_to(batch: Batch, width: int) -> Batch:
    """``batch`` right-padded to ``width`` tokens: inputs ``PAD``, labels ``IGNORE``, not
    scored; per-token scale hints (packed rows) repeat the row's last one."""
    s = batch.inputs.shape[1]
    if width < s:
        raise ValueError(f"cannot pad a batch {s} tokens wide to {width}")
    if width == s:
        return batch
    extra = width - s
    inputs = F.pad(batch.inputs, (0, extra), value=PAD_ID)
    labels = F.pad(batch.labels, (0, extra), value=IGNORE)
    scored = F.pad(batch.scored, (0, extra), value=False)
    scales = batch.scales
    if scales.ndim == 2:
        scales = torch.cat([scales, scales[:, -1:].expand(-1, extra)], dim=1)
    return Batch(inputs, labels, scales, scored)


def padded_loss_inputs(
    model: Backbone, batch: Batch, host: Batch | None, quantum: int = QUANTUM
) -> tuple[Batch, Tensor | None]:
    """(the batch padded to its bucket, the positions planned for it or None).

    Positions are planned from the rows' real lengths (``pe.padded_positions``: randomized
    PE draws per length) read on the host copy ``host`` (no device sync); None when the
    encoding's positions do not depend on the lengths (the model then takes its own)."""
    s = batch.inputs.shape[1]
    width = bucket_width(s, quantum if model.cfg.causal and batch.scales.ndim == 1 else 1)
    padded = pad_to(batch, width)
    pe = model.pe
    if type(pe).padded_positions is PositionalEncoding.padded_positions or host is None:
        return padded, None  # the base class's: positions for the whole width, whatever the lengths
    lengths = (host.inputs != PAD_ID).sum(dim=1)  # (b,), on the host
    return padded, pe.padded_positions(lengths, width, batch.inputs.device)


def plain_loss(
    model: Backbone, precision: str, batch: Batch, positions: Tensor | None, draws: Mapping[Any, Tensor] | None = None
) -> tuple[Tensor, Tensor]:
    """(loss to minimise, task loss) of one plain pass over ``batch`` (padding included, its
    labels ignored) on the planned ``positions`` and ``draws``: what each graph records."""
    dtype = autocast_dtype(precision)
    device_type = batch.inputs.device.type
    with torch.autocast(device_type, dtype=dtype or torch.float32, enabled=dtype is not None, cache_enabled=False):
        task = padded_pass_loss(model, batch, positions, draws)
    regularisation = getattr(model.pe, "regularisation", None)
    return (task + regularisation(), task) if regularisation is not None else (task, task)


def one_pass_loss(model: Backbone, batch: Batch) -> Tensor:
    """The task's loss (``harness.training.loss._task_loss``) as one padded pass over the
    whole batch, on the positions planned for its rows' lengths: a GPU's eager way (CUDA
    runs, and a CUDA-graph bucket that falls back to eager). There a small model's pass is
    launch-bound, so length groups multiply its launches (PRISM: ~1,400 a pass; on an H200
    the loop's grouped eager PRISM step took 128 ms, the one-pass bare step 35 ms) and read
    each group's length back, while the padding they skip costs the GPU next to nothing.
    The same loss and gradients to float rounding (tests/harness/test_padding_skip.py)."""
    lengths = (batch.inputs != PAD_ID).sum(dim=1)  # (b,)
    positions = model.pe.padded_positions(lengths, batch.inputs.shape[1], batch.inputs.device)  # (b|1, s)
    return padded_pass_loss(model, batch, positions)


def padded_pass_loss(
    model: Backbone, batch: Batch, positions: Tensor | None, draws: Mapping[Any, Tensor] | None = None
) -> Tensor:
    """The mean cross-entropy of ``batch``'s labelled tokens from one pass over its whole
    padded width (the padding's labels ignored), the loss taken in float32; ``draws`` what
    the encoding draws in a pass, planned outside it (``pe.plan_draws``; None: drawn in it)."""
    logits = model(batch.inputs, scale_hint=batch.scales, positions=positions, draws=draws)  # (b, s, v)
    logits = logits.float() if logits.dtype in (torch.bfloat16, torch.float16) else logits
    labels = batch.labels.flatten()
    total = F.cross_entropy(logits.flatten(0, 1), labels, ignore_index=IGNORE, reduction="sum")
    return total / (labels != IGNORE).sum()


def graph_inputs(
    model: Backbone, batch: Batch, host: Batch | None, quantum: int, padded: bool
) -> tuple[list[Tensor], bool]:
    """A step's graph inputs but its draws: the batch padded to its bucket (as it is when not
    ``padded``: a language-modelling task's windows), then the positions planned for it where
    the encoding plans them (:func:`padded_loss_inputs`); and whether positions are among them."""
    if padded:
        batch, positions = padded_loss_inputs(model, batch, host, quantum)
    else:
        positions = None
    inputs = [batch.inputs, batch.labels, batch.scales, batch.scored]
    return ([*inputs, positions], True) if positions is not None else (inputs, False)


def graph_loss(
    model: Backbone, precision: str, inputs: Sequence[Tensor], with_positions: bool, draw_keys: tuple[Any, ...]
) -> tuple[Tensor, Tensor]:
    """:func:`plain_loss` on a graph's inputs: :func:`graph_inputs`'s, then one planned draw
    for each of ``draw_keys``."""
    positions = inputs[4] if with_positions else None
    draws = dict(zip(draw_keys, inputs[5 if with_positions else 4 :], strict=True))
    return plain_loss(model, precision, Batch(*inputs[:4]), positions, draws)


class _Pass(nn.Module):
    """One bucket's pass as a module (its parameters the backbone's), for graph capture: its
    inputs :func:`graph_loss`'s."""

    def __init__(self, model: Backbone, precision: str, with_positions: bool, draw_keys: tuple[Any, ...] = ()) -> None:
        super().__init__()
        self.model, self.precision, self.with_positions = model, precision, with_positions
        self.draw_keys = draw_keys

    def forward(self, *inputs: Tensor):
        loss, task = graph_loss(self.model, self.precision, inputs, self.with_positions, self.draw_keys)
        return loss if loss is task else (loss, task.detach())


def draw_samples(pe: PositionalEncoding, device: torch.device) -> dict[Any, Tensor]:
    """Stand-ins for what ``pe`` draws in a pass, to capture a graph with: the same keys,
    shapes and types as ``pe.plan_draws``, drawn from a scratch generator so the run's own
    stream is left as it was (a graph takes each step's real draws as inputs)."""
    with pe.drawing_from(torch.Generator()):
        return pe.plan_draws(device)


class GraphedLoss:
    """The loss of a batch by replaying its length bucket's CUDA graph (captured on first
    use). What the encoding draws in a pass (Abacus's offset) is drawn on the host before
    each replay, from the run's own stream, and copied in as an input (``pe.plan_draws``).
    A bucket whose capture fails (an encoding doing host work in its pass) runs eagerly
    from then on, said once in a warning."""

    def __init__(
        self, model: Backbone, precision: str, eager: LossFn, quantum: int = QUANTUM, *, padded: bool = True
    ) -> None:
        self.model, self.precision, self.eager, self.quantum = model, precision, eager, quantum
        self.padded = padded
        """False: rows without padding (a language-modelling task's windows): each batch as it
        is, the model's own positions."""
        self.graphs: dict[tuple, Callable | None] = {}
        self.draw_keys: tuple[Any, ...] = ()
        """The ``ctx.state`` keys of what the encoding draws in a pass (``pe.plan_draws``),
        in the order the graphs take them after the batch and positions."""

    def __call__(self, batch: Batch, host: Batch | None) -> tuple[Tensor, Tensor]:
        args, with_positions = graph_inputs(self.model, batch, host, self.quantum, self.padded)
        key = tuple((tuple(a.shape), a.dtype) for a in args)
        device = batch.inputs.device
        if key not in self.graphs:
            samples = draw_samples(self.model.pe, device)
            self.draw_keys = tuple(samples)
            self.graphs[key] = self._capture(args + list(samples.values()), with_positions)
        graphed = self.graphs[key]
        if graphed is None:
            return self.eager(batch, host)  # which draws in its pass
        draws = self.model.pe.plan_draws(device)  # this step's, from the run's own stream
        out = graphed(*args, *(draws[k] for k in self.draw_keys))
        # a graph's outputs are static buffers that its next replay overwrites, and the loop
        # keeps each step's loss for a later read-back: copies (a one-element kernel each)
        if isinstance(out, Tensor):
            loss = out.clone()
            return loss, loss
        return out[0].clone(), out[1].clone()

    def _capture(self, args: list[Tensor], with_positions: bool) -> Callable | None:
        module = _Pass(self.model, self.precision, with_positions, self.draw_keys)
        return capture(module, tuple(a.clone() for a in args))


_CAPTURING = threading.Lock()
"""One capture at a time in a process (runs trained side by side in threads each capture theirs)."""


@contextlib.contextmanager
def _thread_local_capture() -> Iterator[None]:
    """``torch.cuda.make_graphed_callables`` captures with ``torch.cuda.graph``'s default
    error mode, ``global``: while one thread captures, a CUDA call another thread may make
    (an allocation, an event query, a pinned copy: another run's step or its batch
    producer) is refused and invalidates the capture. Runs trained side by side in one
    process's threads need ``thread_local``, which checks only the capturing thread's own
    calls; each run captures on its own stream, so no other thread's work enters its graph.
    Held under :data:`_CAPTURING`, so the patched name is restored before another capture."""
    original = torch.cuda.graph

    class _ThreadLocalGraph(original):  # type: ignore[misc, valid-type]
        def __init__(self, cuda_graph: Any, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("capture_error_mode", "thread_local")
            super().__init__(cuda_graph, *args, **kwargs)

    torch.cuda.graph = _ThreadLocalGraph  # type: ignore[misc]
    try:
        yield
    finally:
        torch.cuda.graph = original  # type: ignore[misc]


def capture(module: nn.Module | Callable[..., Any], samples: tuple[Tensor, ...]) -> Callable | None:
    """``module``'s forward and backward on inputs shaped like ``samples`` (a module's, or a
    function's of its inputs: gradients for those that require them), recorded as CUDA
    graphs (``torch.cuda.make_graphed_callables``), or None, said in a warning, when its
    pass cannot be recorded (host work or a sync inside it): the caller then runs it eagerly.
    The CUDA random state is left as it was (the warm-up passes leave no trace)."""
    mismatch = getattr(torch.autograd.graph, "set_warn_on_accumulate_grad_stream_mismatch", None)
    if mismatch is not None:  # capture warms up on a side stream: the gradients' first
        mismatch(False)  # accumulation crosses streams once, by design (torch warns each time)
    try:
        with _CAPTURING, _thread_local_capture():
            rng = torch.cuda.get_rng_state(samples[0].device)
            graphed = torch.cuda.make_graphed_callables(module, samples, num_warmup_iters=3, allow_unused_input=True)
            torch.cuda.set_rng_state(rng, samples[0].device)
        return graphed
    except Exception as exc:  # host work or a sync inside the pass: eager for this shape
        warnings.warn(
            f"no CUDA graph for batches of shape {tuple(samples[0].shape)} ({type(exc).__name__}: {exc}); "
            "they train eagerly",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
