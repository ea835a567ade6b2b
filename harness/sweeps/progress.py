"""Progress of a sweep and of its runs, for ``pezoo bench``.

On a terminal each run in flight has a bar per phase (``tqdm``: done/total, elapsed and
time left, steps/s, and the run's labelled note: ``loss 0.1234`` while training,
``length 12: EM 0.85`` while evaluating), and a pool of workers adds one bar for the
whole sweep (done, running, failed, ETA). Off a terminal (a log file, ``nohup``, CI)
bars would print nothing useful, so each run prints a line when it starts, then one
every ``every`` seconds (30 by default) and one as each phase ends:

    [1/2] nope on copy seed 0: train 450/3000 steps (15%), loss 0.4211, 6.1 steps/s, ETA 7m

for the in-process executor and for pool workers alike (pool workers send their progress
to the driver over their pipe, ``harness.sweeps.executors.LocalPool``). Ray tasks report only
their start and end.

tqdm rather than click's progress bar: click's lives in a private module
(``click._termui_impl``), draws one bar at a time, and has no way to print a line above
live bars; tqdm is maintained, pure Python with no dependencies, and handles several
bars at once (``position``) with ``tqdm.write`` for lines in between.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from typing import Any, TypeGuard, cast

import click

from harness.execution.run import Progress
from harness.records.result import RunOutcome, RunResult
from harness.sweeps.estimate import probe_key
from harness.sweeps.executors import Job, SweepEvents, WorkerLost
from harness.sweeps.labels import run_label, varying_axes
from harness.sweeps.plan import Plan, format_duration, makespan

UNITS = {"train": "steps", "eval": "lengths"}
"""What a phase counts (``harness.execution.run.Progress``: ``train`` steps, ``eval`` lengths)."""

LINE_EVERY = 30.0
"""Seconds between a run's progress lines off a terminal."""

SHARING_EVERY = 60.0
"""Seconds between two looks at the store for other processes training this sweep's runs (for the ETA)."""

MIN_SHARE = 0.25
"""A finished attempt that trained less of its run than this (it resumed near the end) is
not timed for the ETA: its wall time is mostly evaluation and start-up."""


def _known(values: list[float | None]) -> TypeGuard[list[float]]:
    """Whether every one of ``values`` is known (none is None)."""
    return None not in values


def _size() -> dict[str, int]:
    """tqdm's ``ncols``/``nrows``: the terminal's size (``COLUMNS``/``LINES``, else the
    terminal's), 100 x 24 where it says 0 (a pseudo-terminal without a size, where tqdm
    would hide every bar)."""
    size = shutil.get_terminal_size((100, 24))
    return {"ncols": size.columns, "nrows": size.lines}


class RunProgress:
    """Where one run is: the phase, done of total, its note, and how fast it goes.

    The rate counts only what this attempt did (a resumed run starts at its checkpoint's
    step), from the first report of the phase on; the ETA is the phase's time left at
    that rate. ``clock``: seconds, monotonic (a fake one in tests).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.phase: str | None = None
        self.done = self.total = 0
        self.note = ""
        self._start_done = 0
        self._start_at = 0.0
        self.last_line_at = 0.0

    def update(self, phase: str, done: int, total: int, note: str) -> bool:
        """Record a report; True when it starts a new phase."""
        new = phase != self.phase
        if new:
            self.phase, self._start_done = phase, done
            self._start_at = self.last_line_at = self._clock()
        self.done, self.total, self.note = done, total, note
        return new

    def rate(self) -> float | None:
        """Items (steps, lengths) per second in this phase so far; None before any."""
        elapsed = self._clock() - self._start_at
        done = self.done - self._start_done
        return done / elapsed if done > 0 and elapsed > 0 else None

    def eta(self) -> float | None:
        """Seconds the phase has left at its rate so far; None while there is no rate."""
        rate = self.rate()
        return (self.total - self.done) / rate if rate else None

    def line_due(self, every: float) -> bool:
        """Whether to print a line now: ``every`` seconds since the last one, or the phase
        is done. Marks the line as printed."""
        now = self._clock()
        if self.done >= self.total or now - self.last_line_at >= every:
            self.last_line_at = now
            return True
        return False

    def line(self) -> str:
        """``train 450/3000 steps (15%), loss 0.4211, 6.1 steps/s, ETA 7m``."""
        unit = UNITS.get(self.phase or "", "items")
        pct = 100 * self.done / self.total if self.total else 100.0
        parts = [f"{self.phase} {self.done}/{self.total} {unit} ({pct:.0f}%)"]
        if self.note:
            parts.append(self.note)
        rate = self.rate()
        if rate is not None:
            parts.append(f"{rate:.3g} {unit}/s")
        eta = self.eta()
        if eta is not None and self.done < self.total:
            parts.append(f"ETA {format_duration(eta)}")
        return ", ".join(parts)


class SweepReport(SweepEvents):
    """Progress of a sweep, on a terminal or off one (see the module docstring).

    Attributes set by the caller once the executor is known: ``in_process`` (runs go one
    at a time in this process: their bars stay on screen, no sweep bar), ``slots`` (runs
    in flight at once, for the ETA) and ``held_elsewhere`` (the store's
    :meth:`~harness.records.store.Store.held_by_others`: other ``pezoo bench`` processes sharing
    the store share the sweep's work, and the ETA counts them; looked up at most every
    ``SHARING_EVERY`` seconds).
    """

    def __init__(
        self,
        configs,
        plan: Plan | None = None,
        *,
        tty: bool | None = None,
        every: float = LINE_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``plan``: the sweep's plan against the store (``make_plan`` over ``configs``),
        for the runs to do and their estimated seconds; without one every run is to do.
        ``tty``: draw bars (default: whether stdout is a terminal); ``every``: seconds
        between a run's progress lines off a terminal."""
        self.configs = list(configs)
        self.axes = varying_axes(self.configs)
        self.in_process = True
        self.tty = sys.stdout.isatty() if tty is None else tty
        self.every = every
        # the runs to do, in the order the driver dispatches them (one per run id)
        self.queue: list[int] = []
        seen: set[str] = set()
        for i, cfg in enumerate(self.configs, start=1):
            run_id = cfg.run_id()
            if run_id not in seen and (plan is None or plan.runs[i - 1].status != "finished"):
                self.queue.append(i)
            seen.add(run_id)
        self.todo = len(self.queue)
        self.estimates: dict[int, float] = {}  # run index -> the plan's estimated seconds
        self._part_left: dict[int, float] = {}  # run index -> the part of its training its checkpoint leaves
        if plan is not None:
            self.estimates = {r.index: r.estimate.seconds for r in plan.runs if r.estimate is not None}
            self._part_left = {
                r.index: max(0.0, 1.0 - r.estimate.from_step / max(1, r.config.train.steps))
                for r in plan.runs
                if r.estimate is not None and r.estimate.from_step > 0
            }
        self.slots = 1  # runs in flight at once (the executor's capacity); the caller sets it
        self.held_elsewhere: Callable[[], dict[str, str]] | None = None  # run id -> holder; the caller sets it
        self._run_ids = [cfg.run_id() for cfg in self.configs]
        self._sharing: tuple[float, dict[str, str]] | None = None  # (when looked up, what was held)
        self.running: set[int] = set()
        self.done = 0
        self.failures: list[str] = []
        self.deferred_runs: list[str] = []  # "[i/n] label: why", for the sweep's last words
        self._waiting: set[int] = set()  # run indices the time limit holds back for now
        # runs that train at one speed (the same encoding, task and model), None for a variant (it only evaluates)
        self._speed_keys = [None if cfg.is_variant else probe_key(cfg) for cfg in self.configs]
        self._clock = clock
        self._started_at: dict[int, float] = {}  # run index -> when its current attempt started
        self._run_seconds: dict[int, float] = {}  # run index -> wall seconds of its finished attempt
        self._share: dict[int, float] = {}  # run index -> the part of its training this attempt does (resumed: < 1)
        self._reported: set[int] = set()  # run indices whose current attempt has reported progress
        self._runs: dict[int, RunProgress] = {}  # run index -> its progress (runs in flight)
        self._bars: dict[int, Any] = {}  # run index -> its tqdm bar (on a terminal)
        self._sweep_bar: Any = None

    def label(self, index: int) -> str:
        return f"[{index}/{len(self.configs)}] {run_label(self.configs[index - 1], self.axes)}"

    # -- output that keeps live bars intact -------------------------------------------
    def echo(self, message: str, err: bool = False) -> None:
        """Print a line above the live bars (or plainly, without bars)."""
        if self._bars or self._sweep_bar is not None:
            from tqdm import tqdm

            tqdm.write(message, file=sys.stderr if err else sys.stdout)  # clears the bars, prints, redraws
        else:
            click.echo(message, err=err)

    def _status(self) -> str:
        """``done 3/12, running 2, failed 0, ETA 4m`` (no ETA until there is one), and
        ``(with 1 other process on this store)`` when other processes share the work."""
        status = f"done {self.done}/{self.todo}, running {len(self.running)}, failed {len(self.failures)}"
        eta = self.eta()
        if eta is not None and self.done + len(self.failures) < self.todo:
            status += f", ETA {format_duration(eta)}"
            others = self.other_processes()
            if others:
                status += f" (with {others} other process{'es' if others > 1 else ''} on this store)"
        return status

    def held(self) -> dict[str, str]:
        """This sweep's runs that other live processes hold (run id -> holder), as the
        store said at most ``SHARING_EVERY`` seconds ago; {} without a store to ask. When
        asking fails, the last answer stands ({} if there was none: the ETA then counts
        this process alone)."""
        if self.held_elsewhere is None:
            return {}
        now = self._clock()
        if self._sharing is None or now - self._sharing[0] >= SHARING_EVERY:
            try:
                held = self.held_elsewhere()
            except Exception:  # a busy or damaged store must not stop the sweep over an ETA
                held = {} if self._sharing is None else self._sharing[1]
            ours = set(self._run_ids)
            self._sharing = (now, {run_id: who for run_id, who in held.items() if run_id in ours})
        return self._sharing[1]

    def other_processes(self) -> int:
        """How many other live processes are training this sweep's runs (:meth:`held`)."""
        return len(set(self.held().values()))

    def expected_seconds(self, index: int) -> float | None:
        """How long run ``index`` should take: the wall time a whole run took among this
        sweep's finished runs of its own kind (the same encoding, task and model; for a run
        resuming from its checkpoint, the part of it left), else the
        plan's estimate scaled by how the finished runs' wall times compared with theirs (the
        estimate is device time from other runs; workers sharing a machine run slower), else
        the mean wall time of the finished runs; None when there is neither. A run resumed
        from its checkpoint is compared with the part of its estimate it trained
        (:meth:`_note_share`): after a restart the first runs to finish are resumed ones, and
        a whole run's estimate against half a run's time would halve every ETA that follows."""
        siblings = self._siblings(index)
        if siblings:  # runs of its own kind that ended in this sweep: what they took, not an estimate
            whole = sum(self._run_seconds[i] for i in siblings) / sum(self._share.get(i, 1.0) for i in siblings)
            return whole * self._part_left.get(index, 1.0)  # a run resuming from its checkpoint: the part left
        timed = [i for i in self._run_seconds if i in self.estimates]
        if index in self.estimates:
            planned = sum(self.estimates[i] * self._share.get(i, 1.0) for i in timed)
            scale = sum(self._run_seconds[i] for i in timed) / planned if timed and planned > 0 else 1.0
            return self.estimates[index] * scale
        if self._run_seconds:
            return sum(self._run_seconds.values()) / len(self._run_seconds)
        return None

    def _siblings(self, index: int) -> list[int]:
        """This sweep's finished, timed runs that train at run ``index``'s speed (the same
        encoding, task and model: ``harness.sweeps.estimate.probe_key``); [] for a variant."""
        key = self._speed_keys[index - 1]
        if key is None:
            return []
        return [i for i in self._run_seconds if i != index and self._speed_keys[i - 1] == key]

    def _left(self, index: int, now: float) -> float | None:
        """Seconds run ``index`` (in flight) has left: its expected time (the part this
        attempt trains, when it resumed) less what it has run; when that is unknown or
        already past, the time its training has left at the speed it reports (evaluation
        not counted); else None."""
        expected = self.expected_seconds(index)
        share = self._share.get(index, 1.0)
        left = None if expected is None else expected * share - (now - self._started_at[index])
        if left is None or left < 0:
            run = self._runs.get(index)
            live = run.eta() if run is not None and run.phase == "train" else None
            return live if live is not None else (None if left is None else -1.0)
        return left

    def eta(self) -> float | None:
        """Seconds until the sweep ends: the runs in flight finish what they have left,
        then the runs not yet started go, in dispatch order, each to the first worker free
        (the driver's own list scheduling over ``slots`` workers). None while a run left
        has no expected time, or a run in flight has outlived its expected time with no
        speed reported to tell how long it still takes. A mean over runs left would be
        wrong twice on a sweep of unequal runs: it ignores which runs are left, and it
        misses that the last worker busy decides the end. A retried run counts in full,
        though it may resume from its checkpoint.

        Other processes training this sweep's runs (:meth:`held`) count as one more worker
        each, busy first with the run they hold for its whole expected time (how far they
        are is theirs to know), so two processes on one store each see the sweep's end,
        not twice it."""
        now = self._clock()
        held = self.held()
        busy = [self._left(i, now) for i in self.running]
        busy += [self.expected_seconds(i) for i in self.queue if self._run_ids[i - 1] in held]
        queued = [self.expected_seconds(i) for i in self.queue if self._run_ids[i - 1] not in held]
        if not (_known(busy) and _known(queued)) or any(left < 0 for left in busy):
            return None
        return makespan(queued, self.slots + len(set(held.values())), busy)

    def _note_share(self, index: int, done: int, total: int) -> None:
        """The attempt's first training report is step ``done`` of ``total`` (1 when it
        starts afresh, the checkpoint's step + 1 when it resumed): the part of the run's
        training this attempt does, which its wall time is compared with. Evaluation is
        counted with training: it is a small part of a run."""
        if total > 0:
            self._share[index] = min(max((total - done + 1) / total, 0.0), 1.0)

    def _attempt_over(self, index: int, measured: bool) -> None:
        """Run ``index`` is no longer in flight; ``measured``: its time counts towards the ETA
        (a finished run's does; a failed or retried attempt's says little about a run's length,
        nor does one that trained less than ``MIN_SHARE`` of its run: it is mostly evaluation)."""
        self.running.discard(index)
        self._runs.pop(index, None)
        self._close_bar(index)
        started = self._started_at.pop(index, None)
        if index in self._reported and index not in self._share:
            self._share[index] = 0.0  # it reported, but never training: it resumed after its last step
        if measured and started is not None and self._share.get(index, 1.0) >= MIN_SHARE:
            self._run_seconds[index] = self._clock() - started

    def _sweep_bar_update(self) -> None:
        """A pool's bar for the whole sweep, on a terminal (off one, the per-run lines say it all)."""
        if self.in_process or not self.tty:
            return
        if self._sweep_bar is None:
            from tqdm import tqdm

            self._sweep_bar = tqdm(total=self.todo, bar_format="sweep |{bar:30}| {desc}", file=sys.stdout, **_size())
        self._sweep_bar.n = self.done + len(self.failures)
        self._sweep_bar.set_description_str(self._status())

    # -- per-run progress (the executor calls it: in this process, or as a pool worker reports) --
    def progress_for(self, job: Job) -> Progress:
        def progress(phase: str, done: int, total: int, note: str) -> None:
            self.run_progress(job.index, phase, done, total, note)

        return progress

    def run_progress(self, index: int, phase: str, done: int, total: int, note: str) -> None:
        run = self._runs.setdefault(index, RunProgress(self._clock))
        new_phase = run.update(phase, done, total, note)
        if phase == "train" and index not in self._share:  # the attempt's first training report
            self._note_share(index, done, total)
        self._reported.add(index)
        if not self.tty:
            if run.line_due(self.every):
                click.echo(f"{self.label(index)}: {run.line()}")
            return
        if new_phase:
            self._close_bar(index)
            from tqdm import tqdm

            self._bars[index] = tqdm(
                total=total,
                initial=done,
                desc=f"{self.label(index)} {phase}",
                unit=UNITS.get(phase, "it")[:-1],
                leave=self.in_process,  # in this process a run's bars stay as its record
                file=sys.stdout,
                **_size(),
            )
        bar = self._bars[index]
        bar.set_postfix_str(note, refresh=False)
        bar.update(done - bar.n)
        if self._sweep_bar is not None:
            self._sweep_bar.set_description_str(self._status())  # the ETA follows the runs' speed

    def _close_bar(self, index: int) -> None:
        bar = self._bars.pop(index, None)
        if bar is not None:
            bar.close()

    def live_notice(self, job: Job, message: str) -> None:
        self.echo(f"{self.label(job.index)}: {message}", err=True)

    def close_bars(self) -> None:
        for index in list(self._bars):
            self._close_bar(index)
        if self._sweep_bar is not None:
            self._sweep_bar.close()
            self._sweep_bar = None

    # -- SweepEvents -----------------------------------------------------------------
    def skipped(self, index: int, cfg) -> None:
        if index in self.queue:  # finished by another process after the plan was made
            self.queue.remove(index)
            self.todo -= 1
        self.echo(f"{self.label(index)}: already in the store, skipped")

    def claimed(self, index: int, cfg, holder: str) -> None:
        if index in self.queue:
            self.queue.remove(index)
            self.todo -= 1
        if cfg.is_variant:  # its trained run is the one in training
            trained = cfg.trained_config().run_id()
            why = f"waits for the weights of run {trained}: {holder}, which is training it"
        else:
            why = f"{holder}, which is training it"
        self.echo(f"{self.label(index)}: {why}; skipped (run again once it is done)")

    def waiting(self, index: int, cfg, reason: str) -> None:
        if index in self.queue:  # out of the ETA and the count while it waits; back if it starts
            self.queue.remove(index)
            self.todo -= 1
            self._waiting.add(index)
        self.echo(f"{self.label(index)}: waits, {reason}; asked again as runs end")
        self._sweep_bar_update()

    def deferred(self, index: int, cfg, reason: str) -> None:
        self._waiting.discard(index)
        if index in self.queue:
            self.queue.remove(index)
            self.todo -= 1
        self.deferred_runs.append(f"{self.label(index)}: {reason}")
        self.echo(f"{self.label(index)}: deferred, {reason}; not started")
        self._sweep_bar_update()

    def started(self, job: Job) -> None:
        if job.index in self.queue:
            self.queue.remove(job.index)
        if job.index in self._waiting:  # it fits now after all
            self._waiting.discard(job.index)
            self.todo += 1
        self.running.add(job.index)
        self._started_at[job.index] = self._clock()
        self._share.pop(job.index, None)  # known at its first training report
        self._reported.discard(job.index)
        self.slots = max(self.slots, len(self.running))
        if not self.tty:
            click.echo(f"{self.label(job.index)}: started")
        self._sweep_bar_update()

    def notice(self, job: Job, message: str) -> None:
        self.echo(f"{self.label(job.index)}: {message}", err=True)

    def retrying(self, job: Job, reason: str, attempts: int) -> None:
        self._attempt_over(job.index, measured=False)
        self.queue.insert(0, job.index)  # the driver runs a retry next
        self.echo(f"{self.label(job.index)}: attempt {job.attempt} of {attempts} failed ({reason}); retrying", err=True)

    def finished(self, job: Job, outcome: RunOutcome, result: RunResult | WorkerLost) -> None:
        self._attempt_over(job.index, measured=outcome.status == "finished")
        label = self.label(job.index)
        if outcome.status == "finished":
            self.done += 1
            run = cast(RunResult, result)  # only a RunResult finishes
            seconds = (run.train_seconds or 0) + (run.eval_seconds or 0)
            self.echo(f"{label}: finished in {seconds:.1f}s ({self._status()})")
        elif outcome.status in ("cached", "claimed"):  # another process's to record: no failure
            self.done += 1
            self.echo(f"{label}: not recorded here: {outcome.error}")
        else:
            self.failures.append(f"{label}: {outcome.status}: {outcome.error}")
            self.echo(f"{label}: {outcome.status}: {outcome.error}", err=True)
        self._sweep_bar_update()
