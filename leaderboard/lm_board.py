"""The board's language-modelling section: from LM records (``leaderboard/results/lm/``) to
the answer table, bits-per-byte curves per corpus, seconds per step, and the papers' LM
claims with verdicts.

The answer first, as on the algorithmic tables: per encoding, how far its bits per byte stay
within 5 % of its bits per byte at the training length L, as a multiple of L, on its weakest
seed (:func:`reach`). The rule is computed from the records' sums and counts: length S is
within 5 % when ``100 · nats(S) · bytes(L) <= 105 · nats(L) · bytes(S)`` (non-overlapping
windows, the papers' default mode), and a row's reach is the longest tested S with every
tested length up to it within 5 % (a length not reached ends it). A variant of a trained run
(RoPE's scalings, zero-shot or fine-tuned) is held to that run's bpb(L), not its own: one
that costs more than 5 % at L already reaches 0, however flat it is after.

The claims are the encodings' own: each paper card's ``lm_claims`` (:class:`pezoo.LmPaperClaim`,
declared beside the encoding's class), whose rows are data (:class:`pezoo.LmRowSelector`, matched
by :func:`selects`) and whose ``rule`` names one of :data:`RULES`; this module names no encoding.
Verdicts use the board's four outcomes (``leaderboard.claims``) and its one test, the exact
permutation test over seeds (``leaderboard.permutation``):

* a *reach* claim ("X stays flat to m × L"): holds when the weakest seed's reach is at
  least m × L; on a table tested short of m, "holds to the tested k×; claimed m×: untested"
  (partly); otherwise does not hold.
* a *blow-up* claim ("X leaves 5 % within m × L"): holds when every seed's reach is below
  m × L, does not hold when none is, partly when the seeds split.
* a *below* claim ("X's bits per byte at long lengths are below Y's"): at the longest length
  both rows reached on every seed, against the strongest of the rows named (lowest mean):
  holds when the permutation test puts the other above X (p <= 0.05), partly when X is
  lower on the mean only, otherwise does not hold.

No contrast: nothing on the corpus's table keeps within 5 % to 2 × L on its weakest seed.
A claim whose rows are not on the table is listed as not yet run; one whose row matches two
setups of the encoding (FIRE's threshold as its reference code sets it, and scaled to L) gets
a verdict for each, named. The model is about 0.8M
parameters: the section compares the shape of the curves with the papers', never their numbers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from markupsafe import Markup

import pezoo
from harness.lm.config import LmConfig
from harness.lm.record import LmRecord
from leaderboard.claims import DOES_NOT_HOLD, HOLDS, NO_CONTRAST, PARTLY
from leaderboard.lm_rows import (
    LmRow,
    lm_rows,
    ranked,
    reach,
    read_lm_results,
    short_label,
    weakest,
)
from leaderboard.permutation import ALPHA, p_above, p_text
from leaderboard.readme import md
from leaderboard.styles import styles
from leaderboard.text import render_template
from pezoo import LmPaperClaim, LmRowSelector

__all__ = [
    "LM_CLAIMS",
    "RULES",
    "LmRow",
    "LmVerdict",
    "answer_groups",
    "answer_sentence",
    "card_lm_claims",
    "cells",
    "check_claim",
    "corpus_of",
    "lm_pages",
    "lm_rows",
    "provenance_rows",
    "ranked",
    "reach",
    "read_lm_results",
    "readme_section",
    "render_markdown",
    "seconds_text",
    "selects",
    "tail_lengths",
    "verdict",
    "verdicts",
    "weakest",
]

VARIANT_NOTE = "a variant of a trained run against that run's bpb(L), 0 where it is more than 5 % above it at L"

AT_L_NOTE = "already more than 5 % above the bpb at L of the trained run they modify"

SPEED_NOTE = (
    "s/step: each run's training wall time per step on the machine its provenance names (per machine: a "
    "row trained on a CPU and a GPU shows both), beside whatever else ran there (sweeps side by "
    "side on one machine share it); every encoding's step timed side by side in one process: "
    "`python benchmarks/lm_cost.py speed` (benchmarks/results/cpu-lm-speed.md)."
)

TAIL_NOTE = (
    "Fixed target: the last {tail} bytes of each held-out region, scored with S − {tail} bytes of context "
    "before them (uses the longer context, and never predicts from an empty context; "
    "Press, Smith & Lewis 2022, App. B):"
)

SCALE_NOTE = (
    "A byte-level decoder of about 0.8M parameters (d 128, 4 layers, 4 heads) trained at L = 256 bytes for 4000 "
    "steps: the papers' models are 100-1000x larger and their numbers are perplexities of word or subword "
    "tokens; this section compares the shape of the curves (flat, rising, blowing up) with theirs, not the numbers."
)


# ---------------------------------------------------------------------------------------------
# claims


def _includes(actual: object, wanted: object) -> bool:
    """``actual`` has ``wanted``'s value; a mapping: each of its keys, as deep as given."""
    if isinstance(wanted, Mapping):
        return isinstance(actual, Mapping) and all(_includes(actual.get(k), v) for k, v in wanted.items())
    return actual == wanted


def selects(selector: LmRowSelector, cfg: LmConfig) -> bool:
    """Whether a row's config is the one a card's selector names (:class:`pezoo.LmRowSelector`)."""
    if cfg.pe != selector.pe or not _includes(cfg.pe_options, selector.options):
        return False
    if any(cfg.pe_options.get(k) is None for k in selector.has):
        return False
    if selector.variant is None:
        return not cfg.is_variant
    return _includes(cfg.eval_pe_options, selector.variant) and bool(cfg.finetune_steps) == selector.finetuned


@dataclass(frozen=True)
class LmVerdict:
    claim: LmPaperClaim
    outcome: str
    why: str


def _find(rows: Sequence[LmRow], selector: LmRowSelector) -> LmRow | None:
    found = [r for r in rows if selects(selector, r.config)]
    return max(found, key=lambda r: len(r.records)) if found else None


def _common_longest(a: LmRow, b: LmRow) -> int | None:
    """The longest length both rows reached on every seed."""
    for s in sorted(set(a.lengths) & set(b.lengths), reverse=True):
        if all(x is not None for x in a.bpb(s) + b.bpb(s)):
            return s
    return None


def _reach(claim: LmPaperClaim, row: LmRow, rows: Sequence[LmRow]) -> LmVerdict | None:
    """Holds when the weakest seed's reach is at least ``multiple`` × L; partly when it holds
    to the longest length tested, short of the multiple; otherwise does not hold."""
    weakest = min(s / row.length for s in row.reaches())
    tested = row.lengths[-1] / row.length
    if weakest >= claim.multiple:
        return LmVerdict(claim, HOLDS, f"weakest seed within 5 % to {weakest:g}× L")
    if weakest >= tested:
        return LmVerdict(claim, PARTLY, f"holds to the tested {tested:g}×; claimed {claim.multiple:g}×: untested")
    if weakest == 0:
        return LmVerdict(claim, DOES_NOT_HOLD, f"weakest seed not within 5 % even at L ({AT_L_NOTE})")
    return LmVerdict(claim, DOES_NOT_HOLD, f"weakest seed within 5 % only to {weakest:g}× L")


def _blowup(claim: LmPaperClaim, row: LmRow, rows: Sequence[LmRow]) -> LmVerdict | None:
    """Holds when every seed leaves 5 % before ``multiple`` × L, does not hold when none does,
    partly when the seeds split."""
    reaches = [s / row.length for s in row.reaches()]
    below = sum(r < claim.multiple for r in reaches)
    seeds = f"{below} of {len(reaches)} seeds leave 5 % before {claim.multiple:g}× L"
    outcome = HOLDS if below == len(reaches) else DOES_NOT_HOLD if below == 0 else PARTLY
    return LmVerdict(claim, outcome, seeds)


def _below(claim: LmPaperClaim, row: LmRow, rows: Sequence[LmRow]) -> LmVerdict | None:
    """At the longest length both rows reached on every seed, against the strongest of the
    ``against`` rows (lowest mean): holds when the permutation test puts it above ``row``
    (p <= 0.05), partly when ``row`` is lower on the mean only, otherwise does not hold.
    None when none of the ``against`` rows is on the table."""
    others = [r for r in (_find(rows, m) for m in claim.against) if r is not None and r is not row]
    if not others:
        return None
    compared = []
    for other in others:
        at = _common_longest(row, other)
        if at is None:
            continue
        mine = [x for x in row.bpb(at) if x is not None]
        theirs = [x for x in other.bpb(at) if x is not None]
        compared.append((sum(theirs) / len(theirs), at, other, mine, theirs))
    if not compared:
        return LmVerdict(claim, DOES_NOT_HOLD, "no length that both rows reached on every seed")
    mean_other, at, other, mine, theirs = min(compared, key=lambda c: c[0])  # the strongest: lowest bpb
    p = p_above(theirs, mine)
    mean_mine = sum(mine) / len(mine)
    text = f"at {at}: {mean_mine:.3f} against {other.shown} {mean_other:.3f} bpb, {p_text(p, len(theirs), len(mine))}"
    if p is not None and p <= ALPHA:
        return LmVerdict(claim, HOLDS, text)
    return LmVerdict(claim, PARTLY if mean_mine < mean_other else DOES_NOT_HOLD, text)


Rule = Callable[[LmPaperClaim, LmRow, Sequence[LmRow]], "LmVerdict | None"]

RULES: dict[str, Rule] = {"reach": _reach, "blowup": _blowup, "below": _below}
"""The rules an encoding card's LM claim names (:attr:`pezoo.LmPaperClaim.rule`), each
given the claim, its row and the corpus's rows (module docstring words each)."""


def check_claim(claim: LmPaperClaim) -> LmPaperClaim:
    """``claim`` when the board can test it; a one-line ValueError naming what is wrong otherwise."""
    where = f"LM claim {claim.key!r} of {claim.row.pe!r}"
    if claim.rule not in RULES:
        raise ValueError(f"{where}: unknown rule {claim.rule!r}; rules: {', '.join(RULES)}")
    if claim.rule in ("reach", "blowup") and not claim.multiple > 0:
        raise ValueError(f"{where}: rule {claim.rule!r} needs a multiple of L above 0, got {claim.multiple!r}")
    if claim.rule == "below" and not claim.against:
        raise ValueError(f"{where}: rule 'below' needs the rows it is compared with (against)")
    return claim


def card_lm_claims() -> tuple[LmPaperClaim, ...]:
    """Every registered encoding's LM claims (its card's ``lm_claims``), in their order in the section."""

    found = [c for card in pezoo.cards().values() for c in card.lm_claims]
    keys = [c.key for c in found]
    if len(set(keys)) != len(keys):
        raise ValueError(f"two LM claims share a key: {sorted(k for k in set(keys) if keys.count(k) > 1)}")
    return tuple(check_claim(c) for c in sorted(found, key=lambda c: (c.order, c.key)))


LM_CLAIMS: tuple[LmPaperClaim, ...] = card_lm_claims()
"""The papers' LM claims the section judges, read from the encodings' cards (issue 52's list)."""


def verdicts(claim: LmPaperClaim, rows: Sequence[LmRow]) -> list[LmVerdict]:
    """The claim's verdicts on one task's rows: one per row its selector matches (two setups
    of one encoding, e.g. FIRE's threshold as its reference code sets it and scaled to L,
    each judged, most seeds first, its ``why`` naming the row); none when its row (or, for
    ``below``, every row it is compared with) is not on the table."""
    rule = RULES[check_claim(claim).rule]
    found = sorted((r for r in rows if selects(claim.row, r.config)), key=lambda r: (-len(r.records), r.label))
    if not found:
        return []
    if not any(min(r.reaches()) >= 2 * r.length for r in rows):
        why = "nothing on this table keeps within 5 % of bpb(L) to 2× L on its weakest seed"
        return [LmVerdict(claim, NO_CONTRAST, why)]
    out = []
    for row in found:
        v = rule(claim, row, rows)
        if v is not None:
            out.append(v if len(found) == 1 else dataclasses.replace(v, why=f"{row.shown}: {v.why}"))
    return out


def verdict(claim: LmPaperClaim, rows: Sequence[LmRow]) -> LmVerdict | None:
    """The first of :func:`verdicts` (the matched row with the most seeds), or None."""
    found = verdicts(claim, rows)
    return found[0] if found else None


# ---------------------------------------------------------------------------------------------
# rendering


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


LEGEND_WIDTH = 272
"""Pixels right of the plot for its legend: a 28 px swatch and a label cut at 36 characters (~6.5 px
each at 11 px; 250 cut the closing brace off t5{max_distance=64,num_buckets=32})."""


def curves_svg(task: str, rows: Sequence[LmRow], width: int = 520, height: int = 300) -> Markup:
    """Bits per byte (mean over seeds, non-overlapping windows) against log2 of the length, one
    line per row, with a legend to the right (the whole label in each entry's tooltip)."""
    left, top, right, bottom = 56, 20, 14, 44
    series = []
    looks = styles([row.label for row in rows])  # distinct: a variant never wears its encoding's look
    for row in rows:
        points = []
        for s in row.lengths:
            values = row.bpb(s)
            if values and all(v is not None for v in values):
                points.append((math.log2(s), sum(v for v in values if v is not None) / len(values)))
        if points:
            series.append((row.label, short_label(row.config), looks[row.label], points))
    xs = [x for *_, p in series for x, _ in p] or [8.0, 12.0]
    ys = [y for *_, p in series for _, y in p] or [0.0, 8.0]
    x_lo, x_hi = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y_lo, y_hi = math.floor(min(ys) * 2) / 2, math.ceil(max(ys) * 2) / 2
    y_hi = y_hi if y_hi > y_lo else y_lo + 0.5
    w, h = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (x - x_lo) / (x_hi - x_lo) * w

    def py(y: float) -> float:
        return top + (y_hi - y) / (y_hi - y_lo) * h

    step = 0.5 if y_hi - y_lo <= 4 else 1.0
    y_ticks = [(y_lo + k * step, py(y_lo + k * step)) for k in range(round((y_hi - y_lo) / step) + 1)]
    x_ticks = [(2**x, px(x)) for x in range(math.ceil(x_lo), math.floor(x_hi) + 1)]
    lines = [(label, style, [(px(x), py(y)) for x, y in points]) for label, _, style, points in series]
    legend = [
        (label, short if len(short) <= 36 else short[:35] + "…", style, top + 8 + 16 * i)
        for i, (label, short, style, _) in enumerate(series)
    ]
    return render_template(
        "lm_curves.svg.j2",
        title=f"bits per byte against length, {task}",
        width=width + LEGEND_WIDTH,
        legend_x=width + 4,
        legend=legend,
        height=max(height, top + 16 * len(legend) + 8),  # the plot keeps its height; the legend fits below it
        left=left,
        top=top,
        plot_width=w,
        plot_height=h,
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        boundary_x=px(math.log2(rows[0].length)) if rows else None,
        lines=lines,
    )


def cells(row: LmRow, lengths: Sequence[int], mode: str = "windows") -> list[str]:
    """The row's mean bpb over seeds at each length (three decimals), or "not reached" where a
    seed did not reach it."""
    out = []
    for s in lengths:
        values = row.bpb(s, mode)
        done = [v for v in values if v is not None]
        out.append(_fmt(sum(done) / len(done)) if done and len(done) == len(values) else "not reached")
    return out


def tail_lengths(rows: Sequence[LmRow]) -> list[int]:
    """The lengths scored in the fixed-target mode (those of at least ``tail`` bytes)."""
    return [s for s in rows[0].lengths if any(v is not None for row in rows for v in row.bpb(s, "tail"))]


def seconds_text(row: LmRow) -> str:
    sps = row.seconds_per_step()
    return " · ".join(f"{v:.3f} {m}" for m, v in sps.items()) if sps else "–"


def corpus_of(rows: Sequence[LmRow]) -> str:
    """The corpus hash of a table's records (sha256, hex)."""
    return str(rows[0].records[0].provenance.get("corpus_sha256", ""))


def answer_groups(rows: Sequence[LmRow]) -> tuple[str, list[tuple[list[str], float, bool]]]:
    """The answer's parts: the seeds behind it (``1 seed each``, ``1-3 seeds``) and, farthest
    first, (labels, weakest-seed reach as a multiple of L, whether that is the longest length tested)."""
    groups: dict[float, list[str]] = {}
    for row in rows:
        groups.setdefault(weakest(row), []).append(row.shown)
    longest = max(row.lengths[-1] / row.length for row in rows)
    seeds = sorted({len(row.records) for row in rows})
    each = f"{seeds[0]} seed{'s' if seeds[0] > 1 else ''} each" if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]} seeds"
    return each, [(sorted(groups[m]), m, m == longest) for m in sorted(groups, reverse=True)]


def render_markdown(records: Sequence[LmRecord]) -> str:
    """The LM section as markdown: per corpus the answer table, the curves' numbers, seconds
    per step and the claims' verdicts (from real records only: none gives the empty note).
    Every value a record gives (a row's name, its options, a machine's, the corpus hash) goes
    through ``leaderboard.readme.md``: markup in it is shown as text, never a tag or a cell."""
    if not records:
        return "## Language modelling\n\nNo language-modelling results are published yet (`pezoo lm sweep`).\n"
    out = ["## Language modelling", "", SCALE_NOTE, ""]
    for task, rows in lm_rows(records).items():
        first, order = rows[0], ranked(rows)
        out += [f"### {md(task)} (corpus sha256 {md(corpus_of(rows)[:16])})", "", answer_sentence(rows), ""]
        out.append(
            f"How far bits per byte stay within 5 % of bpb(L), weakest seed (L = {first.length} bytes; {VARIANT_NOTE}):"
        )
        out.append("")
        header = " | ".join(f"bpb {s}" for s in first.lengths)
        out.append(f"| encoding | seeds | within 5 % to (× L) | {header} | s/step |")
        out.append("|---|---|---|" + "---|" * len(first.lengths) + "---|")
        for row in order:
            shown = " | ".join(cells(row, row.lengths))
            out.append(
                f"| {md(row.shown)} | {len(row.records)} | {weakest(row):g} | {shown} | {md(seconds_text(row))} |"
            )
        out += ["", SPEED_NOTE]
        out += ["", f"![bits per byte against test length on {md(task)}, one line per encoding](lm-{task}.svg)", ""]
        out += _tail_table(order)
        out += ["Claims:", "", "| claim | source | verdict | why |", "|---|---|---|---|"]
        for claim in LM_CLAIMS:
            found = verdicts(claim, rows)
            if not found:
                out.append(f"| {claim.says} | {claim.source} | not run yet | |")
            out += [f"| {claim.says} | {claim.source} | {v.outcome} | {md(v.why)} |" for v in found]
        out.append("")
    return "\n".join(out) + "\n"


def answer_sentence(rows: Sequence[LmRow]) -> str:
    """The corpus's answer in one sentence (markdown, the rows' names escaped): the encodings by how
    far (a multiple of L) their bits per byte stay within 5 % of bpb(L) on the weakest seed, farthest first."""
    each, groups = answer_groups(rows)
    parts = []
    for labels, multiple, longest in groups:
        names = ", ".join(f"**{md(label)}**" for label in labels)
        if multiple == 0:
            parts.append(f"{names} not even at L ({AT_L_NOTE})")
        elif multiple <= 1:
            parts.append(f"{names} not past L")
        else:
            parts.append(f"{names} to {multiple:g}× L" + (" (the longest length tested)" if longest else ""))
    return f"Bits per byte within 5 % of bpb(L) on the weakest seed ({each}): " + "; ".join(parts) + "."


def _tail_table(order: Sequence[LmRow]) -> list[str]:
    """The fixed-target mode: the same last ``tail`` bytes of each region scored with S - tail
    bytes of context before them (more context, never a new position to predict from scratch)."""
    lengths = tail_lengths(order)
    if not lengths:
        return []
    out = [
        TAIL_NOTE.format(tail=order[0].config.eval.tail),
        "",
        "| encoding | " + " | ".join(f"bpb S = {s}" for s in lengths) + " |",
        "|---|" + "---|" * len(lengths),
    ]
    out += [f"| {md(row.shown)} | " + " | ".join(cells(row, lengths, "tail")) + " |" for row in order]
    return [*out, ""]


def provenance_rows(records: Sequence[LmRecord]) -> list[tuple[str, str]]:
    """(name, value) rows saying where the section's records come from: runs, corpora (hash,
    size and sources), presets, commits, devices, torch and Python versions."""

    def distinct(key: str) -> str:
        return ", ".join(sorted({str(r.provenance.get(key, "?")) for r in records}))

    out = [("runs", str(len(records)))]
    for task, rows in lm_rows(records).items():
        prov = rows[0].records[0].provenance
        sources = "; ".join(str(s) for s in prov.get("corpus_sources", ()))
        size = f"{prov.get('corpus_documents', '?')} documents, {prov.get('corpus_bytes', '?')} bytes"
        out.append((f"corpus of {task}", f"{prov.get('corpus', '?')}: {size}, sha256 {corpus_of(rows)} ({sources})"))
    out.append(("presets", ", ".join(sorted({r.config.preset for r in records}))))
    out += [("commits", distinct("commit")), ("devices", distinct("device")), ("CPUs", distinct("cpu"))]
    out += [("torch", distinct("torch")), ("python", distinct("python"))]
    return out


def readme_section(records: Sequence[LmRecord], site_href: str) -> list[str]:
    """The board README's language-modelling section (markdown lines): each corpus's answer
    sentence and where the whole section is; nothing without records."""
    if not records:
        return []
    out = ["## Language modelling", ""]
    out += [
        "Byte-level models trained at L = 256 bytes on real text and code, scored in bits per byte far past L "
        f"(the setting of the ALiBi, KERPLE, FIRE, xPos and RoPE-scaling papers' claims): "
        f"[`{site_href}/lm.md`]({site_href}/lm.md) (or [`lm.html`]({site_href}/lm.html) in the site) has the "
        "tables, curves and the claims' verdicts.",
        "",
    ]
    for task, rows in lm_rows(records).items():
        out += [f"* {md(task)}: {answer_sentence(rows)}"]
    return [*out, ""]


def lm_pages(records: Sequence[LmRecord]) -> dict[str, str]:
    """The LM section's files (site path -> text): ``lm.md`` and one ``lm-<task>.svg`` of
    curves per corpus; none without records (a board with no LM results has no LM section)."""
    if not records:
        return {}
    pages = {"lm.md": render_markdown(records)}
    for task, task_rows in lm_rows(records).items():
        pages[f"lm-{task}.svg"] = str(curves_svg(task, task_rows))
    return pages
