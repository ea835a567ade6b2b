"""The checks of a finished run's record, one per field: its provenance, parameter counts,
timings, metrics and their scales (the record and its validator are ``harness.records.record``,
which calls each and says what each field holds).

Each check answers with every reason it finds, as sentences, whatever JSON it is given (the
validator's promise: reasons, never another exception).
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from harness.config import RunConfig
from harness.config.numbers import INT64_MAX, is_int, is_number, number_problem, shown
from harness.records.identity import listed_scales

MAX_UNIX_TIME = 253_402_300_799.0
"""9999-12-31 23:59:59 UTC: the latest time a record may carry (a page shows its date)."""

METRIC_KEYS = ("exact", "length", "n", "split", "token_length", "tokens", "tokens_right")
PARAM_KEYS = ("pe", "total")
TIMING_KEYS = ("eval_seconds", "finished_at", "started_at", "train_seconds")
PROVENANCE_REQUIRED = ("commit", "device", "pezoo", "torch")
MAX_PROVENANCE_KEY = 100
MAX_PROVENANCE_TEXT = 10_000
MAX_RESOLVED_OPTIONS = 65_536
"""Bounds on provenance: a key's length, a value's length, and the JSON of
``pe_options_resolved`` (a record holds no more than a run would write)."""


def key_problems(obj: Mapping[str, Any], expected: Iterable[str], where: str) -> list[str]:
    """Missing and unknown keys of ``obj`` (named ``where``), against ``expected``."""
    expected = sorted(expected)
    problems = []
    missing = sorted(set(expected) - set(obj))
    unknown = sorted(set(obj) - set(expected), key=str)
    if missing:
        problems.append(f"{where}: missing key(s) {', '.join(missing)}")
    if unknown:
        problems.append(f"{where}: unknown key(s) {', '.join(map(str, unknown))}; valid keys: {', '.join(expected)}")
    return problems


def _has_control(text: str) -> bool:
    """Whether ``text`` holds a control (Cc) or format (Cf: bidi overrides, zero widths) character."""
    return any(unicodedata.category(ch) in ("Cc", "Cf") for ch in text)


def provenance_problems(prov: Any, run_config: RunConfig | None) -> list[str]:
    if not isinstance(prov, dict):
        return ["provenance must be an object"]
    problems = []
    missing = [k for k in PROVENANCE_REQUIRED if k not in prov]
    if missing:
        problems.append(f"provenance: missing key(s) {', '.join(missing)}")
    long_keys = sorted(k for k in prov if len(k) > MAX_PROVENANCE_KEY)
    if long_keys:
        problems.append(f"provenance: key(s) longer than {MAX_PROVENANCE_KEY} characters")
    bad = sorted(
        k
        for k, v in prov.items()
        if k != "pe_options_resolved" and not (isinstance(v, str) and len(v) <= MAX_PROVENANCE_TEXT)
    )
    if bad:
        problems.append(
            f"provenance: value(s) of {', '.join(bad)} must be strings of at most {MAX_PROVENANCE_TEXT} characters"
        )
    # a NUL, an escape sequence, a newline or a bidi override went verbatim into the site and
    # README (escaped for HTML, still a parse error there and a reordered line in a terminal)
    hidden = sorted(
        str(k)[:MAX_PROVENANCE_KEY]
        for k, v in prov.items()
        if _has_control(str(k)) or (isinstance(v, str) and _has_control(v))
    )
    if hidden:
        problems.append(
            f"provenance: key(s) or value(s) of {', '.join(map(repr, hidden))} hold control or format characters "
            "(a NUL, an escape, a newline, a bidi override): a record's provenance is plain text"
        )
    resolved = prov.get("pe_options_resolved")
    if "pe_options_resolved" in prov and not (
        isinstance(resolved, dict) and len(json.dumps(resolved, default=str)) <= MAX_RESOLVED_OPTIONS
    ):
        problems.append(f"provenance: pe_options_resolved must be an object (option: value) of JSON "
                        f"at most {MAX_RESOLVED_OPTIONS} characters")  # fmt: skip
    elif isinstance(resolved, dict):
        given = run_config.eval_options() if run_config is not None else {}
        differ = sorted(k for k, v in given.items() if resolved.get(k, v) != v)
        if differ:
            problems.append(f"provenance: pe_options_resolved contradicts the config's options {', '.join(differ)}")
    return problems


def params_problems(params: Any) -> list[str]:
    if not isinstance(params, dict):
        return ["params must be an object"]
    problems = key_problems(params, PARAM_KEYS, "params")
    for k in PARAM_KEYS:
        if k in params and (problem := number_problem(f"params.{k}", params[k], integer=True, minimum=0)):
            problems.append(problem)
    if all(is_int(params.get(k)) for k in PARAM_KEYS) and params["pe"] > params["total"]:
        problems.append(f"params.pe ({params['pe']}) cannot exceed params.total ({params['total']})")
    return problems


def timings_problems(timings: Any) -> list[str]:
    if not isinstance(timings, dict):
        return ["timings must be an object"]
    problems = key_problems(timings, TIMING_KEYS, "timings")
    bad = False
    for k in TIMING_KEYS:
        if k not in timings or (k == "finished_at" and timings[k] is None):  # not yet recorded
            continue
        problem = number_problem(f"timings.{k}", timings[k], minimum=0, maximum=MAX_UNIX_TIME)
        if problem is not None:
            bad = True
            problems.append(
                problem + " (9999-12-31, the last date a page shows)" if is_number(timings[k], minimum=0) else problem
            )
    finished, started = timings.get("finished_at"), timings.get("started_at")
    if not bad and not problems and finished is not None and finished < started:
        problems.append("timings: finished_at is before started_at")
    return problems


def metrics_problems(metrics: Any, train_max: int | None) -> list[str]:
    if not isinstance(metrics, list) or not metrics:
        return ["metrics must be a non-empty list"]
    problems: list[str] = []
    lengths: list[int] = []
    for i, m in enumerate(metrics):
        where = f"metrics[{i}]"
        if not isinstance(m, dict):
            problems.append(f"{where} must be an object")
            continue
        key_problems_ = key_problems(m, METRIC_KEYS, where)
        if key_problems_:
            problems += key_problems_
            continue
        length = m["length"]
        if (problem := number_problem(f"{where}.length", length, integer=True, minimum=1)) is not None:
            problems.append(problem)
            continue
        lengths.append(length)
        if m["split"] not in ("train", "test"):
            problems.append(f"{where}.split must be 'train' or 'test', got {shown(m['split'])}")
        elif train_max is not None and (m["split"] == "train") != (length <= train_max):
            problems.append(f"{where}: length {length} is marked {m['split']!r} but train_max is {train_max}")
        checks = (
            number_problem(f"{where}.n", m["n"], integer=True, minimum=1),
            number_problem(f"{where}.token_length", m["token_length"], above=0, maximum=INT64_MAX),
            number_problem(f"{where}.tokens", m["tokens"], integer=True, minimum=1),
        )
        found = [problem for problem in checks if problem is not None]
        problems += found
        if found:
            continue
        counts = (  # a count of examples or tokens lies in 0..its total, and every example scores a token
            number_problem(f"{where}.exact", m["exact"], integer=True, minimum=0, maximum=m["n"]),
            number_problem(f"{where}.tokens_right", m["tokens_right"], integer=True, minimum=0, maximum=m["tokens"]),
            None if m["tokens"] >= m["n"] else f"{where}.tokens must be at least n = {m['n']} (one per example)",
        )
        problems += [problem for problem in counts if problem is not None]
    if lengths != sorted(set(lengths)):
        problems.append("metrics must be sorted by length, each length once")
    return problems


def scale_problems(metrics: list[dict[str, Any]], config: RunConfig) -> list[str]:
    """Why the (already well-formed) ``metrics`` are not those a run of ``config`` records:
    exactly the scales it evaluates (each once, which ``metrics_problems`` checked), each
    over ``eval.samples`` examples. For a task not installed here, each scale must be one
    of those its config lists."""
    problems = []
    test = config.decode_eval
    samples = test.samples
    picks = (1, 2, 3) if config.eval.select == "top3" else (1,)  # top3 sums its picked evaluations' counts
    wrong_n = sorted({m["length"] for m in metrics if m["n"] not in {samples * k for k in picks}})
    if wrong_n:
        problems.append(
            f"metrics at scale(s) {_scales_text(wrong_n)} count other than eval.samples = {samples} examples "
            "(every scale is evaluated on that many)"
        )
    expected = listed_scales(config)
    got = [(m["split"], m["length"]) for m in metrics]
    if expected is not None:
        missing = sorted({n for _, n in expected} - {n for _, n in got})
        extra = sorted({n for _, n in got} - {n for _, n in expected})
    else:  # not installed, or too many to list: each scale must be one the config lists
        train = config.train
        lo = train.train_max + 1

        def listed(n: int) -> bool:
            return train.train_min <= n <= train.train_max or (
                lo <= n <= test.test_max and ((n - lo) % test.test_stride == 0 or n == test.test_max)
            )

        missing, extra = [], sorted(n for _, n in got if not listed(n))
    if extra:
        problems.append(
            f"metrics at scale(s) {_scales_text(extra)} that its config does not evaluate (train "
            f"{config.train.train_min}..{config.train.train_max}, test up to {test.test_max} every "
            f"{test.test_stride})"
        )
    if missing:
        problems.append(
            f"metrics missing at scale(s) {_scales_text(missing)} that its config evaluates: a record keeps every "
            "scale its run evaluated"
        )
    return problems


def _scales_text(scales: list[int], most: int = 8) -> str:
    shown_ = ", ".join(str(n) for n in scales[:most])
    return shown_ + (f" and {len(scales) - most} more" if len(scales) > most else "")
