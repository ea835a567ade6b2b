"""Optional TensorBoard logging of a run (``pezoo bench --tensorboard DIR``).

One event folder per run, ``DIR/<task>/<encoding>/seed<k>-<run id>``, holding the
training loss and learning rate per step and, per evaluation, exact match and token
accuracy at every scale plus their means in and beyond the training range. Needs the
``tensorboard`` package (``pip install 'pezoo[tensorboard]'``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.config import RunConfig

INSTALL_HINT = "--tensorboard needs the tensorboard package: pip install 'pezoo[tensorboard]'"


def check_available() -> None:
    """Raise RuntimeError (with the install command) when TensorBoard cannot be written."""
    try:
        import tensorboard  # noqa: F401
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(f"{INSTALL_HINT} ({exc})") from None


def run_dir(root: str | Path, cfg: RunConfig) -> Path:
    """Event folder of one run under ``root`` (readable names, the run id keeps it unique)."""
    pe = cfg.pe.replace(":", "-")
    return Path(root) / cfg.task / pe / f"seed{cfg.seed}-{cfg.run_id()}"


class RunLog:
    """Scalars of one run. ``first_step`` > 0 (a resumed run) drops events the killed
    attempt wrote after its last checkpoint, so curves do not double back."""

    def __init__(self, root: str | Path, cfg: RunConfig, first_step: int = 0) -> None:
        check_available()
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(str(run_dir(root, cfg)), purge_step=first_step or None)
        self._writer.add_text("config", f"```\n{cfg.to_dict()}\n```", global_step=first_step)

    def step(self, step: int, loss: float) -> None:
        self._writer.add_scalar("train/loss", loss, step)

    def lr(self, step: int, lr: float) -> None:
        self._writer.add_scalar("train/lr", lr, step)

    def evaluation(self, step: int, metrics: Any, tag: str = "eval") -> None:
        """``metrics``: (split, LengthMetrics) per scale, as returned by an evaluation."""
        means: dict[str, list[float]] = {"train": [], "test": []}
        for split, m in metrics:
            self._writer.add_scalar(f"{tag}/exact_match/len{m.length:04d}", float(m.exact_match), step)
            self._writer.add_scalar(f"{tag}/token_accuracy/len{m.length:04d}", float(m.token_accuracy), step)
            if m.trace_exact_match is not None:  # eval.match = answer: the whole trace too
                self._writer.add_scalar(f"{tag}/trace_exact_match/len{m.length:04d}", float(m.trace_exact_match), step)
            means[split].append(float(m.exact_match))
        for split, values in means.items():
            if values:
                name = "in_distribution" if split == "train" else "beyond_training"
                self._writer.add_scalar(f"{tag}/exact_match_{name}", sum(values) / len(values), step)

    def close(self) -> None:
        self._writer.flush()
        self._writer.close()
