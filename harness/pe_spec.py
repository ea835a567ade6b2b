"""Encoding specifications: a registry name with options, in one syntax everywhere.

    rope                                   the encoding's defaults
    prism{copy_every=5,layers=[0,2]}       options: key=value, comma-separated
    prism{paper}                           the paper's per-task setup (harness.protocols)
    prism{paper,n_cursors=2}               that setup, one option changed
    randomized:rope{max_length=256}        a wrapped encoding takes options the same way
    rope{scaling={rope_type=p_rope,p=0.75}}  a table value: {key=value,...}, nested as deep as needed
    rope@{scaling={rope_type=yarn,factor=4.0,original_max_position_embeddings=24}}
                                           an inference-time variant: the trained run ``rope``
                                           evaluated with these options (:data:`INFERENCE_OPTIONS`)

Values are TOML literals (``true``, ``4``, ``1e-3``, ``[0, 3]``, ``"text"``) or tables
``{key=value,...}`` of them; a bare word that is no TOML literal is a string
(``regulariser=frobenius``, also inside a table: ``{rope_type=yarn}``). A bare word without
``=`` names a setup: ``paper`` or ``default`` (the encoding's defaults, also under the
``prism`` preset, whose runs otherwise use the paper setup). ``setup=paper`` says the
same. The same strings go in ``--pe`` (a comma-separated list: commas inside braces,
brackets and quotes belong to the spec), in sweep files (``pe = ["rope", "prism{paper}"]``),
and as TOML tables (``pe = [{name = "prism", setup = "paper", n_cursors = 2}]``).

A run's ``RunConfig.pe_options`` hold the *resolved* options: the setup's, then the
harness's defaults (:func:`harness_defaults`), then the given ones. Every option is
checked by building the encoding (``pezoo.create`` rejects unknown keys and bad values)
before anything is trained or stored.

Randomized PE and run identity. Runs are identified by ``RunConfig.run_id()``, a hash
that includes ``pe_options``. Randomized PE now evaluates on random positions by
default (Ruoss et al. 2023 §3), where it used to evaluate on ``0..n-1``. So the harness
writes the choice into every new randomized run's options (``randomize_eval=true``,
:func:`harness_defaults`), giving new runs new ids, while a stored run whose options lack
the key keeps its id and its meaning, plain positions (:func:`stored_defaults`; built
that way by ``harness.train.build_model`` through :func:`model_options`, and displayed
as ``randomized{randomize_eval=false}``). An explicit ``randomize_eval=false`` builds the
same encoding as that stored ``{}``, and has the same id (:func:`identity_options`).
``draw`` followed the same path: training used to give a padded row of n tokens the
first n of one draw for the whole batch; new runs record ``draw="per_length"`` (a draw
of its own length for each row), and a stored run without the key means
``draw="per_batch"``, displayed as ``randomized:ape{draw=per_batch}``.
"""

from __future__ import annotations

import functools
import json
import math
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness import limits
from harness.backbone import BackboneConfig
from harness.protocols import has_paper_setup, paper_pe_options
from harness.reading import MAX_DEPTH

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the project runs on 3.11+
    tomllib = None

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


# --------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------


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
    if quote or depth:
        raise ValueError(f"unclosed {quote or '/'.join(depth)!r} in {what} {text!r}")
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
    if tomllib is None:  # pragma: no cover
        raise ValueError("encoding options need Python >= 3.11 (tomllib)")
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except RecursionError:  # parse_value's callers bound the depth first; this is the backstop
        raise ValueError(f"{text[:40]!r}... nests more than {MAX_DEPTH} levels deep") from None
    except tomllib.TOMLDecodeError:
        if _BARE.fullmatch(text):
            return text
        raise ValueError(f'{text!r} is not a value (a TOML literal such as 4, 1e-3, true, [0, 3], "text")') from None
    return _canonical(value, text)


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


def _canonical(value: Any, where: str = "") -> Any:
    """JSON-like form: tuples as lists; only numbers, booleans, strings, lists and
    string-keyed tables of them."""
    if isinstance(value, list | tuple):
        return [_canonical(v, where) for v in value]
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {k: _canonical(v, where) for k, v in value.items()}
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
    (module docstring); ValueError says what is wrong."""
    text = text.strip()
    at = _top_level_at(text)
    if at >= 0:
        trained, variant = text[:at].strip(), text[at + 1 :].strip()
        if _top_level_at(variant) >= 0:
            raise ValueError(f"{text!r}: one '@' at most")
        if not (variant.startswith("{") and variant.endswith("}")):
            raise ValueError(f"{text!r}: after '@' come the evaluation options in braces, e.g. @{{scaling={{...}}}}")
        try:
            eval_options = {k: _canonical(v) for k, v in parse_table(variant, "evaluation options").items()}
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
        options = {k: _canonical(v) for k, v in values.items()}
        eval_options = {k: _canonical(v) for k, v in eval_options.items()}
    except ValueError as exc:
        raise ValueError(f"{where}: encoding {name!r}: {exc}") from None
    return PeSpec(name, options, setup, eval_options)


def pe_values(value: Any, where: str = "sweep") -> tuple[str, ...]:
    """A sweep file's ``pe``: a string (one spec or a comma-separated list), a table, or a
    list of those -> canonical spec strings."""
    items = value if isinstance(value, list) else [value]
    out: list[str] = []
    for item in items:
        if isinstance(item, str):
            try:
                out += [str(parse_pe(p)) for p in split_pe_list(item)]
            except ValueError as exc:
                raise ValueError(f"{where}: pe: {exc}") from None
        elif isinstance(item, Mapping):
            out.append(str(pe_from_table(item, f"{where}: pe")))
        else:
            raise ValueError(f"{where}: pe must be a string, a table or a list of them, got {item!r}")
    if not out:
        raise ValueError(f"{where}: pe is empty")
    return tuple(out)


# --------------------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------
# Resolution: the options a run records, and the options its model is built with
# --------------------------------------------------------------------------------------


def _randomized(pe: str) -> bool:
    return pe == "randomized" or pe.startswith("randomized:")


def harness_defaults(pe: str) -> dict[str, Any]:
    """Options the harness writes into every new run of ``pe`` unless given: a randomized
    encoding's ``randomize_eval=True`` (random positions at evaluation, the paper's
    procedure) and ``draw="per_length"`` (each padded row's positions drawn for its own
    length, as the paper's are for each sequence), recorded so that such runs get ids
    of their own."""
    return {"draw": "per_length", "randomize_eval": True} if _randomized(pe) else {}


def stored_defaults(pe: str) -> dict[str, Any]:
    """What a stored run's missing options meant when it was stored: a randomized run
    without ``randomize_eval`` evaluated on plain positions (the wrapper's old default),
    and one without ``draw`` trained on one draw per batch, whose first n positions a
    padded row of n tokens took (the harness before 25 November 2026)."""
    return {"draw": "per_batch", "randomize_eval": False} if _randomized(pe) else {}


def vocabulary_options(pe: str) -> dict[str, Any]:
    """Keywords that locate tokens in the harness's shared vocabulary, for the encodings
    that take them: ``digit_ids`` (Abacus numbers the digits). Supplied when a model is
    built and never recorded in a run's options: token ids are stable
    (``harness.tasks.vocab``), so they are part of the harness, not of the run."""
    import inspect

    import pezoo
    from harness.tasks.vocab import TOKEN_ID

    wanted = False
    for part in pe.rsplit(":", 1)[-1].split("+"):  # a combination's parts too
        try:
            factory = pezoo.get(part)
        except KeyError:
            continue
        wanted = wanted or "digit_ids" in inspect.signature(factory).parameters
    return {"digit_ids": [TOKEN_ID[str(d)] for d in range(10)]} if wanted else {}


def model_options(pe: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword options to build a run's encoding with: its recorded ``pe_options``,
    missing keys meaning what they meant when the run was stored (:func:`stored_defaults`)."""
    return {**stored_defaults(pe), **options}


def identity_options(pe: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` as they enter a run's identity (``RunConfig.run_id``): without the keys
    whose value is what their absence meant in a stored run (:func:`stored_defaults`),
    so that two configs that build the same encoding have the same id."""
    stored = stored_defaults(pe)
    return {k: v for k, v in options.items() if not (k in stored and _same(stored[k], v))}


def _same(a: Any, b: Any) -> bool:
    return json.dumps(_canonical(a)) == json.dumps(_canonical(b))


def resolve_pe(
    spec: PeSpec | str, *, task: str, backbone: BackboneConfig, default_setup: str | None = None
) -> tuple[str, dict[str, Any]]:
    """(registry name, the options a run of ``spec`` on ``task`` records): the setup's
    (``spec.setup``, else ``default_setup`` where the encoding has a paper setup), then
    :func:`harness_defaults`, then the spec's own options; any options are checked by
    building the encoding for ``backbone`` (ValueError naming the spec when that fails)."""
    spec = parse_pe(spec) if isinstance(spec, str) else spec
    setup = spec.setup or (default_setup if has_paper_setup(spec.name) else None)
    base = paper_pe_options(spec.name, task, backbone) if setup == "paper" else {}
    options = {**harness_defaults(spec.name), **base, **{k: _canonical(v) for k, v in spec.options.items()}}
    if options:  # a bare name has nothing to check here (the CLI checks names, with suggestions)
        check_options(spec.name, options, backbone, str(spec))
    return spec.name, dict(sorted(options.items()))


def check_options(pe: str, options: Mapping[str, Any], backbone: BackboneConfig, what: str | None = None) -> None:
    """Build ``pe`` with ``options`` for ``backbone`` (as ``build_model`` would) and turn
    any complaint into a ValueError naming the spec. Size-like options are checked against
    their bounds first (``harness.limits``): building the encoding allocates from them."""
    try:
        limits.check_option_sizes(options)
        b = backbone
        _check_built(pe, json.dumps(dict(options), sort_keys=True), b.d_model, b.n_heads, b.n_layers)
    except (TypeError, ValueError, KeyError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        raise ValueError(f"encoding {what or format_pe(pe, options)!r}: {message}") from None


INFERENCE_OPTIONS: dict[str, tuple[str, ...]] = {"rope": ("scaling",), "xpos": ("blockwise",)}
"""Per registry name, the options an inference-time variant (``name@{...}``) may change:
those that change what the encoding computes from positions without changing its
parameters, so the trained weights load as they are. RoPE's ``scaling`` is the
context-extension methods (position interpolation, NTK, YaRN, ...) applied to a
RoPE-trained model, as practitioners do (``pezoo.encodings.rope.rope_frequencies``);
xPos's ``blockwise`` is the blockwise causal attention its paper evaluates it with
(``pezoo.base.BlockMask``), the block the training length."""


def check_eval_options(
    pe: str,
    options: Mapping[str, Any],
    eval_options: Mapping[str, Any],
    backbone: BackboneConfig,
    what: str | None = None,
) -> None:
    """ValueError unless ``eval_options`` may replace ``options`` of a trained ``pe`` run at
    evaluation: only keys of :data:`INFERENCE_OPTIONS`, values the encoding accepts, and
    the encoding built with them holds parameters and buffers of the same names and shapes
    as the trained one (so its weights load unchanged)."""
    what = what or format_pe(pe, options) + format_eval_options(eval_options)
    allowed = INFERENCE_OPTIONS.get(pe, ())
    bad = sorted(set(eval_options) - set(allowed))
    if bad:
        may = f"only {', '.join(allowed)}" if allowed else "none"
        raise ValueError(
            f"encoding {what!r}: an inference-time variant may not change {', '.join(bad)} (options of {pe!r} that "
            f"may change at evaluation: {may}); options that change the model or its parameters need a run of "
            "their own"
        )
    merged = {**options, **eval_options}
    check_options(pe, merged, backbone, what)
    b = backbone
    dims = (b.d_model, b.n_heads, b.n_layers)
    trained = _state_shapes(pe, json.dumps(dict(options), sort_keys=True), *dims)
    variant = _state_shapes(pe, json.dumps(merged, sort_keys=True), *dims)
    if trained != variant:
        differ = sorted(k for k in set(trained) | set(variant) if trained.get(k) != variant.get(k))
        raise ValueError(
            f"encoding {what!r}: the variant's parameters differ from the trained run's ({', '.join(differ[:5])}); "
            "its weights would not load"
        )


@functools.lru_cache(maxsize=256)
def _state_shapes(pe: str, options_json: str, d_model: int, n_heads: int, n_layers: int) -> dict[str, tuple[int, ...]]:
    import torch

    import pezoo

    with torch.random.fork_rng(devices=[]):
        module = pezoo.create(pe, dims=pezoo.ModelDims(d_model, n_heads, n_layers), **json.loads(options_json))
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


@functools.lru_cache(maxsize=256)
def _check_built(pe: str, options_json: str, d_model: int, n_heads: int, n_layers: int) -> None:
    import torch

    import pezoo

    with torch.random.fork_rng(devices=[]):  # building initialises weights: leave the caller's RNG alone
        pezoo.create(pe, dims=pezoo.ModelDims(d_model, n_heads, n_layers), **json.loads(options_json))


DISPLAY_ALIASES = {"randomized": "randomized:ape"}
"""Registry names that tables show as what they are: bare ``randomized`` is the
``randomized`` wrapper around sin/cos APE (its run ids keep the registry name)."""


def display_name(
    pe: str,
    options: Mapping[str, Any] | None,
    *,
    task: str | None = None,
    backbone: BackboneConfig | Mapping[str, Any] | None = None,
) -> str:
    """How tables name a run of ``pe`` with recorded ``options``: the spec, without the
    options the harness writes by default (:func:`harness_defaults`), with the paper
    setup's options shown as ``paper`` when they all match it (needs ``task`` and
    ``backbone``), a stored run's missing options spelled out
    (``randomized:ape{randomize_eval=false}``), and an alias as what it is
    (``DISPLAY_ALIASES``). E.g. ``rope``, ``randomized:ape``, ``prism{paper}``,
    ``prism{n_cursors=4}``."""
    effective = model_options(pe, options or {})
    defaults = harness_defaults(pe)
    shown = {k: v for k, v in effective.items() if not (k in defaults and _same(defaults[k], v))}
    setup = None
    if task is not None and backbone is not None and has_paper_setup(pe):
        if isinstance(backbone, Mapping):
            try:
                backbone = BackboneConfig(**backbone)
            except TypeError:
                backbone = None
        paper = paper_pe_options(pe, task, backbone) if backbone is not None else {}
        paper = {k: v for k, v in paper.items() if not (k in defaults and _same(defaults[k], v))}
        if paper and all(k in effective and _same(effective[k], v) for k, v in paper.items()):
            setup = "paper"
            shown = {k: v for k, v in shown.items() if k not in paper}
    return format_pe(DISPLAY_ALIASES.get(pe, pe), shown, setup)


def variant_name(eval_options: Mapping[str, Any]) -> str:
    """A short name for an inference-time variant's options: RoPE scaling as
    ``{rope_type}×{factor}`` then its other keys (``original_max_position_embeddings`` as
    ``L``), e.g. ``yarn×4 L=10``, ``linear×4``, ``default``; xPos's blockwise causal
    attention as ``blockwise L=24``; other options as ``k=v``."""
    parts = []
    for key, value in sorted(eval_options.items()):
        if key == "scaling" and isinstance(value, Mapping) and "rope_type" in value:
            rest = dict(value)
            text = str(rest.pop("rope_type"))
            if "factor" in rest:
                text += f"×{format_value(rest.pop('factor')).removesuffix('.0')}"
            for k, v in sorted(rest.items()):
                short = "L" if k == "original_max_position_embeddings" else k
                text += f" {short}={format_value(v)}"
            parts.append(text)
        elif key == "blockwise" and value is not None:
            parts.append(f"blockwise L={format_value(value)}")
        else:
            parts.append(f"{key}={format_value(value)}")
    return ", ".join(parts)


VARIANT_MARK = "(same weights)"
"""What a variant's displayed name ends with: it is a trained run evaluated differently."""


def variant_display_name(trained: str, eval_options: Mapping[str, Any] | None) -> str:
    """``rope → yarn×4 L=10 (same weights)``: the trained run's displayed name, an arrow,
    the variant (:func:`variant_name`); just ``trained`` without evaluation options."""
    if not eval_options:
        return trained
    return f"{trained} → {variant_name(eval_options)} {VARIANT_MARK}"


def config_display_name(cfg: Any) -> str:
    """:func:`display_name` of a ``RunConfig`` (a variant's: :func:`variant_display_name`)."""
    trained = display_name(cfg.pe, cfg.pe_options, task=cfg.task, backbone=cfg.backbone)
    return variant_display_name(trained, getattr(cfg, "eval_pe_options", None))


def names(specs: Iterable[str]) -> list[str]:
    """The registry names of ``specs`` (for name checks), in order, without repeats."""
    return list(dict.fromkeys(parse_pe(s).name for s in specs))
