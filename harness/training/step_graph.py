"""The whole training step replayed as one CUDA graph per length bucket: forward, backward,
gradient clipping and AdamW's update.

Why: ``harness.training.graphs`` replays the forward and backward passes, but the host
still runs the rest of the step (zeroing the gradients, the clip's norm, the optimiser's
Python, the autograd engine's hand-off into the backward graph): about 2.3 ms of host work
a step for a quick-preset NoPE run on an H200 (benchmarks/results/cuda-gpu-nvidia-h200.md),
while the GPU's kernels took 1.0 ms. Runs trained side by side in one process's threads
(``harness.sweeps.executors.grouped``) share one GIL, so that host work is what a group
waits on: sixteen runs in a group trained 167.5 steps/s together on an H100, 1.3x what
packed processes did (benchmarks/results/cuda-gpu-nvidia-h100-80gb-hbm3-2.md). Here a step's
host work is the batch's copy into the graph's inputs, one learning-rate fill and one
graph launch.

What it takes (``torch.cuda.graphs``' whole-network recipe):

* AdamW **fused and capturable**, its learning rate a device tensor the host fills each
  step (:func:`harness.training.train.set_learning_rate` fills it in place), and its state
  made before the capture: the first step of a run (or of a resumed one) runs eagerly, so
  a graph never records the state's creation; where some parameter would get its first
  gradient in a bucket, that step runs eagerly (making the state) and the next one captures.
* A pass with no host work (the forward pass :func:`harness.training.graphs.plain_loss`
  captures): what an encoding draws in a pass (Abacus's and position coupling's offset) is
  drawn on the host before each replay from the run's own stream and copied in as an input
  (``pe.plan_draws``), as randomized PE's positions are; a bucket whose capture fails (an
  encoding that reads a value back) trains eagerly from then on, said once in a warning,
  exactly as :class:`~harness.training.graphs.GraphedLoss` does.
* The warm-up passes before a capture run the forward and backward only, never the update,
  so the weights and the optimiser's state are the ones the eager loop would have; the
  CUDA random state is left as it was.

fp16 runs (a loss scaler, whose skipped steps are host decisions) keep the eager step.
Numerically a replayed step is the eager step on the same kernels; the padded one-pass loss
it records equals the loop's eager loss to float rounding (tests/harness/test_gpu_loop.py
states the tolerance on a GPU). CUDA only: nothing here runs on a CPU, where
:meth:`GraphedStep.supported` says no.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from harness.tasks.data import Batch
from harness.training.backbone import Backbone
from harness.training.graphs import _CAPTURING, QUANTUM, draw_samples, graph_inputs, graph_loss

WARMUP = 2
"""Forward and backward passes on a side stream before a capture (lazy initialisations:
cuBLAS workspaces, autograd's stream hand-off, Triton's compilation), none of them updating."""


class Recorder(Protocol):
    """What a capture needs of the device: its streams, its random state, and graphs that
    record a body once and replay it. :data:`CUDA` is the one a run uses; a test gives a
    CPU stand-in that replays the body itself (tests/harness/test_gpu_loop.py), so the
    step's logic (the first step eager, the state before the capture, the rate read at each
    replay, the buckets) is tested where no GPU is."""

    def warm_up(self, device: torch.device) -> contextlib.AbstractContextManager[None]:
        """A block run on a side stream, ordered after the current stream's work and before its next."""
        ...

    def random_state(self, device: torch.device) -> Tensor: ...

    def set_random_state(self, state: Tensor, device: torch.device) -> None: ...

    def record(self, body: Callable[[], tuple[Tensor, Tensor]]) -> tuple[Any, Tensor, Tensor]:
        """(graph, loss, task loss): ``body`` recorded as a graph whose replay writes its
        outputs into the returned loss tensors."""
        ...


class _Cuda:
    """:class:`Recorder` on a CUDA device (``torch.cuda.graph``, ``thread_local`` capture mode:
    other runs' threads go on while one captures)."""

    @contextlib.contextmanager
    def warm_up(self, device: torch.device) -> Iterator[None]:
        current = torch.cuda.current_stream(device)
        side = torch.cuda.Stream(device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            yield
        current.wait_stream(side)

    def random_state(self, device: torch.device) -> Tensor:
        return torch.cuda.get_rng_state(device)

    def set_random_state(self, state: Tensor, device: torch.device) -> None:
        torch.cuda.set_rng_state(state, device)

    def record(self, body: Callable[[], tuple[Tensor, Tensor]]) -> tuple[Any, Tensor, Tensor]:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            loss, task = body()
        return graph, loss, task


CUDA: Recorder = _Cuda()


class _NotYet(RuntimeError):
    """A capture to try again at a later step of the bucket (not a failure to remember)."""


@dataclass
class _Captured:
    """One bucket's graph, its static inputs and its static loss outputs."""

    graph: Any  # torch.cuda.CUDAGraph (a Recorder's graph)
    inputs: list[Tensor]
    loss: Tensor
    task: Tensor


class GraphedStep:
    """``step(batch, host)``: one training step of ``model`` on ``batch`` by replaying its
    length bucket's graph (captured on first use), returning (loss minimised, task loss)
    with the update applied; or None where the step must run eagerly (the optimiser has no
    state yet, or the bucket's capture failed), the caller then steps as ever."""

    def __init__(
        self,
        model: Backbone,
        precision: str,
        opt: torch.optim.Optimizer,
        grad_clip: float,
        quantum: int = QUANTUM,
        *,
        padded: bool = True,
        recorder: Recorder | None = None,
    ) -> None:
        device = next(model.parameters()).device
        recorder = CUDA if recorder is None else recorder
        if device.type != "cuda" and isinstance(recorder, _Cuda):
            raise ValueError(f"a whole-step CUDA graph needs a CUDA model, this one is on {device}")
        if not all(g.get("fused") for g in opt.param_groups):
            raise ValueError("a whole-step CUDA graph needs the fused AdamW (Accel(fused=True))")
        self.model, self.precision, self.opt, self.grad_clip, self.quantum = model, precision, opt, grad_clip, quantum
        self.device, self.padded, self.recorder = device, padded, recorder
        """``padded`` False: rows without padding (a language-modelling task's windows), each
        batch as it is on the model's own positions, as ``GraphedLoss`` takes them."""
        for g in opt.param_groups:  # the update reads its rate from the device: the host fills it in place
            g["capturable"] = True
            g["lr"] = torch.tensor(float(g["lr"]), dtype=torch.float32, device=device)
        self.graphs: dict[tuple, _Captured | None] = {}
        self.draw_keys: tuple[Any, ...] = ()
        """The ``ctx.state`` keys of what the encoding draws in a pass (``pe.plan_draws``):
        drawn on the host each step and copied in after the batch and positions."""

    @staticmethod
    def supported(device: torch.device, precision: str) -> bool:
        """Whether a run on ``device`` at ``precision`` can take its steps as graphs (CUDA, no
        fp16 loss scaler)."""
        return device.type == "cuda" and precision != "fp16"

    def ready(self) -> bool:
        """Whether the optimiser has made its state (after the run's first eager step)."""
        return len(self.opt.state) > 0

    def __call__(self, batch: Batch, host: Batch | None) -> tuple[Tensor, Tensor] | None:
        if not self.ready():
            return None
        args, with_positions = graph_inputs(self.model, batch, host, self.quantum, self.padded)
        key = tuple((tuple(a.shape), a.dtype) for a in args)
        if key not in self.graphs:
            samples = draw_samples(self.model.pe, self.device)
            self.draw_keys = tuple(samples)
            try:
                self.graphs[key] = self._capture(args + list(samples.values()), with_positions)
            except _NotYet:
                return None
        captured = self.graphs[key]
        if captured is None:
            return None  # the caller steps eagerly, drawing in its pass
        draws = self.model.pe.plan_draws(self.device)  # this step's, from the run's own stream
        args += [draws[k] for k in self.draw_keys]
        for static, a in zip(captured.inputs, args, strict=True):
            static.copy_(a)
        captured.graph.replay()
        # the outputs are static buffers the next replay overwrites; the loop keeps each
        # step's loss for a later read-back
        task = captured.task.clone()
        return (task, task) if captured.loss is captured.task else (captured.loss.clone(), task)

    def _loss(self, inputs: list[Tensor], with_positions: bool) -> tuple[Tensor, Tensor]:
        """The pass on the static inputs (``graphs.graph_loss``)."""
        return graph_loss(self.model, self.precision, inputs, with_positions, self.draw_keys)

    def _capture(self, args: list[Tensor], with_positions: bool) -> _Captured | None:
        inputs = [a.clone() for a in args]
        params = [p for g in self.opt.param_groups for p in g["params"]]

        def step() -> tuple[Tensor, Tensor]:  # what the graph records
            # each step's gradients afresh: captured from no gradient, a replay writes them
            # (it never adds to the last step's); said here so the body means it run by run
            self.opt.zero_grad(set_to_none=True)
            loss, task = self._loss(inputs, with_positions)
            loss.backward()
            nn.utils.clip_grad_norm_(params, self.grad_clip)
            self.opt.step()
            return loss, task

        try:
            with _CAPTURING:  # one capture at a time in a process (grouped runs' threads)
                rng = self.recorder.random_state(self.device)
                try:
                    with self.recorder.warm_up(self.device):
                        for _ in range(WARMUP):
                            self.opt.zero_grad(set_to_none=True)
                            self._loss(inputs, with_positions)[0].backward()
                    stateless = [p for p in params if p.grad is not None and p not in self.opt.state]
                    if stateless:  # its state would be made inside the graph, and made afresh every replay:
                        raise _NotYet  # this step runs eagerly and makes it; the next one captures
                    self.opt.zero_grad(set_to_none=True)
                    graph, loss, task = self.recorder.record(step)
                finally:  # the warm-up passes leave no trace in the run's random draws
                    self.recorder.set_random_state(rng, self.device)
            total = loss.detach()
            return _Captured(graph, inputs, total, total if task is loss else task.detach())
        except _NotYet:
            self.opt.zero_grad(set_to_none=True)
            raise
        except Exception as exc:  # host work or a sync in the pass: this bucket steps eagerly
            self.opt.zero_grad(set_to_none=True)
            warnings.warn(
                f"no whole-step CUDA graph for batches of shape {tuple(args[0].shape)} "
                f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); they step eagerly",
                RuntimeWarning,
                stacklevel=3,
            )
            return None
