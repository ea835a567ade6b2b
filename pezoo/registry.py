"""The registry of encodings: names to factories (built-ins, plugins through the
``pezoo.encodings`` entry point group, wrappers such as ``randomized:``), combinations by
name (``abacus+fire``), and :func:`create`, which builds any of them for a model's shape."""

from __future__ import annotations

import difflib
import functools
import inspect
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib import metadata
from typing import Any, TypeVar

from pezoo.cards import PaperCard
from pezoo.combined import Combined
from pezoo.dims import SHAPE_KEYS
from pezoo.dims import ModelDims as ModelDims  # re-exported: it was defined here
from pezoo.interface import PositionalEncoding, defines_hook
from pezoo.limits import oversized_options
from pezoo.option_types import check_option_types

ENTRY_POINT_GROUP = "pezoo.encodings"


class PluginClashError(ValueError):
    """A plugin (entry point) takes a name that a built-in or another plugin has; the
    message names both and says how to resolve it, on one line."""


class UnknownNameError(KeyError):
    """A name that is not in a registry. The message lists the valid names."""

    def __str__(self) -> str:  # KeyError quotes its message; show it plainly
        return str(self.args[0])


def listed(names: Sequence[str], limit: int = 10) -> str:
    """``names`` joined by commas, the first ``limit`` of them and how many more: an error
    message about 60,000 unknown options was a megabyte on one line."""
    head = ", ".join(names[:limit])
    return head if len(names) <= limit else f"{head} and {len(names) - limit:,} more"


def unknown_name_message(kind: str, name: str, valid: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, valid, n=3)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"unknown {kind} {name!r}.{hint} Valid {kind}s: {', '.join(valid)}"


NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
"""What a registered name may be: letters, digits, ``_``, ``.`` and ``-`` (not starting with
``.`` or ``-``), as an encoding spec reads one (:mod:`pezoo.spec`). The rest have meanings in a
name or a spec: ``:`` a wrapper, ``+`` a combination, ``{`` options, ``@`` a variant, ``,`` a
list; a name holding one would be listed but never reached by :func:`create`."""


def name_problem(kind: str, name: Any) -> str | None:
    """Why ``name`` cannot be registered as a ``kind`` (a sentence), or None where it can."""
    if not isinstance(name, str):
        return f"{kind} names are strings such as 'my_{kind}', got {name!r} ({type(name).__name__})"
    if NAME_PATTERN.fullmatch(name) is None:
        return (
            f"{kind} name {name!r} may hold only letters, digits, '_', '.' and '-' (and start with neither '.' "
            "nor '-'): ':' marks a wrapper, '+' a combination, '{' options, '@' a variant and ',' a list"
        )
    return None


def _source(factory: Any) -> str:
    """Where a factory comes from, for messages: ``module.QualName`` or an entry point's value."""
    if isinstance(factory, _LazyEntryPoint):
        return factory.source
    return f"{getattr(factory, '__module__', '?')}.{getattr(factory, '__qualname__', repr(factory))}"


class Registry(Mapping[str, Callable[..., Any]]):
    """Name -> factory. Hard error on clashes; entry points are found lazily and imported on
    first lookup, or all at once by :meth:`load_plugins`.

    A plugin (entry point) whose name is already taken, by a built-in or by another plugin,
    is an error naming both sources, never a silent shadowing. A plugin that fails to import
    is left out and kept in :attr:`broken` with its error.

    Args:
        kind: what is registered ("encoding", "task"), used in messages.
        entry_point_group: Python entry-point group third-party packages register in.
        base: the class a plugin's class must subclass (PositionalEncoding for encodings);
            a plugin naming another class, or anything that cannot be called, does not load.
    """

    def __init__(self, kind: str, entry_point_group: str | None = None, base: type | None = None) -> None:
        self.kind = kind
        self._base = base
        self._group = entry_point_group
        self._factories: dict[str, Callable[..., Any] | _LazyEntryPoint] = {}  # a plugin: lazy until looked up
        self._entry_points_loaded = entry_point_group is None
        self.broken: dict[str, str] = {}
        """Plugins that failed to load: name -> error message (filled by lookups and :meth:`load_plugins`)."""

    def register(self, name: str, factory: Callable[..., Any]) -> None:
        """Add ``factory`` under ``name``. Registering the same factory again under its name
        does nothing; another factory under a taken name is a ValueError naming both. A name
        that is no string or holds a character with a meaning in names (:data:`NAME_PATTERN`),
        and a factory that cannot be called, are refused, and nothing is registered."""
        problem = name_problem(self.kind, name)
        if problem is not None:
            raise TypeError(problem) if not isinstance(name, str) else ValueError(problem)
        if not callable(factory):
            raise TypeError(
                f"{self.kind} {name!r}: the factory must be callable (a class or a function), got {factory!r} "
                f"({type(factory).__name__})"
            )
        if name in self._factories and self._factories[name] is not factory:
            first, second = _source(self._factories[name]), _source(factory)
            raise ValueError(f"{self.kind} {name!r} is registered twice: by {first} and by {second}")
        self._factories[name] = factory

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded or self._group is None:
            return
        found: dict[str, _LazyEntryPoint] = {}
        clashes = []
        for ep in metadata.entry_points(group=self._group):
            plugin = _LazyEntryPoint(ep, self._base)
            problem = name_problem(self.kind, ep.name)
            if problem is not None:  # listed apart as broken, never as a name create cannot reach
                self.broken[ep.name] = f"could not load plugin {plugin.source}: {problem}"
                continue
            other = found.get(ep.name) or self._factories.get(ep.name)
            if other is None:
                found[ep.name] = plugin
            elif isinstance(other, _LazyEntryPoint) or _source(other) != f"{ep.module}.{ep.attr}":
                # (an already imported plugin that registered itself is the same factory, not a clash)
                origin = "plugin" if isinstance(other, _LazyEntryPoint) else "built-in"
                clashes.append(f"{ep.name!r}: plugin {plugin.source} and {origin} {_source(other)}")
        if clashes:  # raised on every listing or lookup until the clash is resolved
            raise PluginClashError(
                f"{self.kind} plugin names clash (entry-point group {self._group!r}): "
                + "; ".join(clashes)
                + ". Rename the plugin's entry point or uninstall one of the two."
            )
        self._entry_points_loaded = True
        self._factories.update(found)

    def __getitem__(self, name: str) -> Callable[..., Any]:
        self._load_entry_points()
        try:
            factory = self._factories[name]
        except KeyError:
            if name in self.broken:
                raise ImportError(self.broken[name]) from None
            raise UnknownNameError(unknown_name_message(self.kind, name, sorted(self))) from None
        if isinstance(factory, _LazyEntryPoint):  # import a plugin on first use
            try:
                factory = self._factories[name] = factory.load()
            except ImportError as exc:
                del self._factories[name]
                self.broken[name] = str(exc)
                raise
        return factory

    def load_plugins(self) -> dict[str, str]:
        """Import every plugin now (``pezoo list`` and ``pezoo bench`` do, before anything
        else): broken ones leave the registry. Returns :attr:`broken` (name -> error)."""
        self._load_entry_points()
        for name in [n for n, f in self._factories.items() if isinstance(f, _LazyEntryPoint)]:
            try:
                self[name]
            except ImportError:
                pass  # recorded in self.broken
        return dict(self.broken)

    def is_loaded(self, name: str) -> bool:
        return not isinstance(self._factories.get(name), _LazyEntryPoint)

    def __iter__(self) -> Iterator[str]:
        self._load_entry_points()
        return iter(sorted(self._factories))

    def __len__(self) -> int:
        self._load_entry_points()
        return len(self._factories)


class _LazyEntryPoint:
    """Placeholder for a third-party factory, imported on first lookup.

    The registry key is the entry point's name. An encoding class that leaves ``name``
    empty gets it from the key; one whose ``name`` says otherwise does not load (the key
    and ``name`` must agree, or ``create(key).name`` would be another encoding's name).
    """

    def __init__(self, ep: metadata.EntryPoint, base: type | None = None) -> None:
        self._ep, self._base = ep, base
        dist = getattr(ep, "dist", None)
        where = f" (distribution {dist.name})" if dist is not None and getattr(dist, "name", None) else ""
        self.source = f"entry point {ep.name} = {ep.value!r}{where}"

    def load(self) -> Callable[..., Any]:
        try:
            factory = self._ep.load()
        except (Exception, SystemExit) as exc:  # sys.exit() at import: this plugin is broken, not pezoo
            what = f"{type(exc).__name__}: {exc}" if isinstance(exc, SystemExit) or not str(exc) else str(exc)
            raise ImportError(f"could not load plugin {self.source}: {what}") from exc
        base = self._base
        if not callable(factory) or (base is not None and isinstance(factory, type) and not issubclass(factory, base)):
            what = f"the class {_source(factory)}" if isinstance(factory, type) else repr(factory)
            wanted = f"a {base.__name__} subclass or a function returning one" if base else "a class or a function"
            raise ImportError(f"could not load plugin {self.source}: it names {what}, not {wanted}")
        if not (isinstance(factory, type) and base is not None and hasattr(factory, "name")):
            return factory  # a factory function: what it builds is named by it
        named = factory.name  # the registry's base class has a name (PositionalEncoding, Task)
        if not named:
            factory.name = self._ep.name  # derived from the entry-point key
        elif named != self._ep.name:
            raise ImportError(
                f"plugin {self._ep.name!r} from {self._ep.value!r}: its class sets name = {named!r}, "
                f"which differs from the entry-point key {self._ep.name!r}; make them agree or leave name unset"
            )
        return factory

    def __repr__(self) -> str:
        return f"<{self.source}>"


ENCODINGS = Registry("encoding", ENTRY_POINT_GROUP, base=PositionalEncoding)
WRAPPERS: dict[str, Callable[..., PositionalEncoding]] = {}
"""Prefix wrappers: ``create("randomized:rope")`` -> ``WRAPPERS["randomized"](create("rope"))``."""

MAX_WRAPPERS = 8
"""Most ``prefix:`` wrappers one name may nest (``randomized:`` wraps once; wrapping it
again is refused by the wrapper itself): a longer chain is refused before anything is
built, never by a ``RecursionError``."""


def _check_name(name: Any) -> str:
    """``name`` if it is a string of at most :data:`MAX_WRAPPERS` wrappers; TypeError or
    ValueError saying what an encoding name is otherwise."""
    if not isinstance(name, str):
        raise TypeError(
            f"an encoding name is a string such as 'rope', 'randomized:alibi' or 'abacus+fire', got {name!r} "
            f"({type(name).__name__})"
        )
    if name.count(":") > MAX_WRAPPERS:
        raise ValueError(
            f"encoding name {name[:60]!r}... nests {name.count(':')} wrappers; at most {MAX_WRAPPERS} (a wrapper "
            "such as randomized: goes once in front of an encoding)"
        )
    return name


_Encoding = TypeVar("_Encoding", bound=type[PositionalEncoding])


CARDS: dict[str, PaperCard] = {}
"""Registry name -> the paper card declared with it (:func:`register`)."""


def register(name: str, *, card: PaperCard | None = None) -> Callable[[_Encoding], _Encoding]:
    """Class decorator: register an encoding class under ``name`` (sets ``cls.name``), with
    its paper ``card`` (:class:`pezoo.cards.PaperCard`: its paper's setup, departures,
    claims, look, diagnostics); the class is returned as it is, so type checkers keep its
    own type. A wrapper's card (``randomized``) serves its wrapped forms too."""

    def deco(cls: _Encoding) -> _Encoding:
        # every refusal before anything changes: a failed registration leaves the class's name
        if not (isinstance(cls, type) and issubclass(cls, PositionalEncoding)):
            got = f"the class {_source(cls)}" if isinstance(cls, type) else repr(cls)
            raise TypeError(
                f"@register({name!r}) decorates a subclass of pezoo.PositionalEncoding, got {got} (a factory "
                "function is registered with pezoo.base.ENCODINGS.register(name, factory))"
            )
        other = next((n for n, f in ENCODINGS._factories.items() if f is cls and n != name), None)
        if other is not None:  # its one name attribute would say the second name for both keys
            raise ValueError(
                f"@register({name!r}): {_source(cls)} is registered as {other!r} already, and a class has one "
                f"name; register a subclass of it under {name!r}"
            )
        ENCODINGS.register(name, cls)
        cls.name = name
        if card is not None:
            CARDS[name] = card
        return cls

    return deco


def variant_label(key: str, value: Any) -> str | None:
    """The short label a registered card gives inference option ``key`` at ``value``
    (:attr:`PaperCard.variant_labels`), or None where none does."""
    for card in CARDS.values():
        label = card.variant_labels.get(key)
        if label is not None and (text := label(value)) is not None:
            return text
    return None


def card_of(name: str) -> PaperCard:
    """The paper card of registry name ``name`` (empty where it declares none): a wrapped
    name (``randomized:rope``) reads its wrapper's card, a plugin the ``paper_card``
    attribute of its class, if any, once the plugin is loaded (``pezoo list`` and ``pezoo
    bench`` load every plugin): looking a name up never imports or builds anything."""
    prefix, _, base = name.rpartition(":")
    key = prefix or base
    if key in CARDS:
        return CARDS[key]
    if not prefix and key in ENCODINGS._factories and ENCODINGS.is_loaded(key):  # never imports a plugin
        found = getattr(ENCODINGS[key], "paper_card", None)
        if isinstance(found, PaperCard):
            return found
    return PaperCard()


def cards() -> dict[str, PaperCard]:
    """Every registered (unwrapped) encoding's card, by name, in sorted order."""
    return {name: card_of(name) for name in sorted(ENCODINGS)}


def available() -> list[str]:
    """Names ``create`` accepts (wrapped forms such as ``randomized:rope`` included)."""
    names = list(ENCODINGS)
    for prefix in WRAPPERS:
        names += [f"{prefix}:{n}" for n in ENCODINGS if _wrappable(n, prefix)]
    return sorted(set(names))


def _wrappable(name: str, prefix: str = "randomized") -> bool:
    """Whether wrapper ``prefix`` takes the encoding registered as ``name``: its class method
    ``accepts(factory)`` where it has one (``ssmax``), else randomized PE's rule (the encoding
    reads positions and does not declare itself unwrappable)."""
    if not ENCODINGS.is_loaded(name):
        return True
    factory = ENCODINGS[name]
    accepts = getattr(WRAPPERS.get(prefix), "accepts", None)
    if accepts is not None:
        return bool(accepts(factory))
    if getattr(factory, "wrappable", True) is False:  # e.g. an already-randomized alias
        return False
    return bool(getattr(factory, "uses_positions", True))


def is_known(name: str) -> bool:
    """Whether ``name`` names an encoding :func:`create` can build: a registered or wrapped
    name (:func:`available`), or registered names joined by ``+`` (a combination,
    optionally wrapped as a whole: ``randomized:abacus+fire``)."""
    if not isinstance(name, str) or name.count(":") > MAX_WRAPPERS:
        return False
    if name in available():
        return True
    prefix, _, base = name.rpartition(":")
    if prefix and prefix not in WRAPPERS:
        return False
    parts = base.split("+")
    if len(parts) < 2 or not all(p in ENCODINGS for p in parts) or len(set(parts)) < len(parts):
        return False
    # the rules Combined and the wrappers enforce on built parts, read from the classes
    classes = [f for f in (ENCODINGS[p] for p in parts) if isinstance(f, type)]
    if any(defines_hook(c, "positions") for c in classes):
        return False  # a part that chooses its own positions cannot share them (Combined)
    for hook in ("qk", "score_transform", "normaliser"):
        if sum(defines_hook(c, hook) for c in classes) > 1:
            return False  # two parts transforming q and k, the scores, or replacing softmax (Combined)
    if prefix and len(classes) == len(parts):
        accepts = getattr(WRAPPERS[prefix], "accepts", None)
        if accepts is not None:
            return all(accepts(c) for c in classes)
        return any(getattr(c, "uses_positions", True) for c in classes)  # else nothing to randomize
    return True


FAMILY_HOOKS = (
    ("qk", ("qk",)),
    ("bias", ("bias",)),
    ("embedding", ("embed", "embed_tokens")),
    ("attention", ("score_transform", "normaliser")),
)
"""Where a class puts position, first match wins: an encoding that transforms q and k is of
that family even where it also adds a mask (xPos's blocks, a local window), one that adds a
bias even where it also reads the residual stream (FoX)."""


def family_of(name: str) -> str:
    """The family (a key of :data:`pezoo.cards.FAMILIES`) plots group encoding ``name`` in: a
    wrapped name's base's (``randomized:rope`` is RoPE's: the wrapper draws the positions, the
    base puts them in), a combination's parts' when they agree (``other`` when not), else the
    family its card declares, else the first of :data:`FAMILY_HOOKS` whose hooks its class
    does its own work in (``pezoo.interface.defines_hook``; ``none`` when it does in none);
    ``other`` for a name not registered here.
    Looking a name up never imports or builds anything."""
    prefix, _, base = name.rpartition(":")
    if prefix:
        return family_of(base)
    if "+" in name:
        found = {family_of(part) for part in name.split("+")} - {"none"}
        return found.pop() if len(found) == 1 else ("none" if not found else "other")
    declared = card_of(name).family
    if declared is not None:
        return declared
    factory = ENCODINGS._factories.get(name)
    if factory is None or not ENCODINGS.is_loaded(name) or not isinstance(factory, type):
        return "other"
    return next((f for f, hooks in FAMILY_HOOKS if any(defines_hook(factory, h) for h in hooks)), "none")


def get(name: str) -> Callable[..., PositionalEncoding]:
    """The factory registered under ``name``: usually the class; for a wrapped name such
    as ``randomized:rope`` or a combination such as ``abacus+fire``, a function taking
    the same keywords as :func:`create`."""
    _check_name(name)
    if "+" in name:
        if not is_known(name):
            bad = [p for p in name.rpartition(":")[2].split("+") if p not in ENCODINGS]
            raise UnknownNameError(unknown_name_message("encoding", bad[0] if bad else name, available()))
        return functools.partial(create, name)
    if ":" in name:
        if name not in available():
            raise UnknownNameError(unknown_name_message("encoding", name, available()))
        return functools.partial(create, name)
    return ENCODINGS[name]


def create(name: str, *, dims: ModelDims | None = None, **config: Any) -> PositionalEncoding:
    """Build the encoding registered as ``name`` with keyword ``config``.

    ``prefix:base`` applies a wrapper (e.g. ``randomized:rope``); config keys the
    wrapper does not take are passed to the base encoding. ``dims`` supplies the model
    shape to whichever constructor keywords want it. Unknown names raise
    :class:`UnknownNameError` listing the valid names; unknown config keys raise
    ``TypeError`` naming the accepted ones; a name that is no string ``TypeError``, and one
    of more than :data:`MAX_WRAPPERS` wrappers ``ValueError``; ``dims`` that are no
    :class:`ModelDims` and a factory that builds no :class:`PositionalEncoding` ``TypeError``.
    """
    _check_name(name)
    if dims is not None and not isinstance(dims, ModelDims):
        raise TypeError(
            f"dims must be a pezoo.ModelDims(d_model=..., n_heads=..., n_layers=...), got {type(dims).__name__} "
            f"{dims!r}"[:300]
        )
    return _build(name, dims.as_kwargs() if dims is not None else {}, config)


def _build(name: str, shape: Mapping[str, int], config: Mapping[str, Any]) -> PositionalEncoding:
    """:func:`create` with the model's shape as keywords (``dims``'s, and those a wrapper or
    combination was given), passed to each constructor that takes them."""
    if ":" in name:
        prefix, base = name.split(":", 1)
        if "+" in prefix:
            raise ValueError(
                f"{name!r}: a wrapper goes in front of the whole combination ({prefix.split('+')[-1]}:"
                f"{'+'.join([*prefix.split('+')[:-1], base])}), not in front of one part"
            )
        if prefix not in WRAPPERS:
            raise UnknownNameError(unknown_name_message("encoding", name, available()))
        wrapper = WRAPPERS[prefix]
        own = _accepted_keys(wrapper)
        # the model's shape the wrapper was given is the inner encoding's too (dape:alibi, n_heads=8)
        inner_shape = {**shape, **{k: v for k, v in config.items() if k in own and k in SHAPE_KEYS}}
        inner = _build(base, inner_shape, {k: v for k, v in config.items() if k not in own})
        sized = {k: v for k, v in shape.items() if k in own}  # ssmax's heads
        options = {**sized, **{k: v for k, v in config.items() if k in own}}
        _check_values(wrapper, prefix, options)
        return _built(wrapper(inner, **options), f"{prefix}:", wrapper)
    if "+" in name:
        return _create_combined(name, shape, config)
    factory = ENCODINGS[name]
    wanted = _accepted_keys(factory)
    config = {**{k: v for k, v in shape.items() if k in wanted}, **config}
    return _built(_call_strict(factory, name, config), name, factory)


def _built(encoding: Any, name: str, factory: Callable[..., Any]) -> PositionalEncoding:
    """``encoding``, what ``factory`` (registered as ``name``) built, if it is an encoding; a
    TypeError naming the factory and what it returned otherwise (it was returned as it came)."""
    if not isinstance(encoding, PositionalEncoding):
        raise TypeError(
            f"encoding {name!r}: its factory {_source(factory)} returned {type(encoding).__module__}."
            f"{type(encoding).__qualname__}, not a pezoo.PositionalEncoding"
        )
    return encoding


def resolved_options(name: str, **config: Any) -> dict[str, Any]:
    """Every option :func:`create` builds ``name`` with: ``config`` over the defaults of the
    constructors it calls (a wrapper's and its base's; each part's of a combination). The
    model-shape keywords :class:`ModelDims` supplies are not options and are left out.

    A record that stores this, not only the options given, keeps its meaning when a default
    changes later. Raises like :func:`create` for an unknown name or option.

    >>> resolved_options("hard_alibi")
    {'n_masked': None}
    """
    _check_name(name)
    if ":" in name:
        prefix, base = name.split(":", 1)
        if prefix not in WRAPPERS:
            raise UnknownNameError(unknown_name_message("encoding", name, available()))
        own = _accepted_keys(WRAPPERS[prefix])
        inner = resolved_options(base, **{k: v for k, v in config.items() if k not in own})
        wrapper = _defaults(WRAPPERS[prefix], {k: v for k, v in config.items() if k in own}, prefix)
        return dict(sorted({**inner, **wrapper}.items()))
    if "+" in name:
        parts = name.split("+")
        out: dict[str, Any] = {}
        for part in parts:  # each key is taken by one part (create refuses a shared one)
            accepted = _accepted_keys(ENCODINGS[part])
            out.update(_defaults(ENCODINGS[part], {k: v for k, v in config.items() if k in accepted}, part))
        unknown = sorted(set(config) - set(out))
        if unknown:
            raise TypeError(f"encoding {name!r} got unknown option(s) {listed(unknown)}")
        return dict(sorted(out.items()))
    return _defaults(ENCODINGS[name], config, name)


def _defaults(factory: Callable[..., Any], config: Mapping[str, Any], name: str) -> dict[str, Any]:
    """``config`` over ``factory``'s keyword defaults, without the model-shape keywords."""
    unknown = sorted(set(config) - _accepted_keys(factory))
    if unknown:
        raise TypeError(f"encoding {name!r} got unknown option(s) {listed(unknown)}")
    shape = set(ModelDims(1, 1, 1).as_kwargs())
    params = inspect.signature(factory).parameters.values()
    out = {
        p.name: p.default
        for p in params
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is not p.empty and p.name not in shape
    }
    return dict(sorted({**out, **config}.items()))


def _create_combined(name: str, shape: Mapping[str, int], config: Mapping[str, Any]) -> PositionalEncoding:
    """``a+b``: each part built with the model's ``shape`` (the shape keys of ``config`` among
    it: each part that takes one gets it) and the other ``config`` keys it alone accepts."""
    names = name.split("+")
    if any(not n for n in names):
        raise ValueError(f"{name!r}: expected encoding names joined by '+', e.g. abacus+fire")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:  # before the options, which such a part would take twice
        raise ValueError(f"{', '.join(repeated)} appears twice; each part keeps its own state, once")
    accepted = {n: _accepted_keys(ENCODINGS[n]) for n in names}  # unknown part: UnknownNameError
    own: dict[str, dict[str, Any]] = {n: {} for n in names}
    shape = dict(shape)
    for key, value in config.items():
        takers = [n for n in names if key in accepted[n]]
        if not takers:
            valid = "; ".join(f"{n}: {', '.join(sorted(accepted[n])) or '(none)'}" for n in names)
            raise TypeError(f"encoding {name!r} got unknown option {key}; valid options: {valid}")
        if key in SHAPE_KEYS:
            shape[key] = value  # the model's: every part that takes it
            continue
        if len(takers) > 1:
            raise ValueError(
                f"option {key} of {name!r} is taken by {' and '.join(takers)}; build the parts yourself and "
                "join them with pezoo.combine(...)"
            )
        own[takers[0]][key] = value
    return Combined([_build(n, shape, own[n]) for n in names])


def _accepted_keys(factory: Callable[..., Any]) -> set[str]:
    params = inspect.signature(factory).parameters.values()
    return {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}


def _call_strict(factory: Callable[..., Any], name: str, config: Mapping[str, Any]) -> Any:
    accepted = _accepted_keys(factory)
    unknown = sorted(set(config) - accepted)
    if unknown:
        raise TypeError(
            f"encoding {name!r} got unknown option(s) {listed(unknown)}; "
            f"valid options: {', '.join(sorted(accepted)) or '(none)'}"
        )
    _check_values(factory, name, config)
    return factory(**config)


def _check_values(factory: Callable[..., Any], name: str, config: Mapping[str, Any]) -> None:
    """Before ``factory`` runs: each option of the type its annotation declares
    (:mod:`pezoo.option_types`), and each size-like one within :mod:`pezoo.limits`' bound
    (``learned_prf{depth=10**20}`` built layers until the machine ran out of memory)."""
    check_option_types(factory, name, config)
    for path, value, bound in oversized_options(config):
        shown = f"{value:,}" if isinstance(value, int) else f"{value:g}"
        raise ValueError(f"{name}: {path} must be at most {bound:,} (pezoo.limits), got {shown}")
