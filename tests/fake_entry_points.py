"""A stand-in for ``importlib.metadata.entry_points`` that installs plugins for pezoo's groups only."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

REAL_ENTRY_POINTS = metadata.entry_points


def fake_entry_points(eps: Sequence[metadata.EntryPoint]) -> Callable[..., Any]:
    """``metadata.entry_points`` answering pezoo's groups (``pezoo.*``) with ``eps`` and every
    other group as installed. A fake that answered every group left triton, whose backends
    are entry points read when the first compiling run imports it, without its backends: the
    runs of later tests in the same process failed ("'triton.backends' has no attribute
    'compiler'")."""

    def entry_points(group: str | None = None, **select: Any) -> Any:
        if group is not None and group.startswith("pezoo."):
            return [e for e in eps if e.group == group]
        return REAL_ENTRY_POINTS(**({"group": group} if group is not None else {}), **select)

    return entry_points
