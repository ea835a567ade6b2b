"""Checkpoints: a run's full training state, read without running any code.

A checkpoint is one ``torch.save`` dict, read back with ``torch.load(weights_only=True)``:
it holds only tensors and plain Python values (dict, list, tuple, str, int, float, bool,
None), so opening one can never execute code, whoever put the file in the checkpoint
folder. Format version 2:

    format       "pezoo-checkpoint"
    version      2
    run_id       str, ``RunConfig.run_id()``
    config       str, the run's config as JSON (``RunConfig.to_dict()``)
    step         int, training steps done
    loss         float, the loss of the last step
    seconds      float, training seconds so far
    model        the model's state dict (str -> tensor)
    optimizer    the optimiser's state dict (tensors and plain values)
    data_rng     tuple, ``random.Random.getstate()`` of the training data stream
    torch_rng    uint8 tensor, ``torch.get_rng_state()``
    cuda_rng     uint8 tensor, ``torch.cuda.get_rng_state(device)``; only when training on a GPU
    evaluating   bool, whether periodic evaluation has started
    evaluations  list of [step, [[split, {LengthMetrics field: value}], ...]], oldest first
    stream       {"ids": [int], "target": [bool], "scale": [int]}: a packed run's unconsumed
                 stream (``PackedStream.state()``); only for packed runs
    scaler       {"scale": float, "growth_tracker": int}: an fp16 run's loss scale and the
                 steps since it last grew (``torch.amp.GradScaler``); only for fp16 runs
    code         list of [step, commit]: which commit (``harness.provenance.git_commit``)
                 trained the run from which step on; absent in checkpoints written
                 before it was recorded (their steps count as trained by unknown code)
    machine      list of [step, machine]: on which device and CPU
                 (``harness.provenance.machine_name``) the run trained from which step
                 on; absent in checkpoints written before it was recorded

Final weights (``<run_id>.weights.pt``, :func:`save_weights`): what an inference-time
variant (``RunConfig.eval_pe_options``) of a finished run loads instead of training again.
Kept only for runs that have variants in a sweep; read the same way, weights only:

    format       "pezoo-weights"
    version      1
    run_id       str, the trained run's ``RunConfig.run_id()``
    config       str, its config as JSON
    final_loss   float, the loss of its last training step
    model        the trained model's state dict (str -> tensor)

Version 1 had no ``format`` field and pickled harness objects (``LengthMetrics``), which
only an unpickler that runs code can read: it is refused like any file that is not
version 2. A refused or
unusable checkpoint is set aside (:func:`set_aside`) and its run starts over: before any
tensor is loaded into the model or optimiser, each must be backed by bytes of its own
(no stride-0 tensor that declares GBs in a few bytes), have its parameter's shape, and be
finite (no NaN or inf). Only regular files are read (a FIFO would block the reader).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import pickle
import random
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from harness.config import RunConfig, is_finite_number
from harness.evaluate import Evaluation, LengthMetrics
from harness.files import NotRegularFileError, check_regular, open_regular, write_atomically
from harness.record import evaluated_scales

FORMAT = "pezoo-checkpoint"
VERSION = 2


class CheckpointError(RuntimeError):
    """A checkpoint file is unreadable, needs code to read, is incomplete or inconsistent,
    or belongs to another run; the message says which."""


# --------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------


def training_state(
    cfg: RunConfig,
    *,
    step: int,
    loss: float,
    seconds: float,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    data_rng: random.Random,
    device: torch.device | str,
    evaluating: bool,
    evaluations: list[tuple[int, Evaluation]],
    stream: Mapping[str, list] | None = None,
    scaler: Mapping[str, Any] | None = None,
    code: Sequence[tuple[int, str]] = (),
    machine: Sequence[tuple[int, str]] = (),
) -> dict[str, Any]:
    """The checkpoint payload (format above) of a run at ``step``; ``code`` and ``machine``
    are which commit trained the run from which step on, and on which machine
    (:func:`code_history`, :func:`machine_history`)."""
    payload: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "run_id": cfg.run_id(),
        "config": json.dumps(cfg.to_dict(), sort_keys=True),
        "step": int(step),
        "loss": float(loss),
        "seconds": float(seconds),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "data_rng": data_rng.getstate(),
        "torch_rng": torch.get_rng_state(),
        "evaluating": bool(evaluating),
        "evaluations": [[int(s), encode_evaluation(e)] for s, e in evaluations],
    }
    if torch.device(device).type == "cuda":
        payload["cuda_rng"] = torch.cuda.get_rng_state(torch.device(device))
    if stream is not None:
        payload["stream"] = {k: list(v) for k, v in stream.items()}
    if scaler is not None:  # an fp16 run's loss scale (torch.amp.GradScaler.state_dict)
        payload["scaler"] = {"scale": float(scaler["scale"]), "growth_tracker": int(scaler["_growth_tracker"])}
    if code:
        payload["code"] = [[int(s), str(c)] for s, c in code]
    if machine:
        payload["machine"] = [[int(s), str(m)] for s, m in machine]
    return payload


UNKNOWN_CODE = "unknown (a checkpoint from before pezoo recorded it)"
"""What :func:`code_history` says trained the steps of a checkpoint that has no ``code``."""

UNKNOWN_MACHINE = "unknown (a checkpoint from before pezoo recorded it)"
"""What :func:`machine_history` says trained the steps of a checkpoint that has no ``machine``."""


def _history(resume: Mapping[str, Any] | None, field: str, now: str, unknown: str) -> list[tuple[int, str]]:
    """``[(step, value), ...]``: the checkpoint's ``field`` history continued by ``now``."""
    if resume is None:
        return [(0, now)]
    history = [(int(s), str(v)) for s, v in resume.get(field, [[0, unknown]])]
    if history[-1][1] != now:
        history.append((int(resume["step"]), now))
    return history


def code_history(resume: Mapping[str, Any] | None, commit: str) -> list[tuple[int, str]]:
    """Which commit trained a run from which step on, once ``commit`` continues from
    ``resume`` (a checked checkpoint, or None for a fresh run): ``[(0, commit)]`` for a
    fresh run; a resumed one keeps the checkpoint's history and adds ``(step, commit)``
    when the commit changed. A checkpoint written before the history was recorded
    contributes ``(0, UNKNOWN_CODE)``: which code trained those steps is not known."""
    return _history(resume, "code", commit, UNKNOWN_CODE)


def machine_history(resume: Mapping[str, Any] | None, machine: str) -> list[tuple[int, str]]:
    """As :func:`code_history`, for the machine (device, threads and CPU) that trained
    each step: a run resumed on another machine, or with another thread count, may not
    round as the uninterrupted run would, and its record says so."""
    return _history(resume, "machine", machine, UNKNOWN_MACHINE)


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically under a temporary name of this process's own.

    Raises:
        harness.files.WriteError: it could not be written (``disk_full`` says whether the
            disk was full); its temporary file is removed and the previous checkpoint kept.
    """
    write_atomically(Path(path), lambda f: torch.save(payload, f))


def encode_evaluation(evaluation: Evaluation) -> list[list[Any]]:
    """``((split, LengthMetrics), ...)`` as plain lists and dicts."""
    return [[split, dataclasses.asdict(m)] for split, m in evaluation]


_METRIC_FIELDS = {f.name: f for f in dataclasses.fields(LengthMetrics)}


def decode_evaluation(value: Any) -> Evaluation:
    """The inverse of :func:`encode_evaluation`; ``CheckpointError`` on anything else."""
    if not isinstance(value, list):
        raise CheckpointError(f"an evaluation is a {type(value).__name__}, not a list")
    rows = []
    for row in value:
        if not (isinstance(row, list) and len(row) == 2 and row[0] in ("train", "test") and isinstance(row[1], dict)):
            raise CheckpointError(f"an evaluation row is not [split, metrics]: {_short(row)}")
        fields = row[1]
        if set(fields) != set(_METRIC_FIELDS):
            raise CheckpointError(f"evaluation metrics have fields {sorted(fields)}, not {sorted(_METRIC_FIELDS)}")
        for name in ("length", "n"):
            if not _is_int(fields[name]):
                raise CheckpointError(f"evaluation metric {name} is not an integer: {_short(fields[name])}")
        if fields["length"] < 1 or fields["n"] < 1:
            raise CheckpointError(f"an evaluation row has length {fields['length']} and n {fields['n']}")
        for name in ("token_length", "exact_match", "token_accuracy", "trace_exact_match"):
            v = fields[name]
            if v is None and name == "trace_exact_match":
                continue
            if not is_finite_number(v):
                raise CheckpointError(f"evaluation metric {name} is not a finite number: {_short(v)}")
            if v < 0 or (name != "token_length" and v > 1):
                bounds = "negative" if name == "token_length" else "not in [0, 1]"
                raise CheckpointError(f"evaluation metric {name} is {bounds}: {_short(v)}")
        rows.append((row[0], LengthMetrics(**fields)))
    return tuple(rows)


# --------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------


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
    try:
        if mmap:  # torch maps a file by name: check what the name holds first
            check_regular(path)
            payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        else:
            with open_regular(path) as f:
                payload = torch.load(f, map_location="cpu", weights_only=True)
    except NotRegularFileError as exc:
        raise CheckpointError(f"checkpoint {exc}") from None
    except pickle.UnpicklingError as exc:  # the weights-only unpickler refused something
        wanted = re.search(r"GLOBAL ([\w.]+)", str(exc))  # "Unsupported global: GLOBAL x", "... GLOBAL x whose module"
        detail = f"it asks for {wanted.group(1)}" if wanted else "a pickle of something else, or a damaged file"
        raise CheckpointError(
            f"checkpoint {path} is not a pezoo checkpoint readable without running code ({detail})"
        ) from None
    except Exception as exc:  # torch raises several types for a truncated/garbled file
        raise CheckpointError(f"checkpoint {path} is unreadable ({type(exc).__name__}: {_first_line(exc)})") from None
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
    ``harness.train.train(resume=...)``.

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
    evaluations = payload["evaluations"]
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
    for field in ("code", "machine"):
        if field in payload:
            _check_history(field, payload[field], step)
    if cfg.train.pack:
        _check_stream(payload["stream"])
    if cfg.train.precision == "fp16":
        _check_scaler(payload["scaler"])
    weights = payload["model"]
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
    _check_optimizer(payload["optimizer"], optimizer)
    return {**payload, "evaluations": decoded}


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
    step; a setting this torch has and the checkpoint's lacks is filled in by torch."""
    settings = [{k: _plain(v) for k, v in g.items() if k not in ("params", "lr")} for g in optimizer.param_groups]
    if (
        not isinstance(state, dict)
        or not isinstance(state.get("state"), dict)
        or not isinstance(state.get("param_groups"), list)
    ):
        raise CheckpointError("field optimizer is not an optimiser state dict")
    _check_optimizer_tensors(state, optimizer)
    try:
        optimizer.load_state_dict(state)
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


_GROUP_SETTINGS = ("base_lr", "weight_decay", "betas")
"""Group settings a checkpoint must hold (the config's); others torch fills in when missing."""


def _plain(value: Any) -> Any:
    """A group setting as compared: tuples and lists alike (betas), tensors as numbers."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, list | tuple):
        return tuple(_plain(v) for v in value)
    return value


# --------------------------------------------------------------------------------------
# Final weights, for inference-time variants
# --------------------------------------------------------------------------------------

WEIGHTS_FORMAT = "pezoo-weights"
WEIGHTS_VERSION = 1


def save_weights(path: Path, cfg: RunConfig, model: torch.nn.Module, final_loss: float) -> None:
    """Write the trained model of ``cfg`` (format above) atomically to ``path``.

    Raises:
        harness.files.WriteError: it could not be written.
    """
    payload = {
        "format": WEIGHTS_FORMAT,
        "version": WEIGHTS_VERSION,
        "run_id": cfg.run_id(),
        "config": json.dumps(cfg.to_dict(), sort_keys=True),
        "final_loss": float(final_loss),
        "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
    }
    write_atomically(Path(path), lambda f: torch.save(payload, f))


def load_weights(path: Path, run_id: str) -> dict[str, Any]:
    """Read the final weights of run ``run_id`` without running code: ``{"model": state
    dict, "final_loss": float, ...}``.

    Raises:
        CheckpointError: missing, unreadable, asking for code, another format or another run's.
    """
    if not Path(path).is_file():
        raise CheckpointError(f"no final weights of run {run_id} at {path}")
    try:
        with open_regular(path) as f:
            payload = torch.load(f, map_location="cpu", weights_only=True)
    except NotRegularFileError as exc:
        raise CheckpointError(f"weights file {exc}") from None
    except pickle.UnpicklingError as exc:  # the weights-only unpickler refused something
        wanted = re.search(r"GLOBAL ([\w.]+)", str(exc))
        detail = f"it asks for {wanted.group(1)}" if wanted else "a pickle of something else, or a damaged file"
        raise CheckpointError(
            f"weights file {path} is not a pezoo weights file readable without running code ({detail})"
        ) from None
    except Exception as exc:
        raise CheckpointError(f"weights file {path} is unreadable ({type(exc).__name__}: {_first_line(exc)})") from None
    if not isinstance(payload, dict) or payload.get("format") != WEIGHTS_FORMAT:
        raise CheckpointError(f"{path} is not a pezoo weights file (no format {WEIGHTS_FORMAT!r})")
    if payload.get("version") != WEIGHTS_VERSION:
        raise CheckpointError(f"weights file {path} has version {_short(payload.get('version'))}, not 1")
    if payload.get("run_id") != run_id:
        raise CheckpointError(f"weights file {path} is not run {run_id}'s (it says {_short(payload.get('run_id'))})")
    loss, weights = payload.get("final_loss"), payload.get("model")
    if not (isinstance(loss, float) and math.isfinite(loss)):
        raise CheckpointError(f"weights file {path} has no finite final_loss ({_short(loss)})")
    if not isinstance(weights, dict) or not all(isinstance(v, torch.Tensor) for v in weights.values()):
        raise CheckpointError(f"weights file {path}: field model is not a state dict of tensors")
    _check_layouts(weights, f"weights file {path}")
    return payload


# --------------------------------------------------------------------------------------
# Setting aside
# --------------------------------------------------------------------------------------


def set_aside(path: Path, why: str = "unreadable") -> Path | None:
    """Rename a checkpoint that cannot be used to ``<name>.<why>`` (``.<why>-2``, ... when
    taken), so that nothing reads it again and it stays for inspection: ``unreadable`` for
    one that fails the checks, ``diverged`` for the last checkpoint of a run whose loss
    became NaN (resuming it would diverge again).

    Returns the new path, or None when it could not be moved (then it is deleted if
    possible; a first checkpoint of the restarted run replaces it anyway)."""
    path = Path(path)
    for n in range(1, 1000):
        aside = path.with_name(f"{path.name}.{why}" + (f"-{n}" if n > 1 else ""))
        if aside.exists():
            continue
        try:
            os.link(path, aside)  # fails if aside appeared meanwhile: never overwrites one set aside before
        except FileExistsError:
            continue
        except OSError:  # no hard links here (some network file systems): rename
            try:
                os.replace(path, aside)
                return aside
            except OSError:
                break
        path.unlink(missing_ok=True)
        return aside
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass
    return None


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]


def _brief(exc: BaseException) -> str:
    """All of ``exc``'s message on one line, cut at 300 characters (torch lists size mismatches line by line)."""
    text = " ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
