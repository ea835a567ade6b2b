"""What an evaluation of a run measures, as counts: one scale's metrics (``LengthMetrics``)
and one whole evaluation (``Evaluation``). How they are measured is
``harness.evaluation.evaluate``; how fractions and thresholds are made from them,
``harness.records.counts``."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction


@dataclass(frozen=True)
class LengthMetrics:
    """Metrics of one evaluated scale, as counts (``harness.records.counts``): ``exact`` of ``n``
    examples decoded exactly, ``tokens_right`` of ``tokens`` scored tokens predicted right
    (teacher-forced). A selection over several evaluations (``top3``) sums its picks'
    counts, so ``n`` and ``tokens`` then cover every picked evaluation."""

    length: int
    token_length: float
    n: int
    exact: int
    tokens: int
    tokens_right: int
    trace_exact: int | None = None
    """Examples whose whole completion matched, when ``exact`` counts only the final answer
    (``eval.match="answer"``); logged, not stored."""

    @property
    def exact_match(self) -> Fraction:
        """``exact / n``, exactly."""
        return Fraction(self.exact, self.n)

    @property
    def token_accuracy(self) -> Fraction:
        """``tokens_right / tokens``, exactly."""
        return Fraction(self.tokens_right, self.tokens)

    @property
    def trace_exact_match(self) -> Fraction | None:
        """``trace_exact / n``, or None when the whole completion is what ``exact`` counts."""
        return None if self.trace_exact is None else Fraction(self.trace_exact, self.n)


Evaluation = tuple[tuple[str, LengthMetrics], ...]
"""One evaluation of a model: (split, metrics) per scale, training scales first."""
