"""What the papers claim about extrapolation, and what the board's numbers say about it.

A leaderboard answers its question only if a reader can see where it agrees with the
papers and where it does not. Each :class:`Claim` names its source (paper and section),
says the claim in one sentence, and states the test the board applies to it: a plain
rule over the board's own table numbers (``leaderboard.rows.Row``), so a verdict is
never an opinion. A verdict on a table that is still being filled is marked provisional
(``leaderboard.plans``); a claim is only tested on the rows run as its paper runs them
(``prism{paper}``, ``randomized:ape`` evaluated on random positions), or as near as the
board's model allows (Hard-ALiBi: 3 windowed heads and 1 NoPE head per layer, where the
paper's model has 6 and 10; ``harness.config.protocols`` words each difference), never on a configuration
nobody proposed. Two rows' numbers are compared as the tables show them
(``harness.records.ranking.shown``), and every number is worded as its table cell
(``leaderboard.rows.cell_text``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from harness.records.counts import exact
from harness.records.ranking import shown
from leaderboard import permutation as pt
from leaderboard.board import Board, Table
from leaderboard.provisional import table_filling
from leaderboard.reach import nothing_extrapolates, null_text, times_n
from leaderboard.rows import SCORE_TITLES, Row, cell_text
from leaderboard.text import plural
from pezoo import PaperClaim

EM_OK = 0.9  # "keeps working": exact match at least this at a scale (the reach threshold)
COLLAPSED = 0.05  # "collapses": exact match beyond N below this
PARTLY_MULTIPLE = 2  # a reach claim is partly true where its weakest seed reaches at least this multiple of N

HOLDS, PARTLY, DOES_NOT_HOLD, NO_CONTRAST = "holds", "partly", "does not hold", "no contrast"
OUTCOMES = (HOLDS, PARTLY, DOES_NOT_HOLD, NO_CONTRAST)
"""The four outcomes of a verdict; ``no contrast``: nothing on the table extrapolates, or the tested row did not fit."""


@dataclass(frozen=True)
class Verdict:
    """What one (preset, task) table says about a claim.

    Attributes:
        preset, task: the table.
        outcome: one of OUTCOMES.
        evidence: the numbers behind it, one sentence.
        provisional: the table is short of its planned runs or seeds (its words), or None.
        said: the outcome as the page words it where it needs more than the outcome
            (``holds to the tested 4×; claimed 10×: untested``, outcome partly); None: the outcome.
        tested_to: the table's largest scale (a copy table tested to 100 gets a verdict of its own).
    """

    preset: str
    task: str
    outcome: str
    evidence: str
    provisional: str | None = None
    said: str | None = None
    tested_to: int | None = None

    @property
    def shown(self) -> str:
        return self.said or self.outcome

    def where(self) -> str:
        """``copy, preset board`` (``copy tested to 100, preset board`` for a further-tested table)."""
        further = f" tested to {self.tested_to}" if self.tested_to is not None else ""
        return f"{self.task}{further}, preset {self.preset}"


Found = tuple[str, str] | tuple[str, str, str]
"""(outcome, evidence) or (outcome, evidence, the outcome as said)."""


@dataclass(frozen=True)
class Claim:
    """One claim and the test the board applies to it.

    Attributes:
        source: the paper and where it says so.
        says: the claim, in one sentence.
        test: how the board checks it, in one sentence.
        tasks: the tasks the claim is about; None: every task the needed rows are on.
        check: (table, rows by label) -> Found, or None where the table lacks the rows the
            claim needs. A table where nothing extrapolates never reaches it (``no contrast``).
        multiple: the multiple of N a reach claim names (PRISM's 10), None for other claims:
            a table tested less far defers to a table of its task that tests that multiple.
    """

    source: str
    says: str
    test: str
    tasks: tuple[str, ...] | None
    check: Callable[[Table, dict[str, Row]], Found | None]
    multiple: float | None = None


def _weakest(row: Row, n: int) -> int:
    reach = row.per_seed.get("reach", ())
    return int(min(reach)) if reach else n


def _unfit(name: str, row: Row, n: int) -> tuple[str, str]:
    return (
        NO_CONTRAST,
        f"{name} did not fit the training scales (EM≤{n} {cell_text(row, 'em_within')}): nothing to test",
    )


def _reach_claim(name: str, claimed: float, floor: str) -> Callable[[Table, dict[str, Row]], Found | None]:
    """A claim that ``name`` extrapolates to ``claimed`` × N. holds: every seed keeps EM ≥ 0.9
    at every tested scale, and the table tests at least ``claimed`` × N; the same short of
    that multiple: ``holds to the tested k×; claimed m×: untested`` (outcome partly);
    partly: the weakest seed reaches at least PARTLY_MULTIPLE × N and the row's EM>N is not
    below the ``floor`` row's (NoPE's) by the permutation test; otherwise does not hold."""

    def check(table: Table, rows: dict[str, Row]) -> Found | None:
        row = rows.get(name)
        if row is None or row.pending:
            return None
        n, top = table.train_max, table.test_max
        if not row.fitted:
            return _unfit(name, row, n)
        low, em = _weakest(row, n), cell_text(row, "em_beyond")
        seeds = plural(len(row.seeds), "seed")
        nope = rows.get(floor)
        below: str | None = None
        if nope is not None and nope.fitted and nope.label != name:
            p = pt.p_above(nope.per_seed["em_beyond"], row.per_seed["em_beyond"])
            if p is not None and p <= pt.ALPHA:
                below = f"below NoPE on EM>{n} ({cell_text(row, 'em_beyond')} against {cell_text(nope, 'em_beyond')}; "
                below += pt.p_text(p, len(nope.seeds), len(row.seeds)) + ")"
        if low >= top:
            said = f"{name}: EM ≥ {EM_OK} at every tested scale {n + 1}..{top} on all {seeds} (EM>{n} {em})"
            if table.multiple + 1e-9 < claimed:
                return (
                    PARTLY,
                    said + f"; the table tests {top / n:g}× N, the claim is {claimed:g}×",
                    f"holds to the tested {top / n:g}×; claimed {claimed:g}×: untested",
                )
            return HOLDS, said + f"; tested to {top / n:g}× N, the claimed {claimed:g}×"
        reached = f"{name}'s weakest seed keeps EM ≥ {EM_OK} to {low} ({times_n(low, table)} N) of the tested {top}"
        if below is not None:
            return DOES_NOT_HOLD, f"{reached}, and it is {below}"
        if low >= PARTLY_MULTIPLE * n:
            return PARTLY, f"{reached} (EM>{n} {em}): at least {PARTLY_MULTIPLE}× N, short of every tested scale"
        return DOES_NOT_HOLD, f"{reached} (EM>{n} {em}): short of {PARTLY_MULTIPLE}× N"

    return check


def _strongest(table: Table, rows: dict[str, Row], names: Sequence[str]) -> Row | None:
    """The best-ranked fitted row among ``names`` on the table (the strongest competitor)."""
    ranked = [rows[o] for o in names if o in rows and rows[o].ranked]
    return min(ranked, key=lambda r: r.rank or 0) if ranked else None


def _compare(row: Row, other: Row, n: int, score: str = "em_beyond") -> tuple[Fraction | None, str]:
    """(p that ``row`` is above ``other`` on ``score``, the words of the comparison)."""
    p = pt.p_above(row.per_seed[score], other.per_seed[score])
    title = SCORE_TITLES[score].replace("N", str(n))
    test = pt.p_text(p, len(row.seeds), len(other.seeds))
    said = f"{row.label} {title} {cell_text(row, score)} against {other.label} {cell_text(other, score)} ({test})"
    return p, said


def _above_strongest(name: str, others: Sequence[str]) -> Callable[[Table, dict[str, Row]], Found | None]:
    """A comparative claim ("better than X, Y, ..."), judged against the strongest of the
    named competitors on the table (the best ranked that fitted). holds: ``name``'s EM>N is
    above it by the permutation test (p ≤ 0.05); does not hold: ranked at or below it, or
    above it without the test separating them (a tie does not show "better"). No competitor
    fitted: no contrast."""

    def check(table: Table, rows: dict[str, Row]) -> Found | None:
        row = rows.get(name)
        if row is None or row.pending or not any(o in rows for o in others):
            return None
        n = table.train_max
        if not row.fitted:
            return _unfit(name, row, n)
        best = _strongest(table, rows, others)
        if best is None:
            return NO_CONTRAST, f"none of {', '.join(others)} fitted: nothing to compare {name} with"
        p, said = _compare(row, best, n)
        said = f"the strongest named competitor is {best.label} (rank {best.rank}); {name} ranks {row.rank}: {said}"
        if row.rank is not None and best.rank is not None and row.rank >= best.rank:
            return DOES_NOT_HOLD, said
        if p is not None and p <= pt.ALPHA:
            return HOLDS, said
        return DOES_NOT_HOLD, said + ": ranked above it but tied by the test, so better is not shown"

    return check


def _leads(name: str) -> Callable[[Table, dict[str, Row]], Found | None]:
    """A comparative claim ("state of the art"), judged against the strongest other fitted
    row on the table: holds where ``name`` ranks first and the permutation test puts its
    EM>N above the runner-up's; partly where it ranks first without the test deciding, or
    ranks lower without the test putting the leader above it; does not hold where the
    test puts the leader above it."""

    def check(table: Table, rows: dict[str, Row]) -> Found | None:
        row = rows.get(name)
        if row is None or row.pending:
            return None
        n = table.train_max
        if not row.fitted:
            return _unfit(name, row, n)
        others = [r for r in table.rows if r.ranked and r.label != name and "same weights" not in r.label]
        if not others:
            return None
        best = min(others, key=lambda r: r.rank or 0)
        ranked = sum(r.ranked for r in table.rows)
        if row.rank is not None and best.rank is not None and row.rank < best.rank:
            p, said = _compare(row, best, n)
            said = f"{name} ranks {row.rank} of {ranked}; the runner-up is {best.label}: {said}"
            return (
                (HOLDS, said)
                if p is not None and p <= pt.ALPHA
                else (PARTLY, said + ": first, not separated by the test")
            )
        p, said = _compare(best, row, n)
        said = f"{name} ranks {row.rank} of {ranked}; the leader is {best.label}: {said}"
        return (
            (DOES_NOT_HOLD, said)
            if p is not None and p <= pt.ALPHA
            else (PARTLY, said + ": the test does not put it above")
        )

    return check


def _above_base(claim: PaperClaim) -> Callable[[Table, dict[str, Row]], Found | None]:
    """A claim that ``claim.row`` is above its base (``claim.against[0]``) on the score
    ``params["score"]`` (holds: by the permutation test, p ≤ 0.05; partly: above on the
    mean only). Where the table has a row of ``claim.row`` with the option its paper
    calls for (a label starting ``row + params["preferred"]``), the verdict uses it and
    names the plain row beside it; the params word each case."""
    name, base_name, words = claim.row, claim.against[0], claim.params
    score = str(words["score"])

    def pick(rows: dict[str, Row]) -> tuple[Row | None, list[Row]]:
        preferred = [r for label, r in sorted(rows.items()) if label.startswith(name + words["preferred"])]
        default = rows.get(name)
        if preferred:
            return preferred[0], [r for r in (default,) if r is not None]
        return default, []

    def check(table: Table, rows: dict[str, Row]) -> Found | None:
        row, beside = pick(rows)
        base = rows.get(base_name)
        if row is None or base is None or row.pending or base.pending:
            return None
        n = table.train_max
        if not row.fitted:
            return _unfit(row.label, row, n)
        if not base.fitted:
            return (
                NO_CONTRAST,
                f"{words['base_title']} did not fit (EM≤{n} {cell_text(base, 'em_within')}): nothing to compare with",
            )
        p, said = _compare(row, base, n, score)
        said += f"; EM>{n} {cell_text(row, 'em_beyond')} against {cell_text(base, 'em_beyond')}"
        if beside:
            title = SCORE_TITLES[score].replace("N", str(n))
            said += f"; {words['beside']}: " + "; ".join(f"{title} {cell_text(r, score)}" for r in beside)
            said += f" (the verdict uses {row.label}: {words['preferred_why']})"
        elif row.label == name:
            said += f" ({words['default_why']})"
        if p is not None and p <= pt.ALPHA:
            return HOLDS, said
        if shown(row.scores[score].mean) > shown(base.scores[score].mean):
            return PARTLY, said + ": above on the mean, not separated by the test"
        return DOES_NOT_HOLD, said

    return check


def _collapses(names: Sequence[str]) -> Callable[[Table, dict[str, Row]], Found | None]:
    """A claim that the rows ``names`` collapse past N: every one that fitted scores exact
    match below COLLAPSED beyond N on every seed (holds), some do (partly), none (does not hold)."""

    def check(table: Table, rows: dict[str, Row]) -> Found | None:
        found = [(name, rows[name]) for name in names if name in rows and not rows[name].pending]
        n = table.train_max
        unfit = [
            f"{name} did not fit (EM≤{n} {cell_text(row, 'em_within')}): not counted"
            for name, row in found
            if not row.fitted
        ]
        found = [
            (name, row) for name, row in found if row.fitted
        ]  # collapsing past N means nothing if N was not learned
        if not found:
            return (NO_CONTRAST, "; ".join(unfit)) if unfit else None
        parts, collapsed = [], 0
        for name, row in found:
            em = row.scores["em_beyond"]
            parts.append(f"{name} EM>{n} {cell_text(row, 'em_beyond')}")
            collapsed += em.hi < exact(COLLAPSED)  # exactly: 0.05 is 1/20
        outcome = HOLDS if collapsed == len(found) else PARTLY if collapsed else DOES_NOT_HOLD
        return outcome, "; ".join(parts + unfit)

    return check


RULES: dict[str, Callable[[PaperClaim], Callable[[Table, dict[str, Row]], Found | None]]] = {
    "reach": lambda c: _reach_claim(c.row, float(c.multiple or 1), c.against[0]),
    "above_strongest": lambda c: _above_strongest(c.row, c.against),
    "leads": lambda c: _leads(c.row),
    "above_base": _above_base,
    "collapses": lambda c: _collapses((c.row, *c.against)),
}
"""The rules a paper card's claim names (:attr:`pezoo.PaperClaim.rule`), each made into
the check of its row(s) on one table."""


def board_claim(claim: PaperClaim) -> Claim:
    """A paper card's claim as the board tests it: its rule's check, its test's words with
    the board's thresholds filled in."""
    if claim.rule not in RULES:
        raise ValueError(f"claim on {claim.row!r}: unknown rule {claim.rule!r}; rules: {', '.join(RULES)}")
    return Claim(
        source=claim.source,
        says=claim.says,
        test=claim.test.format(em_ok=EM_OK, partly_multiple=PARTLY_MULTIPLE, collapsed=COLLAPSED),
        tasks=claim.tasks,
        check=RULES[claim.rule](claim),
        multiple=claim.multiple,
    )


def card_claims() -> tuple[Claim, ...]:
    """Every registered encoding's paper claims (its card's ``claims``), in their order on the pages."""
    import pezoo

    found = [c for card in pezoo.cards().values() for c in card.claims]
    return tuple(board_claim(c) for c in sorted(found, key=lambda c: c.order))


CLAIMS: tuple[Claim, ...] = card_claims()
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
    outcome, evidence, said = (*found, None) if len(found) == 2 else found
    if nothing_extrapolates(table):  # a null table contrasts nothing, whatever the rule would read off it
        n = table.train_max
        outcome, said = NO_CONTRAST, None
        evidence = f"{null_text(table)}: no seed of any fitted row keeps EM ≥ {EM_OK} at scale {n + 1}"
    several = sum((t.preset, t.task) == (table.preset, table.task) for t in board.tables) > 1
    if said is not None and (further := _testing_table(board, claim, table)) is not None:
        said = said.replace(
            f"claimed {claim.multiple:g}×: untested",
            f"claimed {claim.multiple:g}×: see the table tested to {further.test_max}",
        )
    return Verdict(
        table.preset,
        table.task,
        outcome,
        evidence,
        table_filling(board, table),
        said,
        table.tested_to if several else None,
    )


def _testing_table(board: Board, claim: Claim, table: Table) -> Table | None:
    """The table of ``table``'s preset and task that tests ``claim``'s multiple and has a
    verdict on it (its row published on every seed), where ``table`` tests less far; else None."""
    if claim.multiple is None or table.multiple + 1e-9 >= claim.multiple:
        return None
    for other in board.tables:
        if (other.preset, other.task) != (table.preset, table.task) or other.multiple + 1e-9 < claim.multiple:
            continue
        if not nothing_extrapolates(other) and claim.check(other, {r.label: r for r in other.rows}) is not None:
            return other
    return None


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
    "(each difference is listed under “Run unlike their papers”), by the rule stated under it. A verdict is one of "
    "holds, partly, does not hold, or no contrast: nothing on the table extrapolates (no seed of any fitted row "
    f"keeps exact match ≥ {EM_OK} one scale past N), or the tested row did not fit. A claim of a multiple of N "
    "holds only on a table tested to that multiple. A “better than” claim is judged against the strongest "
    "competitor it names. Where a verdict says one row is above another it names the permutation test and its p. "
    "A verdict on a table still short of its planned runs or seeds is provisional; tables of an earlier protocol "
    "that a later one is replacing are not tested. Small models and short training: a claim that does not hold "
    "here may still hold at the papers' scale."
)
"""What the claims section is, quoted by the site and the README."""
