"""Checks of a task's instances, made once before a run trains (``check_run``).

A task added by a user (in-tree or as a ``pezoo.tasks`` plugin) whose generator breaks
the interface's rules used to fail deep inside training with a message naming neither
the task nor what it returned (``token 'Z' is not in the shared vocabulary`` in a
batch-producer traceback), or worse, to train and be recorded as finished with results
that mean nothing: an empty target (exact match by emitting EOS alone), ``=`` or EOS
inside an instance (the layout misread), a generator that ignores its seed or the scale
it is asked for. :func:`check_instances` draws a few instances at the smallest and
largest scale of a run's training and test ranges and raises ``ValueError`` with one
sentence naming the task, the scale, what it returned and what was expected.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from harness.tasks import vocab
from harness.tasks.base import Example, Task

LAYOUT_TOKENS = (vocab.PAD, vocab.EOS, "=", "<bos>")
"""Tokens the harness's layout ``<bos> prompt = target <eos>`` adds (and pads with): never
part of a prompt or target, or the split into prompt and answer would be misread."""

DRAWS = 3
"""Instances drawn per checked scale (each twice, from equal seeds: determinism)."""


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_declarations(task: Task) -> None:
    """ValueError if the task's declared ``vocabulary`` has a token outside the shared
    vocabulary or one of the layout's tokens."""
    where = f"task {task.name!r}: its declared vocabulary"
    unknown = [t for t in task.vocabulary if t not in vocab.TOKEN_ID]
    if unknown:
        raise ValueError(
            f"{where} has {_short(unknown)}, not in the shared vocabulary (harness/tasks/vocab.py: append new tokens "
            f"there, at most {vocab.VOCAB_SIZE} in all)"
        )
    layout = [t for t in task.vocabulary if t in LAYOUT_TOKENS]
    if layout:
        raise ValueError(f"{where} has {_short(layout)}, which the harness's layout adds (leave them out)")


def _tokens(task: Task, what: str, tokens: Any, call: str) -> tuple[str, ...]:
    """``tokens`` as a tuple of shared-vocabulary strings, else ValueError naming the first bad one."""
    where = f"task {task.name!r}: {call} returned a {what}"
    if isinstance(tokens, str) or not isinstance(tokens, Sequence):
        raise ValueError(f"{where} of {_short(tokens)} ({type(tokens).__name__}), not a tuple of token strings")
    for t in tokens:
        if not isinstance(t, str):
            raise ValueError(
                f"{where} with the token {_short(t)} ({type(t).__name__}); tokens are strings such as '3': "
                f"{_short(tuple(tokens))}"
            )
        if t in LAYOUT_TOKENS:
            raise ValueError(
                f"{where} with {t!r}, which the harness's layout '<bos> prompt = target <eos>' adds: inside an "
                f"instance it would be misread: {_short(tuple(tokens))}"
            )
        if t not in vocab.TOKEN_ID:
            raise ValueError(
                f"{where} with the token {t!r}, which is not in the shared vocabulary (harness/tasks/vocab.py): "
                f"{_short(tuple(tokens))}"
            )
        if task.vocabulary and t not in task.vocabulary:
            raise ValueError(
                f"{where} with the token {t!r}, which is not in the task's declared vocabulary "
                f"{' '.join(task.vocabulary)}: {_short(tuple(tokens))}"
            )
    return tuple(tokens)


def check_example(task: Task, ex: Any, n: int, call: str) -> None:
    """ValueError if ``ex``, returned by ``call`` (e.g. ``sample(5)``), is no valid instance
    of scale n of ``task``."""
    where = f"task {task.name!r}: {call} returned"
    if not isinstance(ex, Example):
        raise ValueError(f"{where} {_short(ex)} ({type(ex).__name__}), not a harness.tasks.Example")
    prompt = _tokens(task, "prompt", ex.prompt, call)
    target = _tokens(task, "target", ex.target, call)
    if not target:
        raise ValueError(
            f"{where} an empty target for the prompt {_short(prompt)}: a model would score exact match by "
            "emitting <eos> alone"
        )
    if ex.scale != n:
        raise ValueError(f"{where} an instance of scale {_short(ex.scale)}; asked for scale {n}")
    if ex.mask is not None and (
        isinstance(ex.mask, str)
        or not isinstance(ex.mask, Sequence)
        or len(ex.mask) != len(target)
        or not all(isinstance(m, bool) for m in ex.mask)
    ):
        raise ValueError(
            f"{where} the accuracy mask {_short(ex.mask)} for a target of {len(target)} tokens; expected None or "
            f"{len(target)} booleans (accuracy_mask)"
        )
    if ex.scale_hint is not None and (isinstance(ex.scale_hint, bool) or not isinstance(ex.scale_hint, int)):
        raise ValueError(f"{where} the scale hint {_short(ex.scale_hint)}; expected an int or None (scale_hint)")
    fixed = task.output_length(n)
    if fixed is not None and fixed != len(target):
        raise ValueError(
            f"{where} a target of {len(target)} tokens, but output_length({n}) says {fixed}: {_short(target)}"
        )
    try:
        solved = task.solve(prompt)
    except Exception as exc:
        raise ValueError(f"task {task.name!r}: solve() of a {call} prompt raised {type(exc).__name__}: {exc}") from exc
    if solved is None or isinstance(solved, str) or not isinstance(solved, Sequence) or tuple(solved) != target:
        raise ValueError(
            f"{where} the target {_short(target)}, but solve() of its prompt {_short(prompt)} gives "
            f"{_short(solved)}: the target must be a function of the prompt"
        )


def _draw(task: Task, method: str, n: int, seed: int) -> Any:
    call = f"{method}({n})"
    rng = random.Random(f"check/{task.name}/{method}/{n}/{seed}")
    try:
        return getattr(task, method)(n, rng)
    except Exception as exc:
        raise ValueError(f"task {task.name!r}: {call} raised {type(exc).__name__}: {exc}") from exc


def _ends(task: Task, scales: Sequence[int]) -> list[int]:
    """The smallest and largest of ``scales`` the task has instances of."""
    have = [n for n in scales if task.has_scale(n)]
    return sorted({have[0], have[-1]}) if have else []


def check_instances(task: Task, train_scales: Sequence[int], test_scales: Sequence[int], draws: int = DRAWS) -> None:
    """ValueError (one sentence naming the task, the scale, what it returned and what was
    expected) unless ``draws`` instances at the smallest and largest of ``train_scales``
    (``sample``) and of ``test_scales`` (``sample_test``, as the evaluation sets draw)
    are valid (:func:`check_example`), equal when drawn again from an equal seed, and the
    largest test scale's are longer than the smallest training scale's longest."""
    check_declarations(task)
    lengths: dict[int, list[int]] = {}
    for method, scales in (("sample", train_scales), ("sample_test", test_scales)):
        for n in _ends(task, scales):
            for seed in range(draws):
                ex = _draw(task, method, n, seed)
                check_example(task, ex, n, f"{method}({n})")
                again = _draw(task, method, n, seed)
                if again != ex:
                    raise ValueError(
                        f"task {task.name!r}: {method}({n}) returned different instances from equal seeds "
                        f"({_short(ex.prompt, 60)} then {_short(getattr(again, 'prompt', again), 60)}); a task must "
                        "draw only from the random.Random it is given (not the random module, numpy or the clock)"
                    )
                lengths.setdefault(n, []).append(ex.token_length)
    train, test = _ends(task, train_scales), _ends(task, test_scales)
    if train and test and max(lengths[test[-1]]) <= max(lengths[train[0]]):
        raise ValueError(
            f"task {task.name!r}: its instances at test scale {test[-1]} are no longer than at training scale "
            f"{train[0]} (at most {max(lengths[test[-1]])} tokens against {max(lengths[train[0]])}): sample_prompt "
            "must make an instance of the scale n it is given, or nothing is tested beyond the training length"
        )
