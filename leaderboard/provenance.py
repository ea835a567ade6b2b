"""Where the runs of each preset came from, and the sentence saying what each of them trained.

Computed from the published records alone (never the SQLite store), per preset among the
runs a page shows: seeds, tasks, encodings, steps, backbones, devices, CPUs, commits,
versions and the days the runs finished (:func:`provenance`). Every page opens with a
banner per preset built from it and ends with it as a table, so a reader can tell a
small CPU board from the papers' regime before reading a number. A field the older
records predate reads ``NOT_RECORDED`` rather than being guessed.

:func:`trained_sentence` says it in one sentence at the top of the front page and the
README: what each run trained, on what, how far it was tested, and, unless the board is
paper scale (the ``gpu`` preset on GPUs), what the source papers train instead
(``PAPERS_PROTOCOLS``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from leaderboard.records import record_label
from leaderboard.schema import Record
from leaderboard.text import plural


@dataclass(frozen=True)
class Provenance:
    """Where the runs of one preset (within some page's scope) came from."""

    preset: str
    runs: int
    seeds: tuple[int, ...]
    tasks: tuple[str, ...]
    encodings: tuple[str, ...]
    steps: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    backbones: tuple[str, ...]
    eval_samples: tuple[int, ...]
    devices: tuple[str, ...]
    commits: tuple[str, ...]
    pezoo_versions: tuple[str, ...]
    torch_versions: tuple[str, ...]
    first_day: str
    last_day: str
    files: tuple[str, ...]
    n_layers: tuple[int, ...] = ()
    d_models: tuple[int, ...] = ()
    evaluated: int = 0  # runs that evaluate another run's trained weights (inference-time variants), no training
    reevaluated: int = 0  # runs tested further than a finished run of the same training, on its kept weights
    cpus: tuple[str, ...] = ()  # the hosts' CPUs ("not recorded" for records from before pezoo recorded them)
    resumed_elsewhere: int = 0  # runs trained by more than one commit or on more than one machine
    cpus_unknown: int = 0  # runs whose record names no CPU (written before the harness recorded it)
    train_scales: tuple[str, ...] = ()  # the training scales, "1..10"
    test_maxes: tuple[int, ...] = ()  # the largest tested scale

    def runs_text(self) -> str:
        """``97 runs (18 of them evaluate a trained run's weights, no training)``."""
        text = plural(self.runs, "run")
        if self.evaluated or self.reevaluated:
            text += f" ({self.evaluated + self.reevaluated} of them evaluate a trained run's weights, no training)"
        return text

    def models_text(self) -> str:
        """``d_model 128, 3 layers, 4 heads``; several: ``2 models (d_model 128, 3 layers, 4 heads;
        d_model 128, 3 layers, 4 heads, untied output layer)``, each model's words kept together."""
        if len(self.backbones) <= 1:
            return "".join(self.backbones)
        return f"{plural(len(self.backbones), 'model')} ({'; '.join(self.backbones)})"

    @property
    def paper_scale(self) -> bool:
        """Only a GPU-preset board run on GPUs is in the papers' regime; everything else is flagged."""
        return self.preset == "gpu" and all(d.startswith("cuda") for d in self.devices)

    @property
    def on_cpu(self) -> bool:
        return any(d.startswith("cpu") for d in self.devices)


NOT_RECORDED = "not recorded"
"""A provenance field a record predates (the CPU, recorded from 25 November 2026)."""


def provenance(records: Iterable[Record]) -> list[Provenance]:
    """One Provenance per preset among ``records``, sorted by preset."""
    by_preset: dict[str, list[Record]] = {}
    for rec in records:
        by_preset.setdefault(rec.data["preset"], []).append(rec)
    out = []
    for preset in sorted(by_preset):
        recs = by_preset[preset]

        def values(get: Any, recs: list[Record] = recs) -> tuple[Any, ...]:
            return tuple(sorted({get(r.data) for r in recs}))

        days = values(lambda d: _day(d["timings"]["finished_at"]))
        out.append(
            Provenance(
                preset=preset,
                runs=len(recs),
                seeds=values(lambda d: d["seed"]),
                tasks=values(lambda d: d["task"]),
                encodings=values(record_label),
                steps=values(lambda d: d["config"]["train"]["steps"]),
                batch_sizes=values(lambda d: d["config"]["train"]["batch_size"]),
                backbones=values(_backbone_text),
                eval_samples=values(lambda d: d["config"]["eval"]["samples"]),
                devices=values(lambda d: d["provenance"]["device"]),
                commits=values(lambda d: d["provenance"]["commit"]),
                pezoo_versions=values(lambda d: d["provenance"]["pezoo"]),
                torch_versions=values(lambda d: d["provenance"]["torch"]),
                first_day=days[0],
                last_day=days[-1],
                files=tuple(sorted({r.path.name for r in recs})),
                n_layers=values(lambda d: d["config"].get("backbone", {}).get("n_layers")),
                d_models=values(lambda d: d["config"].get("backbone", {}).get("d_model")),
                evaluated=sum(bool(r.data["config"].get("eval_pe_options")) for r in recs),
                reevaluated=sum(
                    not r.data["config"].get("eval_pe_options") and "weights_from" in r.data["provenance"] for r in recs
                ),
                cpus=values(lambda d: d["provenance"].get("cpu", NOT_RECORDED)),
                cpus_unknown=sum("cpu" not in r.data["provenance"] for r in recs),
                resumed_elsewhere=sum(
                    any(k in r.data["provenance"] for k in ("code_by_step", "machine_by_step")) for r in recs
                ),
                train_scales=values(
                    lambda d: f"{d['config']['train'].get('train_min', 1)}..{d['config']['train']['train_max']}"
                ),
                test_maxes=values(lambda d: d["config"]["eval"]["test_max"]),
            )
        )
    return out


PAPERS_PROTOCOLS = (
    "the papers train far longer on GPUs, mostly larger models (5 layers, d_model 512, 150k steps in Position as "
    "Probability §6.2 and §6.4; 5 layers, d_model 64, 2M steps in Randomized Positional Encodings, Appendix A; "
    "12 layers, d_model 1024, 200k steps in Universal Length Generalization with Turing Programs §3.1.1)"
)
"""What the source papers train, for the sentence at the top of a board that is not paper scale."""


def trained_sentence(p: Provenance) -> str:
    """One sentence a newcomer understands: what each run of the preset trained, on what,
    how far it was tested, and (unless the board is paper scale) how that differs from the
    papers' protocols.

    Built from the records' own config and provenance, e.g. "Each run trains a 3-layer
    transformer (d_model 128) for 3000 steps of batch 64 on task instances of scale 1..10,
    on a CPU, and is tested on scales up to 40; the papers train larger models far longer
    on GPUs (...)."
    """
    layers = "/".join(map(str, p.n_layers)) or "?"
    width = "/".join(map(str, p.d_models)) or "?"
    steps = "/".join(map(str, p.steps))
    batch = "/".join(map(str, p.batch_sizes))
    text = f"Each run trains a {layers}-layer transformer (d_model {width}) for {steps} steps of batch {batch}"
    if p.train_scales:
        text += f" on task instances of scale {' or '.join(p.train_scales)},"
    text += " " + _device_words(p.devices)
    known = [c for c in p.cpus if c != NOT_RECORDED]
    if p.cpus_unknown and known:  # all unknown: the Provenance table's CPU row says "not recorded"
        cpus = plural(len(known), "CPU model")
        text += f" ({cpus} named in the records; the CPU of {p.cpus_unknown} of the {p.runs} runs is unknown)"
    elif len(known) > 1:
        text += f" (more than one machine: the records name {len(known)} CPU models, listed under Provenance)"
    if p.test_maxes:
        text += f", and is tested on scales up to {'/'.join(map(str, p.test_maxes))}"
    if p.evaluated:
        text += " (a row marked “same weights” evaluates a trained run's weights with other options, no training)"
    if p.reevaluated:
        text += (
            "; a run tested on another range than a finished run of the same training (encoding, task, seed and "
            f"training alike) evaluates that run's kept final weights, no training ({plural(p.reevaluated, 'run')})"
        )
    return text + ("." if p.paper_scale else f"; {PAPERS_PROTOCOLS}.")


def _device_words(devices: Sequence[str]) -> str:
    """``cpu:x86_64 x1 threads`` -> "on a CPU"; ``cuda:NVIDIA H100`` -> "on a GPU (NVIDIA H100)"."""
    words = []
    for device in devices:
        kind, _, name = device.partition(":")
        what = {"cpu": "a CPU", "cuda": "a GPU", "mps": "an Apple GPU"}.get(kind, f"device {kind}")
        words.append(what if kind == "cpu" or not name else f"{what} ({name})")
    return "on " + (" or ".join(dict.fromkeys(words)) if words else "an unrecorded device")


def _backbone_text(d: Mapping[str, Any]) -> str:
    b = d["config"].get("backbone", {})
    head = b.get("head", "tied")  # records from before the option: tied
    shape = f"d_model {b.get('d_model')}, {plural(b.get('n_layers'), 'layer')}, {plural(b.get('n_heads'), 'head')}"
    return shape if head == "tied" else f"{shape}, {head} output layer"


def _day(unix: float) -> str:
    return dt.datetime.fromtimestamp(unix, tz=dt.timezone.utc).strftime("%Y-%m-%d")
