"""How the training loop drives its device (:class:`Accel`): the GPU loop's features, none of
which changes what a CPU run computes, switched by ``PEZOO_ACCEL`` (:data:`ACCEL_ENV`).

Moved out of ``harness.training.train`` (which re-exports the names) so that module stays one
concept: the loop itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ACCEL_ENV = "PEZOO_ACCEL"
"""Environment variable that switches the GPU loop's features (:meth:`Accel.for_device`):
``off`` (none: the loop a CPU runs), ``on`` (all), or a comma-separated subset of
``prefetch,readback,fused,graphs,forced,spawn,step,stack``. Unset: all but ``step`` and
``stack`` on CUDA (they wait for their first measurement on a GPU), none on CPU."""

ACCEL_FEATURES = ("prefetch", "readback", "fused", "graphs", "forced", "spawn", "step", "stack")

ACCEL_DEFAULT = ("prefetch", "readback", "fused", "graphs", "forced", "spawn")
"""What a CUDA run switches on when nothing is named (and what ``on`` names)."""


@dataclass(frozen=True)
class Accel:
    """How the training loop drives its device; none of it changes what a CPU run computes.

    Attributes:
        prefetch: batches a producer thread makes ahead of the step (``harness.training.feed``;
            0: made in the loop). The same batches either way.
        readback: read the step losses back from the device every this many steps (1:
            every step, a device sync each). A non-finite loss is still caught: at the
            next read-back, reported at the step it happened, the run recorded diverged.
        fused: fused AdamW at every precision (one kernel for all parameters). Changes
            the float rounding of an fp32 run, so only on CUDA.
        graphs: the forward and backward pass replayed as CUDA graphs, one per length
            bucket (``harness.training.graphs``; CUDA only).
        forced: evaluation reads exact match off the teacher-forced pass instead of a
            greedy decode (``harness.evaluation.evaluate``, "exact match without a decode"): equal
            but for argmax near-ties the two round differently, so off on CPU by default.
        spawn: with ``prefetch``, the examples are made in a producer process, not the
            producer thread (``harness.training.feed``): runs trained side by side in one
            process do not make each other's examples under one GIL. The same batches.
        step: the whole step (forward, backward, clipping, the fused AdamW's update) replayed
            as one CUDA graph per length bucket (``harness.training.step_graph``; CUDA
            only, fused implied): a step's host work is one graph launch.
        stack: runs of one model shape trained side by side in this process take their
            forward and backward passes together, as one pass over their stacked weights
            (``harness.training.stacked``); where the group installed stacks (a grouped
            sweep), else nothing. Equal to a run alone up to float rounding, so not a CPU
            default.
    """

    prefetch: int = 0
    readback: int = 1
    fused: bool = False
    graphs: bool = False
    forced: bool = False
    spawn: bool = False
    step: bool = False
    stack: bool = False

    def __post_init__(self) -> None:
        if self.prefetch < 0 or self.readback < 1:
            raise ValueError(f"prefetch must be >= 0 and readback >= 1, got {self.prefetch} and {self.readback}")

    def features(self) -> str:
        """The features on, by name, comma-separated (``prefetch,readback,fused,graphs,forced``
        order; empty: none), as :data:`ACCEL_ENV` names them."""
        on = {"prefetch": self.prefetch > 0, "readback": self.readback > 1, "fused": self.fused}
        on |= {"graphs": self.graphs, "forced": self.forced, "spawn": self.spawn, "step": self.step}
        on |= {"stack": self.stack}
        return ",".join(name for name in ACCEL_FEATURES if on[name])

    @classmethod
    def for_device(cls, device: torch.device | str, setting: str | None = None) -> Accel:
        """The features for ``device``: ``setting`` (else ``$PEZOO_ACCEL``, :data:`ACCEL_ENV`)
        names them; unset, all of them on CUDA and none on CPU (where they would change
        nothing but the float rounding of fused AdamW, or need a GPU)."""
        import os

        cuda = torch.device(device).type == "cuda"
        setting = os.environ.get(ACCEL_ENV) if setting is None else setting
        if setting is None or setting.strip() == "":
            names = set(ACCEL_DEFAULT) if cuda else set()
        elif setting.strip() in ("on", "off"):
            names = set(ACCEL_DEFAULT) if setting.strip() == "on" else set()
        else:
            names = {n.strip() for n in setting.split(",") if n.strip()}
            unknown = sorted(names - set(ACCEL_FEATURES))
            if unknown:
                raise ValueError(
                    f"{ACCEL_ENV}: unknown feature(s) {', '.join(unknown)}; valid: on, off, "
                    f"or some of {', '.join(ACCEL_FEATURES)}"
                )
        if not cuda:
            names -= {"fused", "graphs", "step"}  # CPU numerics stay the board's
            if setting is None or setting.strip() in ("", "on"):
                names.discard("forced")  # a CPU run reads it off the pass only when named
                names.discard("spawn")  # nor makes its examples in a second process (a core each)
        return cls(
            prefetch=4 if "prefetch" in names else 0,
            readback=25 if "readback" in names else 1,
            fused="fused" in names or "step" in names,
            graphs="graphs" in names,
            forced="forced" in names,
            spawn="spawn" in names and "prefetch" in names,
            step="step" in names,
            stack="stack" in names,
        )
