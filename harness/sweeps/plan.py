"""Sweep plans: which runs of a sweep a store has done, and how long the missing ones
take (each run's estimate: ``harness.sweeps.estimate``), as a table and as wall time on a number
of workers."""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.config import RunConfig
from harness.config.pe_spec import config_display_name
from harness.sweeps.estimate import (
    Estimate,
    MachineScale,
    estimate,
    machine_scales,
    measurements,
    scaled_to_machine,
    sources,
)
from harness.sweeps.labels import axis_value


@dataclass(frozen=True)
class PlannedRun:
    index: int
    config: RunConfig
    status: str | None  # the store's status, None when never started
    estimate: Estimate | None  # only for runs that are not finished


@dataclass(frozen=True)
class Plan:
    """The runs of a sweep against a store."""

    runs: tuple[PlannedRun, ...]
    devices: tuple[str, ...]  # devices the store's measured runs ran on
    device_type: str | None = None  # the kind of device the runs are estimated for (None: any)
    machine_scales: tuple[MachineScale, ...] = ()  # speeds of other CPUs scaled to this one
    machine_names: tuple[str | None, ...] = ()  # the CPU of each of machine_scales (None: not recorded)

    @property
    def done(self) -> int:
        return sum(r.status == "finished" for r in self.runs)

    @property
    def missing(self) -> int:
        return len(self.runs) - self.done

    def counts(self) -> dict[str, int]:
        """Runs per store status (``not started`` for runs the store has never seen)."""
        counts: dict[str, int] = {}
        for r in self.runs:
            key = r.status or "not started"
            counts[key] = counts.get(key, 0) + 1
        return counts

    @property
    def device_hours(self) -> float:
        """Estimated device hours of the missing runs that have an estimate."""
        return sum(r.estimate.seconds for r in self.runs if r.estimate is not None) / 3600

    @property
    def unestimated(self) -> int:
        return sum(r.status != "finished" and r.estimate is None for r in self.runs)


def make_plan(
    configs: Sequence[RunConfig],
    store_runs: Iterable[Mapping[str, Any]],
    resume_steps: Mapping[str, int] | None = None,
    *,
    device_type: str | None = None,
    probes: Mapping[tuple[Any, ...], tuple[float, int]] | None = None,
    lapsed: Collection[str] = (),
    machine: str | None = None,
    borrow: bool = True,
    published: Iterable[Mapping[str, Any]] = (),
) -> Plan:
    """Done/missing per run and an estimate for each missing one (``store_runs`` are
    ``Store.runs()`` rows; pass ``[]`` for a store that does not exist yet).
    ``resume_steps`` (run id → step, from ``checkpointed_steps``) counts only the steps a
    checkpointed run has left. ``device_type`` (``cpu``/``cuda``): the kind of device the
    runs will train on, estimated only from runs on that kind. ``probes``: speeds probed
    here, by ``probe_key`` (``harness.training.probe.probe_speeds``). ``lapsed``: ids of runs whose
    ``running`` claim's process is gone (``Store.lapsed``): they count as ``interrupted``,
    which is what they are. ``machine``: this CPU (``harness.records.provenance.cpu_name()``):
    speeds measured on another CPU are scaled by how much faster this one ran the runs
    measured on both (``machine_scales``), so a store filled on a slower machine does not
    double every estimate here (nor a time limit defer runs that fit it).

    ``borrow``: also estimate from similar runs, then from ``published`` runs (finished
    runs in the store's row shape from published results), as ``pezoo sweep plan`` does;
    ``pezoo bench`` passes False (``harness.sweeps.estimate.sources``). The store's runs are paired
    among themselves and the published runs among themselves (the plan names the store's
    factors; the published ones are marked rough anyway)."""
    rows = list(store_runs)
    status = {r["run_id"]: "interrupted" if r["run_id"] in lapsed else r["status"] for r in rows}
    measured = measurements(rows)
    others = measurements(published) if borrow else []
    scales: dict[tuple[str | None, str], MachineScale] = {}
    if machine is not None:
        # each source pairs its own runs: runs that did not record their CPU are one machine
        # within a store (the one that filled it), not across a store and the published board
        scales = machine_scales(measured, machine)
        measured = scaled_to_machine(measured, scales)
        others = scaled_to_machine(others, machine_scales(others, machine))
    speed_sources = sources(measured, device_type=device_type, probes=probes, borrow=borrow, published=others)
    resume_steps = resume_steps or {}
    planned = []
    for i, cfg in enumerate(configs, start=1):
        st = status.get(cfg.run_id())
        est = None if st == "finished" else estimate(cfg, speed_sources, resume_steps.get(cfg.run_id(), 0))
        planned.append(PlannedRun(i, cfg, st, est))
    ordered = sorted(scales.items(), key=lambda kv: (kv[0][0] or "", kv[0][1]))
    return Plan(
        tuple(planned),
        tuple(sorted({m.device for m in measured})),
        device_type,
        tuple(scale for _, scale in ordered),
        tuple(cpu for (cpu, _), _ in ordered),
    )


def makespan(durations: Iterable[float], workers: int, busy: Iterable[float] = ()) -> float:
    """When ``workers`` workers finish ``durations`` (seconds, in dispatch order), each run
    going to the first worker free, with some workers ``busy`` for that many seconds
    first: list scheduling, as the sweep driver dispatches."""
    free_at = list(busy)
    free_at += [0.0] * max(0, workers - len(free_at))
    heapq.heapify(free_at)
    for seconds in durations:
        heapq.heappush(free_at, heapq.heappop(free_at) + seconds)
    return max(free_at, default=0.0)


ORDERS = ("listed", "longest-first", "seeds-first")
"""How ``pezoo bench --sweep`` orders its runs (``--order``)."""


def seeds_first(configs: Sequence[RunConfig]) -> list[RunConfig]:
    """``configs`` with every row's first seed before any row's second, and so on: a row is
    the runs that differ only in their seed, its seeds counted in increasing order; runs of
    one round keep their listed order (a trained run stays ahead of its inference-time
    variants, listed after it).

    For a sweep that does not end in one sitting (a CPU board column over several sessions,
    a lent GPU's few minutes): what finishes covers every row with one seed before any row
    gets its second, so a provisional table has all its rows; seeds added to rows that
    split (the 8-seed rule) come last."""
    rows: dict[str, set[int]] = {}
    key = [dataclasses.replace(c, seed=0).run_id() for c in configs]
    for k, c in zip(key, configs, strict=True):
        rows.setdefault(k, set()).add(c.seed)
    rank = {k: {seed: i for i, seed in enumerate(sorted(seeds))} for k, seeds in rows.items()}
    order = sorted(range(len(configs)), key=lambda i: rank[key[i]][configs[i].seed])  # stable
    return [configs[i] for i in order]


def longest_first(
    configs: Sequence[RunConfig],
    store_runs: Iterable[Mapping[str, Any]],
    resume_steps: Mapping[str, int] | None = None,
    **plan_options: Any,
) -> list[RunConfig]:
    """``configs`` with the missing runs longest first by ``estimate`` (ties and runs with
    no estimate keep their listed order; runs without one go first, since they may be long).

    A pool of workers that takes runs in this order finishes them closer together: the
    last run to start is a short one, so no worker waits alone on a long one at the end
    (longest-processing-time-first list scheduling). Finished runs come first; they are
    skipped anyway. A checkpointed run counts by what it has left (``resume_steps``);
    ``plan_options`` go to :func:`make_plan` (``device_type``, ``borrow``, ...)."""
    plan = make_plan(configs, store_runs, resume_steps, **plan_options)

    def rank(run: PlannedRun) -> tuple[int, float]:
        if run.status == "finished":
            return (0, 0.0)
        return (1, 0.0) if run.estimate is None else (2, -run.estimate.seconds)

    return [run.config for run in sorted(plan.runs, key=rank)]


def order_runs(
    configs: Sequence[RunConfig],
    order: str,
    store_runs: Iterable[Mapping[str, Any]],
    resume_steps: Mapping[str, int] | None = None,
    *,
    suspects: Collection[str] = (),
    **plan_options: Any,
) -> list[RunConfig]:
    """``configs`` in the order ``pezoo bench --order`` runs them (:data:`ORDERS`): as listed,
    :func:`longest_first` (ranked by estimates that may borrow this store's other runs'
    speeds: a relative order needs no exact ones) or :func:`seeds_first`; then the
    ``suspects`` (``Store.suspects``: runs processes kept dying on) last, as the sweep's
    driver queues them. `pezoo sweep plan --order` lists and times the runs by the same
    function, so its wall time is the one the sweep will take."""
    if order == "longest-first":
        ordered = longest_first(configs, store_runs, resume_steps, **{**plan_options, "borrow": True})
    elif order == "seeds-first":
        ordered = seeds_first(configs)
    elif order == "listed":
        ordered = list(configs)
    else:
        raise ValueError(f"unknown order {order!r}: one of {', '.join(ORDERS)}")
    if not suspects:
        return ordered
    return [c for c in ordered if c.run_id() not in suspects] + [c for c in ordered if c.run_id() in suspects]


def format_duration(seconds: float) -> str:
    if seconds < 1:
        return "<1s"
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def wall_seconds(plan: Plan, workers: int) -> tuple[float, float] | None:
    """Wall seconds the plan's missing runs take on ``workers`` workers, in the listed order
    and longest first (``makespan`` of their estimates); None when a missing run has none."""
    missing = [r for r in plan.runs if r.status != "finished"]
    if any(r.estimate is None for r in missing):
        return None
    listed = [r.estimate.seconds for r in missing if r.estimate is not None]
    return makespan(listed, workers), makespan(sorted(listed, reverse=True), workers)


def format_plan(
    plan: Plan, axes: Sequence[str] = (), workers: int | None = None, *, grouped: bool = False, order: str = "listed"
) -> str:
    """The runs as a table (status, estimated time), then the counts and the estimate
    (with ``workers``, also the wall time on that many workers in the plan's order and
    longest first; ``grouped``: the workers are runs side by side in one process on a GPU,
    each counted at its own estimated speed, which a grouped run keeps only as far as the GPU
    has room: said so). ``order`` names the order the plan's runs are in (``order_runs``)."""
    from tabulate import tabulate

    rows = []
    for r in plan.runs:
        c = r.config
        extra = [c.preset if a == "preset" else axis_value(c, a) for a in axes]
        est = "" if r.estimate is None else format_duration(r.estimate.seconds)
        if r.estimate is not None and r.estimate.from_step:
            est += f" (from step {r.estimate.from_step})"
        rows.append([r.index, config_display_name(c), c.task, c.seed, *extra, r.status or "-", est, c.run_id()])
    headers = ["#", "pe", "task", "seed", *axes, "status", "estimate", "run_id"]
    lines = [tabulate(rows, headers=headers, tablefmt="simple"), ""]
    counts = plan.counts()
    missing = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()) if k != "finished")
    lines.append(
        f"{len(plan.runs)} runs: {plan.done} done, {plan.missing} missing" + (f" ({missing})" if missing else "")
    )
    if plan.missing:
        lines += estimate_lines(plan)
        by_task = task_lines(plan)
        if by_task:
            lines.append(by_task)
        wall = wall_seconds(plan, workers) if workers else None
        if wall is not None:
            rough = " (rough)" if any(r.estimate is not None and r.estimate.rough for r in plan.runs) else ""
            where = f"{workers} runs side by side in one process" if grouped else f"{workers} worker(s)"
            this = "in the listed order" if order == "listed" else f"with --order {order}"
            other = "" if order == "longest-first" else f", {format_duration(wall[1])} with --order longest-first"
            lines.append(f"wall time on {where}{rough}: about {format_duration(wall[0])} {this}{other}")
            if grouped:
                lines.append(
                    "  (each run at its estimated speed alone: runs side by side share the GPU, so this is the "
                    "least it can take; speeds recorded from grouped runs make it exact)"
                )
    return "\n".join(lines)


def task_lines(plan: Plan) -> str | None:
    """``left by task: copy 3 runs, 1.2 h; addition 51 runs, 64.7 h`` (runs missing and their
    estimated device-hours, in the plan's task order) when the plan spans several tasks:
    which column of a board costs what decides which to fill first, or to leave out."""
    left: dict[str, list[float]] = {}
    for r in plan.runs:
        if r.status != "finished":
            left.setdefault(r.config.task, []).append(r.estimate.seconds if r.estimate is not None else math.nan)
    if len({r.config.task for r in plan.runs}) < 2 or not left:
        return None
    parts = []
    for task, seconds in left.items():
        known = [s for s in seconds if not math.isnan(s)]
        hours = f"{sum(known) / 3600:.1f} h" + (
            "" if len(known) == len(seconds) else f" ({len(seconds) - len(known)} unknown)"
        )
        parts.append(f"{task} {len(seconds)} run{'s' if len(seconds) != 1 else ''}, {hours}")
    return "left by task (device time): " + "; ".join(parts)


def estimate_bases(plan: Plan) -> str:
    """What the estimates of the missing runs rest on (rough ones say so): ``2 from same
    task and model; 1 from the recorded speed of preset quick on cpu (rough: ...); speeds
    measured on cpu:...``."""
    bases: dict[str, int] = {}
    for r in plan.runs:
        if r.estimate is not None:
            bases[r.estimate.basis] = bases.get(r.estimate.basis, 0) + 1
    text = "; ".join(f"{n} from {b}" for b, n in bases.items())
    if plan.devices and any(r.estimate is not None and not r.estimate.rough for r in plan.runs):
        text += f"; speeds measured on {', '.join(plan.devices)}"
    for cpu, scale in zip(plan.machine_names, plan.machine_scales, strict=True):
        where = cpu or "a CPU the runs did not record"
        text += (
            f"; {scale.encoding} on {where} scaled ×{scale.factor:.2f} to this CPU "
            f"(from {scale.pairs} measured on both)"
        )
    return text


def estimate_lines(plan: Plan) -> list[str]:
    """What the estimate of the missing runs rests on: device-hours and their bases (the
    rough ones marked), and how many runs have none (unknown) and why."""
    lines = []
    estimated = plan.missing - plan.unestimated
    on = f" on {plan.device_type}" if plan.device_type else ""
    if estimated:
        lines.append(
            f"estimate: {plan.device_hours:.2f} device-hours for {estimated} missing runs{on} ({estimate_bases(plan)})"
        )
    if plan.unestimated:
        lines.append(
            f"{plan.unestimated} missing runs have no estimate (unknown): no finished run of the same preset and "
            f"model{on} in the store, and no recorded speed of their preset{on}; finish one first (e.g. --seeds 1) "
            "and plan again"
        )
    return lines
