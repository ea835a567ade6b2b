"""How far each board has been filled: the runs its committed sweep file plans.

A board is filled over many sessions from a sweep file kept next to the results folder
(``leaderboard/board.toml``). Until every planned run is published, a table may rank one
seed where three are planned, or miss encodings: the pages must say so, or a reader
takes a provisional ranking for a settled one. The sweep files found there are the plans;
each planned run is matched to the published records by run id (``RunConfig.run_id``,
the identity both the store and the results files use).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.records.identity import config_run_id


@dataclass(frozen=True)
class Planned:
    """The planned runs of one (preset, task), or of a whole preset (``task`` None).

    Attributes:
        run_ids: the planned runs' ids.
        seeds: the planned seeds, ascending.
    """

    run_ids: frozenset[str]
    seeds: tuple[int, ...]
    seed_of: Mapping[str, int] | None = None  # run id -> seed (per-seed counts)
    cell_of: Mapping[str, str] | None = None  # run id -> its cell (:func:`cell`), where known
    row_of: Mapping[str, tuple[str, int]] | None = None  # run id -> (board label, largest test scale), where known

    def within(self, test_max: int) -> Planned:
        """The planned runs tested up to ``test_max`` (one table: a copy table tested to 100
        is another table than the one tested to 40); all of them where runs' ranges are unknown."""
        if self.row_of is None:
            return self
        keep = frozenset(r for r in self.run_ids if self.row_of[r][1] == test_max)
        seed_of = None if self.seed_of is None else {r: s for r, s in self.seed_of.items() if r in keep}
        seeds = self.seeds if seed_of is None else tuple(sorted(set(seed_of.values())))
        cell_of = None if self.cell_of is None else {r: c for r, c in self.cell_of.items() if r in keep}
        return Planned(keep, seeds, seed_of, cell_of, {r: self.row_of[r] for r in keep})

    def seeds_by_row(self) -> dict[str, frozenset[int]]:
        """Board label -> the seeds the plan gives that row ({} where labels are unknown)."""
        if self.row_of is None or self.seed_of is None:
            return {}
        seeds: dict[str, set[int]] = {}
        for run, (label, _) in self.row_of.items():
            seeds.setdefault(label, set()).add(self.seed_of[run])
        return {label: frozenset(s) for label, s in seeds.items()}

    def seeds_of_rows(self) -> dict[str, int]:
        """Board label -> how many seeds the plan gives that row ({} where labels are unknown)."""
        return {label: len(s) for label, s in self.seeds_by_row().items()}

    def test_ranges(self) -> tuple[int, ...]:
        """The largest test scales the plan's runs are tested to, ascending (() where unknown)."""
        return () if self.row_of is None else tuple(sorted({t for _, t in self.row_of.values()}))


@dataclass(frozen=True)
class Plans:
    """Every plan found next to the results folder.

    Attributes:
        sources: per preset, the sweep files (names relative to the leaderboard folder)
            that plan runs of it.
        presets: per preset, all its planned runs.
        tables: per (preset, task), its planned runs.
        problems: sweep files that could not be read, each with the reason (the board is
            still built; the CLI prints them).
        files_of: per planned run id, the sweep files that plan it (a board still being
            filled names the ones with runs left: :meth:`unfinished`).
    """

    sources: Mapping[str, tuple[str, ...]]
    presets: Mapping[str, Planned]
    tables: Mapping[tuple[str, str], Planned]
    problems: tuple[str, ...] = ()
    files_of: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def unfinished(self, preset: str, published: Iterable[str]) -> tuple[str, ...]:
        """The preset's sweep files that plan a run not in ``published`` (run ids), in
        :attr:`sources` order; all its sources where runs' files are unknown."""
        plan = self.presets.get(preset)
        if plan is None:
            return ()
        left = plan.run_ids - set(published)
        if not self.files_of:
            return self.sources.get(preset, ()) if left else ()
        files = {f for run in left for f in self.files_of.get(run, ())}
        return tuple(f for f in self.sources.get(preset, ()) if f in files)

    def without(self, tables: Iterable[tuple[str, str]]) -> Plans:
        """These plans less the (preset, task) ``tables`` (retired ones, ``leaderboard.retired``):
        their runs leave both the table's and the preset's plan."""
        gone = set(tables)
        dropped = {run for key in gone if key in self.tables for run in self.tables[key].run_ids}
        presets = {}
        for preset, plan in self.presets.items():
            run_ids = plan.run_ids - dropped
            seed_of = None if plan.seed_of is None else {r: s for r, s in plan.seed_of.items() if r in run_ids}
            seeds = plan.seeds if seed_of is None else tuple(sorted(set(seed_of.values())))
            cell_of = None if plan.cell_of is None else {r: c for r, c in plan.cell_of.items() if r in run_ids}
            row_of = None if plan.row_of is None else {r: c for r, c in plan.row_of.items() if r in run_ids}
            presets[preset] = Planned(run_ids, seeds, seed_of, cell_of, row_of)
        tables = {key: plan for key, plan in self.tables.items() if key not in gone}
        return Plans(self.sources, presets, tables, self.problems, self.files_of)


NO_PLANS = Plans({}, {}, {})


def read_plans(folder: Path) -> Plans:
    """The plans of the sweep files (``*.toml``, except ``retired.toml``) in ``folder``;
    unreadable ones become ``problems``, never an error (the results alone make a valid board)."""
    from harness.sweeps.sweep import load_sweep
    from leaderboard.records import record_label
    from leaderboard.retired import RETIRED_FILE

    runs: list[tuple[Any, ...]] = []  # (preset, task, seed, run_id, source, cell, (label, test_max))
    problems = []
    for path in sorted(folder.glob("*.toml")) if folder.is_dir() else []:
        if path.name == RETIRED_FILE:
            continue
        try:
            configs = load_sweep(path).configs()
        except (ValueError, TypeError, KeyError) as exc:
            problems.append(f"{path.name}: {exc}")
            continue
        for c in configs:
            d = c.to_dict()
            row = (record_label({"pe": c.pe, "config": d}), int(d["eval"]["test_max"]))
            runs.append((c.preset, c.task, c.seed, c.run_id(), path.name, cell(d), row))
    return plans_of(runs, problems)


def cell(config: Mapping[str, Any]) -> str:
    """A planned or published run's place on the boards: its preset and everything that
    identifies it but the encoding's options (the encoding, task, seed, training,
    evaluation, and a variant's evaluation options), from its config dict
    (``RunConfig.to_dict``, as results records hold it). A run re-run with corrected
    encoding options, such as randomized PE's ``draw``, gets a new run id but keeps its
    cell; a run whose training or evaluation changed does not."""
    return f"{config['preset']}/{config_run_id({**config, 'pe_options': {}})}"


def plans_of(runs: Iterable[tuple[Any, ...]], problems: Iterable[str] = ()) -> Plans:
    """Plans from (preset, task, seed, run_id, source file[, cell[, (board label, test_max)]]) tuples."""
    runs = list(runs)

    def planned(rows: list[tuple[Any, ...]]) -> Planned:
        cells = {r[3]: r[5] for r in rows if len(r) > 5}
        row_of = {r[3]: (str(r[6][0]), int(r[6][1])) for r in rows if len(r) > 6}
        return Planned(
            frozenset(r[3] for r in rows),
            tuple(sorted({r[2] for r in rows})),
            {r[3]: r[2] for r in rows},
            cells if len(cells) == len(rows) else None,
            row_of if len(row_of) == len(rows) else None,
        )

    presets = sorted({r[0] for r in runs})
    files: dict[str, set[str]] = {}
    for r in runs:
        files.setdefault(r[3], set()).add(r[4])
    return Plans(
        sources={p: tuple(sorted({r[4] for r in runs if r[0] == p})) for p in presets},
        presets={p: planned([r for r in runs if r[0] == p]) for p in presets},
        tables={
            (p, t): planned([r for r in runs if (r[0], r[1]) == (p, t)])
            for p, t in sorted({(r[0], r[1]) for r in runs})
        },
        problems=tuple(problems),
        files_of={run: tuple(sorted(names)) for run, names in files.items()},
    )


@dataclass(frozen=True)
class Filled:
    """How much of a plan is published: ``done`` of ``planned`` runs, and the seeds with
    at least one published run against the planned seeds."""

    done: int
    planned: int
    seeds_done: tuple[int, ...]
    seeds_planned: tuple[int, ...]
    by_seed: tuple[tuple[int, int, int], ...] = ()  # (seed, published, planned), ascending seed
    rerunning: int = 0  # planned runs not published whose cell an earlier, since corrected run holds

    @property
    def complete(self) -> bool:
        return self.done >= self.planned

    @property
    def covered(self) -> bool:
        """Every planned run is published, or is the re-run, under corrected options, of a
        published run of the same cell (:func:`cell`), which stands in for it meanwhile:
        the table has all its rows and seeds, some still to be replaced."""
        return self.done + self.rerunning >= self.planned


def seeds_by_run(records: Iterable[Any]) -> dict[str, int]:
    """Published results records (``leaderboard.schema`` records) as run id -> seed, what
    :func:`filled` takes."""
    return {r.run_id: int(r.data["seed"]) for r in records}


def published_cells(records: Iterable[Any]) -> frozenset[str]:
    """The cells (:func:`cell`) of published results records, what :func:`filled` takes."""
    return frozenset(cell(r.data["config"]) for r in records)


def filled(plan: Planned, published: Mapping[str, int], cells: frozenset[str] = frozenset()) -> Filled:
    """``plan`` against the published runs (run id -> seed) and their ``cells``."""
    done = plan.run_ids & published.keys()
    # a published cell stands in for a planned run only where no planned run published holds it: a new
    # row of another option (randomized{max_length=336} beside randomized) shares its cell, re-runs nothing
    taken = set() if plan.cell_of is None else {plan.cell_of.get(run) for run in done}
    rerunning = sum(
        1 for run in plan.run_ids - done if plan.cell_of is not None and plan.cell_of.get(run) in cells - taken
    )
    by_seed: tuple[tuple[int, int, int], ...] = ()
    if plan.seed_of is not None:
        seed_of = plan.seed_of
        by_seed = tuple(
            (seed, sum(seed_of[i] == seed for i in done), sum(seed_of[i] == seed for i in plan.run_ids))
            for seed in plan.seeds
        )
    return Filled(
        len(done), len(plan.run_ids), tuple(sorted({published[i] for i in done})), plan.seeds, by_seed, rerunning
    )
