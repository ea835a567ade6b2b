"""Every board encoding's training pass, as a CUDA graph records it (``harness.training.graphs``),
does no host work: no tensor made from host data and copied over, no value read back, no
data-dependent shape. Such an operation can break a CUDA graph's capture, and the bucket then
trains eagerly (on an H200 a PRISM capture failed with the Triton scan on, its steps then
eager at 44 ms; this trace, run afterwards on the torch path, found a host-made tensor in
PRISM's starting histogram and in Hard-ALiBi's window mask). Checked on CPU by watching the
pass's ATen operations, so it holds without a GPU; and on the ``meta`` device, where a table
made on the host and moved to the pass's device (``.to(x.device)``, a no-op on CPU) shows as a
copy (on an H100 xPos's decay bases were one, and its LM training fell back to eager)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.config import preset_config
from harness.perf.train import training_batch
from harness.records.inputs import TOML_LIMIT, parse_toml, read_text
from harness.training.graphs import padded_loss_inputs, padded_pass_loss, plain_loss
from harness.training.train import build_model

BOARD = ["randomized", "prism{paper}", "prism", "hard_alibi", "rope", "nope", "ape", "learned_ape", "alibi", "t5",
         "learned_prf", "learned_prf_sh", "fire", "kerple_log", "kerple_power", "xpos", "cope", "abacus"]  # fmt: skip

ROOT = Path(__file__).resolve().parents[2]
LM_SWEEP = ROOT / "leaderboard" / "lm" / "sweep.toml"
LM_TRAINED = [p for g in parse_toml(read_text(LM_SWEEP, TOML_LIMIT))["grid"] for p in g["pe"] if "@" not in p]
FRONTIER = [p for g in parse_toml(read_text(ROOT / "leaderboard" / "board-frontier.toml", TOML_LIMIT))["grid"]
            for p in g["pe"] if "copy" in g["task"]]  # fmt: skip
ENCODINGS = list(dict.fromkeys(BOARD + FRONTIER + LM_TRAINED))
"""The board's encodings (the frontier's rows on copy among them) and the LM track's, options as
their sweeps set them (xPos blockwise: on an H100 its block mask's -inf was a host-made tensor,
and every LM capture of it failed)."""

HOST_WORK = ("aten._local_scalar_dense", "aten.lift_fresh", "aten.nonzero", "aten.masked_select", "aten._unique")
"""Operations a captured pass cannot hold: a host value read back (``.item()``, ``int(t)``), a
tensor built from host data (``torch.tensor(x)``, ``t[i] = 1.0``), data-dependent sizes."""

SYNCING = {"learned_prf_sh": "groups its batch by distinct scale (torch.unique): trains eagerly on a GPU"}
"""Encodings whose pass needs the host, and why (their buckets fall back to eager, warned)."""


class HostWork(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        to_device = name.startswith("aten._to_copy") and "device" in (kwargs or {})
        if to_device or name.startswith(HOST_WORK):
            self.seen.append(name)
        return func(*args, **(kwargs or {}))


def host_work(pe: str) -> list[str]:
    cfg = preset_config("quick", pe=pe, task="copy", seed=0)
    model = build_model(cfg, "cpu")
    _, batch = training_batch("quick", 4, torch.device("cpu"))
    padded, positions = padded_loss_inputs(model, batch, batch)
    with model.pe.drawing_from(torch.Generator()):  # as the loop trains: the run's own stream
        draws = model.pe.plan_draws(padded.inputs.device)  # drawn outside the graph, handed in
        with HostWork() as watch:
            loss, _ = plain_loss(model, "fp32", padded, positions, draws)
            loss.backward()
    return watch.seen


META_UNTRACEABLE = {
    "prism": "its scan has an operation without a meta kernel",
    "prism{paper}": "its scan has an operation without a meta kernel",
}
"""Encodings whose pass cannot run on the meta device (the CPU trace above still covers them)."""


def host_copies(pe: str) -> list[str]:
    """The host work of ``pe``'s padded pass with the model and batch on the meta device: a
    tensor made on the host and moved to the pass's device is a copy there, an error where
    it meets a meta tensor unmoved."""
    meta = torch.device("meta")
    cfg = preset_config("quick", pe=pe, task="copy", seed=0)
    model = build_model(cfg, "cpu").to(meta)
    _, batch = training_batch("quick", 4, torch.device("cpu"))
    padded, positions = padded_loss_inputs(model, batch.to(meta), batch)
    with model.pe.drawing_from(torch.Generator()):  # as the loop trains: the run's own stream
        draws = model.pe.plan_draws(meta)  # drawn outside the graph, handed in
        with HostWork() as watch:
            try:  # no autocast: it has no meta device type
                padded_pass_loss(model, padded, positions, draws).backward()
            except (RuntimeError, NotImplementedError) as exc:
                watch.seen.append(f"error: {exc}"[:200])
    return watch.seen


TRACES = {
    "cpu": (host_work, "does host work a CUDA graph cannot record"),
    "meta": (host_copies, "moves a host-made tensor to its device"),
}


@pytest.mark.parametrize(
    ("trace", "pe"),
    [("cpu", p) for p in ENCODINGS] + [("meta", p) for p in ENCODINGS if p not in META_UNTRACEABLE],
)
def test_the_graphed_pass_does_no_host_work(trace, pe, monkeypatch):
    if pe == "learned_ape":  # its range check reads positions back, except where it cannot (compiled or
        # captured: an on-device assert instead), which is what a graph records
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    watch, fault = TRACES[trace]
    seen = watch(pe)
    if pe in SYNCING:
        assert seen, f"{pe} no longer needs the host: drop it from SYNCING"
    else:
        assert not seen, f"{pe}'s pass {fault}: {sorted(set(seen))}"
