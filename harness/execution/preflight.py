"""Checks before any training: a run that cannot work fails at once, saying why, rather
than after all of its training (or at every retry)."""

from __future__ import annotations

import torch

import harness.tasks as tasks
from harness.config import RunConfig
from harness.config.pe_spec import preflight_build
from harness.execution.attempt import exited
from harness.records.provenance import run_provenance
from harness.tasks.checks import check_instances
from harness.tasks.data import evaluation_set
from harness.tasks.lm.corpora import CorpusError
from harness.tasks.lm.data import task_regions
from harness.training.accel import Accel


def check_run(cfg: RunConfig) -> None:
    """Fail fast, before any training, on a run that cannot work (ValueError says why),
    a bad ``$PEZOO_ACCEL`` included (``harness.training.accel.Accel``)."""
    Accel.for_device("cpu")  # its syntax; what it switches on depends on the worker's device
    if cfg.is_lm:
        _check_lm(cfg)
        return
    task = tasks.create(cfg.task)
    task.check_scale(cfg.train.train_min)
    if not any(task.has_scale(n) for n in cfg.train_lengths()):
        raise ValueError(f"task {cfg.task!r} has no instances at training scales {cfg.train_lengths()}")
    if not any(task.has_scale(n) for n in cfg.test_lengths()):
        raise ValueError(f"task {cfg.task!r} has no instances at test scales {cfg.test_lengths()}")
    if cfg.protocol == "encoder" and task.output_length(cfg.train.train_max) is None:
        raise ValueError(
            f"task {cfg.task!r} has no fixed output length, which the encoder protocol (preset "
            f"{cfg.preset!r}) needs; use a randomized-PE task or a decoder preset such as quick"
        )
    check_instances(task, cfg.train_lengths(), cfg.test_lengths())  # a user's task: its instances, drawn once
    _check_positions_fit(cfg, task)


def _check_lm(cfg: RunConfig) -> None:
    """A language-modelling run: its corpus can be had (``CorpusError`` says how to get it),
    its held-out text holds the regions it scores, and the encoding has a position for every
    token it trains on (a test length it cannot reach is recorded as not reached, not refused)."""
    lm = cfg.lm_eval
    try:
        task_regions(cfg.task, lm.lengths[-1], lm.regions)
    except CorpusError as exc:
        raise ValueError(str(exc)) from None
    bound = _bound(cfg)
    longest = max(cfg.train.train_max, lm.finetune_length)
    if bound is not None and longest > bound:
        raise ValueError(
            f"{cfg.pe} has positions 0..{bound - 1} only, but the run trains on windows of {longest} bytes; give "
            "the encoding more positions (max_position / max_length)"
        )


def _bound(cfg: RunConfig) -> int | None:
    """The encoding's largest position plus one, or None: unbounded (``preflight_build``)."""
    try:
        return preflight_build(cfg.pe, cfg.pe_options, cfg.backbone)  # shared with the spec's option check
    except SystemExit as exc:  # a plugin's constructor: else bench would end here, with its status
        why = exited(exc, run_provenance(cfg, torch.device("cpu")), "building it exits, so no run can use it")
        raise ValueError(f"encoding {cfg.pe}: {why}") from None


def _check_positions_fit(cfg: RunConfig, task: tasks.Task) -> None:
    """ValueError before training when the encoding has no position for the longest
    sequence the run will feed it (a learned table's rows, randomized PE's range L): that
    used to surface at evaluation, after all of training, and then twice more on retries."""
    bound = _bound(cfg)
    if bound is None:
        return
    longest: list[tuple[int, str]] = []  # (tokens, where)
    if cfg.train.pack:
        longest.append((cfg.train.pack, f"training rows of {cfg.train.pack} tokens (train.pack)"))
    scales = [n for n in (*cfg.train_lengths(), *cfg.test_lengths()) if task.has_scale(n)]
    decode = cfg.decode_eval
    if scales and not decode.window:  # a sliding window bounds what the model sees
        n = max(scales)
        tokens = max(ex.token_length for ex in evaluation_set(task, n, decode.samples, cfg.seed))
        longest.append((tokens, f"{cfg.task} at scale {n}: sequences of up to {tokens} tokens"))
    for tokens, where in longest:
        if tokens > bound:
            raise ValueError(
                f"{cfg.pe} has positions 0..{bound - 1} only, but the run would feed it {where}; lower the "
                f"test length (--test-len) or give the encoding more positions (max_position / max_length)"
            )
