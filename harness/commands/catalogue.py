"""What ``pezoo list`` shows, and what a wrong name on the command line is told.

One section per kind (encodings, tasks, presets, backends), one line per entry: its name
and the first sentence or line of its docstring (presets: ``PRESET_DESCRIPTIONS``).
Each encoding is marked with the wrappers that can take it (``r``: ``randomized:NAME``;
``-``: none). A wrapped name whose base cannot be wrapped (``randomized:hard_alibi``) gets
the reason the Python API gives (``pezoo.create`` raises it), not "unknown encoding".
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Sequence
from typing import Any

import torch

import pezoo
from harness import tasks
from harness.config import PRESET_DESCRIPTIONS, PRESETS
from harness.tasks.lm import LM_TASKS
from pezoo import ENCODINGS, WRAPPERS, unknown_name_message

WIDTH = 100
"""Longest description line before it is cut (at a word, with ``...``)."""


def summary(obj: Any, width: int = WIDTH) -> str:
    """The first paragraph of ``obj``'s docstring on one line, cut to ``width`` characters."""
    doc = _docstring(obj) or ""
    first = " ".join(doc.split("\n\n", 1)[0].split())
    return textwrap.shorten(first, width, placeholder=" ...") if first else ""


_BASES = (pezoo.PositionalEncoding, tasks.Task, torch.nn.Module, object)
"""Classes whose docstring describes every subclass in general, never one of them."""


def _docstring(obj: Any) -> str | None:
    """``obj``'s docstring, a class's own or the nearest above it short of :data:`_BASES`: a
    plugin class without one was listed with "Base class of every pezoo encoding"."""
    cls = obj if isinstance(obj, type) else type(obj) if isinstance(obj, _BASES[:2]) else None
    if cls is None:  # a factory function
        return inspect.getdoc(obj)
    for klass in cls.__mro__:
        if klass in _BASES:
            return None
        doc = klass.__dict__.get("__doc__")
        if doc:
            return inspect.cleandoc(doc)
    return None


def wrappable(name: str, prefix: str | None = None) -> bool:
    """Whether ``prefix:name`` (any wrapper's, without ``prefix``) is an encoding (``pezoo.available`` lists it)."""
    available = pezoo.available()
    return any(f"{p}:{name}" in available for p in ([prefix] if prefix else WRAPPERS))


def _section(title: str, rows: Sequence[tuple[str, str]]) -> list[str]:
    pad = max((len(name) for name, _ in rows), default=0) + 2
    return [title] + [f"  {name:<{pad}}{text}".rstrip() for name, text in rows]


def wrapper_marks() -> dict[str, str]:
    """Each wrapper's mark in ``pezoo list``: its first letter (``r`` for randomized:), or its
    whole prefix where two wrappers share a first letter."""
    letters = [p[0] for p in WRAPPERS]
    return {p: p[0] if letters.count(p[0]) == 1 else f"{p}," for p in WRAPPERS}


def listing() -> str:
    """The text of ``pezoo list``: a section per kind, a line per entry (marked with the
    wrappers that can wrap it)."""
    marks = wrapper_marks()
    legend = ", ".join(f"{mark.rstrip(',')} = {p}:NAME" for p, mark in marks.items())
    broken = ENCODINGS.load_plugins()  # every plugin imported now: a broken one is not listed as usable
    encodings = []
    for name in ENCODINGS:
        mark = "".join(m for p, m in marks.items() if wrappable(name, p)).rstrip(",") or "-"
        encodings.append((f"{name} {mark}", summary(ENCODINGS[name])))
    lines = _section(f"encodings (wrapped by {legend}; join names with + to combine: abacus+fire):", encodings)
    if broken:
        lines += _section("plugins that failed to load (not usable):", sorted(broken.items()))
    lines += _section("tasks:", [(name, summary(tasks.TASKS[name])) for name in tasks.available()])
    lm_tasks = [(t.name, t.description) for t in LM_TASKS.values()]
    lines += _section("lm_tasks (language modelling; their presets: lm, lm_long, lm_smoke):", lm_tasks)
    lines += _section("presets:", [(name, PRESET_DESCRIPTIONS.get(name, "")) for name in PRESETS])
    lines += _section("backends:", [(name, "") for name in sorted(pezoo.BACKENDS)])
    return "\n".join(lines)


def _why_not_wrappable(prefix: str, base: str) -> str | None:
    """Why ``prefix:base`` is no encoding although both parts exist (None if they don't)."""
    if prefix not in WRAPPERS or base not in ENCODINGS:
        return None
    try:
        factory = ENCODINGS[base]
    except ImportError:
        return None
    wrapper = WRAPPERS[prefix]
    if isinstance(factory, type) and isinstance(wrapper, type) and issubclass(factory, wrapper):
        reason = f"{base!r} is already {prefix}"
    elif getattr(factory, "wrappable", True) is False:
        reason = f"encoding {base!r} declares itself not wrappable (see its docstring)"
    elif not getattr(factory, "uses_positions", True):
        reason = f"encoding {base!r} does not read positions, so {prefix} would change nothing"
    else:
        return None
    ok = [n.split(":", 1)[1] for n in pezoo.available() if n.startswith(f"{prefix}:")]
    return f"{prefix}:{base} is not an encoding: {reason}. {prefix.capitalize()} wraps: {', '.join(ok)}"


def _why_not_combinable(name: str) -> str | None:
    """Why ``name``, registered encodings joined by ``+`` (optionally wrapped), is no
    encoding: the reason ``pezoo.create`` gives, building it on the meta device (no memory,
    no values); None where a part is unknown or it builds."""
    prefix, _, base = name.rpartition(":")
    parts = base.split("+")
    if len(parts) < 2 or not all(p in ENCODINGS for p in parts) or (prefix and prefix not in WRAPPERS):
        return None
    try:
        with torch.device("meta"):
            pezoo.create(name, dims=pezoo.ModelDims(d_model=64, n_heads=4, n_layers=2))
    except ValueError as exc:
        return f"{name} is not an encoding: {exc}"
    except Exception:  # a part's own trouble at build time: not a reason about the combination
        return None
    return None


def name_problem(kind: str, name: str, valid: Sequence[str]) -> str:
    """What to say about ``name``, not among ``valid`` names of ``kind``: for a wrapped
    encoding whose base cannot be wrapped, or a combination of registered encodings that
    cannot be combined, why; else "unknown" with close matches."""
    if kind == "encoding" and "+" in name:
        why = _why_not_combinable(name)
        if why:
            return why
    if kind == "encoding" and ":" in name:
        why = _why_not_wrappable(*name.split(":", 1))
        if why:
            return why
    return unknown_name_message(kind, name, list(valid))
