"""The board's language-modelling section: from LM records (``leaderboard/results/lm/``) to
the answer table, bits-per-byte curves per corpus, seconds per step, and the papers' LM
claims with verdicts (judged by ``leaderboard.lm_verdicts``).

The answer first, as on the algorithmic tables: per encoding, its effective context length in
bits per byte: how far its bits per byte stay within 5 % of its bits per byte at the training
length L, as a multiple of L, on its weakest seed (``leaderboard.lm_rows.reach``); beside it
its effective context length in passkey retrieval (``leaderboard.lm_rows.passkey_reach``: at
least 0.9 of the samples right at every depth, the algorithmic board's reach rule), "not
measured" for records made before the passkey grid was part of the evaluation
(:data:`EFFECTIVE_CONTEXT_RULE`). The bpb rule is computed from the records' sums and
counts: length S is within 5 % when ``100 · nats(S) · bytes(L) <= 105 · nats(L) ·
bytes(S)``, and a row's reach is the longest tested S with every tested length up to it
within 5 % (a length not reached ends it). It is read in both modes: non-overlapping windows (the papers'
default, which the verdicts use) and the fixed-target tail mode, where its records score
the tail at L (a tail target of L bytes: records since issue 63). A variant of a trained run
(RoPE's scalings, zero-shot or fine-tuned) is held to that run's bpb(L), not its own: one
that costs more than 5 % at L already reaches 0, however flat it is after.

Each table says what its numbers come from (:func:`protocol_note`): the corpus hash (its
documents and split), the split's rule, the bytes scored; and how its verdicts read
(:func:`verdict_note`): the mode, the 5 % rule as a perplexity ratio, the smallest p its
seeds allow and the absence of a multiple-test correction. The model is about 0.8M
parameters: the section compares the shape of the curves with the papers', never their numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from harness.lm.claims import selects
from harness.lm.record import LmRecord
from harness.tasks.lm.passkey import DEPTHS, FIXED_BYTES
from leaderboard.lm_curves import curves_svg, positions_length, positions_svg
from leaderboard.lm_rows import (
    LmRow,
    lm_rows,
    passkey_reach,
    ranked,
    reach,
    read_lm_results,
    weakest,
    weakest_passkey,
    weakest_tail,
)
from leaderboard.lm_verdicts import (
    AT_L_NOTE,
    LM_CLAIMS,
    RULES,
    LmVerdict,
    card_lm_claims,
    check_claim,
    departures,
    verdict,
    verdicts,
)
from leaderboard.permutation import smallest_p
from leaderboard.readme import md

__all__ = [
    "AT_L_NOTE",
    "CURVES_NOTE",
    "EFFECTIVE_CONTEXT_RULE",
    "LM_CLAIMS",
    "NOT_MEASURED",
    "PASSKEY_NOTE",
    "POSITIONS_NOTE",
    "RULES",
    "LmRow",
    "LmVerdict",
    "answer_groups",
    "answer_sentence",
    "card_lm_claims",
    "cells",
    "check_claim",
    "corpus_of",
    "curves_svg",
    "departure_notes",
    "departures",
    "lm_pages",
    "lm_rows",
    "passkey_cell",
    "passkey_lengths_of",
    "passkey_reach",
    "passkey_rows",
    "positions_length",
    "positions_svg",
    "protocol_note",
    "provenance_rows",
    "ranked",
    "reach",
    "read_lm_results",
    "readme_section",
    "render_markdown",
    "seconds_text",
    "selects",
    "tail_cell",
    "tail_lengths",
    "verdict",
    "verdict_note",
    "verdicts",
    "weakest",
]

EFFECTIVE_CONTEXT_RULE = (
    "Effective context length: the longest tested length at which a metric stays within its tolerance, there and "
    "at every tested length below it, as a multiple of L on the row's weakest seed, computed exactly from the "
    "records' counts. In bits per byte the tolerance is 5 % above bpb(L) (100 · nats(S) · bytes(L) ≤ 105 · "
    "nats(L) · bytes(S)); in passkey retrieval it is at least 0.9 of the samples right at every depth (10 · right "
    "≥ 9 · total), the algorithmic board's reach rule (exact match ≥ 0.9 at every scale up to it), which is that "
    "board's effective context length; a passkey effective context of 0 means below 0.9 at the grid's shortest "
    "length."
)
"""The section's one rule for both metrics, quoted by the markdown and the HTML page."""

PASSKEY_NOTE = (
    "Passkey retrieval (Mohtashami & Jaggi 2023, the test the PI and YaRN papers use): a 5-digit key in the line "
    "“The pass key is 68452. Remember it. 68452 is the pass key.” hidden at a depth (0, 25, 50, 75, 100 % of "
    "the filler) in held-out text (the scored regions: no training text), the sample ending “What is the pass key? "
    "The pass key is”; a sample is right when the greedy continuation is “ 68452”, read off one teacher-forced pass "
    "(the argmax at each of the answer's six bytes, which is the greedy decode). A length of S bytes is exactly S, "
    f"tested above the {FIXED_BYTES} bytes of needle, question and answer; the same keys and fillers for every "
    "encoding under a seed. Each cell reads samples right of samples, summed over the row's seeds."
)
"""What the passkey grid is, quoted by the markdown and the HTML page (``harness.tasks.lm.passkey``)."""

NOT_MEASURED = "not measured"
"""What a row whose records have no passkey grid (records made before issue 64), or no curves by
position (records made before issue 63's), shows."""

CURVES_NOTE = (
    "One panel per family of encodings (where each puts position: queries and keys, a bias on the scores, the "
    "embeddings, nowhere), the others' rows in grey behind; every panel on the same axes. Each row keeps its "
    "colour, dash and marker on every page."
)

POSITIONS_NOTE = (
    "Bits per byte by position within the window (the per-token loss curve of the forgetting-transformer paper, "
    "Lin et al. 2025, in bytes): at the longest length each row measured, every window's loss at each position, "
    "summed over the windows and the seeds per half-octave bucket of positions (nats and bytes, counted; each "
    "point is a bucket, drawn at its end), in non-overlapping windows. Past the dashed line the positions were "
    "never seen in training: a row that breaks there, breaks at the first position past L or gradually."
)

VARIANT_NOTE = "a variant of a trained run against that run's bpb(L), 0 where it is more than 5 % above it at L"

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

SCALE_CAVEAT = (
    "the papers' models are 100-1000x larger and their numbers are perplexities of word or subword "
    "tokens; this section compares the shape of the curves (flat, rising, blowing up) with theirs, not the numbers."
)


def _trained(records: Sequence[LmRecord]) -> list[LmRecord]:
    return [r for r in records if not r.config.is_variant] or list(records)


def training_phrase(records: Sequence[LmRecord]) -> str:
    """``trained at L = 256 bytes`` when the records share one training length, else ``trained short``."""
    lengths = {r.config.length for r in _trained(records)}
    return f"trained at L = {lengths.pop()} bytes" if len(lengths) == 1 else "trained short"


def scale_note(records: Sequence[LmRecord]) -> str:
    """What model the section's numbers come from, read off its records (their backbone,
    training length and steps, and the median of their parameter counts), and why its numbers
    are not the papers'."""
    trained = _trained(records)
    shapes = {
        (r.config.backbone.d_model, r.config.backbone.n_layers, r.config.backbone.n_heads, r.config.train.steps)
        for r in trained
    }
    totals = sorted(int(r.n_params.get("total", 0)) for r in trained)
    if len(shapes) != 1 or not totals:
        return f"Byte-level decoders, each table's protocol under its heading: {SCALE_CAVEAT}"
    d, layers, heads, steps = shapes.pop()
    median = totals[len(totals) // 2]
    size = f"about {median / 1e6:.1f}M parameters" if median >= 100_000 else f"about {median / 1e3:.0f}K parameters"
    return (
        f"A byte-level decoder of {size} (d {d}, {layers} layers, {heads} heads) {training_phrase(records)} for "
        f"{steps} steps: {SCALE_CAVEAT}"
    )


# ---------------------------------------------------------------------------------------------
# rendering


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


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


def passkey_cell(row: LmRow) -> str:
    """The row's passkey effective context on its weakest seed (× L), or "not measured"."""
    got = weakest_passkey(row)
    return NOT_MEASURED if got is None else f"{got:g}"


def passkey_lengths_of(rows: Sequence[LmRow]) -> list[int]:
    """The lengths of the table's passkey grid (those some row measured), increasing."""
    return sorted({c.length for row in rows for r in row.records for c in r.passkey or ()})


def passkey_rows(rows: Sequence[LmRow]) -> list[tuple[str, str, int | None, list[str]]]:
    """The passkey table's lines, in ``rows``' order: (row name, its label, depth, per length
    ``right/total`` summed over seeds or "–" where a seed did not reach it); one line per depth,
    or one line with depth None and no cells for a row that did not measure the grid."""
    lengths = passkey_lengths_of(rows)
    out: list[tuple[str, str, int | None, list[str]]] = []
    for row in rows:
        if row.passkey_reaches() is None:
            out.append((row.shown, row.label, None, []))
            continue
        for d in DEPTHS:
            got = [row.passkey_counts(s, d) for s in lengths]
            out.append((row.shown, row.label, d, ["–" if g is None else f"{g[0]}/{g[1]}" for g in got]))
    return out


def seconds_text(row: LmRow) -> str:
    sps = row.seconds_per_step()
    return " · ".join(f"{v:.3f} {m}" for m, v in sps.items()) if sps else "–"


def corpus_of(rows: Sequence[LmRow]) -> str:
    """The corpus hash of a table's records (sha256, hex)."""
    return str(rows[0].records[0].provenance.get("corpus_sha256", ""))


def tail_cell(row: LmRow) -> str:
    """The row's tail-mode reach on its weakest seed (× L), or "–" without a tail score at L."""
    got = weakest_tail(row)
    return "–" if got is None else f"{got:g}"


OLD_SPLIT_LEAKS = {"en": ("3.3", "8.2"), "code": ("13.0", "14.5")}
"""Per corpus, the split before issue 63 measured by benchmarks/lm_leaks.py: % of held-out
128-byte windows holding a 64-byte run of training text, % of scored 64-byte chunks in it."""


def protocol_note(rows: Sequence[LmRow]) -> str:
    """Where a table's numbers come from, in a paragraph of plain text: the corpus hash (its
    documents and split), the split's rule, the preset, the bytes scored in each mode."""
    first = rows[0].records[0]
    cfg, prov = first.config, first.provenance
    regions, longest, tail = cfg.eval.regions, cfg.eval.lengths[-1], cfg.eval.tail
    split = prov.get("corpus_split")
    reference = (
        "with its reference at L" if tail <= cfg.length else f"from S = {tail:,} on, so it has no reference at L"
    )
    text = (
        f"Numbers from corpus sha256 {corpus_of(rows)} ({prov.get('corpus_documents', '?')} documents), "
        f"preset {cfg.preset}: {regions} held-out regions of {longest:,} bytes, {regions * longest:,} bytes scored "
        f"at every length in non-overlapping windows; the tail mode scores the last {tail:,} bytes of each "
        f"({regions * tail:,} bytes) {reference}. "
    )
    if split:
        return text + (
            f"Split {split}: near-duplicate documents kept on one side, the scored regions free of any "
            "64-byte run of the training text (docs/lm.md)."
        )
    corpus = str(prov.get("corpus", ""))
    leaks = OLD_SPLIT_LEAKS.get(corpus)
    measured = (
        f": {leaks[0]} % of its held-out 128-byte windows hold a 64-byte run of the training text and {leaks[1]} % of "
        "the scored 64-byte chunks occur in it (benchmarks/results/lm-leaks.md)"
        if leaks
        else ""
    )
    return text + (
        "These records were made under the split before issue 63 (pezoo-lm-split/1: documents held out by the hash "
        f"of their names, near-duplicates on both sides){measured}; the corpus hash above names that split. They are "
        "to be retrained under pezoo-lm-split/2 and 256 KB scored."
    )


def verdict_note(rows: Sequence[LmRow]) -> str:
    """How the table's verdicts read, in a paragraph of plain text: the mode they use and why, the
    5 % rule as a perplexity ratio, the permutation test, the smallest p the seeds allow, and
    that no correction is made for the number of verdicts."""
    at_l = sorted(m for row in rows if not row.config.is_variant for m in [_mean(row.bpb(row.length))] if m)
    typical = at_l[len(at_l) // 2] if at_l else 2.0
    seeds = sorted({len(row.records) for row in rows} | {5})
    floors = "; ".join(f"{n} against {n}: {_p(smallest_p(n, n))}" for n in seeds)
    count = sum(len(verdicts(c, rows)) for c in LM_CLAIMS)
    return (
        "The verdicts read non-overlapping windows, the papers' own evaluation (ALiBi's and KERPLE's tables are of "
        "it), though a short window's first bytes have little context; each reach verdict gives the tail mode's "
        "reach beside it where the records score the tail at L. Within 5 % of bpb(L) is, in perplexity per byte, a "
        f"factor of 2^(0.05 · bpb(L)): ×{2 ** (0.05 * typical):.3f} at this table's middle bpb(L) of "
        f"{typical:.2f}; per token of b bytes, 2^(0.05 · bpb(L) · b) (×{2 ** (0.2 * typical):.2f} at 4 bytes per "
        "token). Reach and blow-up verdicts count seeds (split seeds read partly, k of n); a below verdict is an "
        "exact one-sided permutation test over seeds of the difference of the two rows' means (every split of the "
        "pooled per-seed values; p is the share of splits at least as far apart) and holds at p ≤ 0.05. The "
        f"smallest p n seeds against n allow is 1 / C(2n, n): {floors}; at 3 against 3, holds means every seed of "
        "one row lies below every seed of the other, however small the gap. No correction is made for the "
        f"{count} verdicts of this table (nor across tables): at p ≤ 0.05 each, about one below-test in twenty "
        "holds by chance where nothing differs."
    )


def _mean(values: Sequence[float | None]) -> float | None:
    done = [v for v in values if v is not None]
    return sum(done) / len(done) if done and len(done) == len(values) else None


def _p(p: Fraction) -> str:
    """1/20 as 0.05; 1/252 as ``1/252 ≈ 0.00397``."""
    return f"{p.numerator}/{p.denominator} ≈ {float(p):.3g}" if p.denominator > 20 else f"{float(p):g}"


def departure_notes(rows: Sequence[LmRow]) -> list[tuple[str, str]]:
    """(row name, how it departs from its paper's LM setup) for each row that does."""
    return [(row.shown, "; ".join(got)) for row in ranked(rows) if (got := departures(row))]


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
        sweep = "`pezoo bench --sweep leaderboard/lm/sweep.toml`"
        return f"## Language modelling\n\nNo language-modelling results are published yet ({sweep}).\n"
    out = ["## Language modelling", "", scale_note(records), "", EFFECTIVE_CONTEXT_RULE, ""]
    for task, rows in lm_rows(records).items():
        first, order = rows[0], ranked(rows)
        out += [f"### {md(task)} (corpus sha256 {md(corpus_of(rows)[:16])})", "", md(protocol_note(rows)), ""]
        out += [answer_sentence(rows), ""]
        out.append(
            f"Effective context length, weakest seed: how far bits per byte stay within 5 % of bpb(L), in "
            f"non-overlapping windows and in the tail mode, and how far passkey retrieval stays at least 0.9 right at "
            f"every depth (L = {first.length} bytes; {VARIANT_NOTE}):"
        )
        out.append("")
        header = " | ".join(f"bpb {s}" for s in first.lengths)
        out.append(
            f"| encoding | seeds | bpb within 5 % to (× L) | tail mode (× L) | passkey to (× L) | {header} | s/step |"
        )
        out.append("|---|---|---|---|---|" + "---|" * len(first.lengths) + "---|")
        for row in order:
            shown = " | ".join(cells(row, row.lengths))
            out.append(
                f"| {md(row.shown)} | {len(row.records)} | {weakest(row):g} | {tail_cell(row)} | {passkey_cell(row)} "
                f"| {shown} | {md(seconds_text(row))} |"
            )
        out += ["", SPEED_NOTE]
        notes = departure_notes(order)
        if notes:
            out += ["", "Departures from the papers' setups (judged too, and said so in each verdict):", ""]
            out += [f"* {md(name)}: {md(text)}" for name, text in notes]
        out += ["", CURVES_NOTE, ""]
        out += [f"![bits per byte against test length on {md(task)}, one panel per family](lm-{task}.svg)", ""]
        out += _positions_part(task, order)
        out += _tail_table(order)
        out += _passkey_table(order)
        out += ["Claims:", "", md(verdict_note(rows)), "", "| claim | source | verdict | why |", "|---|---|---|---|"]
        for claim in LM_CLAIMS:
            found = verdicts(claim, rows)
            if not found:
                out.append(f"| {claim.says} | {claim.source} | not run yet | |")
            out += [f"| {claim.says} | {claim.source} | {v.shown} | {md(v.why)} |" for v in found]
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


def _positions_part(task: str, order: Sequence[LmRow]) -> list[str]:
    """The curves by position: their note and figure, or a line saying they were not measured."""
    if positions_svg(task, order) is None:
        return [
            f"Bits per byte by position within the window: {NOT_MEASURED} (these records were made before the "
            "evaluation kept it, `eval.positions`).",
            "",
        ]
    at = ", ".join(f"{s:,}" for s in positions_length(order))
    alt = f"bits per byte by position within the window on {md(task)}, at S = {at}, one panel per family"
    return [POSITIONS_NOTE, "", f"![{alt}](lm-{task}-positions.svg)", ""]


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


def _passkey_table(order: Sequence[LmRow]) -> list[str]:
    """The passkey grid: per row and depth, samples right of samples at each length; a table
    whose rows measured none says so in a line."""
    lengths = passkey_lengths_of(order)
    if not lengths:
        return [
            f"Passkey retrieval: {NOT_MEASURED} (these records were made before the passkey grid was part of the "
            "evaluation, `eval.passkey`).",
            "",
        ]
    out = [
        PASSKEY_NOTE,
        "",
        "| encoding | depth | " + " | ".join(f"S = {s}" for s in lengths) + " |",
        "|---|---|" + "---|" * len(lengths),
    ]
    for shown, _, depth, got in passkey_rows(order):
        if depth is None:
            out.append(f"| {md(shown)} | {NOT_MEASURED} |" + " |" * len(lengths))
        else:
            out.append(f"| {md(shown)} | {depth} % | " + " | ".join(got) + " |")
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
        f"Byte-level models {training_phrase(records)} on real text and code, scored in bits per byte far past L "
        f"(the setting of the ALiBi, KERPLE, FIRE, xPos and RoPE-scaling papers' claims): "
        f"[`{site_href}/lm.md`]({site_href}/lm.md) (or [`lm.html`]({site_href}/lm.html) in the site) has the "
        "tables, curves and the claims' verdicts.",
        "",
    ]
    for task, rows in lm_rows(records).items():
        out += [f"* {md(task)}: {answer_sentence(rows)}"]
    return [*out, ""]


def lm_pages(records: Sequence[LmRecord]) -> dict[str, str]:
    """The LM section's files (site path -> text): ``lm.md``, one ``lm-<task>.svg`` of curves per
    corpus and, where its records measured them, ``lm-<task>-positions.svg``; none without records
    (a board with no LM results has no LM section)."""
    if not records:
        return {}
    pages = {"lm.md": render_markdown(records)}
    for task, task_rows in lm_rows(records).items():
        pages[f"lm-{task}.svg"] = str(curves_svg(task, ranked(task_rows)))  # legends in the tables' order
        by_position = positions_svg(task, ranked(task_rows))
        if by_position is not None:
            pages[f"lm-{task}-positions.svg"] = str(by_position)
    return pages
