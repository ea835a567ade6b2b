"""Does an encoding option's value have the type its constructor declares?

``pezoo.create`` passes options from TOML, JSON and the command line to constructors that
take them at their word: the string ``"false"`` for a boolean is truthy (``fire{share_layers=
"false"}`` shared the layers), ``1.5`` for a count reached ``torch.randint`` or ``range``,
``"abc"`` for a learning rate failed at the first optimiser step, after the store was made.
:func:`check_option_types` compares each value with the constructor's annotation before the
constructor runs and names the option, the type wanted and the value in one ``ValueError`` (the error
``pezoo.context.check_number`` gives for a bad number: one kind of error for a bad value,
whichever check finds it).

What the annotations say, and what passes:

* ``bool``: ``True``/``False`` only (not 0, 1 or a string).
* ``int``: an integral number that is not a bool (numpy's integers too).
* ``float``: an int or float that is not a bool (whether nan, inf or a negative one is
  allowed is the constructor's to say, with its bounds: ``check_number``).
* ``str``, ``None``, ``Literal[...]`` (one of its values), ``X | Y`` (either).
* ``tuple[T, ...]`` / ``list[T]`` / ``Sequence[T]``: a list or tuple (never a string) of ``T``;
  ``tuple[T1, T2]``: a list or tuple of exactly those.
* ``Mapping[...]``: any mapping (its keys are the encoding's to check); a class: an instance.

An annotation it cannot read (``Any``, a forward reference a plugin left unresolved) passes
anything: the constructor stays the judge of what this module does not know.
"""

from __future__ import annotations

import collections.abc
import inspect
import numbers
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from pezoo.dims import SHAPE_KEYS

__all__ = ["check_option_types", "describe", "matches"]


def check_option_types(factory: Callable[..., Any], name: str, options: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the first option of ``options`` whose value does not match
    ``factory``'s annotation for it. The model's shape (``d_model``, ``n_heads``, ...) is
    left to the constructor, which words its own refusal with the bounds."""
    hints = _hints(factory)
    for option, value in options.items():
        hint = hints.get(option)
        if hint is None or option in SHAPE_KEYS or matches(value, hint):
            continue
        raise ValueError(f"{name}: {option} must be {describe(hint)}, got {_shown(value)}")


def _hints(factory: Callable[..., Any]) -> dict[str, Any]:
    target = factory.__init__ if inspect.isclass(factory) else factory
    try:
        return typing.get_type_hints(target)
    except Exception:  # a plugin's annotation that names what its module does not import
        return {}


def _union_args(hint: Any) -> tuple[Any, ...]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return ()


def matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` is what annotation ``hint`` declares (the rules of the module doc)."""
    if hint is Any or isinstance(hint, (str, typing.ForwardRef, typing.TypeVar)):
        return True
    if hint is None or hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    union = _union_args(hint)
    if union:
        return any(matches(value, a) for a in union)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if origin in (tuple, list, collections.abc.Sequence):
        if not isinstance(value, (list, tuple)):
            return False
        if origin is not tuple or (len(args) == 2 and args[1] is Ellipsis):
            return not args or all(matches(v, args[0]) for v in value)
        return len(value) == len(args) and all(matches(v, a) for v, a in zip(value, args, strict=True))
    if origin is not None and isinstance(origin, type) and issubclass(origin, collections.abc.Mapping):
        return isinstance(value, Mapping)
    if isinstance(hint, type):
        try:
            return isinstance(value, hint)
        except TypeError:  # a Protocol that is not runtime-checkable: the constructor judges
            return True
    return True  # an annotation this module does not read: the constructor judges


def describe(hint: Any) -> str:
    """``hint`` in words, for an error message ("an integer or None")."""
    if hint is None or hint is type(None):
        return "None (unset)"
    words = {bool: "true or false (a boolean)", int: "an integer", float: "a number", str: "a string"}
    if hint in words:
        return words[hint]
    union = _union_args(hint)
    if union:
        return " or ".join(describe(a) for a in union)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (tuple, list, collections.abc.Sequence):
        if origin is not tuple or (len(args) == 2 and args[1] is Ellipsis):
            return f"a list of {_plural(args[0])}" if args else "a list"
        if len(set(args)) == 1:
            return f"a list of {len(args)} {_plural(args[0])}"
        return f"a list of {len(args)}: " + ", ".join(describe(a) for a in args)
    if origin is not None and isinstance(origin, type) and issubclass(origin, collections.abc.Mapping):
        return "a table (mapping)"
    if isinstance(hint, type):
        return f"a {hint.__name__}"
    return str(hint)


def _plural(hint: Any) -> str:
    plural = {bool: "booleans", int: "integers", float: "numbers", str: "strings"}
    return plural.get(hint, describe(hint))


def _shown(value: Any) -> str:
    """``value`` with its type where the repr hides it (``'false'``: the string)."""
    if isinstance(value, str):
        return f"the string {value!r}"
    return f"{value!r} ({type(value).__name__})"
