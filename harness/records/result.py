"""What one run ends as: :class:`RunOutcome` (what became of it, for the sweep's table) and
:class:`RunResult` (what a trained and evaluated run hands back to whoever writes the store:
plain, picklable data, with its conversions to and from the one run record,
:class:`harness.records.record.RunRecord`)."""

from __future__ import annotations

import json
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.config import RunConfig
from harness.records.lm_metrics import LmScores
from harness.records.metrics import LengthMetrics
from harness.records.record import RunRecord


@dataclass(frozen=True)
class RunOutcome:
    """What became of a run: ``finished``, ``cached`` (the store holds it finished, maybe
    finished by another process meanwhile), ``claimed`` (another process is training it;
    ``error`` says which), ``deferred`` (not started: a sweep's ``admit`` said why, in
    ``error``), ``diverged`` or ``failed``."""

    run_id: str
    status: str  # finished | cached | claimed | deferred | diverged | failed | unrecorded (finished, kept)
    error: str | None = None


@dataclass(frozen=True)
class RunResult:
    """What a trained and evaluated run hands back to whoever writes the store.

    Attributes:
        run_id: ``cfg.run_id()``.
        status: ``finished``, ``diverged`` (NaN/inf loss) or ``failed`` (an exception).
        provenance: where it ran (commit, device, versions), taken on the worker.
        started_at: wall-clock (``time.time()``) when the worker started the run.
        metrics: (split, metrics) per evaluated scale; empty unless finished.
        final_loss, train_seconds, eval_seconds, n_params: as stored with a finished run.
        error: one line saying what went wrong (diverged, failed).
        traceback: the full traceback of a failed run.
        notices: messages worth showing (a resume, a corrupt checkpoint), in order.
        diagnostics: what the encoding did on one example (PRISM's cursor trajectories,
            ``harness.training.diagnostics``), or None.
        retryable: whether another attempt could end otherwise (False for a variant whose
            trained run kept no usable weights: the executor then does not retry it).
        lm: a finished language-modelling run's scores, where an algorithmic run has ``metrics``.
    """

    run_id: str
    status: str
    provenance: Mapping[str, Any]
    started_at: float
    metrics: tuple[tuple[str, LengthMetrics], ...] = ()
    final_loss: float | None = None
    train_seconds: float | None = None
    eval_seconds: float | None = None
    n_params: Mapping[str, int] = field(default_factory=dict)
    error: str | None = None
    traceback: str | None = None
    notices: tuple[str, ...] = ()
    diagnostics: Mapping[str, Any] | None = None
    retryable: bool = True
    lm: LmScores | None = None

    @classmethod
    def failed(
        cls,
        run_id: str,
        provenance: Mapping[str, Any],
        started_at: float,
        exc: BaseException,
        notices: Iterable[str] = (),
        *,
        retryable: bool = True,
    ) -> RunResult:
        """The result of a run that raised ``exc``; call it in the ``except`` block, which
        supplies the traceback."""
        return cls(
            run_id,
            "failed",
            provenance,
            started_at,
            error=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc(),
            notices=tuple(notices),
            retryable=retryable,
        )

    def record(self, cfg: RunConfig) -> RunRecord:
        """The record of this finished result of ``cfg`` (``finished_at`` None: not yet in the store).

        Raises:
            ValueError: the result is not a finished one.
        """
        loss, train_seconds, eval_seconds = self.final_loss, self.train_seconds, self.eval_seconds
        if self.status != "finished" or loss is None or train_seconds is None or eval_seconds is None:
            raise ValueError(f"run {self.run_id}: not a finished result with its final loss and timings")
        return RunRecord(
            run_id=self.run_id,
            config=json.loads(json.dumps(cfg.to_dict())),  # as JSON holds it: tuples become lists
            provenance=self.provenance,
            metrics=self.metrics,
            final_loss=float(loss),
            train_seconds=float(train_seconds),
            eval_seconds=float(eval_seconds),
            started_at=float(self.started_at),
            finished_at=None,
            n_params=int(self.n_params["total"]),
            pe_params=int(self.n_params["pe"]),
            diagnostics=self.diagnostics,
            lm=self.lm,
        )

    @classmethod
    def from_record(cls, record: RunRecord) -> RunResult:
        """The finished result a record holds (a kept result read back)."""
        return cls(
            record.run_id,
            "finished",
            record.provenance,
            record.started_at,
            metrics=record.metrics,
            final_loss=record.final_loss,
            train_seconds=record.train_seconds,
            eval_seconds=record.eval_seconds,
            n_params={"total": record.n_params, "pe": record.pe_params},
            diagnostics=record.diagnostics,
            lm=record.lm,
        )
