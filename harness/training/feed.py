"""The training batches of a run, in order, made inline or ahead of the step by a producer thread.

Axis letters: b batch, s sequence.

The batches are a pure function of the run's seed: one ``random.Random`` (seeded
``train/<task>/<seed>``) draws every example, in step order, and the curriculum's scale
range at step ``i`` is a function of ``i``. So whether the batches are made in the training
loop (``ahead=0``, what a CPU run does) or by a producer thread that runs up to ``ahead``
batches in front of it (a GPU run: the host's Python work overlaps the device's), the
step sees the same batch, bit for bit (``tests/harness/test_feed.py``).

A checkpoint must hold the data state *after the last batch trained on*, not after the
last one the producer made: each :class:`Fed` item carries that state (the rng's state
and a packed stream's unconsumed tail) when the caller asked for it at that step
(``keep_state``), since copying it every step would cost the loop what it saves.

On CUDA a producer also pins the batch's host memory and copies it with
``non_blocking=True``, so the copy overlaps the previous step's kernels.

With ``spawn`` the examples are made in a producer *process* (its own interpreter, one
torch thread), which sends the host batches (arrays, by value) to the producer thread,
which only pins and copies them: runs trained side by side in one process
(``harness.sweeps.executors.grouped``) then do not make each other's examples under one
GIL. The process draws from a copy of the same rng, so the batches are the same, bit for
bit; a feed whose parts cannot be sent to a process (a task that does not pickle) makes
them in the thread, said in a warning.
"""

from __future__ import annotations

import contextlib
import queue
import random
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from harness.tasks import Task
from harness.tasks.data import Batch, PackedStream, collate, sample_training_batch
from harness.tasks.lm.data import LmBatches


@dataclass(frozen=True)
class Fed:
    """One training batch and where it came from.

    Attributes:
        step: the training step it is for (0-based).
        batch: the batch, on the run's device.
        data_rng: the data rng's state once this batch was made (``keep_state(step)``
            only, else None).
        stream: a packed stream's unconsumed tail once this batch was made (same rule).
        host: the batch on the host when ``batch`` is on a GPU (its row lengths, read
            there, cost no device sync), else None.
    """

    step: int
    batch: Batch
    data_rng: Any = None
    stream: dict[str, list] | None = None
    host: Batch | None = None


def make_batch(
    task: Task,
    rng: random.Random,
    stream: PackedStream | None,
    *,
    batch_size: int,
    lo: int,
    hi: int,
    protocol: str,
) -> Batch:
    """The next training batch on the host: ``batch_size`` examples at scales ``lo..hi``
    (one shared scale for the encoder protocol), collated; or the next packed rows."""
    if stream is not None:
        return stream.batch(batch_size, lo, hi)
    examples = sample_training_batch(task, rng, batch_size, lo, hi, shared_scale=protocol == "encoder")
    return collate(examples, protocol)


class BatchFeed:
    """The batches of steps ``first..last-1`` in order (iterate over it), each on ``device``:
    ``task``'s examples, or a language-modelling task's windows (``LmBatches``: the step's
    own, whatever the scale range).

    ``scale_range(step)`` gives the (lo, hi) scales of a step's examples. ``ahead``: how many
    batches a producer thread makes in front of the step (0: each is made when asked for,
    in the caller's thread). ``keep_state(step)``: whether the item of ``step`` carries the
    data state (for a checkpoint after that step). Call :meth:`close` (or use ``with``) to
    stop the producer early; an error in the producer is raised in the consumer.
    """

    def __init__(
        self,
        task: Task | LmBatches,
        rng: random.Random,
        stream: PackedStream | None,
        *,
        batch_size: int,
        protocol: str,
        scale_range: Callable[[int], tuple[int, int]],
        first: int,
        last: int,
        device: torch.device | str,
        ahead: int = 0,
        keep_state: Callable[[int], bool] = lambda step: False,
        spawn: bool = False,
    ) -> None:
        if ahead < 0:
            raise ValueError(f"ahead must be >= 0 batches, got {ahead}")
        self.task, self.rng, self.stream = task, rng, stream
        self.batch_size, self.protocol, self.scale_range = batch_size, protocol, scale_range
        self.first, self.last, self.device, self.ahead = first, last, torch.device(device), ahead
        self.keep_state = keep_state
        self._queue: queue.Queue[Fed | BaseException | None] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cuda_stream: torch.cuda.Stream | None = None
        self.spawn = spawn and ahead > 0
        self._process: Any = None
        self._process_stop: Any = None

    def _make(self, step: int) -> Fed:
        if isinstance(self.task, LmBatches):  # a language-modelling task's windows: a function of the step
            batch = self.task.batch(step, self.batch_size)
        else:
            lo, hi = self.scale_range(step)
            batch = make_batch(
                self.task, self.rng, self.stream, batch_size=self.batch_size, lo=lo, hi=hi, protocol=self.protocol
            )
        keep = self.keep_state(step)
        data_rng = self.rng.getstate() if keep else None
        stream = self.stream.state() if keep and self.stream is not None else None
        return self._placed(step, batch, data_rng, stream)

    def _placed(self, step: int, batch: Batch, data_rng: Any, stream: dict[str, list] | None) -> Fed:
        """The item of ``step``: its host batch on the run's device, with its data state."""
        on_device = self._to_device(batch)
        return Fed(step, on_device, data_rng, stream, batch if on_device is not batch else None)

    def _to_device(self, batch: Batch) -> Batch:
        if self.device.type == "cpu":
            return batch
        if self.device.type != "cuda":
            return batch.to(self.device)
        parts = (batch.inputs, batch.labels, batch.scales, batch.scored)
        pinned = [t.pin_memory() for t in parts] if self.ahead else list(parts)
        return Batch(*(t.to(self.device, non_blocking=bool(self.ahead)) for t in pinned))

    def _put(self, item: Fed | BaseException | None) -> bool:
        """Hand ``item`` to the consumer; False once it has stopped listening."""
        assert self._queue is not None
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self) -> None:
        # The copies go on the consumer's stream (a thread starts on the device's default
        # stream): where runs train side by side, each on a stream of its own, a batch is
        # then copied before the steps that read it, in that stream's order.
        on_stream = torch.cuda.stream(self._cuda_stream) if self._cuda_stream is not None else contextlib.nullcontext()
        try:
            with on_stream:
                made = self._from_process() if self.spawn else None
                if made is None:
                    made = (self._make(step) for step in range(self.first, self.last))
                for fed in made:
                    if not self._put(fed):
                        return
                self._put(None)
        except BaseException as exc:  # handed to the consumer, raised there
            self._put(exc)

    def _from_process(self) -> Iterator[Fed] | None:
        """The items made by a producer process, on the device; None (said in a warning)
        when the feed's parts cannot be sent to one."""
        import multiprocessing
        import pickle

        try:
            parts = pickle.dumps(
                (self.task, self.rng, self.stream, self.batch_size, self.protocol, self.scale_range, self.keep_state)
            )
        except Exception as exc:  # a lambda, a task holding one: the thread makes them
            warnings.warn(
                f"the training batches are made in a thread, not a process: {type(exc).__name__}: {exc}",
                RuntimeWarning,
                stacklevel=2,
            )
            return None
        ctx = multiprocessing.get_context("spawn")  # never fork a process that holds CUDA
        out: Any = ctx.Queue(maxsize=max(1, self.ahead))
        self._process_stop = ctx.Event()
        self._process = ctx.Process(
            target=_produce_in_process,
            args=(parts, self.first, self.last, out, self._process_stop),
            name="pezoo-batches",
            daemon=True,
        )
        self._process.start()
        return self._received(out)

    def _received(self, out: Any) -> Iterator[Fed]:
        while True:
            try:
                item = out.get(timeout=1.0)
            except queue.Empty:
                if self._stop.is_set():
                    return
                if self._process is not None and not self._process.is_alive():
                    raise RuntimeError(
                        f"the batch producer process died (exit code {self._process.exitcode})"
                    ) from None
                continue
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            step, arrays, data_rng, stream = item
            yield self._placed(step, Batch(*(torch.from_numpy(a) for a in arrays)), data_rng, stream)

    def __iter__(self) -> Iterator[Fed]:
        if not self.ahead:
            for step in range(self.first, self.last):
                yield self._make(step)
            return
        self._queue = queue.Queue(maxsize=self.ahead)
        self._cuda_stream = torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None
        self._thread = threading.Thread(target=self._produce, name="pezoo-batches", daemon=True)
        self._thread.start()
        try:
            while True:
                item = self._queue.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.close()

    def close(self) -> None:
        """Stop the producer (it finishes the batch it is making) and wait for it."""
        self._stop.set()
        if self._process_stop is not None:
            self._process_stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._process is not None:
            self._process.join(timeout=5)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()
            self._process = None

    def __enter__(self) -> BatchFeed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _produce_in_process(parts: bytes, first: int, last: int, out: Any, stop: Any) -> None:
    """A producer process: make the host batches of steps ``first..last-1`` from the feed's
    parts (pickled), each with its data state where the feed keeps it, into ``out``."""
    import pickle

    torch.set_num_threads(1)  # one core's worth of Python: the examples are Python
    try:
        task, rng, stream, batch_size, protocol, scale_range, keep_state = pickle.loads(parts)
        inline = BatchFeed(
            task, rng, stream, batch_size=batch_size, protocol=protocol, scale_range=scale_range,
            first=first, last=last, device="cpu", keep_state=keep_state,
        )  # fmt: skip
        for fed in inline:  # the host batches, made as a feed without a producer makes them
            # as numpy arrays, pickled by value: torch would send shared memory, which the
            # receiver fetches from this process, and this process ends after its last batch
            arrays = tuple(t.numpy() for t in (fed.batch.inputs, fed.batch.labels, fed.batch.scales, fed.batch.scored))
            if not _send(out, (fed.step, arrays, fed.data_rng, fed.stream), stop):
                return
        _send(out, None, stop)
    except BaseException as exc:  # told to the consumer, raised there
        _send(out, exc, stop)


def _send(out: Any, item: Any, stop: Any) -> bool:
    """Put ``item`` in ``out`` unless told to stop first; whether it went."""
    while not stop.is_set():
        try:
            out.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False
