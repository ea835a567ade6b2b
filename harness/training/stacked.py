"""Runs of one architecture trained in lockstep as one stacked pass (``torch.func``).

Axis letters: k run (a stack's member), b batch, s sequence.

A board run is a small model on small batches: on a GPU its step is a few hundred kernels
of microseconds each, far too small to fill the device, and runs side by side in threads
(``harness.sweeps.executors.grouped``) still launch their kernels one run at a time. Runs
whose models have the same shape can instead take their steps *together*: at each step
their parameters are stacked along a new leading axis (k) and one pass over the stacked
batches (``torch.func.vmap`` over ``torch.func.functional_call``) computes every run's loss
and, by one backward, every run's gradients, into its own parameters (the stack's
backward hands each run its slice). One pass's kernels then carry k runs' work.

Each run keeps everything else of its own: its thread, its data stream and producer, its
optimiser, learning rate, clipping, loss read-back, periodic evaluation and checkpoints
(``harness.training.train``). Only the forward and backward pass is shared, so a run
computes what it computes alone up to the float rounding of a batched kernel, and of the
padding to the stack's widest batch (no real token of a causal model sees padding;
tests/harness/test_stacked.py states the tolerance). What an encoding draws in a pass
(randomized positions, Abacus's offset) is planned by each run from its own stream outside
the pass and handed in, as a CUDA graph's inputs are (``harness.training.graphs``).

The members meet at each step (:meth:`Stack.step`): the last to arrive runs the pass for all.
A member joins when its loop starts and leaves when it ends (its last step, a divergence,
an error, a cancelled sweep), and the others go on without it. A stack whose pass cannot
be run (an encoding vmap cannot batch: PRISM's GRU, a Triton kernel, a draw made inside the
pass) is dissolved at its first step, said once in a warning: its members train as they
would alone, bit for bit. An fp16 run never joins one (its loss scaler is its own). The pass
runs on the eager attention backend (plain matmuls and a softmax, which vmap batches
everywhere; the same attention as the model's own backend to float rounding), else on the
model's own.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.func import functional_call, vmap

from harness.config.global_rng import forked_global_rng
from harness.tasks.data import Batch
from harness.training.backbone import Backbone
from harness.training.graphs import QUANTUM, _Pass, capture, draw_samples, graph_inputs, pad_to

CAPTURE_AFTER = 20
"""A stacked pass of one stack size and input shapes is recorded as a CUDA graph at its 20th
use: while a group's runs start one by one (or end), each size in between is met a few
times only, and capturing each would cost more than the eager passes it saves."""


@dataclass
class _Request:
    """One member's share of a step: its batch (padded to its own bucket), the positions it
    planned for it (or None), and what its encoding draws in the pass."""

    inputs: list[Tensor]
    positions: Tensor | None
    draws: list[Tensor]
    stream: Any = None


@dataclass
class _Answer:
    """What a member gets back: (loss to minimise, task loss), its gradients in its own
    parameters; or ``solo``: the stack was dissolved, the member takes its step alone."""

    loss: Tensor | None = None
    task: Tensor | None = None
    solo: bool = False


class Member:
    """One run's place in a :class:`Stack` (``with member:`` leaves it at the end)."""

    def __init__(self, stack: Stack, model: Backbone, index: int, draws: torch.Generator | None = None) -> None:
        self.stack, self.model, self.index = stack, model, index
        self.draws = draws
        """The run's own generator, which its encoding draws from (``pe.drawing_from``): a step
        the stack hands back to the run alone starts again from the state it had."""

    def step(self, batch: Batch, host: Batch | None) -> tuple[Tensor, Tensor] | None:
        """This run's (loss to minimise, task loss) on ``batch`` from the stacked pass, its
        gradients already in its parameters (set, not accumulated); None once the stack is
        dissolved: the caller takes the step as a run alone does."""
        return self.stack.step(self, batch, host)

    def leave(self) -> None:
        self.stack.leave(self)

    def __enter__(self) -> Member:
        return self

    def __exit__(self, *exc: object) -> None:
        self.leave()


class Stack:
    """Runs whose models have one shape (:func:`stack_key`), trained in lockstep on one device.

    Args:
        model: a model of the stack's shape (the first member's): a copy of it is the pass's
            template, whose own weights are never used (each member's are swapped in).
        precision: the runs' precision (``harness.training.precision``): the pass's autocast.
        padded: the batches are right-padded rows (an algorithmic task's) rather than whole
            windows (a language-modelling task's).
        quantum: the bucket of a batch's width (``harness.training.graphs.bucket_width``).
        graphs: on CUDA, the stacked pass is recorded as CUDA graphs (:class:`_StackedPass`).
    """

    def __init__(
        self, model: Backbone, precision: str, *, padded: bool = True, quantum: int = QUANTUM, graphs: bool = False
    ) -> None:
        # a copy: the pass swaps the members' weights into its template for its duration, and a
        # member that has left trains or evaluates its own model meanwhile
        # a run's generator is its own, never copied; and a copy may draw (PRISM's gate network
        # is rebuilt, initialised, then loaded): under the global RNG's lock, leaving it as it was
        with model.pe.drawing_from(None), forked_global_rng():
            self.template = copy.deepcopy(model)
        self.precision, self.padded, self.quantum, self.graphs = precision, padded, quantum, graphs
        self.device = next(model.parameters()).device
        self._cond = threading.Condition()
        self._members: dict[int, Member] = {}
        self._pending: dict[int, _Request] = {}
        self._answers: dict[int, _Answer] = {}
        self._next = 0
        self.dissolved: str | None = None
        """Why the stack's members train alone now (None: they do not)."""
        self.passes = 0
        """Stacked passes run, and the members' steps they took (:attr:`member_steps`)."""
        self.member_steps = 0
        # eager first: plain matmuls and a softmax, which vmap batches on every device (it runs
        # sdpa's CPU kernel one run at a time, and cannot take a learned bias's gradient there)
        self._backends = list(dict.fromkeys(["eager", model.backend]))
        self._passes: dict[str, _StackedPass] = {}
        self._stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None

    def join(self, model: Backbone, draws: torch.Generator | None = None) -> Member:
        """A member for ``model`` (whose parameters must match the template's, name for
        name, shape for shape; ``draws`` the run's own generator, :class:`Member`); it takes
        part from its first :meth:`step`."""
        mine = [(n, tuple(p.shape), p.dtype) for n, p in model.named_parameters()]
        theirs = [(n, tuple(p.shape), p.dtype) for n, p in self.template.named_parameters()]
        if mine != theirs:
            raise ValueError("a stack's members have the same parameters, name for name and shape for shape")
        with self._cond:
            member = Member(self, model, self._next, draws)
            self._next += 1
            self._members[member.index] = member
            return member

    def leave(self, member: Member) -> None:
        if self._stream is not None:
            # its last update may still be reading gradients that live in the stack's memory
            # (a recorded pass's buffers, or blocks the stack's stream would reuse): the stack's
            # later passes wait for the work queued on the leaving run's stream
            self._stream.wait_stream(torch.cuda.current_stream(self.device))
        with self._cond:
            self._members.pop(member.index, None)
            self._pending.pop(member.index, None)
            self._answers.pop(member.index, None)
            if not self._members:  # its recorded passes' memory back to the device (runs of a shape run together)
                self._passes.clear()
            self._cond.notify_all()  # the others may all be waiting now

    @property
    def backend(self) -> str | None:
        """The attention backend the stacked pass runs on (None once dissolved)."""
        return self._backends[0] if self.dissolved is None and self._backends else None

    @property
    def size(self) -> int:
        with self._cond:
            return len(self._members)

    def step(self, member: Member, batch: Batch, host: Batch | None) -> tuple[Tensor, Tensor] | None:
        if self.dissolved is not None:
            return None
        before = member.draws.get_state() if member.draws is not None else None
        request = self._request(member.model, batch, host)  # draws the step's positions and offsets
        with self._cond:
            self._pending[member.index] = request
            while member.index not in self._answers:
                if self._pending and set(self._pending) == set(self._members):
                    self._run()
                else:
                    self._cond.wait()
            answer = self._answers.pop(member.index)
        if answer.solo:  # the run takes this step alone, drawing what it would have drawn
            if before is not None:
                assert member.draws is not None
                member.draws.set_state(before)
            return None
        if self._stream is not None:  # the member's own stream goes on from the pass's results
            torch.cuda.current_stream(self.device).wait_stream(self._stream)
        assert answer.loss is not None and answer.task is not None
        return answer.loss, answer.task

    def _request(self, model: Backbone, batch: Batch, host: Batch | None) -> _Request:
        """The member's batch padded to its bucket, its positions and draws planned in its own
        thread, from its own stream (``pe.drawing_from``), as a CUDA graph's inputs are."""
        # the lengths a randomized encoding's positions are planned from: the feed's host copy of a
        # device batch, else the batch itself (a CPU batch; on a device without one, a sync)
        host = batch if host is None else host
        inputs, with_positions = graph_inputs(model, batch, host, self.quantum, self.padded)
        positions = inputs.pop() if with_positions else None
        draws = list(model.pe.plan_draws(batch.inputs.device).values())
        stream = torch.cuda.current_stream(self.device) if self._stream is not None else None
        return _Request(inputs, positions, draws, stream)

    def _run(self) -> None:
        """The pass for every waiting member (called with the lock held, by the last to arrive)."""
        order = sorted(self._pending)
        requests = [self._pending[i] for i in order]
        models = [self._members[i].model for i in order]
        self._pending.clear()
        results: list[tuple[Tensor, Tensor]] | None = None
        while self.dissolved is None and results is None:
            backend = self._backends[0]
            try:
                results = self._pass(backend).run(models, requests, self._stream)
            except Exception as exc:  # vmap cannot batch it: the next backend, else each alone
                self._backends.pop(0)
                for model in models:
                    for p in model.parameters():
                        p.grad = None
                if not self._backends:
                    self.dissolved = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                    warnings.warn(
                        f"runs of {len(models)} could not be trained as one stacked pass ({self.dissolved}); "
                        "each trains alone",
                        RuntimeWarning,
                        stacklevel=2,
                    )
        if results is None:
            for i in order:
                self._answers[i] = _Answer(solo=True)
        else:
            self.passes += 1
            self.member_steps += len(order)
            for i, (loss, task) in zip(order, results, strict=True):
                self._answers[i] = _Answer(loss, task)
        self._cond.notify_all()

    def _pass(self, backend: str) -> _StackedPass:
        if backend not in self._passes:
            self._passes[backend] = _StackedPass(self.template, backend, self.precision, graphs=self.graphs)
        return self._passes[backend]


class _StackedPass:
    """The template's training pass (``harness.training.graphs._Pass``: the plain padded pass
    on planned positions and draws) on ``backend``, vmapped over stacked parameters: a
    function of (the stacked parameters, one tensor per name; the stacked inputs), whose
    gradients with respect to the stacked parameters are each member's own, slice by slice.

    With ``graphs`` (CUDA) that function is recorded as a CUDA graph per (stack size, input
    shapes) (``harness.training.graphs.capture``), on stacked parameters held in buffers of
    its own that each step's weights are copied into: the graph never depends on which runs
    are the members, so runs coming and going cost no capture but a new stack size's."""

    def __init__(self, template: Backbone, backend: str, precision: str, *, graphs: bool = False) -> None:
        self.precision = precision
        if backend == template.backend:
            model = template
        else:  # the same model on another backend: its weights are never read, each member's are swapped in
            cfg = dataclasses.replace(template.cfg, backend=backend)
            # its initialisation draws from torch's global RNG: under the lock that another
            # thread's seeded initialisation holds (build_model), and leaving it as it was
            with forked_global_rng():
                model = Backbone(cfg, copy.deepcopy(template.pe)).to(next(template.parameters()).device)
        model.train()
        device = next(model.parameters()).device
        self.draw_keys = tuple(draw_samples(model.pe, device))
        self.model = model
        self.names = [n for n, _ in model.named_parameters()]
        self.graphs = graphs and device.type == "cuda"
        self._graphed: dict[tuple, tuple[Any, list[Tensor]] | None] = {}
        self._uses: dict[tuple, int] = {}
        self._functions: dict[tuple[int, bool], Any] = {}

    def _function(self, k: int, with_positions: bool) -> Any:
        """(stacked parameters..., stacked inputs...) -> (loss (k,), task loss (k,)), made once
        per stack size (its buffers stacked k times)."""
        key = (k, with_positions)
        if key not in self._functions:
            self._functions[key] = self._make_function(k, with_positions)
        return self._functions[key]

    def _make_function(self, k: int, with_positions: bool) -> Any:
        pass_ = _Pass(self.model, self.precision, with_positions, self.draw_keys)
        names = [f"model.{n}" for n in self.names]
        buffers = {f"model.{n}": torch.stack([b] * k) for n, b in self.model.named_buffers()}

        def one(p: dict[str, Tensor], b: dict[str, Tensor], *inputs: Tensor) -> tuple[Tensor, Tensor]:
            out = functional_call(pass_, (p, b), inputs)
            return (out[0], out[1]) if isinstance(out, tuple) else (out, out.detach())

        def stacked_pass(*args: Tensor) -> tuple[Tensor, Tensor]:
            params = dict(zip(names, args[: len(names)], strict=True))
            return vmap(one)(params, buffers, *args[len(names) :])

        return stacked_pass

    def run(self, models: list[Backbone], requests: list[_Request], stream: Any) -> list[tuple[Tensor, Tensor]]:
        """Every member's (loss, task loss), its gradients set in its own parameters."""
        if any(len(r.draws) != len(self.draw_keys) for r in requests):
            raise ValueError("a member planned other draws than the stack's template")
        with_positions = requests[0].positions is not None
        if any((r.positions is not None) != with_positions for r in requests):
            raise ValueError("members planned positions differently")
        context = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
        with context:
            if stream is not None:
                for r in requests:
                    stream.wait_stream(r.stream)
                    # made on the member's stream and read on this one: the allocator must not
                    # hand their memory to the member's batch producer before this stream is done
                    for x in (*r.inputs, *r.draws, *([] if r.positions is None else [r.positions])):
                        x.record_stream(stream)
            k = len(models)
            width = max(r.inputs[0].shape[1] for r in requests)
            rows = [self._widened(r, width) for r in requests]
            inputs = [torch.stack(column) for column in zip(*rows, strict=True)]
            by_model = [dict(m.named_parameters()) for m in models]
            key = (k, with_positions, tuple((tuple(x.shape), x.dtype) for x in inputs))
            graphed = self._graph(key, with_positions, inputs) if self.graphs else None
            if graphed is not None:
                function, params = graphed
                with torch.no_grad():
                    for name, held in zip(self.names, params, strict=True):
                        torch.stack([p[name] for p in by_model], out=held.detach())
                loss, task = (x.clone() for x in function(*params, *inputs))  # the next replay overwrites them
            else:
                with torch.no_grad():
                    params = [torch.stack([p[n] for p in by_model]) for n in self.names]
                params = [p.requires_grad_() for p in params]
                loss, task = self._function(k, with_positions)(*params, *inputs)
            grads = torch.autograd.grad(loss.sum(), params, allow_unused=True)
            for name, grad in zip(self.names, grads, strict=True):
                # in the parameters' own (contiguous) layout, as autograd hands a run alone its
                # gradient: vmap's can come transposed (the embedding's), and the fused AdamW
                # reads a strided gradient wrong (a bf16 run's loss stopped falling)
                grad = None if grad is None else grad.contiguous()
                for i, p in enumerate(by_model):  # each run's slice of the stack's gradient: its own
                    p[name].grad = None if grad is None else grad[i]
            losses = [loss[i].detach() for i in range(k)]
            tasks = [task[i].detach() for i in range(k)]
        return list(zip(losses, tasks, strict=True))

    def _graph(self, key: tuple, with_positions: bool, inputs: list[Tensor]) -> tuple[Any, list[Tensor]] | None:
        """The recorded pass for ``key`` and its parameter buffers, captured at its
        :data:`CAPTURE_AFTER`-th use (a stack size met only while runs start or end runs
        eagerly: a capture costs more than a few eager passes); None until then, or where it
        cannot be recorded (said once in a warning by ``capture``): eager."""
        self._uses[key] = self._uses.get(key, 0) + 1
        if self._uses[key] < CAPTURE_AFTER:
            return None
        if key not in self._graphed:
            k = key[0]
            params = [
                torch.zeros((k, *p.shape), dtype=p.dtype, device=p.device, requires_grad=True)
                for p in self.model.parameters()
            ]
            function = capture(self._function(k, with_positions), (*params, *inputs))
            self._graphed[key] = None if function is None else (function, params)
        return self._graphed[key]

    def _widened(self, request: _Request, width: int) -> list[Tensor]:
        """A member's graph inputs (batch, then positions, then draws) at the stack's width:
        its batch padded further (``pad_to``), its positions by repeating their last column
        (padding's positions are never seen by a real token, and stay valid table indices)."""
        batch = pad_to(Batch(*request.inputs), width)
        out = [batch.inputs, batch.labels, batch.scales, batch.scored]
        if request.positions is not None:
            p = request.positions
            if p.shape[1] < width:
                p = torch.cat([p, p[:, -1:].expand(-1, width - p.shape[1])], dim=1)
            out.append(p)
        return out + list(request.draws)


def stack_key(model: Backbone, precision: str, padded: bool, options: Any) -> tuple:
    """What runs share to be stacked: the device, the model's shape and backend, the encoding
    and its built options, the precision and the batch layout."""
    device = next(model.parameters()).device
    shapes = tuple((n, tuple(p.shape), str(p.dtype)) for n, p in model.named_parameters())
    return (str(device), repr(model.cfg), type(model.pe).__qualname__, repr(options), precision, padded, shapes)


class Stacks:
    """The stacks of one group of runs (``harness.sweeps.executors.grouped``): a run joins
    the stack of its :func:`stack_key`, made on first use. Installed in a thread by
    :func:`installed`, where :func:`join` finds it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stacks: dict[tuple, Stack] = {}

    def join(
        self,
        model: Backbone,
        precision: str,
        padded: bool,
        options: Any,
        graphs: bool = False,
        draws: torch.Generator | None = None,
    ) -> Member | None:
        """A member of the stack for ``model``; None when that stack was dissolved (its pass
        cannot be batched: the run trains alone, as later runs of its shape will)."""
        key = (*stack_key(model, precision, padded, options), graphs)
        with self._lock:
            stack = self._stacks.get(key)
            if stack is None:
                stack = self._stacks[key] = Stack(model, precision, padded=padded, graphs=graphs)
            return stack.join(model, draws) if stack.dissolved is None else None

    def all(self) -> list[Stack]:
        with self._lock:
            return list(self._stacks.values())


_LOCAL = threading.local()


@contextlib.contextmanager
def installed(stacks: Stacks | None) -> Iterator[None]:
    """Within the block, runs trained in this thread with the ``stack`` loop feature join
    ``stacks`` (:func:`join`)."""
    previous = getattr(_LOCAL, "stacks", None)
    _LOCAL.stacks = stacks
    try:
        yield
    finally:
        _LOCAL.stacks = previous


def join(
    model: Backbone,
    precision: str,
    padded: bool,
    options: Any,
    *,
    graphs: bool = False,
    draws: torch.Generator | None = None,
) -> Member | None:
    """A member of this thread's stacks (:func:`installed`) for ``model``, or None: none
    installed, or an fp16 run (its loss scaler is its own; it trains alone). ``graphs``: the
    stack's pass is recorded as CUDA graphs (on CUDA); ``draws``: the run's own generator."""
    stacks: Stacks | None = getattr(_LOCAL, "stacks", None)
    if stacks is None or precision == "fp16":
        return None
    return stacks.join(model, precision, padded, options, graphs, draws)


__all__ = ["Member", "Stack", "Stacks", "installed", "join", "stack_key"]
