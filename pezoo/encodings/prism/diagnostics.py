"""What PRISM's cursors do on a given input: histograms, gate probabilities and the mode
trajectory of every cursor (the paper's Figures 11–17), and a plot of them.

Axis letters: b batch, h heads, c cursors per head, s tokens, p histogram bins.

>>> with trace(model.pe) as traces:          # doctest: +SKIP
...     model(tokens)
>>> plot_traces(traces(), "prism.png", tokens=["1", "2", "="])   # doctest: +SKIP

``trace`` works on any model whose encoding is a :class:`PRISM` (any
:class:`~pezoo.encodings.prism.recording.CursorRecording`), full passes and incremental
decoding alike (calls are concatenated along the token axis).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from pezoo.encodings.prism.recording import CursorRecording

__all__ = ["GATE_NAMES", "CursorTrace", "plot_traces", "trace"]

GATE_NAMES = ("reset", "inc", "dec", "keep")


@dataclass(frozen=True)
class CursorTrace:
    """Every cursor of one PRISM layer over one input batch.

    Attributes:
        layer: backbone layer the PRISM layer sits before.
        hist: (b, 2, h, c, s, p) histograms after each token; side 0 = query cursors,
            1 = key cursors; bin k is offset k - P.
        gates: (b, 2, h, c, s, 4) gate probabilities (reset, inc, dec, keep).
    """

    layer: int
    hist: Tensor
    gates: Tensor

    @property
    def support(self) -> int:
        return self.hist.shape[-1] // 2

    @property
    def modes(self) -> Tensor:
        """(b, 2, h, c, s) most likely offset of each cursor after each token."""
        return self.hist.argmax(dim=-1) - self.support

    @property
    def confidence(self) -> Tensor:
        """(b, 2, h, c, s) probability mass at the mode."""
        return self.hist.max(dim=-1).values


@contextmanager
def trace(pe: CursorRecording) -> Iterator[Callable[[], list[CursorTrace]]]:
    """Record the forward calls made inside the block; yields a function returning one
    :class:`CursorTrace` per PRISM layer (calls concatenated along the token axis)."""
    with pe.recording() as records:
        yield lambda: _collect(records)


def _collect(records: list[dict]) -> list[CursorTrace]:
    by_layer: dict[int, list[dict]] = {}
    for rec in records:
        by_layer.setdefault(rec["layer"], []).append(rec)
    traces = []
    for layer, recs in sorted(by_layer.items()):
        support = max(r["hist"].shape[-1] // 2 for r in recs)
        hists = [F.pad(r["hist"], (support - r["hist"].shape[-1] // 2,) * 2) for r in recs]
        traces.append(
            CursorTrace(layer, torch.cat(hists, dim=-2).cpu(), torch.cat([r["gates"] for r in recs], dim=-2).cpu())
        )
    return traces


def plot_traces(
    traces: Sequence[CursorTrace],
    path: str | Path,
    *,
    example: int = 0,
    tokens: Sequence[str] | None = None,
    title: str | None = None,
) -> Path:
    """Plot, per PRISM layer: the mode of every query and key cursor vs token index, the
    drift P(inc) - P(dec) and the reset probability of every cursor, and one query cursor's full
    histogram over time. Saved as PNG or SVG (by suffix). Needs matplotlib (extra ``plot``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    rows = len(traces)
    fig, axes = plt.subplots(rows, 5, figsize=(25, 4.6 * rows), squeeze=False)
    for row, tr in enumerate(traces):
        s = tr.hist.shape[-2]  # tokens
        _plot_modes(axes[row, :2], tr, example, legend=row == 0)
        _plot_gates(fig, axes[row, 2:4], tr, example)
        _plot_histogram(fig, axes[row, 4], tr, example)
        if tokens is not None:
            for ax in axes[row]:
                ax.set_xticks(range(len(tokens[:s])), list(tokens[:s]), fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_modes(axes: Any, tr: CursorTrace, example: int, *, legend: bool) -> None:
    """On ``axes`` (query, key): the mode of every cursor of that side vs token index, with the
    lines ±(t + 1) a counting cursor follows; the legend on the query plot if ``legend``."""
    modes = tr.modes[example].numpy()  # (2, h, c, s)
    _, h, c, s = modes.shape
    steps = torch.arange(s).numpy()
    for side, name in ((0, "query"), (1, "key")):
        ax = axes[side]
        for hi in range(h):
            for ci in range(c):
                ax.plot(steps, modes[side, hi, ci], marker=".", lw=1, label=f"h{hi} c{ci}")
        ax.plot(steps, steps + 1, "k--", lw=0.8, label="±(t + 1)")
        ax.plot(steps, -(steps + 1), "k--", lw=0.8)
        ax.set_title(f"PRISM layer {tr.layer}: {name}-cursor modes")
        ax.set_xlabel("token index t")
        ax.set_ylabel("mode offset")
        if legend and side == 0:
            ax.legend(fontsize=6, ncol=2)


def _plot_gates(fig: Any, axes: Any, tr: CursorTrace, example: int) -> None:
    """On ``axes`` (two): the drift P(inc) - P(dec) and the reset probability of every cursor
    (one image row each) vs token index."""
    gates = tr.gates[example].numpy()  # (2, h, c, s, 4)
    _, h, c, s, _ = gates.shape
    labels = [f"{'qk'[sd]} h{hi} c{ci}" for sd in range(2) for hi in range(h) for ci in range(c)]
    drift = gates[..., 1] - gates[..., 2]  # expected move E[Δ] without reset
    for ax, values, name, (lo, hi), cmap in (
        (axes[0], drift, "P(inc) - P(dec)", (-1, 1), "coolwarm"),
        (axes[1], gates[..., 0], "P(reset)", (0, 1), "viridis"),
    ):
        image = ax.imshow(values.reshape(-1, s), aspect="auto", vmin=lo, vmax=hi, cmap=cmap)
        ax.set_yticks(range(len(labels)), labels, fontsize=6)
        ax.set_title(f"{name} per cursor")
        ax.set_xlabel("token index t")
        fig.colorbar(image, ax=ax)


def _plot_histogram(fig: Any, ax: Any, tr: CursorTrace, example: int) -> None:
    """On ``ax``: query cursor h0 c0's whole histogram over time, on the offsets it can reach."""
    s, support = tr.hist.shape[-2], tr.support  # tokens, P
    lo, hi = max(0, support - s - 2), min(2 * support + 1, support + s + 3)
    image = ax.imshow(
        tr.hist[example, 0, 0, 0, :, lo:hi].T.numpy(),
        aspect="auto",
        origin="lower",
        extent=(-0.5, s - 0.5, lo - support - 0.5, hi - support - 0.5),
        cmap="magma",
    )
    ax.set_title("histogram of query cursor h0 c0")
    ax.set_xlabel("token index t")
    ax.set_ylabel("offset")
    fig.colorbar(image, ax=ax)
