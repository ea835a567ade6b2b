"""Reading a checkpoint back, and checking every field of it against the run before the
model or optimiser takes any of it.

A checkpoint is read with ``torch.load(weights_only=True)``, so opening one can never
execute code, whoever put the file in the checkpoint folder; only regular files are read
(a FIFO would block the reader). A refused or unusable checkpoint is set aside
(``harness.training.checkpoint.aside``) and its run starts over: before any tensor is loaded into
the model or optimiser, each must be backed by bytes of its own (no stride-0 tensor that
declares GBs in a few bytes), have its parameter's shape, and be finite (no NaN or inf).
"""

from __future__ import annotations

import io
import itertools
import json
import math
import pickle
import random
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from harness.config import RunConfig
from harness.records.files import NotRegularFileError, check_regular, open_regular
from harness.records.identity import evaluated_scales
from harness.training.checkpoint.format import (
    FORMAT,
    VERSION,
    CheckpointError,
    _brief,
    _first_line,
    _is_int,
    _short,
    decode_evaluation,
)


def read_payload(path: Path, noun: str, kind: str, *, mmap: bool = False, data: bytes | None = None) -> Any:
    """``torch.load`` of a regular file with the weights-only unpickler (``mmap``: tensors
    mapped, not read; ``data``: the file's bytes, already read and checked), every failure
    a CheckpointError naming the file as ``noun`` (a ``checkpoint``, a ``weights file``) of
    ``kind``: not regular, asking for code, unreadable."""
    try:
        if data is not None:
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        if mmap:  # torch maps a file by name: check what the name holds first
            check_regular(path)
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        with open_regular(path) as f:
            return torch.load(f, map_location="cpu", weights_only=True)
    except NotRegularFileError as exc:
        raise CheckpointError(f"{noun} {exc}") from None
    except pickle.UnpicklingError as exc:  # the weights-only unpickler refused something
        wanted = re.search(r"GLOBAL ([\w.]+)", str(exc))  # "Unsupported global: GLOBAL x", "... GLOBAL x whose module"
        detail = f"it asks for {wanted.group(1)}" if wanted else "a pickle of something else, or a damaged file"
        raise CheckpointError(f"{noun} {path} is not a {kind} readable without running code ({detail})") from None
    except Exception as exc:  # torch raises several types for a truncated/garbled file
        raise CheckpointError(f"{noun} {path} is unreadable ({type(exc).__name__}: {_first_line(exc)})") from None


def load_checkpoint(path: Path, run_id: str, *, mmap: bool = False) -> dict[str, Any]:
    """Read a checkpoint without running code and check that it is run ``run_id``'s, in this format.

    Only the header (format, version, run id, step) is checked here; :func:`check_state`
    checks the rest against the model. ``mmap`` maps the tensors instead of reading them
    (for reading just the step).

    Raises:
        CheckpointError: unreadable (truncated, not a checkpoint), asking for code to be
            run (a pickle of anything but tensors and plain values), another format
            version, or another run's.
    """
    payload = read_payload(path, "checkpoint", "pezoo checkpoint", mmap=mmap)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {path} is not a pezoo checkpoint (no format {FORMAT!r})")
    if payload.get("version") != VERSION:
        raise CheckpointError(
            f"checkpoint {path} has format version {_short(payload.get('version'))}; this pezoo reads version {VERSION}"
        )
    if payload.get("run_id") != run_id:
        raise CheckpointError(
            f"checkpoint {path} does not belong to run {run_id} (it says {_short(payload.get('run_id'))})"
        )
    if not _is_int(payload.get("step")) or payload["step"] < 0:
        raise CheckpointError(f"checkpoint {path} has no valid step ({_short(payload.get('step'))})")
    _check_layouts(payload, f"checkpoint {path}")
    return payload


def _tensors(value: Any, where: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """``(where, tensor)`` for every tensor inside ``value`` (dicts, lists, tuples), without
    recursion (a hostile file may nest deeper than Python's stack)."""
    stack: list[tuple[str, Any]] = [(where, value)]
    while stack:
        at, item = stack.pop()
        if isinstance(item, torch.Tensor):
            yield at, item
        elif isinstance(item, dict):
            stack.extend((f"{at}.{k}" if at else str(k), v) for k, v in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((f"{at}[{i}]", v) for i, v in enumerate(item))


def layout_problem(t: torch.Tensor) -> str | None:
    """Why tensor ``t``'s declared shape does not fit its stored bytes, or None when it
    does: every element must have bytes of its own in its storage. A stride of 0 (or
    strides that make elements overlap) lets a file of a few bytes declare a tensor of
    any size, which the first operation that copies it (a dtype conversion, ``clone``)
    allocates in full: a 194 KB checkpoint reached GBs of memory that way."""
    if t.layout != torch.strided:
        return f"has layout {t.layout}, not a dense tensor"
    span = 1  # elements spanned by the dims seen so far, smallest stride first
    for stride, size in sorted((st, sz) for sz, st in zip(t.shape, t.stride(), strict=True) if sz > 1):
        if stride < span:
            return f"has shape {tuple(t.shape)} with strides {t.stride()}: elements share bytes (a stride-0 tensor)"
        span += stride * (size - 1)
    if t.numel() and (t.storage_offset() + span) * t.element_size() > t.untyped_storage().nbytes():
        return f"has shape {tuple(t.shape)} but its storage holds only {t.untyped_storage().nbytes()} bytes"
    return None


def _check_layouts(payload: Any, what: str) -> None:
    """CheckpointError for the first tensor in ``payload`` whose shape its bytes do not hold
    (:func:`layout_problem`); only metadata is read, nothing is allocated."""
    for where, t in _tensors(payload):
        problem = layout_problem(t)
        if problem is not None:
            raise CheckpointError(f"{what}: tensor {where} {problem}")


def check_state(
    payload: dict[str, Any], cfg: RunConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> dict[str, Any]:
    """Load ``payload``'s weights into ``model`` and its optimiser state into ``optimizer``
    (a fresh one, to check it), after checking every field against ``cfg``.

    Returns the payload with ``evaluations`` decoded (``[(step, Evaluation)]``), ready for
    ``harness.training.train.train(resume=...)``.

    Raises:
        CheckpointError: a field is missing, of the wrong type or shape, or the config is
            not ``cfg``'s.
    """
    missing = [k for k in _REQUIRED if k not in payload]
    if cfg.train.pack and "stream" not in payload:
        missing.append("stream")
    if cfg.train.precision == "fp16" and "scaler" not in payload:
        missing.append("scaler")
    if missing:
        raise CheckpointError(f"lacks field{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    try:
        stored = RunConfig.from_dict(json.loads(payload["config"]))
    except Exception as exc:
        problem = f"{type(exc).__name__}: {_first_line(exc)}"
        raise CheckpointError(f"its config is not a valid run config ({problem})") from None
    if stored.run_id() != cfg.run_id():
        raise CheckpointError(f"its config is run {stored.run_id()}'s, not {cfg.run_id()}'s")
    step = payload["step"]
    if step > cfg.train.steps:
        raise CheckpointError(f"its step {step} is past the run's {cfg.train.steps} steps")
    for name in ("loss", "seconds"):
        v = payload[name]
        if not (isinstance(v, float) and math.isfinite(v)) or (name == "seconds" and v < 0):
            raise CheckpointError(f"field {name} is not a finite number ({_short(v)})")
    if not isinstance(payload["evaluating"], bool):
        raise CheckpointError(f"field evaluating is not a bool ({_short(payload['evaluating'])})")
    _check_rng(payload)
    decoded = _decode_evaluations(payload["evaluations"], cfg, step)
    for field in ("code", "machine"):
        if field in payload:
            _check_history(field, payload[field], step)
    if cfg.train.pack:
        _check_stream(payload["stream"])
    if cfg.train.precision == "fp16":
        _check_scaler(payload["scaler"])
    _load_weights(payload["model"], model)
    _check_optimizer(payload["optimizer"], optimizer)
    return {**payload, "evaluations": decoded}


def _decode_evaluations(evaluations: Any, cfg: RunConfig, step: int) -> list[tuple[int, Any]]:
    """The checkpoint's periodic ``evaluations`` as ``[(step, Evaluation)]``, each at a step
    up to ``step`` and at scales ``cfg`` evaluates; CheckpointError otherwise."""
    if not isinstance(evaluations, list):
        raise CheckpointError("field evaluations is not a list")
    decoded, scales = [], set(evaluated_scales(cfg))
    for item in evaluations:
        if not (isinstance(item, list) and len(item) == 2 and _is_int(item[0]) and 0 < item[0] <= step):
            raise CheckpointError(f"an evaluation is not [step <= {step}, rows]: {_short(item)}")
        rows = decode_evaluation(item[1])
        if not {(split, m.length) for split, m in rows} <= scales:
            raise CheckpointError(f"an evaluation at step {item[0]} has scales the run does not evaluate")
        decoded.append((item[0], rows))
    return decoded


def _load_weights(weights: Any, model: torch.nn.Module) -> None:
    """Load the checkpoint's ``weights`` into ``model`` once they are a state dict of finite
    tensors whose shapes fit it; CheckpointError otherwise."""
    if not isinstance(weights, dict) or not all(isinstance(v, torch.Tensor) for v in weights.values()):
        raise CheckpointError("field model is not a state dict of tensors")
    own = model.state_dict()
    for name, t in weights.items():  # shapes first: nothing is copied from a tensor that does not fit
        if name in own and tuple(t.shape) != tuple(own[name].shape):
            raise CheckpointError(
                f"its weights do not fit the model ({name} has shape {tuple(t.shape)}, the model's "
                f"{tuple(own[name].shape)})"
            )
    _check_finite(weights.items(), "its weights")
    try:
        model.load_state_dict(weights)
    except (RuntimeError, TypeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"its weights do not fit the model ({_brief(exc)})") from None


def _check_history(field: str, history: Any, step: int) -> None:
    """``history``: [[step, text], ...] from step 0, steps increasing and at most ``step``."""
    ok = isinstance(history, list) and bool(history)
    ok = ok and all(isinstance(c, list) and len(c) == 2 and _is_int(c[0]) and isinstance(c[1], str) for c in history)
    ok = ok and history[0][0] == 0
    ok = ok and all(a[0] < b[0] for a, b in itertools.pairwise(history)) and history[-1][0] <= step
    if not ok:
        what = "commit" if field == "code" else field
        raise CheckpointError(
            f"field {field} is not [[0, {what}], [step, {what}], ...] up to step {step}: {_short(history)}"
        )


_REQUIRED = (
    "config",
    "step",
    "loss",
    "seconds",
    "model",
    "optimizer",
    "data_rng",
    "torch_rng",
    "evaluating",
    "evaluations",
)


def _check_rng(payload: dict[str, Any]) -> None:
    state = payload["data_rng"]
    if not (isinstance(state, tuple) and len(state) == 3 and isinstance(state[1], tuple)):
        raise CheckpointError(f"field data_rng is not a random.Random state ({_short(state)})")
    try:
        random.Random().setstate(state)
    except (TypeError, ValueError, OverflowError) as exc:
        raise CheckpointError(f"field data_rng is not a random.Random state ({exc})") from None
    for name, reference in (("torch_rng", torch.get_rng_state()), ("cuda_rng", None)):
        if name not in payload:
            continue
        t = payload[name]
        if not (isinstance(t, torch.Tensor) and t.dtype == torch.uint8 and t.dim() == 1):
            raise CheckpointError(f"field {name} is not a uint8 generator state")
        if reference is not None:
            if t.numel() != reference.numel():
                raise CheckpointError(f"field {name} has {t.numel()} bytes, a generator state {reference.numel()}")
            try:
                torch.Generator().set_state(t)
            except RuntimeError as exc:
                raise CheckpointError(f"field {name} is not a generator state ({_first_line(exc)})") from None


def _check_stream(stream: Any) -> None:
    kinds = {"ids": int, "target": bool, "scale": int}
    if not (isinstance(stream, dict) and set(stream) == set(kinds)):
        raise CheckpointError(f"field stream is not {{ids, target, scale}} ({_short(stream)})")
    lengths = set()
    for key, kind in kinds.items():
        values = stream[key]
        ok = isinstance(values, list) and all(
            isinstance(v, bool) if kind is bool else _is_int(v) and v >= 0 for v in values
        )
        if not ok:
            raise CheckpointError(f"field stream.{key} is not a list of {kind.__name__}s")
        lengths.add(len(values))
    if len(lengths) > 1:
        raise CheckpointError("field stream has lists of different lengths")


def _check_scaler(scaler: Any) -> None:
    """An fp16 run's loss scale: {"scale": a finite float > 0, "growth_tracker": an int >= 0}."""
    ok = isinstance(scaler, dict) and set(scaler) == {"scale", "growth_tracker"}
    ok = ok and isinstance(scaler["scale"], float) and math.isfinite(scaler["scale"]) and scaler["scale"] > 0
    if not (ok and _is_int(scaler["growth_tracker"]) and scaler["growth_tracker"] >= 0):
        raise CheckpointError(f"field scaler is not {{scale > 0, growth_tracker >= 0}} ({_short(scaler)})")


def _check_optimizer(state: Any, optimizer: torch.optim.Optimizer) -> None:
    """Load ``state`` into ``optimizer`` (fresh, built from the run's config) and check that
    it fits: tensors of its parameters' shapes, and the config's settings in every group. A
    checkpoint's param_groups replace the optimiser's own on loading, so a learning rate,
    betas or weight decay other than the config's would train the rest of the run under
    settings its record does not show. ``lr`` itself is rewritten from ``base_lr`` at every
    step; a setting this torch has and the checkpoint's lacks is filled in by torch. How the
    update is computed (:data:`IMPLEMENTATION`: fused, foreach, capturable) is the training
    loop's, not the run's: a GPU run's checkpoint (fused AdamW) resumes on a CPU and back,
    each optimiser keeping its own (:func:`load_optimizer_state`)."""
    settings = [
        {k: _plain(v) for k, v in g.items() if k not in ("params", "lr", *IMPLEMENTATION)}
        for g in optimizer.param_groups
    ]
    if (
        not isinstance(state, dict)
        or not isinstance(state.get("state"), dict)
        or not isinstance(state.get("param_groups"), list)
    ):
        raise CheckpointError("field optimizer is not an optimiser state dict")
    _check_optimizer_tensors(state, optimizer)
    try:
        load_optimizer_state(optimizer, state)
    except (ValueError, KeyError, TypeError, RuntimeError, IndexError) as exc:
        raise CheckpointError(f"its optimiser state does not fit the model ({_brief(exc)})") from None
    for i, (configured, group) in enumerate(zip(settings, optimizer.param_groups, strict=True)):
        for key, value in configured.items():
            if key not in group and key in _GROUP_SETTINGS:  # training reads base_lr at every step
                raise CheckpointError(f"its optimiser group {i} lacks {key}")
            if key in group and _plain(group[key]) != value:
                raise CheckpointError(
                    f"its optimiser group {i} has {key} {_short(group[key])}, the run's config {_short(value)}"
                )
    for group in optimizer.param_groups:
        for p in group["params"]:
            for key, value in optimizer.state.get(p, {}).items():
                if not isinstance(value, torch.Tensor):
                    continue
                want = () if key == "step" else tuple(p.shape)
                if tuple(value.shape) != want or not (value.is_floating_point() or key == "step"):
                    raise CheckpointError(
                        f"its optimiser state {key} has shape {tuple(value.shape)}, its parameter needs {want}"
                    )


def _check_optimizer_tensors(state: dict[str, Any], optimizer: torch.optim.Optimizer) -> None:
    """Before the optimiser reads ``state`` (it converts each tensor to its parameter's
    dtype and device, a full copy): every tensor of a parameter's state has that
    parameter's shape (``step``: a scalar) and is finite. Parameters are matched as
    ``Optimizer.load_state_dict`` matches them, in order, group by group."""
    groups = state["param_groups"]
    ours = [g["params"] for g in optimizer.param_groups]
    ok = len(groups) == len(ours) and all(
        isinstance(g, dict) and isinstance(g.get("params"), list) and len(g["params"]) == len(o)
        for g, o in zip(groups, ours, strict=False)
    )
    if not ok:
        raise CheckpointError("its optimiser state does not fit the model (other parameter groups)")
    params = {key: p for g, o in zip(groups, ours, strict=True) for key, p in zip(g["params"], o, strict=True)}
    for key, per_param in state["state"].items():
        if key not in params or not isinstance(per_param, dict):
            raise CheckpointError(f"its optimiser state has an entry {_short(key)} for no parameter of the model")
        p = params[key]
        for name, value in per_param.items():
            if not isinstance(value, torch.Tensor):
                continue
            want = () if name == "step" else tuple(p.shape)
            if tuple(value.shape) != want:
                raise CheckpointError(
                    f"its optimiser state {name} has shape {tuple(value.shape)}, its parameter needs {want}"
                )
            _check_finite([(f"optimiser state {name}", value)], "its optimiser state")


def _check_finite(tensors: Iterable[tuple[str, torch.Tensor]], what: str) -> None:
    """CheckpointError naming the first floating-point tensor that holds a NaN or an inf:
    resuming from it trains nothing (every later loss is NaN) and diverges again."""
    for name, t in tensors:
        if (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all()):
            raise CheckpointError(f"{what}: {name} holds NaN or inf values (the training it comes from diverged)")


IMPLEMENTATION = ("fused", "foreach", "capturable", "differentiable")
"""Optimiser group settings that say how the update is computed, not what it is: the
training loop's (``harness.training.train.make_optimizer``: fused on a GPU), kept by the
optimiser a checkpoint is loaded into."""


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """``optimizer.load_state_dict(state)``, the optimiser keeping its own
    :data:`IMPLEMENTATION` settings: torch takes every group setting from the checkpoint, so a
    CPU run resumed from a GPU run's checkpoint would otherwise step with the fused kernel
    (other float rounding than the CPU loop's), and a GPU run from a CPU one's without it."""
    own = [{k: g[k] for k in IMPLEMENTATION if k in g} for g in optimizer.param_groups]
    optimizer.load_state_dict(state)
    for group, settings in zip(optimizer.param_groups, own, strict=True):
        group.update(settings)


_GROUP_SETTINGS = ("base_lr", "weight_decay", "betas")
"""Group settings a checkpoint must hold (the config's); others torch fills in when missing."""


def _plain(value: Any) -> Any:
    """A group setting as compared: tuples and lists alike (betas), tensors as numbers."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, list | tuple):
        return tuple(_plain(v) for v in value)
    return value
