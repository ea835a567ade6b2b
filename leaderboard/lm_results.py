"""The published LM results as the board reads them (``leaderboard/results/lm/*.jsonl``),
and the rules a set of LM records keeps to make one honest section: what the algorithmic
results get from ``leaderboard.schema`` (each line checked, its checksum matched, each run
once) and ``leaderboard.records.check_protocols`` (one protocol per table).

Each line is a sealed record: a run of the one harness (``pezoo bench --task lm_en``,
exported by ``pezoo leaderboard export``: a results-file line that ``leaderboard.schema``
checks, read as :meth:`LmRecord.of_run`), or a record of the track's earlier store
(``harness.lm.record``: :meth:`LmRecord.from_dict` is its validator, checksum included; a
record of the unsealed schema ``pezoo-lm-run/1`` is refused here). A set of records (:func:`set_problems`) must keep to:

* **each run once**: a run id on two lines is refused at its second (the board would show
  one and the other would be published beside it);
* **one protocol per table**: a table is one task (one corpus); its records share preset,
  backbone, training and evaluation, and differ only in encoding, a variant's options and
  fine-tune, and seed (so a smoke run is never a fourth seed of a board run);
* **one corpus per table**: one ``corpus_sha256`` per task (the table's heading names it);
* **a variant's trained run published**: a variant (RoPE's scalings, zero-shot or
  fine-tuned) is judged against the bpb at L of the run whose weights it evaluates
  (``LmConfig.trained_config``), so that run must be published with it; a provenance
  ``weights_from`` must name it, and a zero-shot variant carries its final loss;
* **one record per row and seed**: two run ids of one label, task and seed are refused.

Every problem names its file and line, as ``pezoo leaderboard check`` prints them; whatever
a file holds, :func:`read_lm_results` raises :class:`LmResultsError` (a ValueError) and
nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.lm.config import LmConfig
from harness.lm.record import LM_SCHEMA, UNSEALED_SCHEMA, LmRecord
from harness.records.inputs import RESULTS_LIMIT, FileReadError, read_text
from harness.records.record import RunRecord
from leaderboard.schema import parse_json, validate_record
from pezoo.spec import format_eval_options, format_pe

__all__ = [
    "PROTOCOL_FREE_KEYS",
    "LmResultsError",
    "Located",
    "label_of",
    "protocol_of",
    "read_lm_file",
    "read_lm_results",
    "set_problems",
]

PROTOCOL_FREE_KEYS = ("pe", "pe_options", "eval_pe_options", "finetune_steps", "finetune_length", "seed", "task")
"""LmConfig keys that may differ between the records of one table (the task is the table)."""

Problem = tuple[Path | None, int, str]


class LmResultsError(ValueError):
    """LM results that cannot make the section; ``problems`` holds (path, line, reason),
    the path None for records not read from a file."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        shown = [_where(path, line) + reason for path, line, reason in self.problems[:50]]
        if len(self.problems) > 50:
            shown.append(f"... and {len(self.problems) - 50} more")
        super().__init__("\n  ".join(shown))


def _where(path: Path | None, line: int) -> str:
    return "" if path is None else f"{path}:{line}: "


@dataclass(frozen=True)
class Located:
    """One valid LM record and where it was read from (``line`` 1-based; no path: not read)."""

    record: LmRecord
    path: Path | None = None
    line: int = 0

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.path is not None else f"record {self.record.run_id}"


def label_of(cfg: LmConfig) -> str:
    """The row label of a config: its encoding spec, a variant's options, a fine-tune's steps."""
    text = format_pe(cfg.pe, cfg.pe_options)
    if cfg.eval_pe_options:
        text += format_eval_options(cfg.eval_pe_options)
    if cfg.finetune_steps:
        text += f" +{cfg.finetune_steps} steps at {cfg.finetune_length}"
    return text


def protocol_of(cfg: LmConfig) -> dict[str, Any]:
    """What the records of one table share: the config less :data:`PROTOCOL_FREE_KEYS`."""
    return {k: v for k, v in cfg.to_dict().items() if k not in PROTOCOL_FREE_KEYS}


def _differing(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in _differing(a.get(k), b.get(k), f"{prefix}{k}.")]
    return [] if a == b else [prefix.rstrip(".")]


def read_lm_file(path: Path) -> tuple[list[Located], list[Problem]]:
    """The valid records of one LM results file and every problem of its lines."""
    try:  # a regular file within RESULTS_LIMIT, UTF-8: a FIFO or a 6 GB sparse file is refused unread
        text = read_text(path, RESULTS_LIMIT)
    except FileReadError as exc:
        return [], [(path, 0, exc.reason)]
    found: list[Located] = []
    problems: list[Problem] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = parse_json(line)
            if isinstance(value, dict) and "schema_version" in value:  # a run of the one harness (pezoo bench)
                reasons = validate_record(value)
                if reasons:
                    raise ValueError("; ".join(reasons[:5]))
                found.append(Located(LmRecord.of_run(RunRecord.from_dict(value)), path, number))
                continue
            if isinstance(value, dict) and value.get("schema") == UNSEALED_SCHEMA:
                raise ValueError(
                    f"an LM record of schema {UNSEALED_SCHEMA!r} carries no checksum: publish records of schema "
                    f"{LM_SCHEMA!r}, or runs of the one harness (`pezoo leaderboard export`)"
                )
            found.append(Located(LmRecord.from_dict(value), path, number))
        except (ValueError, KeyError, TypeError) as exc:
            problems.append((path, number, str(exc)))
    return found, problems


def set_problems(records: Sequence[Located], *, label: Callable[[LmConfig], str] = label_of) -> list[Problem]:
    """Every rule of the module docstring that ``records`` break, at the record that breaks it."""
    problems: list[Problem] = []
    by_id: dict[str, Located] = {}
    for r in records:
        first = by_id.setdefault(r.record.run_id, r)
        if first is not r:
            problems.append((r.path, r.line, f"run {r.record.run_id} is already published at {first.where}"))
    tables: dict[str, Located] = {}
    rows: dict[tuple[str, str, int], Located] = {}
    for r in by_id.values():
        cfg = r.record.config
        first = tables.setdefault(cfg.task, r)
        if first is not r:
            differ = _differing(protocol_of(cfg), protocol_of(first.record.config))
            if differ:
                problems.append(
                    (
                        r.path,
                        r.line,
                        f"{cfg.task}'s table holds one protocol, and this run's {', '.join(differ)} differ from "
                        f"those of {first.where} (preset {first.record.config.preset!r}, this one's "
                        f"{cfg.preset!r}): runs of another protocol go to a results folder of their own",
                    )
                )
            mine, theirs = r.record.provenance.get("corpus_sha256"), first.record.provenance.get("corpus_sha256")
            if mine != theirs:
                problems.append(
                    (
                        r.path,
                        r.line,
                        f"{cfg.task}'s table holds one corpus, and this run's corpus_sha256 {str(mine)[:16]} is not "
                        f"that of {first.where} ({str(theirs)[:16]})",
                    )
                )
        row = (cfg.task, label(cfg), cfg.seed)
        other = rows.setdefault(row, r)
        if other is not r:
            problems.append(
                (r.path, r.line, f"two records of {row[1]} on {row[0]} seed {row[2]}: this one and {other.where}")
            )
        problems += _variant_problems(r, by_id)
    return problems


def _variant_problems(r: Located, by_id: dict[str, Located]) -> list[Problem]:
    """A variant's trained run must be published (and be the run its weights came from)."""
    cfg, prov = r.record.config, r.record.provenance
    source = prov.get("weights_from")
    if not cfg.is_variant:
        if source is None:
            return []
        return [(r.path, r.line, f"run {r.record.run_id} names weights_from {source!r} but is not a variant")]
    trained_id = r.record.trained_run_id()
    base = by_id.get(trained_id)
    if base is None:
        return [
            (
                r.path,
                r.line,
                f"variant {r.record.run_id} is judged against its trained run {trained_id}, which is not "
                "published: publish that run with it",
            )
        ]
    if source is not None and source != trained_id:
        return [(r.path, r.line, f"variant {r.record.run_id} evaluated the weights of {source!r}, not its trained run")]
    if not cfg.finetune_steps and r.record.final_loss != base.record.final_loss:
        return [(r.path, r.line, f"zero-shot variant {r.record.run_id}: its final_loss is not its trained run's")]
    return []


def read_lm_results(folder: Path) -> list[LmRecord]:
    """Every record of the ``*.jsonl`` files in ``folder`` (none when it does not exist),
    each valid and sealed, the set keeping to :func:`set_problems`; LmResultsError naming
    every problem otherwise."""
    if not folder.is_dir():
        return []
    located: list[Located] = []
    problems: list[Problem] = []
    for path in sorted(p for p in folder.glob("*.jsonl") if not p.is_dir()):
        found, bad = read_lm_file(path)
        located += found
        problems += bad
    if not problems:
        problems = set_problems(located)
    if problems:
        raise LmResultsError(problems)
    return [r.record for r in located]
