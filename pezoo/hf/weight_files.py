"""The weight files of a saved model, so that a folder holds one model's weights, not two.

transformers saves a model's weights as one file (``model.safetensors``) or as shards and
their index (``model-00001-of-00003.safetensors``, ..., ``model.safetensors.index.json``),
and loads whichever it finds first: the single file before the index, safetensors before
pickles (``pytorch_model.bin`` and its shards and index). Its ``save_pretrained`` removes only
stale shards of the layout it writes, so a sharded save into a folder holding another model's
``model.safetensors`` left that file in front of the new index, and every load read the other
model. :func:`replacing` makes a save replace every weight file of the folder, whatever its
layout; :func:`ambiguous` names the files of a folder that holds two layouts at once (saved so
before), which the load refuses.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["ambiguous", "replacing", "weight_files"]

SINGLES = ("model.safetensors", "pytorch_model.bin")
"""The one-file layouts, safetensors first (transformers' order)."""

INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
"""The sharded layouts' indexes, in the order of :data:`SINGLES`."""


def _variant(name: str, variant: str | None) -> str:
    """``name`` of a ``variant`` (transformers' ``_add_variant``): ``model.fp16.safetensors``."""
    if variant is None:
        return name
    stem, suffix = name.rsplit(".", 1)
    return f"{stem}.{variant}.{suffix}"


def _shard(single: str, variant: str | None) -> re.Pattern[str]:
    stem, suffix = _variant(single, variant).rsplit(".", 1)
    return re.compile(re.escape(stem) + r"-\d{5}-of-\d{5}\." + re.escape(suffix))


def weight_files(folder: Path, variant: str | None = None) -> list[Path]:
    """The weight files of ``variant`` in ``folder``, of every layout: single files, indexes
    and shards (files, or links to them as in the hub's cache; sorted by name)."""
    if not folder.is_dir():
        return []
    names = {_variant(n, variant) for n in (*SINGLES, *INDEXES)}
    shards = [_shard(single, variant) for single in SINGLES]
    return sorted(
        p
        for p in folder.iterdir()
        if (p.name in names or any(s.fullmatch(p.name) for s in shards)) and (p.is_symlink() or p.is_file())
    )


def ambiguous(folder: Path, variant: str | None = None) -> list[str]:
    """The names of a format's single file and index when ``folder`` holds both (two saves of
    different layouts: transformers would read the single file and never the index); [] when
    the folder's weights are one model's."""
    found = []
    for single, index in zip(SINGLES, INDEXES, strict=True):
        pair = [_variant(single, variant), _variant(index, variant)]
        if all((folder / name).is_file() for name in pair):
            found += pair
    return found


@contextmanager
def replacing(folder: Path, variant: str | None = None) -> Iterator[None]:
    """Around a save into ``folder``: the weight files there (:func:`weight_files`, every
    layout) are moved aside first, and removed once the save has written its own; if the save
    fails, what it wrote is removed and they are put back, so a failed save loses nothing."""
    old = weight_files(folder, variant)
    if not old:
        yield
        return
    aside = Path(tempfile.mkdtemp(prefix=".pezoo-replaced-weights-", dir=folder))
    moved: list[Path] = []
    try:
        for path in old:
            path.replace(aside / path.name)
            moved.append(path)
        yield
    except BaseException:
        for written in weight_files(folder, variant):
            written.unlink()
        for path in moved:
            (aside / path.name).replace(path)
        raise
    finally:
        shutil.rmtree(aside, ignore_errors=True)
