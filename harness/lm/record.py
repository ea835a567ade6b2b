"""The LM page's view of a language-modelling run (:class:`LmRecord`), and the records the
track published before it ran in the one harness.

A language-modelling run is trained, scored and stored by the harness like every run (``pezoo
bench --task lm_en``): its record is a ``harness.records.record.RunRecord`` whose ``lm`` holds
its scores. The LM page (``leaderboard.lm_board``) reads each run as an :class:`LmRecord`:
:meth:`LmRecord.of_run` views a harness record so. The records the track published before
(``leaderboard/results/lm/lm-*.jsonl``, schema ``pezoo-lm-run/2``, trained by the loop this
track had of its own) are read as written by :meth:`LmRecord.from_dict`, their one validator:
the config, where it ran (commit, device, the corpus's sha256), per (mode, length) the summed
nats and the bytes scored, a ``passkey`` key where the config asks for the grid, a
``positions`` key where it asks for curves by position, and its ``checksum``: ``"sha256:"``
and the hex digest of the canonical JSON (sorted keys, no spaces, UTF-8, no NaN) of every
other key, as the algorithmic results files carry (``leaderboard.schema``). The checksum
guards against accidental or hand edits, not forgery. Records of schema ``pezoo-lm-run/1``
(no checksum) are refused by the board.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.config import RunConfig
from harness.config.checks import shown
from harness.lm.config import LmConfig
from harness.records.lm_metrics import LengthScore, PasskeyCell, passkey_from, scores_from, with_curves
from harness.records.lm_positions import PositionCurve
from harness.records.record import RunRecord

__all__ = ["LM_SCHEMA", "UNSEALED_SCHEMA", "LmRecord", "checksum"]

LM_SCHEMA = "pezoo-lm-run/2"
"""The record format's name and version: version 2 carries a checksum."""

UNSEALED_SCHEMA = "pezoo-lm-run/1"
"""The format before records carried a checksum: read from a store as written (nothing to
check it against), never published (``leaderboard.lm_results``)."""

KEYS = frozenset(
    {
        "schema",
        "run_id",
        "config",
        "scores",
        "final_loss",
        "train_steps",
        "train_seconds",
        "eval_seconds",
        "n_params",
        "provenance",
    }
)
"""The keys of an unsealed record; a sealed one has ``checksum`` too, one whose config
asks for the passkey grid has ``passkey`` too, and one whose config asks for curves by
position has ``positions`` too."""

OPTIONAL_KEYS = frozenset({"passkey", "positions"})
"""Keys a record has exactly when its config asks for what they hold."""


def checksum(body: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``body`` without its ``checksum`` key (sorted
    keys, no spaces, UTF-8 kept; NaN and infinities refused with a ValueError)."""
    rest = {k: v for k, v in body.items() if k != "checksum"}
    text = json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class LmRecord:
    """A finished language-modelling run.

    Attributes:
        config: the run's ``LmConfig`` (its ``run_id`` is the record's).
        scores: per (mode, length), ``LengthScore`` (nats and bytes, or not reached and why);
            where the config asks for curves by position (``eval.positions``), each reached
            windows score carries its :class:`~harness.records.lm_positions.PositionCurve`.
        final_loss: the last training step's loss (nats per byte); for a zero-shot variant
            its trained run's.
        train_steps: steps this record's weights were trained (a variant's fine-tune only).
        train_seconds: their wall-clock seconds (0 for a zero-shot variant).
        eval_seconds: the evaluation's.
        n_params: {"total": ..., "pe": ...}.
        provenance: commit, device, versions, ``corpus_sha256`` and the corpus's sources;
            ``weights_from`` for a variant.
        passkey: per (length, depth) of the passkey grid, ``PasskeyCell`` (samples right of
            samples, or not reached and why); None when the config does not ask for it
            (``eval.passkey`` 0: not measured).
    """

    config: LmConfig
    scores: tuple[LengthScore, ...]
    final_loss: float
    train_steps: int
    train_seconds: float
    eval_seconds: float
    n_params: Mapping[str, int] = field(default_factory=dict)
    provenance: Mapping[str, Any] = field(default_factory=dict)
    passkey: tuple[PasskeyCell, ...] | None = None
    harness_ids: tuple[str, str] | None = None
    """For a view of a harness record (:meth:`of_run`): its run id and its trained run's, the
    ids the one store and the published results know it by; None for a record of this type."""

    @property
    def run_id(self) -> str:
        return self.harness_ids[0] if self.harness_ids is not None else self.config.run_id()

    def trained_run_id(self) -> str:
        """The id of the run whose weights a variant evaluates (its own for a trained run)."""
        return self.harness_ids[1] if self.harness_ids is not None else self.config.trained_config().run_id()

    @classmethod
    def of_run(cls, record: RunRecord) -> LmRecord:
        """The LM page's view of a language-modelling run trained by the one harness (``pezoo
        bench --task lm_en``; its record a ``RunRecord`` holding ``LmScores``): the same
        config, scores, passkey grid and provenance, under the harness's run ids. ValueError
        for a record of another task."""
        if record.lm is None:
            raise ValueError(f"run {record.run_id} is not a language-modelling run")
        cfg = RunConfig.from_dict(record.config)
        lm = cfg.lm_eval
        config = LmConfig(
            pe=cfg.pe,
            task=cfg.task,
            seed=cfg.seed,
            preset=cfg.preset,
            pe_options=dict(cfg.pe_options),
            backbone=cfg.backbone,
            train=cfg.train,
            eval=dataclasses.replace(lm, finetune_steps=0, finetune_length=0),
            eval_pe_options=dict(cfg.eval_pe_options),
            finetune_steps=lm.finetune_steps,
            finetune_length=lm.finetune_length,
        )
        return cls(
            config,
            record.lm.scores,
            record.final_loss,
            cfg.lm_eval.finetune_steps if cfg.is_variant else cfg.train.steps,
            record.train_seconds,
            record.eval_seconds,
            {"total": record.n_params, "pe": record.pe_params},
            dict(record.provenance),
            record.lm.passkey,
            (record.run_id, cfg.trained_config().run_id()),
        )

    @property
    def seconds_per_step(self) -> float | None:
        return self.train_seconds / self.train_steps if self.train_steps else None

    def score(self, mode: str, length: int) -> LengthScore | None:
        return next((s for s in self.scores if s.mode == mode and s.length == length), None)

    def position_curve(self, length: int) -> PositionCurve | None:
        """The windows mode's curve by position at ``length``; None where it was not measured or not reached."""
        score = self.score("windows", length)
        return None if score is None else score.curve

    def passkey_cell(self, length: int, depth: int) -> PasskeyCell | None:
        """The passkey grid's cell at (length, depth); None where it was not measured."""
        return next((c for c in self.passkey or () if c.length == length and c.depth == depth), None)

    def to_dict(self) -> dict[str, Any]:
        """The record's JSON object, sealed with its checksum."""
        body = {
            "schema": LM_SCHEMA,
            "run_id": self.run_id,
            "config": self.config.to_dict(),
            "scores": [s.to_dict() for s in self.scores],
            "final_loss": self.final_loss,
            "train_steps": self.train_steps,
            "train_seconds": self.train_seconds,
            "eval_seconds": self.eval_seconds,
            "n_params": dict(self.n_params),
            "provenance": dict(self.provenance),
        }
        if self.passkey is not None:
            body["passkey"] = [c.to_dict() for c in self.passkey]
        if self.config.eval.positions:
            body["positions"] = [
                {"length": s.length, **s.curve.to_dict()} for s in self.scores if s.mode == "windows" and s.curve
            ]
        return {**body, "checksum": checksum(body)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LmRecord:
        """The record of a JSON object; ValueError saying what is wrong otherwise."""
        if not isinstance(d, Mapping):
            raise ValueError(f"an LM record must be an object, got {shown(d)}")
        if d.get("schema") not in (LM_SCHEMA, UNSEALED_SCHEMA):
            raise ValueError(f"not an LM record of schema {LM_SCHEMA!r}: schema {shown(d.get('schema'))}")
        expected = KEYS | {"checksum"} if d["schema"] == LM_SCHEMA else KEYS
        if set(d) - OPTIONAL_KEYS != expected:
            raise ValueError(f"an LM record has keys {sorted(expected)} (and passkey, positions), got {sorted(d)}")
        config = LmConfig.from_dict(d["config"])
        if config.run_id() != d["run_id"]:
            raise ValueError(f"record {d['run_id']!r}: its config's run id is {config.run_id()!r}")
        if ("passkey" in d) != bool(config.eval.passkey):
            raise ValueError(
                f"record {d['run_id']}: a record has passkey cells exactly when its config's eval.passkey is above 0 "
                f"(it is {config.eval.passkey})"
            )
        if ("positions" in d) != config.eval.positions:
            raise ValueError(
                f"record {d['run_id']}: a record has position curves exactly when its config's eval.positions is true"
            )
        scores = scores_from(d["run_id"], d["scores"], config.eval)
        if "positions" in d:
            scores = with_curves(d["run_id"], d["positions"], scores)
        passkey = passkey_from(d["run_id"], d["passkey"], config.eval) if "passkey" in d else None
        for key in ("final_loss", "train_seconds", "eval_seconds"):
            value = d[key]
            if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
                raise ValueError(f"record {d['run_id']}: {key} must be a finite number >= 0, got {shown(value)}")
        steps = d["train_steps"]
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
            raise ValueError(f"record {d['run_id']}: train_steps must be an integer >= 0, got {shown(steps)}")
        if not isinstance(d["provenance"], Mapping) or "corpus_sha256" not in d["provenance"]:
            raise ValueError(f"record {d['run_id']}: its provenance lacks corpus_sha256")
        if d["schema"] == LM_SCHEMA:
            if not isinstance(d["checksum"], str) or d["checksum"] != checksum(d):
                raise ValueError(f"record {d['run_id']}: checksum mismatch: the record was edited after it was written")
        return cls(
            config,
            scores,
            float(d["final_loss"]),
            int(d["train_steps"]),
            float(d["train_seconds"]),
            float(d["eval_seconds"]),
            dict(d["n_params"]),
            dict(d["provenance"]),
            passkey,
        )
