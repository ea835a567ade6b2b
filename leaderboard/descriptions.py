"""What the registries say about tasks and encodings, for the pages that describe them:
a task's format, example and PE-solvability label; an encoding's docstring and options.

Both fall back to None for a name that is not installed here (a plugin's results
published elsewhere), and to empty text for a task attribute that does not exist.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TaskInfo:
    source: str
    metric: str
    layout: str
    example: str
    example_scale: int | None
    pe_solvability: str
    pe_solvability_basis: str
    summary: str


def task_info(name: str) -> TaskInfo | None:
    """The task's description from the harness registry; None when it is not installed."""
    try:
        from harness.tasks import TASKS, vocab
        from harness.tasks.catalogue import example_scale

        task = TASKS[name]()
    except Exception:
        return None
    try:
        n = example_scale(task)
        ex = task.sample(n, random.Random(f"catalogue/{name}"))
        example = vocab.to_text([*ex.prompt, "=", *ex.target])
    except Exception:
        n, example = None, ""
    return TaskInfo(
        source=str(getattr(task, "source", "")),
        metric=str(getattr(task, "metric", "")),
        layout=str(getattr(task, "layout", "")),
        example=example,
        example_scale=n,
        pe_solvability=str(getattr(task, "pe_solvability", "") or "not labelled"),
        pe_solvability_basis=str(getattr(task, "pe_solvability_basis", "")),
        summary=(inspect.getdoc(type(task)) or "").split("\n\n")[0].replace("\n", " "),
    )


@dataclass(frozen=True)
class EncodingInfo:
    summary: str
    doc: str
    options: tuple[tuple[str, str], ...]  # (name, default) of the constructor
    wrapper_doc: str


def _default_text(value: Any) -> str:
    if value is inspect.Parameter.empty:
        return "required"
    text = repr(value)
    return type(value).__name__ if " at 0x" in text else text


def encoding_info(name: str) -> EncodingInfo | None:
    """The encoding's docstring and constructor options; None when it is not installed."""
    try:
        import pezoo
        from pezoo.base import WRAPPERS

        prefix, base = name.split(":", 1) if ":" in name else ("", name)
        factory = pezoo.get(base)
        wrapper = WRAPPERS[prefix] if prefix else None
    except Exception:
        return None
    doc = inspect.getdoc(factory) or ""
    params: Iterable[inspect.Parameter]
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        params = []
    options = tuple(
        (p.name, _default_text(p.default))
        for p in params
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"
    )
    return EncodingInfo(
        summary=doc.split("\n\n")[0].replace("\n", " "),
        doc=doc,
        options=options,
        wrapper_doc=(inspect.getdoc(wrapper) or "") if wrapper is not None else "",
    )
