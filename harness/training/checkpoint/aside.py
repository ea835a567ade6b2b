"""Setting a checkpoint aside: one that cannot be used is renamed, never read again and
kept for inspection.
"""

from __future__ import annotations

import os
from pathlib import Path


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
