"""Kept final weights: where a finished run keeps them, the SHA-256 its record vouches for
them by, which kept weights a run may evaluate instead of training, and reading them back
into a model only when their bytes are the ones the record vouches for.

Evaluating them (``harness.execution.run.evaluate_kept``) is a step of running a run.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from harness.config import RunConfig
from harness.execution.attempt import Attempt
from harness.records.files import WriteError
from harness.training.backbone import Backbone
from harness.training.checkpoint import CheckpointError, load_weights, save_weights, weights_bytes
from harness.training.checkpoint.weights import SHA256
from harness.training.train import build_model


def weights_path(checkpoint_dir: str | Path, run_id: str) -> Path:
    """The final weights a finished run keeps for its inference-time variants and for the
    runs that train as it did: ``<checkpoint_dir>/<run_id>.weights.pt``
    (``harness.training.checkpoint.save_weights``)."""
    return Path(checkpoint_dir) / f"{run_id}.weights.pt"


WEIGHTS_DIGEST = "weights_sha256"
"""The provenance key under which a run that kept its final weights records the SHA-256
of the file it wrote (``harness.training.checkpoint.save_weights``). The record, written to the
store with the run's result, is what a later run trusts that file by: a weights file is
evaluated only if its bytes still have the digest its run's record holds."""


def recorded_weights(runs: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str | None, str]]:
    """``{run id: (training id, SHA-256)}`` of the finished runs among ``runs`` (store
    rows, as ``Store.run`` gives them) whose record holds the digest of the final weights
    they kept (:data:`WEIGHTS_DIGEST`). The training id comes from the record's config,
    never from the weights file's header."""
    found = {}
    for run in runs:
        digest = run["provenance"].get(WEIGHTS_DIGEST) if isinstance(run.get("provenance"), dict) else None
        if run.get("status") != "finished" or not (isinstance(digest, str) and SHA256.fullmatch(digest)):
            continue
        found[run["run_id"]] = (_training_id(json.dumps(run["config"], sort_keys=True)), digest)
    return found


@functools.lru_cache(maxsize=4096)
def _training_id(config: str) -> str | None:
    """``RunConfig.training_id`` of a stored config (its JSON); None if it reads as no run config."""
    try:
        return RunConfig.from_dict(json.loads(config)).training_id()
    except (ValueError, TypeError, KeyError, RecursionError):
        return None


def trusted_weights(cfg: RunConfig, recorded: Mapping[str, tuple[str | None, str]]) -> dict[str, str]:
    """``{run id: SHA-256}``: the kept weights ``cfg`` may evaluate instead of training, as
    their runs' records vouch for them (``recorded``: :func:`recorded_weights` of the
    store): for an inference-time variant its trained run's; else those of every other run
    with the same ``RunConfig.training_id`` (the same training, only the evaluation
    differs), oldest first."""
    if cfg.is_variant:
        trained = cfg.trained_config().run_id()
        return {trained: recorded[trained][1]} if trained in recorded else {}
    training, run_id = cfg.training_id(), cfg.run_id()
    if training is None:
        return {}
    return {r: digest for r, (t, digest) in recorded.items() if t == training and r != run_id}


def weights_source(cfg: RunConfig, checkpoint_dir: str | Path, trusted: Mapping[str, str]) -> str | None:
    """The run whose kept final weights ``cfg`` evaluates instead of training, or None (it
    trains): the first run of ``trusted`` (:func:`trusted_weights`) whose weights file is
    in ``checkpoint_dir``. Whether the file is still the one its run kept is checked when
    the run starts (``harness.execution.run.train_and_evaluate``)."""
    return next((r for r in trusted if weights_path(checkpoint_dir, r).is_file()), None)


def keep_final_weights(run: Attempt, path: Path, model: Backbone, final_loss: float) -> None:
    """Keep the final weights at ``path``, their SHA-256 in the provenance (the record
    vouches for the file: :data:`WEIGHTS_DIGEST`); a failed write is told (the run still
    finishes)."""
    try:
        run.prov[WEIGHTS_DIGEST] = save_weights(path, run.cfg, model, final_loss)
    except WriteError as exc:
        run.tell_run(f"its final weights could not be kept ({exc}); its variants cannot be evaluated")


def load_kept(
    cfg: RunConfig, trained_id: str, sha256: str | None, device: torch.device, folder: Path
) -> tuple[Backbone, float]:
    """The model of ``cfg`` (built with ``cfg.eval_options()``) holding the final weights
    run ``trained_id`` kept in ``folder`` (:func:`weights_path`), and that run's final loss.
    The file is read only if its bytes have the SHA-256 ``sha256`` the run's record holds
    (:data:`WEIGHTS_DIGEST`; None: the record holds none, so the file cannot be trusted).

    Raises:
        CheckpointError: missing, not vouched for, not the file the run kept, unreadable,
            or not fitting the model.
    """
    path = weights_path(folder, trained_id)
    model = build_model(replace(cfg.trained_config(), pe_options=cfg.eval_options()), device)
    if sha256 is None:
        raise CheckpointError(
            f"no final weights of run {trained_id} at {path}"
            if not path.is_file()
            else f"weights file {path} is not vouched for: run {trained_id} is not finished in this store with the "
            f"SHA-256 of the weights it kept ({WEIGHTS_DIGEST}; runs recorded before pezoo kept one have none), so "
            "the file cannot be checked"
        )
    payload = load_weights(path, trained_id, sha256, max_bytes=weights_bytes(model))
    try:
        model.load_state_dict(payload["model"])
    except (RuntimeError, KeyError, ValueError) as exc:
        raise CheckpointError(
            f"the weights of run {trained_id} do not fit this run's model ({_one_line(exc)})"
        ) from None
    return model, payload["final_loss"]


def _one_line(exc: BaseException) -> str:
    """``exc``'s message on one line, cut at 300 characters (torch lists mismatches line by line)."""
    text = " ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."
