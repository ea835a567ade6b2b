"""A finished run's result: one typed record (:class:`RunRecord`) and its one validator.

A finished run is written in three shapes, each a serialisation of the record:

- the results store's rows (``harness.records.store``: ``Store.record`` reads one,
  ``Store.insert_finished`` writes one),
- a kept-result file, when the store could not take the run (``harness.records.kept_results``),
- a published results-file line (``leaderboard.schema``: the plain form below, plus
  ``schema_version`` and ``checksum``).

The plain form (:meth:`RunRecord.to_dict`) is one JSON object with exactly these keys:

    run_id          16 hex digits: ``RunConfig.run_id()`` of the config (``harness.records.identity.config_run_id``)
    pe, task        encoding and task registry names (equal to the config's)
    seed            int (equal to the config's)
    preset          the protocol label (equal to the config's)
    status          "finished"
    config          the full run configuration (``RunConfig.to_dict()``): it must build a
                    ``RunConfig`` (keys, types, ranges) whose ``run_id()`` is ``run_id``
    provenance      commit, device, torch, pezoo (strings, required) and any other
                    string-valued keys the harness records (python, platform, cpu;
                    code_by_step and machine_by_step for a run resumed under another
                    commit or on another machine; weights_from for a variant;
                    stacked for a run whose steps shared a stacked pass;
                    plugins for a plugin's encoding or task code), and
                    pe_options_resolved: an object, every option the encoding was
                    built with, defaults included (``pezoo.resolved_options``)
    params          {"total": int, "pe": int} parameter counts
    timings         {"train_seconds", "eval_seconds", "started_at", "finished_at"}:
                    seconds, and Unix times of the run, none past 9999-12-31
                    (``record_fields.MAX_UNIX_TIME``: a page shows the date); ``finished_at`` is null
                    in a result not yet recorded (a kept result)
    final_loss      the last training loss (finite, >= 0)
    metrics         one object per evaluated scale, sorted by length: split ("train" for
                    1..N, "test" beyond N), length, token_length, and counts
                    (``harness.records.counts``): n (examples), exact (examples decoded
                    exactly, 0..n), tokens (scored tokens, at least n), tokens_right
                    (0..tokens); exactly the scales the config evaluates
                    (``harness.records.identity.evaluated_scales``), each over ``eval.samples`` examples
                    (``top3``: over each picked evaluation's, 1 to 3 times as many)

Every integer fits SQLite's signed 64 bits, every number is finite (``harness.config.numbers``).
A record's diagnostics (what the encoding did on one example, ``harness.training.diagnostics``)
travel beside the plain form: :func:`diagnostics_problem` checks them.

:func:`record_problems` is the validator: hand-written (no schema library; each field's
check is in ``harness.records.record_fields``), it reports every problem it finds, and
whatever it is given (any JSON, nesting, NaN, huge integers) it answers with reasons,
never another exception (hypothesis tests feed it random JSON).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pezoo
from harness.config import RunConfig
from harness.config.numbers import is_int, is_number, number_problem, shown
from harness.config.pe_spec import check_eval_options, check_options
from harness.records.identity import config_run_id, listed_scales
from harness.records.lm_metrics import LmScores
from harness.records.metrics import LengthMetrics
from harness.records.record_fields import (
    key_problems,
    metrics_problems,
    params_problems,
    provenance_problems,
    scale_problems,
    timings_problems,
)
from harness.tasks.lm import LM_TASKS

KEYS = ("config", "final_loss", "metrics", "params", "pe", "preset", "provenance", "run_id", "seed", "status", "task",
        "timings")  # fmt: skip
"""The keys of a record's plain form, sorted."""
LM_KEYS = ("passkey", "positions")
"""The keys a language-modelling record may hold besides :data:`KEYS` (where measured)."""

_HEX16 = re.compile(r"[0-9a-f]{16}")


@dataclass(frozen=True)
class RunRecord:
    """A finished run's result: what the store, a kept-result file and a results file hold.

    Built from any of its serialisations without checks; :meth:`problems` (the one
    validator, :func:`record_problems`) says whether it is a valid record.

    Attributes:
        run_id: ``RunConfig.run_id()`` of ``config``.
        config: ``RunConfig.to_dict()`` as JSON holds it (lists, not tuples).
        provenance: where and with what it ran (commit, device, versions: strings).
        metrics: (split, metrics) per evaluated scale, in order of length.
            ``trace_exact_match`` is carried by a kept result only (logged, not stored).
        final_loss: the last training loss.
        train_seconds, eval_seconds: how long training and the final evaluation took.
        started_at: when the run started (Unix time).
        finished_at: when the store recorded it (Unix time); None until then.
        n_params, pe_params: parameter counts, of the model and of its encoding.
        diagnostics: what the encoding did on one example (``harness.training.diagnostics``), or None.
        lm: a language-modelling run's scores (``harness.records.lm_metrics.LmScores``: nats
            and bytes per (mode, length), curves by position, passkey cells), where an
            algorithmic run has ``metrics``; None for an algorithmic run (``metrics`` is then
            empty for an LM one).
    """

    run_id: str
    config: Mapping[str, Any]
    provenance: Mapping[str, Any]
    metrics: tuple[tuple[str, LengthMetrics], ...]
    final_loss: float
    train_seconds: float
    eval_seconds: float
    started_at: float
    finished_at: float | None
    n_params: int
    pe_params: int
    diagnostics: Mapping[str, Any] | None = None
    lm: LmScores | None = None

    @property
    def pe(self) -> Any:
        return self.config.get("pe")

    @property
    def task(self) -> Any:
        return self.config.get("task")

    @property
    def seed(self) -> Any:
        return self.config.get("seed")

    @property
    def preset(self) -> Any:
        return self.config.get("preset")

    def to_dict(self) -> dict[str, Any]:
        """The plain form (module docstring): what a results-file line holds, less its
        ``schema_version`` and ``checksum``. A language-modelling record's ``metrics`` are its
        scores, with ``positions`` and ``passkey`` beside them where measured
        (``LmScores.to_body``)."""
        body = {
            "run_id": self.run_id,
            "pe": self.pe,
            "task": self.task,
            "seed": self.seed,
            "preset": self.preset,
            "status": "finished",
            "config": self.config,
            "provenance": self.provenance,
            "params": {"total": self.n_params, "pe": self.pe_params},
            "timings": {
                "train_seconds": self.train_seconds,
                "eval_seconds": self.eval_seconds,
                "started_at": self.started_at,
                "finished_at": self.finished_at,
            },
            "final_loss": self.final_loss,
        }
        if self.lm is not None:
            return {**body, **self.lm.to_body()}
        body["metrics"] = [
            {
                "split": split,
                "length": m.length,
                "token_length": m.token_length,
                "n": m.n,
                "exact": m.exact,
                "tokens": m.tokens,
                "tokens_right": m.tokens_right,
            }
            for split, m in self.metrics
        ]
        return body

    @classmethod
    def from_dict(cls, body: Mapping[str, Any], diagnostics: Mapping[str, Any] | None = None) -> RunRecord:
        """The record of a valid plain form (``record_problems(body) == []``)."""
        lm = None
        if body["task"] in LM_TASKS:
            lm = LmScores.from_body(body["run_id"], body, RunConfig.from_dict(body["config"]).lm_eval)
        return cls(
            lm=lm,
            run_id=body["run_id"],
            config=body["config"],
            provenance=body["provenance"],
            metrics=()
            if lm is not None
            else tuple(
                (
                    m["split"],
                    LengthMetrics(m["length"], m["token_length"], m["n"], m["exact"], m["tokens"], m["tokens_right"]),
                )
                for m in body["metrics"]
            ),
            final_loss=body["final_loss"],
            train_seconds=body["timings"]["train_seconds"],
            eval_seconds=body["timings"]["eval_seconds"],
            started_at=body["timings"]["started_at"],
            finished_at=body["timings"]["finished_at"],
            n_params=body["params"]["total"],
            pe_params=body["params"]["pe"],
            diagnostics=diagnostics,
        )

    def problems(self) -> list[str]:
        """Every reason this is not a valid record (:func:`record_problems`); empty if valid."""
        return record_problems(self.to_dict(), self.diagnostics)


# --------------------------------------------------------------------------------------
# The validator
# --------------------------------------------------------------------------------------


def record_problems(body: Any, diagnostics: Any = None) -> list[str]:
    """Every reason ``body`` is not the plain form of a finished run's record (and
    ``diagnostics``, unless None, not its diagnostics); empty if it is valid."""
    if not isinstance(body, dict):
        return [f"a record must be a JSON object, got {type(body).__name__}"]
    lm = isinstance(body.get("task"), str) and body["task"] in LM_TASKS  # an LM record: scores where metrics are
    present = set(body) - set(LM_KEYS) if lm else set(body)
    problems = key_problems({k: body[k] for k in present}, KEYS, "record")
    if problems:
        return problems

    config = body["config"]
    if not isinstance(config, dict):
        return ["config must be an object"]
    try:
        run_config: RunConfig | None = RunConfig.from_dict(config)
    except ValueError as exc:
        problems.append(f"config: {exc}")
        run_config = None
    for key in ("pe", "task", "preset", "seed"):
        value = body[key]
        if key == "seed":
            problem = number_problem(key, value, integer=True)
        else:
            problem = (
                None if isinstance(value, str) and value else f"{key} must be a non-empty string, got {shown(value)}"
            )
        if problem is not None:
            problems.append(problem)
        elif config.get(key) != value:
            problems.append(f"{key} is {shown(value)} but config.{key} is {shown(config.get(key))}")
    if body["status"] != "finished":
        problems.append(f"status must be 'finished' (only finished runs are recorded), got {shown(body['status'])}")
    problems += _run_id_problems(body["run_id"], config, run_config)
    problems += _encoding_problems(run_config)
    problems += provenance_problems(body["provenance"], run_config)
    problems += params_problems(body["params"])
    problems += timings_problems(body["timings"])
    loss = number_problem("final_loss", body["final_loss"], minimum=0)
    if loss is not None:
        problems.append(f"{loss} (a cross-entropy)")
    if lm:
        problems += _lm_problems(body, run_config)
    else:
        problems += metrics_problems(body["metrics"], run_config.train.train_max if run_config is not None else None)
        if run_config is not None and not problems:
            problems += scale_problems(body["metrics"], run_config)
    if diagnostics is not None and (problem := diagnostics_problem(diagnostics, config)) is not None:
        problems.append(f"diagnostics: {problem}")
    return problems


def _encoding_problems(run_config: RunConfig | None) -> list[str]:
    """Why the run's encoding could not be built as its config says (its options, and an
    evaluation variant's), where the encoding is installed: what ``pezoo bench`` refuses
    before a run, a record must not carry (a hand-edited ``rope{base=-5}`` or
    ``fire{share_layers="false"}``, re-sealed, was valid). A record of an encoding this
    installation lacks (another's plugin) is not judged."""
    if run_config is None:
        return []
    pe, options, backbone = run_config.pe, run_config.pe_options, run_config.backbone
    try:
        pezoo.registry.resolved_options(pe)
    except (pezoo.UnknownNameError, TypeError, ValueError):
        return []  # not installed here (or not a name at all: the config's own problem)
    try:
        if run_config.eval_pe_options:
            check_eval_options(pe, options, run_config.eval_pe_options, backbone)
        else:
            check_options(pe, options, backbone)
    except ValueError as exc:
        return [f"config: {exc}"]
    except Exception as exc:  # whatever else a hostile record's options provoke: a problem, never a crash
        return [f"config: encoding {pe!r} cannot be built with its options ({type(exc).__name__}: {exc})"]
    return []


def _lm_problems(body: dict[str, Any], run_config: RunConfig | None) -> list[str]:
    """Why a language-modelling record's scores (``metrics``, ``positions``, ``passkey``) are
    not those its run measures (``harness.records.lm_metrics.LmScores.from_body``, the one
    validator of LM scores)."""
    if run_config is None:
        return []  # its config's problem is said already
    try:
        LmScores.from_body(body["run_id"], body, run_config.lm_eval)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        return [f"metrics: {exc}"]
    return []


def _run_id_problems(run_id: Any, config: dict[str, Any], run_config: RunConfig | None) -> list[str]:
    if not (isinstance(run_id, str) and _HEX16.fullmatch(run_id)):
        return [f"run_id must be 16 lowercase hex digits, got {shown(run_id)}"]
    if config_run_id(config) != run_id:
        return [f"run_id {run_id} does not match its config (which hashes to {config_run_id(config)})"]
    if run_config is not None and run_config.run_id() != run_id:
        # the dict hashes to the id, but the run it describes does not: a field left out
        # (filled with its default when the harness reads it) or written in another form
        return [
            f"config does not describe run {run_id} as the harness writes it (a field left out, or a number "
            f"in another form such as 1 for 1.0): it reads as run {run_config.run_id()}; export records from a "
            "store rather than writing them"
        ]
    return []


# --------------------------------------------------------------------------------------
# Diagnostics
# --------------------------------------------------------------------------------------

DIAGNOSTICS_KEYS = ("layers", "scale", "tokens", "train_max", "version")
LAYER_KEYS = ("key_confidence", "key_modes", "layer", "query_confidence", "query_modes", "support")


def _grid(value: Any, s: int) -> bool:
    """``value`` is a non-empty (heads, cursors, s) nest of lists."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(c, list) and c and all(isinstance(m, list) and len(m) == s for m in c) for c in value)
    )


def _layer_problem(layer: Any, index: int, s: int) -> str | None:
    where = f"layers[{index}]"
    if not isinstance(layer, dict):
        return f"{where} must be an object"
    for key in ("query_modes", "key_modes"):
        if not _grid(layer.get(key), s):
            return f"{where}: {key} must be (heads, cursors, {s})"
    problems = key_problems(layer, LAYER_KEYS, where)
    if problems:
        return problems[0]
    if (problem := number_problem(f"{where}: layer", layer["layer"], integer=True, minimum=0)) is not None:
        return problem
    support = layer["support"]
    if (problem := number_problem(f"{where}: support", support, integer=True, minimum=1)) is not None:
        return problem
    for side in ("query", "key"):
        modes, confidence = layer[f"{side}_modes"], layer[f"{side}_confidence"]
        values = [m for c in modes for trajectory in c for m in trajectory]
        if not all(is_int(m, minimum=-support, maximum=support) for m in values):
            return f"{where}: {side}_modes must be integer offsets in -{support}..{support}"
        shape = [[len(t) for t in c] for c in modes]
        if not (_grid(confidence, s) and [[len(t) for t in c] for c in confidence] == shape):
            return f"{where}: {side}_confidence must have the shape of {side}_modes"
        if not all(is_number(p, minimum=0, maximum=1) for c in confidence for t in c for p in t):
            return f"{where}: {side}_confidence must be probabilities in [0, 1]"
    return None


def diagnostics_problem(body: Any, config: Mapping[str, Any] | None = None) -> str | None:
    """Why ``body`` is not the diagnostics of a run (of ``config``, when given), or None.

    A version-1 object holds exactly ``version`` (1), ``scale`` (the test scale traced, an
    integer above ``train_max``), ``train_max`` (the run's, an integer >= 1), ``tokens``
    (s strings: free text, which the site escapes) and ``layers``: one or more objects of ``layer``
    (index >= 0), ``support`` P (>= 1), ``query_modes`` / ``key_modes`` ((heads, cursors,
    s) integer offsets in -P..P) and ``query_confidence`` / ``key_confidence`` (the same
    shape, probabilities). Of a run of ``config``: its ``train_max``, and the largest test
    scale it evaluates (where that is known here; else one up to its ``test_max``).
    """
    if not isinstance(body, dict) or not (is_int(body.get("version")) and body["version"] == 1):
        return "not a version-1 diagnostics object"
    tokens, layers = body.get("tokens"), body.get("layers")
    if not isinstance(tokens, list) or not isinstance(layers, list) or not layers:
        return "needs a token list and at least one layer"
    if not tokens or not all(isinstance(t, str) for t in tokens):
        return "tokens must be a non-empty list of strings"
    for index, layer in enumerate(layers):
        problem = _layer_problem(layer, index, len(tokens))
        if problem:
            return problem
    problems = key_problems(body, DIAGNOSTICS_KEYS, "diagnostics")
    if problems:
        return problems[0]
    scale, train_max = body["scale"], body["train_max"]
    for key, value in (("scale", scale), ("train_max", train_max)):
        if (problem := number_problem(key, value, integer=True, minimum=1)) is not None:
            return problem
    if scale <= train_max:
        return f"scale {scale} must exceed train_max {train_max} (the trace is of a test scale)"
    if config is not None:
        return _diagnostics_run_problem(scale, train_max, config)
    return None


def _diagnostics_run_problem(scale: int, train_max: int, config: Mapping[str, Any]) -> str | None:
    train = config.get("train")
    test_max = config.get("eval", {}).get("test_max") if isinstance(config.get("eval"), dict) else None
    if isinstance(train, dict) and train_max != train.get("train_max"):
        return f"train_max {train_max} is not its run's ({shown(train.get('train_max'))})"
    if is_int(test_max) and scale > test_max:
        return f"scale {scale} is beyond its run's largest test scale ({test_max})"
    try:
        listed = listed_scales(RunConfig.from_dict(dict(config)))
    except ValueError:
        return None
    tests = [n for split, n in listed or () if split == "test"]
    if tests and scale != tests[-1]:
        return f"scale {scale} is not its run's largest test scale ({tests[-1]}), the one traced"
    return None
