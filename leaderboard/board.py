"""The board: every (preset, task, test range) table, assembled once from the published
records against the sweep files' plans, less what has left it.

``assemble`` checks that each table's runs share one protocol, and each row's runs one
way of being made (``leaderboard.records``, ``leaderboard.making``),
applies the retirements of ``leaderboard/retired.toml`` (``retire``: tables superseded
by a later protocol or withdrawn, rows replaced by a corrected run), and computes each
table's rows and curves (``leaderboard.rows``). A ``Board`` then answers what the pages
ask of it: which tables a task has, how much of a plan is published, what is still to
come, and what replaces an earlier protocol.

What the pages show beside the tables is computed next door, from the records or this
board: how far each row holds (``leaderboard.reach``), whether a table is provisional
(``leaderboard.provisional``), where the runs came from (``leaderboard.provenance``),
the notes on rows run unlike their papers, reading extra inputs or set up per task
(``leaderboard.notes``), the verdicts on the papers' claims (``leaderboard.claims``) and
the at a glance grid (``leaderboard.overview``). Those modules import this one, never
the reverse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from leaderboard.making import legend, making_of_runs
from leaderboard.plans import NO_PLANS, Filled, Planned, Plans, filled, published_cells, seeds_by_run
from leaderboard.records import BoardError, check_protocols, frame, record_label, test_range, train_steps
from leaderboard.retired import RETIRED_FILE, Retirement, RowRetirement
from leaderboard.rows import Curve, Row, curves, summary
from leaderboard.schema import Record
from leaderboard.text import and_join, plural


@dataclass(frozen=True)
class Table:
    """One (preset, task): its training range, ranked rows and curves."""

    preset: str
    task: str
    train_max: int
    test_max: int
    rows: tuple[Row, ...]
    curves: tuple[Curve, ...]
    protocol: str | None = None  # the config's "protocol" (decoder / encoder) where runs record one
    train_min: int = 1
    match: str = "trace"  # what exact match scores (config eval.match): the whole completion, or the final answer
    test_range: int | None = None  # its runs' planned largest test scale (config eval.test_max); None: test_max

    @property
    def tested_to(self) -> int:
        """The largest test scale its runs were planned to (a table's identity beside preset and task)."""
        return self.test_max if self.test_range is None else self.test_range

    @property
    def multiple(self) -> float:
        """The largest tested scale as a multiple of N (4 for 40 over N = 10)."""
        return self.test_max / self.train_max

    def made_legend(self) -> str | None:
        """The key to its rows' marks of how they were made (``GPU``: ``leaderboard.making.legend``);
        None where every row was made as the CPU board is."""
        return legend([(row.label, row.making) for row in self.rows])


@dataclass(frozen=True)
class RetiredTable:
    """A (preset, task) table left off the board (``leaderboard.retired``): the retirement,
    and what its published runs were."""

    retirement: Retirement
    runs: int
    seeds: tuple[int, ...]
    steps: tuple[int, ...]
    successor_steps: tuple[int, ...]

    def sentence(self) -> str:
        """``The quick table for copy (22 runs, seeds 0, 1, 3000 training steps) has left the
        board: the board preset's copy table (10000 steps) is complete. Why: ... Its runs stay
        in the results files.``"""
        r = self.retirement
        seeds = ("seed " if len(self.seeds) == 1 else "seeds ") + ", ".join(map(str, self.seeds))
        steps = "/".join(map(str, self.steps))
        replaced = (
            "no table replaces it"
            if r.superseded_by is None
            else f"the {r.superseded_by} preset's {r.task} table ({'/'.join(map(str, self.successor_steps))} steps) "
            "is complete"
        )
        return (
            f"The {r.preset} table for {r.task} ({plural(self.runs, 'run')}, {seeds}, {steps} training steps) "
            f"has left the board: {replaced}. Why: {r.why.rstrip('.')}. Its runs stay in the results files."
        )

    def summary(self) -> str:
        """What left the board, in a few words: ``the quick table for copy``."""
        return f"the {self.retirement.preset} table for {self.retirement.task}"

    @property
    def tasks(self) -> tuple[str, ...]:
        return (self.retirement.task,)


@dataclass(frozen=True)
class RetiredRow:
    """A row left off the board (``[[retired_row]]`` in ``leaderboard.retired``): the
    retirement, and the tasks and seeds its published runs covered."""

    retirement: RowRetirement
    runs: int
    tasks: tuple[str, ...]
    seeds: tuple[int, ...]

    def sentence(self) -> str:
        """``The board row rope → dynamic×4 L=22 (same weights) (6 runs on copy, reverse,
        seeds 0, 1, 2) has left the board for rope → dynamic×4 L=24 (same weights), published
        on the same tasks and seeds. Why: ... Its runs stay in the results files.``"""
        r = self.retirement
        seeds = ("seed " if len(self.seeds) == 1 else "seeds ") + ", ".join(map(str, self.seeds))
        return (
            f"The {r.preset} row {r.row} ({plural(self.runs, 'run')} on {', '.join(self.tasks)}, {seeds}) has left "
            f"the board for {r.superseded_by}, published on the same tasks and seeds. Why: {r.why.rstrip('.')}. "
            "Its runs stay in the results files."
        )

    def summary(self) -> str:
        return f"the {self.retirement.preset} row {self.retirement.row}"


RETIRED_RULE = (
    "Tables superseded by a complete table of a later protocol or withdrawn with their task, and rows replaced by "
    f"a corrected run (leaderboard/{RETIRED_FILE}):"
)


@dataclass(frozen=True)
class TableToCome:
    """A planned table with no published run yet: what it will hold."""

    preset: str
    task: str
    tested_to: int
    labels: tuple[str, ...]
    runs: int
    seeds: tuple[int, ...]

    def sentence(self, train_max: int | None = None) -> str:
        """``Being run: a copy table tested to 100 (10× N): hard_alibi, learned_prf_sh and
        prism{paper}, seeds 0, 1, 2 (9 runs); none published yet.``"""
        times = "" if not train_max else f" ({self.tested_to / train_max:g}× N)"
        seeds = ("seed " if len(self.seeds) == 1 else "seeds ") + ", ".join(map(str, self.seeds))
        return (
            f"Being run: a {self.task} table of preset {self.preset} tested to {self.tested_to}{times}: "
            f"{and_join(list(self.labels))}, {seeds} ({plural(self.runs, 'run')}); none published yet"
        )


@dataclass(frozen=True)
class Board:
    """Everything the pages show, computed once from the records (less the retired tables')."""

    records: tuple[Record, ...]
    tables: tuple[Table, ...]  # sorted by task, then preset
    plans: Plans = NO_PLANS  # the committed sweep files' planned runs (leaderboard.plans)
    retired: tuple[RetiredTable | RetiredRow, ...] = ()  # tables and rows left off the board, and why

    def _published(self, **equal: str) -> tuple[dict[str, int], frozenset[str]]:
        records = self.records_where(**equal)
        return seeds_by_run(records), published_cells(records)

    def preset_filled(self, preset: str) -> Filled | None:
        """How much of the preset's plan is published; None without a plan."""
        plan = self.plans.presets.get(preset)
        return None if plan is None else filled(plan, *self._published(preset=preset))

    def table_plan(self, table: Table) -> Planned | None:
        """The planned runs of ``table`` (its preset, task and test range); None without a plan."""
        plan = self.plans.tables.get((table.preset, table.task))
        return None if plan is None else plan.within(table.tested_to)

    def table_filled(self, table: Table) -> Filled | None:
        """How much of the (preset, task, test range)'s plan is published; None without a plan."""
        plan = self.table_plan(table)
        if plan is None:
            return None
        records = self.records_where(preset=table.preset, task=table.task)
        records = [r for r in records if test_range(r.data) == table.tested_to]
        return filled(plan, seeds_by_run(records), published_cells(records))

    def tables_to_come(self, task: str) -> list[TableToCome]:
        """The tables a sweep file plans on ``task`` that have no published run yet (a copy
        table tested to 100 while its runs train), so a page can say they are being run."""
        out = []
        for (preset, planned_task), plan in sorted(self.plans.tables.items()):
            if planned_task != task or self.successor(preset) is not None:
                continue
            have = {t.tested_to for t in self.tables if (t.preset, t.task) == (preset, task)}
            for tested_to in plan.test_ranges():
                if tested_to in have:
                    continue
                part = plan.within(tested_to)
                rows = part.seeds_of_rows()
                out.append(TableToCome(preset, task, tested_to, tuple(sorted(rows)), len(part.run_ids), part.seeds))
        return out

    @property
    def tasks(self) -> list[str]:
        return sorted({t.task for t in self.tables})

    @property
    def presets(self) -> list[str]:
        return sorted({t.preset for t in self.tables})

    @property
    def labels(self) -> list[str]:
        return sorted({row.label for t in self.tables for row in t.rows})

    @property
    def encodings(self) -> list[str]:
        return sorted({row.encoding for t in self.tables for row in t.rows})

    def retired_table(self, preset: str, task: str) -> RetiredTable | None:
        """The retirement of ``preset``'s table for ``task``, if it has left the board."""
        return next(
            (
                r
                for r in self.retired
                if isinstance(r, RetiredTable) and (r.retirement.preset, r.retirement.task) == (preset, task)
            ),
            None,
        )

    def successor(self, preset: str) -> str | None:
        """The later protocol that replaces ``preset``'s tables, where some of them have
        already left the board for it (``[[retired]]`` in ``leaderboard.retired``), else None."""
        return next(
            (
                r.retirement.superseded_by
                for r in self.retired
                if isinstance(r, RetiredTable) and r.retirement.preset == preset and r.retirement.superseded_by
            ),
            None,
        )

    def retired_on(self, task: str) -> list[RetiredTable | RetiredRow]:
        """The retirements that took something off ``task``'s tables."""
        return [r for r in self.retired if task in r.tasks]

    def tables_of_task(self, task: str) -> list[Table]:
        return [t for t in self.tables if t.task == task]

    def records_where(self, **equal: str) -> list[Record]:
        return [r for r in self.records if all(r.data[k] == v for k, v in equal.items())]


def assemble(
    records: Sequence[Record], plans: Plans = NO_PLANS, retirements: Sequence[Retirement | RowRetirement] = ()
) -> Board:
    """The board of ``records`` (validated results) against the sweep files' ``plans``,
    less the tables ``retirements`` retire; raises BoardError on incomparable runs or a
    retirement that does not hold (:func:`retire`)."""
    records, plans, retired = retire(records, plans, retirements)
    check_protocols(records)
    df = frame(records)
    tables = []
    by_table: dict[tuple[str, str, int], list[Record]] = {}
    for r in records:
        by_table.setdefault((r.data["task"], r.data["preset"], test_range(r.data)), []).append(r)
    for (task, preset, tested_to), g in df.groupby(["task", "preset", "test_range"], sort=True):
        table_records = by_table[(str(task), str(preset), int(tested_to))]
        config = table_records[0].data["config"]
        protocol = config.get("protocol")  # one per (task, preset, test range): check_protocols made sure
        plan = plans.tables.get((str(preset), str(task)))
        wanted = _seeds_wanted(None if plan is None else plan.within(int(tested_to)), table_records)
        runs_of: dict[str, list[Mapping]] = {}
        for r in table_records:
            runs_of.setdefault(record_label(r.data), []).append(r.data)
        rows = [replace(row, making=making_of_runs(runs_of[row.label])) for row in summary(g, seeds_wanted=wanted)]
        tables.append(
            Table(
                preset=str(preset),
                task=str(task),
                train_max=int(g["train_max"].iloc[0]),
                test_max=int(g["length"].max()),
                rows=tuple(rows),  # each with how its runs were made (one way: check_protocols made sure)
                curves=tuple(curves(g)),
                protocol=None if protocol is None else str(protocol),
                train_min=int(config["train"].get("train_min", 1)),
                match=str(config.get("eval", {}).get("match", "trace")),
                test_range=int(tested_to),
            )
        )
    return Board(tuple(records), tuple(tables), plans, retired)


def _seeds_wanted(plan: Planned | None, records: Sequence[Record]) -> int | Mapping[str, int] | None:
    """The seeds the plan gives each row of a table still being filled: per label where
    the plan knows its rows' labels (a row planned for 8 seeds beside rows of 3), else
    the plan's seeds for every row. None (rank every row whose seeds fit) without a plan,
    or once every planned run is published or stood in for: the table is then complete,
    and a row the plan gave fewer seeds than others is as complete as it will get."""
    if plan is None:
        return None
    f = filled(plan, seeds_by_run(records), published_cells(records))
    if f.covered:
        return None
    rows = plan.seeds_of_rows()
    if not rows:
        return len(plan.seeds)
    # a published row the plan does not name wants what the plan's rows want at least
    fallback = min(rows.values())
    return {label: rows.get(label, fallback) for label in {record_label(r.data) for r in records}}


def retire(
    records: Sequence[Record], plans: Plans, retirements: Sequence[Retirement | RowRetirement]
) -> tuple[list[Record], Plans, tuple[RetiredTable | RetiredRow, ...]]:
    """(the records left on the board, the plans less the retired tables, the retired tables
    and rows).

    Raises:
        BoardError: a retirement that matches no published run (a typo), whose successor
            is not planned by a sweep file, is itself retired, or is not complete yet; a
            withdrawal (no successor) while a sweep file plans its task under another
            preset, or while runs of another preset on its task stay on the board; a row
            retirement whose successor row is not published on each of its tasks and seeds.
    """
    tables = [r for r in retirements if isinstance(r, Retirement)]
    kept, plans, retired_tables = _retire_tables(records, plans, tables)
    rows = [r for r in retirements if isinstance(r, RowRetirement)]
    kept, retired_rows = _retire_rows(kept, rows)
    _check_withdrawals(kept, [r for r in tables if r.superseded_by is None])
    return kept, plans, (*retired_tables, *retired_rows)


def _check_withdrawals(kept: Sequence[Record], withdrawn: Sequence[Retirement]) -> None:
    """Refuse a withdrawal whose task still has runs on the board (``kept``: the records
    left once every retirement is applied): their table would be shown, so something does
    replace the withdrawn one, and without a plan nothing marks it provisional."""
    for r in withdrawn:
        shown = sorted({str(rec.data["preset"]) for rec in kept if rec.data["task"] == r.task})
        if shown:
            have = "has" if len(shown) == 1 else "have"
            raise BoardError(
                f"leaderboard/{RETIRED_FILE} withdraws {r.preset!r} on {r.task!r} with no table replacing it, but "
                f"{' and '.join(map(repr, shown))} {have} published runs on {r.task!r}, which the board would show: "
                "plan them in a sweep file beside the results, and retire the old table for theirs once complete"
            )


def _retire_rows(
    records: list[Record], retirements: Sequence[RowRetirement]
) -> tuple[list[Record], tuple[RetiredRow, ...]]:
    """(the records left, the retired rows): each row's runs leave, once its successor row
    has a run on every (task, seed) it had."""
    if not retirements:
        return records, ()
    where = f"leaderboard/{RETIRED_FILE}"
    labels = [record_label(rec.data) for rec in records]
    retired_keys = {(r.preset, r.row) for r in retirements}
    out = []
    for r in retirements:
        gone = [
            rec for rec, label in zip(records, labels, strict=True) if (rec.data["preset"], label) == (r.preset, r.row)
        ]
        if not gone:
            raise BoardError(f"{where} retires the {r.preset} row {r.row!r}, but no published run has it (a typo?)")
        if (r.preset, r.superseded_by) in retired_keys:
            raise BoardError(f"{where}: the {r.preset} row {r.row!r} is superseded by {r.superseded_by!r}, retired too")
        covered = {
            (rec.data["task"], int(rec.data["seed"]))
            for rec, label in zip(records, labels, strict=True)
            if (rec.data["preset"], label) == (r.preset, r.superseded_by)
        }
        needed = {(rec.data["task"], int(rec.data["seed"])) for rec in gone}
        if needed - covered:
            missing = ", ".join(f"{task} seed {seed}" for task, seed in sorted(needed - covered))
            raise BoardError(
                f"{where} retires the {r.preset} row {r.row!r} for {r.superseded_by!r}, which is not published on "
                f"{missing}: retire the old row once its successor covers every task and seed it had"
            )
        out.append(
            RetiredRow(
                r,
                len(gone),
                tuple(sorted({task for task, _ in needed})),
                tuple(sorted({seed for _, seed in needed})),
            )
        )
    kept = [rec for rec, label in zip(records, labels, strict=True) if (rec.data["preset"], label) not in retired_keys]
    return kept, tuple(out)


def _retire_tables(
    records: Sequence[Record], plans: Plans, retirements: Sequence[Retirement]
) -> tuple[list[Record], Plans, tuple[RetiredTable, ...]]:
    """:func:`retire` for the (preset, task) tables."""
    if not retirements:
        return list(records), plans, ()
    retired_keys = {(r.preset, r.task) for r in retirements}
    out = tuple(_retired_table(r, records, plans, retired_keys) for r in retirements)
    kept = [rec for rec in records if (rec.data["preset"], rec.data["task"]) not in retired_keys]
    return kept, plans.without(retired_keys), out


def _retired_table(
    r: Retirement, records: Sequence[Record], plans: Plans, retired_keys: set[tuple[str, str]]
) -> RetiredTable:
    """The table ``r`` retires, once that holds: it has published runs, and either no sweep
    file plans its task under another preset (withdrawn) or the table superseding it may
    replace it (:func:`_successor_runs`); raises BoardError otherwise."""
    where = f"leaderboard/{RETIRED_FILE}"
    gone = [rec for rec in records if (rec.data["preset"], rec.data["task"]) == (r.preset, r.task)]
    if not gone:
        raise BoardError(f"{where} retires preset {r.preset!r} on {r.task!r}, but no published run is one (a typo?)")
    if r.superseded_by is None:
        still = sorted(p for p, t in plans.tables if t == r.task and (p, t) not in retired_keys)
        if still:
            raise BoardError(
                f"{where} withdraws {r.preset!r} on {r.task!r} with no table replacing it, but a sweep file "
                f"plans {' and '.join(map(repr, still))} on {r.task!r}: delete the [[withdrawn]] entry (the old "
                "table returns, marked as an earlier protocol) and retire it ([[retired]]) once that table is "
                "complete, or take the task out of that sweep file"
            )
        successor_steps: tuple[int, ...] = ()
    else:
        successor_steps = train_steps(_successor_runs(r, r.superseded_by, gone, records, plans, retired_keys))
    seeds = tuple(sorted({int(rec.data["seed"]) for rec in gone}))
    return RetiredTable(r, len(gone), seeds, train_steps(gone), successor_steps)


def _successor_runs(
    r: Retirement,
    successor: str,
    gone: Sequence[Record],
    records: Sequence[Record],
    plans: Plans,
    retired_keys: set[tuple[str, str]],
) -> list[Record]:
    """The published runs of ``successor``'s table, which supersedes the one ``r`` retires
    (whose runs are ``gone``); raises BoardError unless a sweep file plans that table, it is
    not retired too, and it is complete or shows again every encoding and seed the old one showed."""
    where = f"leaderboard/{RETIRED_FILE}"
    if (successor, r.task) in retired_keys:
        raise BoardError(f"{where}: {r.preset!r} on {r.task!r} is superseded by {successor!r}, which is retired too")
    plan = plans.tables.get((successor, r.task))
    if plan is None:
        raise BoardError(
            f"{where} retires {r.preset!r} on {r.task!r} in favour of {successor!r}, but no sweep file "
            f"plans {successor!r} on {r.task!r}, so nothing says that table is complete"
        )
    successors = [rec for rec in records if (rec.data["preset"], rec.data["task"]) == (successor, r.task)]
    f = filled(plan, seeds_by_run(successors), published_cells(successors))
    # a table whose rows all stand, some awaiting a corrected re-run, still replaces it; so does one that
    # shows every encoding on every seed the old table showed while later rows or seeds are added to it
    # (8 seeds for rows whose seeds split): it says itself that it is still being filled
    shown_again = {(rec.data["pe"], int(rec.data["seed"])) for rec in successors}
    if not f.covered and not {(rec.data["pe"], int(rec.data["seed"])) for rec in gone} <= shown_again:
        raise BoardError(
            f"{where} retires {r.preset!r} on {r.task!r}, but {successor!r} on {r.task!r} has "
            f"{f.done} of its {f.planned} planned runs published: retire the old table once the new one is complete"
        )
    return successors
