"""A sweep's time limit (``pezoo bench --time-limit``): start only the runs expected to
end before it.

For a machine that goes away at a known time with what is on its disk: a notebook or
cloud session, a scheduler's job whose checkpoint folder is not kept. A run cut off
there loses all it trained, so a run that cannot finish in the time left is better not
started: it is *deferred* (left for a later ``pezoo bench``) and a shorter run after it
in the list may go in its place. Such a run first *waits* and is asked again each time a
worker is free (``harness.sweeps.executors.driver``: a run that ended may have bettered
its estimate); it is deferred once nothing is left in flight. Runs already started are never stopped; where
checkpoints are kept (a shared ``--checkpoint-dir``), nothing needs this: a killed run
resumes from its last checkpoint.

A run's expected time is the sweep's ETA estimate for it (``SweepReport.expected_seconds``:
what a whole run of its own kind took in this sweep, once one has ended; else the plan's
estimate from finished runs' speeds, what a checkpoint has done left out,
scaled by how this sweep's finished runs compared with their estimates), times
:data:`MARGIN`. Where no finished run of the same encoding (options included), task
and model measured it, bench first times a few training steps of it here (:func:`probing`,
``harness.training.probe``), as ``pezoo sweep plan --probe`` does. A run that has no estimate
even then (its probe failed) is started while any time is left.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from harness.config import RunConfig
from harness.sweeps.estimate import SAME_RUN, probe_key
from harness.sweeps.plan import Plan, format_duration, make_plan

MARGIN = 1.1
"""A run is started when its expected seconds times this end before the limit: estimates
move with the machine's load and the run's own evaluation."""

_DURATION = re.compile(r"(?:(?P<h>\d+(?:\.\d+)?)h)?(?:(?P<m>\d+(?:\.\d+)?)m)?(?:(?P<s>\d+(?:\.\d+)?)s?)?")


def parse_duration(text: str) -> float:
    """Seconds in ``text``: ``2h30m``, ``90m``, ``1.5h``, ``45s`` or a plain number of seconds.

    Raises:
        ValueError: not such a duration, or not longer than 0 s.
    """
    spec = text.strip().lower()
    match = _DURATION.fullmatch(spec)
    if not spec or match is None:
        raise ValueError(f"{text!r} is not a duration: write e.g. 2h30m, 90m, 1.5h, 45s or a number of seconds")
    seconds = 3600 * float(match["h"] or 0) + 60 * float(match["m"] or 0) + float(match["s"] or 0)
    if seconds <= 0:
        raise ValueError(f"a time limit must be longer than 0 s, got {text!r}")
    return seconds


def probing(
    expected: Callable[[int], float | None],
    measured: Callable[[int], bool],
    probe: Callable[[int], None],
) -> Callable[[int], float | None]:
    """``expected`` for :class:`TimeLimit` that first probes a run whose estimate no
    finished run of the same encoding (options included), task and model measured:
    a borrowed speed can be far off for an encoding whose cost is its own (prism{paper}
    on reverse, with its copy branch, was estimated at 22 minutes from the other
    encodings on reverse; its runs take hours). ``probe(index)`` times a few steps of the
    run here and updates what ``expected`` returns; it is asked once per run."""
    probed: set[int] = set()

    def expect(index: int) -> float | None:
        if index not in probed and not measured(index):
            probed.add(index)
            probe(index)
        return expected(index)

    return expect


def probing_expectation(
    configs: Sequence[RunConfig],
    plan: Plan,
    rows: Sequence[Mapping[str, Any]],
    resume: Mapping[str, int],
    plan_options: Mapping[str, Any],
    report: Any,
    device: Any,
) -> Callable[[int], float | None]:
    """``pezoo bench --time-limit``'s expected seconds per run: the ETA's (``report``, a
    ``harness.sweeps.progress.SweepReport``), after a probe of the run here on ``device`` when no
    finished run of its own measured its speed (:func:`probing`), the plan's estimate then
    made again with the probe (``plan_options`` as the plan was made)."""
    from harness.training.probe import probe_speeds

    def measured(index: int) -> bool:
        cfg, est = configs[index - 1], plan.runs[index - 1].estimate
        return cfg.is_variant or (est is not None and est.basis == SAME_RUN)  # a variant only evaluates

    probes: dict[Any, tuple[float, int]] = {}  # one probe per speed group: a run's other seeds share it
    tried: set[Any] = set()

    def probe(index: int) -> None:
        cfg, key = configs[index - 1], probe_key(configs[index - 1])
        if key not in tried:
            tried.add(key)
            why = "no finished run of it to estimate from"
            report.echo(f"{report.label(index)}: timing a few training steps here: {why}")
            probes.update(probe_speeds([cfg], probe_key, device=str(device)))
            if key not in probes:
                report.echo(f"{report.label(index)}: the probe failed; estimated from other runs as before")
        if key not in probes:
            return
        est = make_plan([cfg], rows, resume, probes=probes, **plan_options).runs[0].estimate
        if est is not None:
            report.estimates[index] = est.seconds
            rate = f"{est.steps_per_second:.3g} steps/s"
            report.echo(f"{report.label(index)}: {rate} here, about {format_duration(est.seconds)} in all")

    return probing(report.expected_seconds, measured, probe)


class TimeLimit:
    """Admits a run when it is expected to end before the limit, ``seconds`` after this
    object is made.

    ``expected(index)``: the seconds run ``index`` is expected to take, or None when
    unknown; ``clock``: seconds, monotonic (a fake one in tests).
    """

    def __init__(
        self,
        seconds: float,
        expected: Callable[[int], float | None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.seconds = seconds
        self._expected = expected
        self._clock = clock
        self._ends_at = clock() + seconds

    def left(self) -> float:
        """Seconds until the limit (negative once past)."""
        return self._ends_at - self._clock()

    def admit(self, index: int) -> str | None:
        """None to start run ``index`` now; else why it is deferred."""
        left = self.left()
        if left <= 0:
            return f"the time limit ({format_duration(self.seconds)}) has passed"
        expected = self._expected(index)
        if expected is None or expected * MARGIN <= left:
            return None
        return (
            f"expected to take {format_duration(expected)} and {format_duration(left)} is left "
            f"of the time limit ({format_duration(self.seconds)})"
        )
