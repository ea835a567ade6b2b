"""What the papers claim about extrapolation, and what the board's numbers say about it.

A leaderboard answers its question only if a reader can see where it agrees with the
papers and where it does not. Each :class:`Claim` names its source (paper and section),
says the claim in one sentence, and states the test the board applies to it: a plain
rule over the board's own table numbers (``leaderboard.board.Row``), so a verdict is
never an opinion. A verdict on a table that is still being filled is marked provisional
(``leaderboard.plans``); a claim is only tested on the rows run as its paper runs them
(``prism{paper}``, ``randomized:ape`` evaluated on random positions), or as near as the
board's model allows (Hard-ALiBi: 3 windowed heads and 1 NoPE head per layer, where the
paper's model has 6 and 10; ``harness.protocols`` words each difference), never on a configuration
nobody proposed. Two rows' numbers are compared as the tables show them
(``harness.ranking.shown``), and every number is worded as its table cell
(``leaderboard.board.cell_text``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.ranking import shown
from leaderboard.board import Board, Row, Table, cell_text, table_filling

EM_OK = 0.9  # "keeps working": exact match at least this at a scale (the reach threshold)
COLLAPSED = 0.05  # "collapses": exact match beyond N below this


@dataclass(frozen=True)
class Verdict:
    """What one (preset, task) table says about a claim.

    Attributes:
        preset, task: the table.
        outcome: ``holds``, ``partly`` or ``does not hold``.
        evidence: the numbers behind it, one sentence.
        provisional: the table is short of its planned runs or seeds (its words), or None.
    """

    preset: str
    task: str
    outcome: str
    evidence: str
    provisional: str | None = None


@dataclass(frozen=True)
class Claim:
    """One claim and the test the board applies to it.

    Attributes:
        source: the paper and where it says so.
        says: the claim, in one sentence.
        test: how the board checks it, in one sentence.
        tasks: the tasks the claim is about; None: every task the needed rows are on.
        check: (table, rows by label) -> (outcome, evidence), or None where the table
            lacks the rows the claim needs.
    """

    source: str
    says: str
    test: str
    tasks: tuple[str, ...] | None
    check: Callable[[Table, dict[str, Row]], tuple[str, str] | None]


def _reach_outcome(row: Row | None, table: Table, name: str) -> tuple[str, str] | None:
    """holds: EM >= 0.9 at every tested scale past N on every seed; partly: some scales past N."""
    if row is None:
        return None
    n, top = table.train_max, table.test_max
    if not row.fitted:
        return "does not hold", f"{name} did not fit the training scales (EM≤{n} {cell_text(row, 'em_within')})"
    reach = row.per_seed.get("reach", ())
    low = int(min(reach)) if reach else n
    em = cell_text(row, "em_beyond")
    if low >= top:
        return "holds", (
            f"{name}: EM ≥ {EM_OK} at every tested scale {n + 1}..{top} on every seed (EM>{n} {em}); "
            f"tested up to {top / n:g}× N"
        )
    if low > n:
        return "partly", f"{name} reaches {low} on its weakest seed of the tested {top} (EM>{n} {em})"
    return "does not hold", f"{name} falls below EM {EM_OK} at scale {n + 1} (EM>{n} {em})"


def _prism(table: Table, rows: dict[str, Row]) -> tuple[str, str] | None:
    return _reach_outcome(rows.get("prism{paper}"), table, "prism{paper}")


def _hard_alibi(table: Table, rows: dict[str, Row]) -> tuple[str, str] | None:
    """A comparative claim ("state of the art"), so a comparative test: its rank among the
    fitted encodings on the table, then whether every seed reaches past N at all."""
    row = rows.get("hard_alibi")
    if row is None:
        return None
    n = table.train_max
    if row.pending:  # a rank among the others needs all its seeds
        return None
    if row.rank is None:  # not fitted
        return "does not hold", f"hard_alibi did not fit the training scales (EM≤{n} {cell_text(row, 'em_within')})"
    reach = row.per_seed.get("reach", ())
    low = int(min(reach)) if reach else n
    ranked = sum(r.ranked for r in table.rows)
    said = f"hard_alibi ranks {row.rank} of {ranked} (EM>{n} {cell_text(row, 'em_beyond')}; every seed reaches "
    said += f"at least {low} of the tested {table.test_max})"
    above = [r.label for r in table.rows if r.rank is not None and r.rank < row.rank]
    if row.rank == 1:
        return "holds", said
    behind = f"; ranked above it: {', '.join(above[:3])}{' …' if len(above) > 3 else ''}"
    if low > n:
        return "partly", said + behind
    return "does not hold", said + behind


def _randomized(table: Table, rows: dict[str, Row]) -> tuple[str, str] | None:
    rand, base = rows.get("randomized:ape"), rows.get("ape")
    if rand is None or base is None:
        return None
    n = table.train_max
    r, b = rand.scores["tok_beyond"], base.scores["tok_beyond"]
    numbers = f"tok>{n} {cell_text(rand, 'tok_beyond')} against {cell_text(base, 'tok_beyond')}; "
    numbers += f"EM>{n} {cell_text(rand, 'em_beyond')} against {cell_text(base, 'em_beyond')}"
    if shown(r.lo) > shown(b.hi):  # as the table shows them
        return "holds", f"randomized:ape above sin/cos APE on every seed: {numbers}"
    if shown(r.mean) > shown(b.mean):
        return "partly", f"randomized:ape above sin/cos APE on the mean, within the seeds' spread: {numbers}"
    return "does not hold", f"randomized:ape not above sin/cos APE: {numbers}"


def _ape(table: Table, rows: dict[str, Row]) -> tuple[str, str] | None:
    found = [(name, rows[name]) for name in ("ape", "learned_ape") if name in rows]
    n = table.train_max
    unfit = [
        f"{name} did not fit (EM≤{n} {cell_text(row, 'em_within')}): not counted"
        for name, row in found
        if not row.fitted
    ]
    found = [(name, row) for name, row in found if row.fitted]  # collapsing past N means nothing if N was not learned
    if not found:
        return None
    parts, collapsed = [], 0
    for name, row in found:
        em = row.scores["em_beyond"]
        parts.append(f"{name} EM>{n} {cell_text(row, 'em_beyond')}")
        collapsed += em.hi < COLLAPSED
    outcome = "holds" if collapsed == len(found) else "partly" if collapsed else "does not hold"
    return outcome, "; ".join(parts + unfit)


def _above(name: str, others: Sequence[str]) -> Callable[[Table, dict[str, Row]], tuple[str, str] | None]:
    """A comparative claim ("extrapolates better than X, Y, ..."): ``name`` against each of
    ``others`` on the table. Above one: ranked ahead of it, or it did not fit. holds: above
    every one, and its EM>N range over seeds clear of theirs (the seeds separate them);
    partly: above some, or above all on the ranking with the seeds not separating them;
    does not hold: above none, or ``name`` did not fit."""

    def check(table: Table, rows: dict[str, Row]) -> tuple[str, str] | None:
        row, present = rows.get(name), [o for o in others if o in rows and not rows[o].pending]
        if row is None or row.pending or not present:  # a comparison of ranks needs every seed
            return None
        waiting = [o for o in others if o in rows and rows[o].pending]
        n = table.train_max
        if row.rank is None:
            return "does not hold", f"{name} did not fit the training scales (EM≤{n} {cell_text(row, 'em_within')})"
        em = row.scores["em_beyond"]

        def beats(other: Row) -> bool:
            return other.rank is None or other.rank > row.rank  # type: ignore[operator]

        def clear(other: Row) -> bool:  # the seeds separate the two on EM>N, as the table shows them
            return other.rank is None or shown(em.lo) > shown(other.scores["em_beyond"].hi)

        def named(other: Row) -> str:
            if other.rank is None:
                return f"{other.label} (did not fit)"
            return f"{other.label} (rank {other.rank}, EM>{n} {cell_text(other, 'em_beyond')})"

        beaten = [rows[o] for o in present if beats(rows[o])]
        ahead = [rows[o] for o in present if not beats(rows[o])]
        said = f"{name} ranks {row.rank} (EM>{n} {cell_text(row, 'em_beyond')})"
        if beaten:
            said += "; above " + ", ".join(named(o) for o in beaten)
        if ahead:
            said += "; not above " + ", ".join(named(o) for o in ahead)
        if waiting:
            said += "; not compared yet (short of their seeds): " + ", ".join(waiting)
        if not beaten:
            return "does not hold", said
        if ahead:
            return "partly", said
        unseparated = [o.label for o in beaten if not clear(o)]
        if unseparated:
            return "partly", said + f"; the seeds do not separate it from {', '.join(unseparated)} on EM>{n}"
        return "holds", said

    return check


CLAIMS: tuple[Claim, ...] = (
    Claim(
        source="Lee 2025, “Position as Probability: Self-Supervised Transformers that Think Past Their Training for "
        "Length Extrapolation”, abstract and §1",
        says="PRISM extrapolates accurately far beyond the training length (up to 10×, copy variants up to 15×).",
        test=f"prism{{paper}} fits and keeps exact match ≥ {EM_OK} at every tested scale beyond N, on every seed "
        "(holds), only as far as the table tests (its largest scale over N), which may be short of the claimed 10×; "
        "keeps it past N on every seed but not to the largest tested scale (partly); otherwise does not hold.",
        tasks=None,
        check=_prism,
    ),
    Claim(
        source="Jelassi et al. 2024, “Repeat After Me”, as summarised by Hou et al., “Universal Length "
        "Generalization with Turing Programs”, §1 and §2.3",
        says="Hard-ALiBi achieves state-of-the-art length generalization on copying.",
        test="hard_alibi fits copy and ranks first among the encodings that fit (holds); ranks lower but reaches "
        f"past N (exact match ≥ {EM_OK}) on every seed (partly); otherwise does not hold.",
        tasks=("copy",),
        check=_hard_alibi,
    ),
    Claim(
        source="Ruoss et al. 2023, “Randomized Positional Encodings Boost Length Generalization of "
        "Transformers”, §4 and Table 1",
        says="Randomizing an encoding's positions raises its accuracy beyond the training lengths "
        "(by 12.0 points on average over their tasks).",
        test="randomized:ape's per-token accuracy beyond N (the paper's metric) is above sin/cos APE's: on every "
        "seed (holds), on the mean only (partly).",
        tasks=None,
        check=_randomized,
    ),
    Claim(
        source="Hou et al., “Universal Length Generalization with Turing Programs”, related work (after Shaw "
        "et al. 2018); Ruoss et al. 2023, §1",
        says="Absolute position encodings do not generalize past the training length.",
        test=f"sin/cos and learned APE, where they fit the training scales, score exact match below {COLLAPSED} "
        "beyond N on every seed.",
        tasks=None,
        check=_ape,
    ),
    Claim(
        source="Li et al. 2024, “Functional Interpolation for Relative Positions Improves Long Context "
        "Transformers”, abstract (claimed on language modelling and long-text benchmarks)",
        says="FIRE generalizes to longer contexts better than the relative encodings it is compared with.",
        test="fire ranks above each of T5's bias, ALiBi, KERPLE (log), RoPE and NoPE on the table, with its EM>N "
        "range over seeds clear of theirs (holds); above some, or above all without the seeds separating them "
        "(partly); above none (does not hold).",
        tasks=None,
        check=_above("fire", ("t5", "alibi", "kerple_log", "rope", "nope")),
    ),
    Claim(
        source="Chi et al. 2022, “KERPLE: Kernelized Relative Positional Embedding for Length Extrapolation”, "
        "abstract (claimed on language modelling)",
        says="KERPLE's logarithmic variant extrapolates better than the encodings it is compared with.",
        test="kerple_log ranks above each of ALiBi, T5's bias, RoPE and sin/cos APE on the table, with its EM>N "
        "range over seeds clear of theirs (holds); above some, or above all without the seeds separating them "
        "(partly); above none (does not hold).",
        tasks=None,
        check=_above("kerple_log", ("alibi", "t5", "rope", "ape")),
    ),
    Claim(
        source="McLeish et al. 2024, “Transformers Can Do Arithmetic with the Right Embeddings”, abstract",
        says="With Abacus embeddings, a model trained on additions of up to 20 digits adds 100-digit numbers "
        "(up to 99% accuracy): 5× the training length.",
        test=f"abacus fits addition and keeps exact match ≥ {EM_OK} at every tested scale beyond N, on every seed "
        "(holds), only as far as the table tests, which may be short of 5×; keeps it past N on every seed but not to "
        "the largest tested scale (partly); otherwise does not hold. The task is pezoo's addition (least significant "
        "digit first, with a chain of thought), not the paper's format.",
        tasks=("addition",),
        check=lambda table, rows: _reach_outcome(rows.get("abacus"), table, "abacus"),
    ),
)
"""The claims the board tests, in the order the pages show them."""


def verdict(board: Board, claim: Claim, table: Table) -> Verdict | None:
    """The claim's verdict on one table of ``board``; None when the table lacks the rows
    (or the task) it needs."""
    if claim.tasks is not None and table.task not in claim.tasks:
        return None
    if board.successor(table.preset) is not None:  # an earlier protocol, being replaced: not evidence
        return None
    found = claim.check(table, {row.label: row for row in table.rows})
    if found is None:
        return None
    outcome, evidence = found
    return Verdict(table.preset, table.task, outcome, evidence, table_filling(board, table))


def verdicts(board: Board, claim: Claim) -> list[Verdict]:
    """The claim's verdict on every table of ``board`` that has the rows it needs."""
    return [v for table in board.tables if (v := verdict(board, claim, table)) is not None]


def table_verdicts(board: Board, table: Table, claims: Sequence[Claim] = CLAIMS) -> list[tuple[Claim, Verdict]]:
    """The verdicts of every claim on one table (a task page shows them under its ranking)."""
    return [(c, v) for c in claims if (v := verdict(board, c, table)) is not None]


def claim_verdicts(board: Board, claims: Sequence[Claim] = CLAIMS) -> list[tuple[Claim, list[Verdict]]]:
    """Every claim with at least one verdict on ``board``, with its verdicts."""
    return [(c, v) for c in claims if (v := verdicts(board, c))]


def unanswered(board: Board, claims: Sequence[Claim] = CLAIMS) -> list[tuple[Claim, str]]:
    """The claims with no verdict on ``board``, each with why: ``the board has no addition
    table`` (none of its tasks has a table the claims are tested on) or ``no table has the
    rows it needs``. The pages list them, so a claim does not vanish without a word."""
    tested_tasks = {t.task for t in board.tables if board.successor(t.preset) is None}
    out = []
    for claim in claims:
        if verdicts(board, claim):
            continue
        if claim.tasks is not None and not tested_tasks & set(claim.tasks):
            names = " or ".join(claim.tasks)
            out.append((claim, f"the board has no {names} table of a protocol the claims are tested on"))
        else:
            out.append((claim, "no table has the rows it needs"))
    return out


UNANSWERED_RULE = "No verdict on this board:"
"""The heading of the claims without a verdict (:func:`unanswered`)."""

CLAIMS_RULE = (
    "Each claim is tested on the rows run as its paper runs them, or as near as the board's small model allows "
    "(each difference is listed under “Run unlike their papers”), by the rule stated under it; numbers are "
    "compared as the tables show them. A verdict on a table still short of its planned runs or seeds is "
    "provisional; tables of an earlier protocol that a later one is replacing are not tested. Small models and "
    "short training: a claim that does not hold here may still hold at the papers' "
    "scale."
)
"""What the claims section is, quoted by the site and the README."""
