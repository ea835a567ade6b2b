"""Encoding specifications: a registry name with options, written as one string.

    rope                                   the encoding's defaults
    prism{copy_every=5,layers=[0,2]}       options: key=value, comma-separated
    prism{paper}                           the paper's setup (:mod:`pezoo.setups`)
    prism{paper,n_cursors=2}               that setup, one option changed
    randomized:rope{max_length=256}        a wrapped encoding takes options the same way
    abacus+fire{max_shift=0}               a combination too (the name is the registry's:
                                           :mod:`pezoo.registry` reads its ``:`` and ``+``)
    rope{scaling={rope_type=p_rope,p=0.75}}  a table value: {key=value,...}, nested as deep as needed
    rope@{scaling={rope_type=yarn,factor=4.0,original_max_position_embeddings=24}}
                                           an inference-time variant: the run of ``rope``
                                           evaluated with these options (``eval_options``)

Values are TOML literals (``true``, ``4``, ``1e-3``, ``[0, 3]``, ``"text"``) or tables
``{key=value,...}`` of them; a bare word that is no TOML literal is a string
(``regulariser=frobenius``, also inside a table: ``{rope_type=yarn}``). A bare word without
``=`` names a setup: ``paper`` or ``default`` (the encoding's defaults). ``setup=paper``
says the same. A comma-separated list of specs (:func:`split_pe_list`: commas inside
braces, brackets and quotes belong to the spec) is what ``pezoo bench --pe`` takes, and
:func:`pe_from_table` reads the same spec from a TOML table
(``{name = "prism", setup = "paper", n_cursors = 2}``).

This module is the syntax only: it reads and writes specs, and never looks a name up. The
name's own structure (wrappers ``randomized:``, combinations ``a+b``) is the registry's
(:func:`pezoo.create`); what a setup means is :mod:`pezoo.setups`'; the options a
benchmark run records are the harness's.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser from PyPI (tomllib is tomli, taken into the standard library)
    import tomli as tomllib

MAX_DEPTH = 32
"""How deeply lists and tables may nest in a spec's values: deeper is a ValueError, never a
``RecursionError``."""

SETUPS = ("paper", "default")
"""Named setups a spec may ask for (a bare word in braces, or ``setup=...``)."""

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_:.+\-]*")
_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_TOML_WORDS = ("true", "false", "inf", "nan")
_PAIRS = {"[": "]", "{": "}"}


@dataclass(frozen=True)
class PeSpec:
    """An encoding name, its explicit options and an optional named setup.

    ``str(spec)`` is the canonical spelling (options sorted by key), which parses back
    to an equal spec.
    """

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)
    setup: str | None = None
    eval_options: Mapping[str, Any] = field(default_factory=dict)
    """Options that replace the trained ones at evaluation only (``name{...}@{eval options}``):
    the trained run of ``name{options}``, evaluated as an inference-time variant."""

    def __str__(self) -> str:
        text = format_pe(self.name, self.options, self.setup)
        return text + format_eval_options(self.eval_options) if self.eval_options else text

    @property
    def trained(self) -> PeSpec:
        """The spec of the run whose weights a variant evaluates (itself without ``eval_options``)."""
        return PeSpec(self.name, self.options, self.setup)


def _split_top_level(text: str, what: str) -> list[str]:
    """Split at commas outside brackets, braces and quotes (ValueError if unbalanced)."""
    parts, depth, quote, start = [], [], None, 0
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch in _PAIRS:
            depth.append(_PAIRS[ch])
            if len(depth) > MAX_DEPTH:  # before anything recurses into it (tomllib, parse_table)
                raise ValueError(f"{what} {text[:40]!r}... nests more than {MAX_DEPTH} levels deep")
        elif ch in "]}":
            if not depth or depth.pop() != ch:
                raise ValueError(f"unbalanced {ch!r} in {what} {text!r}")
        elif ch == "," and not depth:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    if quote:
        raise ValueError(f"unclosed quote {quote!r} in {what} {text!r}")
    if depth:  # depth holds the closers expected: name the opener left open
        opener = {close: open_ for open_, close in _PAIRS.items()}[depth[-1]]
        raise ValueError(f"unclosed {opener!r} (no {depth[-1]!r} after it) in {what} {text!r}")
    parts.append(text[start:])
    return [p.strip() for p in parts]


def split_pe_list(text: str) -> list[str]:
    """``"rope, prism{layers=[0,2],n_cursors=4}"`` -> ``["rope", "prism{layers=[0,2],n_cursors=4}"]``
    (empty items are dropped; ValueError on unbalanced brackets or quotes)."""
    return [p for p in _split_top_level(text, "encoding list") if p]


def parse_value(text: str) -> Any:
    """A TOML literal, a table ``{key=value,...}`` of values, or a bare word as a string
    (ValueError otherwise)."""
    text = text.strip()
    if text.startswith("{") and text.endswith("}"):
        return parse_table(text)
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except RecursionError:  # parse_value's callers bound the depth first; this is the backstop
        raise ValueError(f"{text[:40]!r}... nests more than {MAX_DEPTH} levels deep") from None
    except tomllib.TOMLDecodeError:
        if _BARE.fullmatch(text):
            return text
        raise ValueError(f'{text!r} is not a value (a TOML literal such as 4, 1e-3, true, [0, 3], "text")') from None
    return canonical(value, text)


def parse_table(text: str, what: str = "table") -> dict[str, Any]:
    """``{key=value,...}`` -> dict; values as :func:`parse_value` reads them (bare words,
    nested tables). An empty ``{}`` is an empty dict."""
    text = text.strip()
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError(f"{text!r} is not a {what} {{key=value,...}}")
    _split_top_level(text, what)  # balanced as a whole
    body = text[1:-1]
    out: dict[str, Any] = {}
    if not body.strip():
        return out
    for item in _split_top_level(body, what):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not _KEY.fullmatch(key):
            raise ValueError(f"{text!r}: {item!r} is not key=value")
        if key in out:
            raise ValueError(f"{text!r}: key {key!r} given twice")
        out[key] = parse_value(value)
    return out


def canonical(value: Any, where: str = "") -> Any:
    """An option value in its JSON-like form: tuples as lists; only numbers, booleans, strings, lists and
    string-keyed tables of them."""
    if isinstance(value, list | tuple):
        return [canonical(v, where) for v in value]
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {k: canonical(v, where) for k, v in value.items()}
    raise ValueError(
        f"option values are numbers, booleans, strings, lists or tables of them; got {value!r} {where}".strip()
    )


def _top_level_at(text: str) -> int:
    """Index of the first ``@`` outside brackets, braces and quotes, or -1."""
    depth, quote = 0, None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "@" and depth == 0:
            return i
    return -1


def parse_pe(text: str) -> PeSpec:
    """Parse one spec, ``name``, ``name{item,...}`` or a variant ``name{...}@{key=value,...}``
    (module docstring); ValueError says what is wrong (TypeError: ``text`` is no string)."""
    if not isinstance(text, str):
        raise TypeError(
            f"an encoding spec is a string such as 'rope' or 'alibi{{n_biased=4}}', got {text!r} "
            f"({type(text).__name__})"
        )
    text = text.strip()
    at = _top_level_at(text)
    if at >= 0:
        trained, variant = text[:at].strip(), text[at + 1 :].strip()
        if _top_level_at(variant) >= 0:
            raise ValueError(f"{text!r}: one '@' at most")
        if not (variant.startswith("{") and variant.endswith("}")):
            raise ValueError(f"{text!r}: after '@' come the evaluation options in braces, e.g. @{{scaling={{...}}}}")
        try:
            eval_options = {k: canonical(v) for k, v in parse_table(variant, "evaluation options").items()}
        except ValueError as exc:
            raise ValueError(f"{text!r}: {exc}") from None
        spec = parse_pe(trained)
        return PeSpec(spec.name, spec.options, spec.setup, eval_options)
    brace = text.find("{")
    name = text if brace < 0 else text[:brace].strip()
    if not _NAME.fullmatch(name):
        raise ValueError(f"{text!r}: expected an encoding name, optionally followed by {{options}}")
    if brace < 0:
        return PeSpec(name)
    _split_top_level(text[brace:], "encoding")  # balanced as a whole
    if not text.endswith("}"):
        raise ValueError(f"{text!r}: the options must end with '}}'")
    body = text[brace + 1 : -1]
    options: dict[str, Any] = {}
    setup = None
    for item in _split_top_level(body, f"options of {name!r}"):
        if not item:
            if body.strip():
                raise ValueError(f"{text!r}: empty option (two commas, or a trailing comma)")
            continue
        key, eq, value = item.partition("=")
        key = key.strip()
        if not _KEY.fullmatch(key):
            raise ValueError(f"{text!r}: {key!r} is not an option name")
        if not eq:
            if setup is not None:
                raise ValueError(f"{text!r}: two setups ({setup!r}, {key!r})")
            setup = _check_setup(key, text)
            continue
        if key in options or (key == "setup" and setup is not None):
            raise ValueError(f"{text!r}: option {key!r} given twice")
        try:
            parsed = parse_value(value)
        except ValueError as exc:
            raise ValueError(f"{text!r}: option {key}: {exc}") from None
        if key == "setup":
            setup = _check_setup(parsed, text)
        else:
            options[key] = parsed
    return PeSpec(name, options, setup)


def _check_setup(value: Any, where: str) -> str:
    if value not in SETUPS:
        raise ValueError(
            f"{where!r}: {value!r} is not a setup (valid: {', '.join(SETUPS)}); options are written key=value"
        )
    return value


def pe_from_table(table: Mapping[str, Any], where: str = "sweep") -> PeSpec:
    """A spec from a TOML table: ``{name = "prism", setup = "paper", n_cursors = 2}``."""
    if not isinstance(table, Mapping):
        raise ValueError(f'{where}: an encoding table is {{name = "<encoding>", option = value, ...}}, got {table!r}')
    values = dict(table)
    name = values.pop("name", None)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f'{where}: an encoding table needs name = "<encoding>", got {table!r}')
    setup = values.pop("setup", None)
    if setup is not None:
        setup = _check_setup(setup, where)
    eval_options = values.pop("eval", {})
    if not isinstance(eval_options, Mapping):
        raise ValueError(f"{where}: eval (an inference-time variant's options) must be a table, got {eval_options!r}")
    for key in values:
        if not _KEY.fullmatch(key):
            raise ValueError(f"{where}: {key!r} is not an option name")
    try:
        options = {k: canonical(v) for k, v in values.items()}
        eval_options = {k: canonical(v) for k, v in eval_options.items()}
    except ValueError as exc:
        raise ValueError(f"{where}: encoding {name!r}: {exc}") from None
    return PeSpec(name, options, setup, eval_options)


def format_value(value: Any, *, bare: bool = True) -> str:
    """The value as :func:`parse_value` reads it back (a string as a bare word where it
    can be: ``bare`` and not inside a list)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return repr(value) if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, str):
        if bare and _BARE.fullmatch(value) and value not in _TOML_WORDS:
            return value
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")  # a TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ",".join(format_value(v, bare=False) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}={format_value(v)}" for k, v in sorted(value.items())) + "}"
    raise ValueError(f"cannot write option value {value!r}")


def format_pe(name: str, options: Mapping[str, Any] | None = None, setup: str | None = None) -> str:
    """``name{setup,key=value,...}`` (options sorted by key; just ``name`` with neither)."""
    items = ([setup] if setup else []) + [f"{k}={format_value(v)}" for k, v in sorted((options or {}).items())]
    return f"{name}{{{','.join(items)}}}" if items else name


def format_eval_options(eval_options: Mapping[str, Any]) -> str:
    """``@{key=value,...}`` (sorted), the variant part of a spec; empty for no options."""
    return "@" + format_value(dict(eval_options)) if eval_options else ""


def names(specs: Iterable[PeSpec | str]) -> list[str]:
    """The registry names of ``specs`` (for name checks), in order, without repeats."""
    return list(dict.fromkeys((parse_pe(s) if isinstance(s, str) else s).name for s in specs))
