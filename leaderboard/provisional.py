"""What makes a table provisional, in the sentences beside it: a board still being
filled (fewer runs or seeds published than its sweep files plan), and a table of an
earlier protocol whose replacement is being run.
"""

from __future__ import annotations

from leaderboard.board import Board, Table
from leaderboard.plans import Filled
from leaderboard.records import train_steps
from leaderboard.text import plural


def filling_sentence(board: Board, preset: str) -> str | None:
    """One sentence saying that the preset's board is still being filled, or None (no
    plan, or every planned run published)."""
    f = board.preset_filled(preset)
    if f is None or f.complete:
        return None
    sources = ", ".join(f"leaderboard/{s}" for s in board.plans.sources[preset])
    records = board.records_where(preset=preset)
    left = board.plans.unfinished(preset, (r.run_id for r in records)) or board.plans.sources[preset][:1]
    rest = " and ".join(f"pezoo sweep plan leaderboard/{s}" for s in left)
    return (
        f"Still being filled: {f.done} of the {plural(f.planned, 'run')} that {sources} plans are published "
        f"({_seeds_phrase(f)}){_rerun_phrase(f)}; {rest} {'list' if len(left) > 1 else 'lists'} the rest. "
        "A table with fewer runs or seeds than planned is provisional: its ranking may change."
    )


def _rerun_phrase(f: Filled) -> str:
    """``; 3 re-runs of published runs under corrected options to come, ...`` when some
    planned runs re-run published ones (``Filled.rerunning``), else empty."""
    if not f.rerunning:
        return ""
    runs = plural(f.rerunning, "re-run")
    return (
        f"; {runs} of published runs under corrected options to come, the earlier runs standing in meanwhile, "
        "marked with how they depart from their paper"
    )


def superseded_sentence(board: Board, table: Table) -> str | None:
    """``an earlier protocol (3000 steps): the board preset's table for odds_first (30 of
    51 planned runs published) replaces it when complete; not tested against the papers'
    claims`` for a table of a preset whose other tables have already left the board for a
    later protocol, else None."""
    successor = board.successor(table.preset)
    if successor is None:
        return None
    steps = "/".join(map(str, train_steps(board.records_where(preset=table.preset, task=table.task))))
    later = next((t for t in board.tables if (t.preset, t.task) == (successor, table.task)), None)
    f = None if later is None else board.table_filled(later)
    so_far = "not started" if later is None else f"{f.done} of {f.planned} planned runs published" if f else "begun"
    return (
        f"an earlier protocol ({steps} steps): the {successor} preset's table for {table.task} ({so_far}) replaces "
        "it when complete; not tested against the papers' claims"
    )


def table_filling(board: Board, table: Table) -> str | None:
    """``provisional: 15 of 19 planned runs (seed 0: 13 of 13, seed 1: 2 of 13, ...)`` for an
    unfinished table, else None."""
    f = board.table_filled(table)
    if f is None or f.complete:
        return None
    return f"provisional: {f.done} of {f.planned} planned runs ({_seeds_phrase(f)}){_rerun_phrase(f)}"


def _seeds_phrase(f: Filled) -> str:
    """``seed 0: 20 of 20, seed 1: 1 of 20, seed 2: 1 of 20`` (or, without per-seed counts,
    ``seeds 0, 1 of 0, 1, 2``)."""
    if f.by_seed:
        return ", ".join(f"seed {seed}: {done} of {planned}" for seed, done, planned in f.by_seed)
    done = ", ".join(map(str, f.seeds_done)) or "none"
    return f"{'seed' if len(f.seeds_done) == 1 else 'seeds'} {done} of {', '.join(map(str, f.seeds_planned))}"
