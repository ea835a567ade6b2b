"""How much of the LM track's held-out text occurs in its training text (issue 63): the split
before issue 63 (documents held out by the hash of their names alone, regions the first
M-byte slices round robin) against the split now (``harness.tasks.lm.split``, regions from
``harness.tasks.lm.data.scored_regions``), per corpus. A measurement, not a test (the tests check
the rule on corpora made in the test: tests/harness/lm/test_lm_split.py).

    python benchmarks/lm_leaks.py [--out benchmarks/results/lm-leaks]

It reads the real corpora (``pezoo lm corpus`` fetches them; nothing else is downloaded) and
prints, per corpus and split, three shares:

* **windows (any run)**: the held-out documents' non-overlapping 128-byte windows that hold a
  64-byte run of the training text at any offset (the rule: at most 2 %);
* **windows (training's chunks)**: those holding one of the training text's 64-byte-aligned
  chunks (the issue's first measure, which misses a shared run that straddles two chunks);
* **scored chunks**: the scored regions' 64-byte-aligned chunks that occur in the training
  text (the rule: none), for the ``lm`` preset's regions (and ``lm_long``'s).

With ``--out``, writes ``OUT.md`` and ``OUT.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from harness.lm.config import LM_PRESETS
from harness.tasks.lm.corpora import Corpus, load_corpus
from harness.tasks.lm.data import scored_regions
from harness.tasks.lm.overlap import RUN, TextIndex, leak_report, windows_holding_runs
from harness.tasks.lm.split import HELDOUT_FRACTION, HELDOUT_MIN_BYTES, split

Docs = tuple[tuple[str, bytes], ...]


def split_before(corpus: Corpus) -> tuple[Docs, Docs]:
    """The split before issue 63 (pezoo-lm-split/1): documents of at least 16,384 bytes held
    out in the order of a hash of their names until they hold a tenth of the bytes."""

    def order(name: str) -> str:
        return hashlib.sha256(f"pezoo/lm-split/{corpus.name}/{name}".encode()).hexdigest()

    eligible = sorted((d for d in corpus.documents if len(d[1]) >= HELDOUT_MIN_BYTES), key=lambda d: order(d[0]))
    num, den = HELDOUT_FRACTION
    held: list[tuple[str, bytes]] = []
    for doc in eligible:
        if held and sum(len(d) for _, d in held) * den >= corpus.n_bytes * num:
            break
        held.append(doc)
    taken = {n for n, _ in held}
    return tuple(d for d in corpus.documents if d[0] not in taken), tuple(held)


def regions_before(heldout: Docs, size: int, count: int) -> list[bytes]:
    """The regions before issue 63: the k-th ``size``-byte slice of each document, round robin."""
    slices = [[data[i * size : (i + 1) * size] for i in range(len(data) // size)] for _, data in heldout]
    out: list[bytes] = []
    depth = 0
    while len(out) < count and any(depth < len(s) for s in slices):
        out.extend(s[depth] for s in slices if depth < len(s))
        depth += 1
    return out[:count]


def training_chunks_share(train: Docs, index: TextIndex, heldout: Docs) -> tuple[int, int]:
    """(windows, of all) of the held-out documents holding one of the training documents'
    64-byte-aligned chunks (aligned from each document's start)."""
    on_grid = np.zeros(len(index.data), dtype=bool)  # (n,) global offsets on their document's chunk grid
    start = 0
    for _, data in train:
        on_grid[start : start + len(data) : RUN] = True
        start += len(data)
    aligned = TextIndex(())
    keep = on_grid[index.where]
    aligned.data, aligned.hashes, aligned.where = index.data, index.hashes[keep], index.where[keep]
    held = total = 0
    for _, data in heldout:
        got = windows_holding_runs(aligned.runs(data), len(data))
        held, total = held + got[0], total + got[1]
    return held, total


def measure(train: Docs, heldout: Docs, regions: Mapping[str, Sequence[bytes]]) -> dict[str, object]:
    index = TextIndex(train)
    report = leak_report(train, heldout, index=index)
    held, total = training_chunks_share(train, index, heldout)
    out: dict[str, object] = {
        "heldout_documents": len(heldout),
        "heldout_bytes": sum(len(d) for _, d in heldout),
        "windows_any_run": [report.windows_leaked, report.windows],
        "windows_training_chunks": [held, total],
        "worst_documents": [list(d) for d in sorted(report.by_document, key=lambda d: -d[1])[:5] if d[1]],
    }
    for preset, chosen in regions.items():
        scored = leak_report((), (), chosen, index=index)
        out[f"scored_chunks_{preset}"] = [scored.chunks_leaked, scored.chunks]
        out[f"scored_bytes_{preset}"] = sum(len(r) for r in chosen)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, help="write OUT.md and OUT.json")
    args = p.parse_args(argv)
    presets = {p: (LM_PRESETS[p]["eval"]["lengths"][-1], LM_PRESETS[p]["eval"]["regions"]) for p in ("lm", "lm_long")}
    results: dict[str, dict[str, object]] = {}
    for name in ("en", "code"):
        t0 = time.perf_counter()
        corpus = load_corpus(name)
        train, heldout = split_before(corpus)
        old = {"lm": regions_before(heldout, 4096, 8), "lm_long": regions_before(heldout, 16384, 4)}  # 8 and 4 regions
        before = measure(train, heldout, old)
        parts = split(corpus)
        now_regions = {p: [r.data for r in scored_regions(parts, m, k)] for p, (m, k) in presets.items()}
        after = measure(parts.train, parts.heldout, now_regions)
        after["documents_scored_lm"] = len({r.document for r in scored_regions(parts, *presets["lm"])})
        after["corpus_sha256"] = parts.sha256
        after["groups"] = sum(len(g) > 1 for g in parts.groups)
        results[name] = {"documents_sha256": corpus.sha256, "before": before, "after": after}
        print(f"{name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    text = render(results)
    print(text)
    if args.out:
        args.out.with_suffix(".md").write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


def _pct(pair: object) -> str:
    assert isinstance(pair, list)
    got, total = int(pair[0]), int(pair[1])
    return f"{got:,} of {total:,} ({100 * got / total:.2f} %)" if total else "–"


def render(results: dict[str, dict[str, object]]) -> str:
    out = [
        "# LM held-out text against training text (benchmarks/lm_leaks.py)",
        "",
        "| corpus | split | held out | 128-byte windows holding a 64-byte run of training text | "
        "… holding a training-aligned 64-byte chunk | scored 64-byte chunks in training text (lm) | (lm_long) | "
        "bytes scored (lm) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        for when in ("before", "after"):
            m = r[when]
            assert isinstance(m, dict)
            label = "before (pezoo-lm-split/1)" if when == "before" else "after (pezoo-lm-split/2)"
            shares = [_pct(m[k]) for k in ("windows_any_run", "windows_training_chunks", "scored_chunks_lm")]
            out.append(
                f"| {name} | {label} | {m['heldout_documents']} documents, {m['heldout_bytes']:,} bytes | "
                f"{' | '.join(shares)} | {_pct(m['scored_chunks_lm_long'])} | {m['scored_bytes_lm']:,} |"
            )
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
