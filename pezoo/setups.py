"""Encodings as their papers run them: the options of each paper's setup, per task.

``paper_options(pe, task, dims)`` returns the options a paper used for ``pe`` on ``task``,
with its sizes scaled to a model of ``dims`` where that model is smaller than the paper's.
A spec asks for it with ``name{paper}`` (:mod:`pezoo.spec`); ``pezoo.hf.use_encoding`` and
the benchmark (``pezoo bench``) both read it here. Each setup is the encoding's own,
declared on its paper card (:class:`pezoo.cards.PaperCard`, ``setup``); a wrapped name
(``randomized:<base>``) uses its wrapper's.
"""

from __future__ import annotations

from typing import Any

from pezoo.registry import WRAPPERS, ModelDims, card_of, cards


def has_paper_setup(pe: str) -> bool:
    """Whether :func:`paper_options` knows ``pe``'s paper setup."""
    return card_of(pe).setup is not None


def paper_options(pe: str, task: str, dims: ModelDims) -> dict[str, Any]:
    """The options ``pe``'s paper runs it with on ``task``, sized for a model of ``dims``
    (``task=""``: the setup of a task the paper singles out for none). ValueError for an
    encoding without a paper setup."""
    setup = card_of(pe).setup
    if setup is None:
        with_one = [name for name, card in cards().items() if card.setup is not None]
        have = ", ".join([*with_one, *(f"{p}:<base>" for p in WRAPPERS if card_of(p).setup is not None)])
        raise ValueError(
            f"no paper setup is defined for encoding {pe!r} (its defaults are what the benchmark runs); "
            f"encodings with one: {have}"
        )
    return setup(task, dims)
