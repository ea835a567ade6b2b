"""Encoding specs in the benchmark: the options a run records, how a run is named, and
which options an inference-time variant may change.

The spec syntax (``prism{paper,n_cursors=2}``, ``rope@{scaling={...}}``) is pezoo's
(:mod:`pezoo.spec`); the same strings go in ``--pe`` and in sweep files
(``pe = ["rope", "prism{paper}"]``, or TOML tables
``pe = [{name = "prism", setup = "paper", n_cursors = 2}]``). Under the ``prism`` preset an
encoding with a paper setup gets it unless the spec says ``default``.

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
that way by ``harness.training.train.build_model`` through :func:`model_options`, and displayed
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
from collections.abc import Mapping
from typing import Any

import pezoo
from harness.config import limits
from harness.config.backbone import BackboneConfig
from harness.config.global_rng import forked_global_rng
from harness.config.protocols import paper_pe_options
from pezoo.setups import has_paper_setup
from pezoo.spec import PeSpec, canonical, format_eval_options, format_pe, format_value, parse_pe


def harness_defaults(pe: str) -> dict[str, Any]:
    """Options the harness writes into every new run of ``pe`` unless given (its card's
    ``run_defaults``: e.g. a randomized encoding's paper procedure), recorded so that such
    runs get ids of their own."""
    return dict(pezoo.card_of(pe).run_defaults)


def stored_defaults(pe: str) -> dict[str, Any]:
    """What a stored run's missing options meant when it was stored (its card's
    ``stored_defaults``)."""
    return dict(pezoo.card_of(pe).stored_defaults)


def _takes(pe: str, keyword: str) -> bool:
    """Whether the encoding ``pe`` (a wrapper's base, a combination's parts too) is built
    with the keyword ``keyword``; an unknown name takes nothing (its run fails, saying so)."""
    import inspect

    for part in pe.rsplit(":", 1)[-1].split("+"):
        try:
            factory = pezoo.get(part)
        except KeyError:
            continue
        if keyword in inspect.signature(factory).parameters:
            return True
    return False


def vocabulary_options(pe: str) -> dict[str, Any]:
    """Keywords that locate tokens in the harness's shared vocabulary, for the encodings
    that take them: ``digit_ids`` (Abacus numbers the digits). Supplied when a model is
    built and never recorded in a run's options: token ids are stable
    (``harness.tasks.vocab``), so they are part of the harness, not of the run."""
    from harness.tasks.vocab import TOKEN_ID

    return {"digit_ids": [TOKEN_ID[str(d)] for d in range(10)]} if _takes(pe, "digit_ids") else {}


def task_options(pe: str, task: str) -> dict[str, Any]:
    """Keywords an encoding reads from the run's task, for the encodings that take them:
    ``coupling``, the task's declared position coupling (``Task.coupling``, read by
    ``position_coupling``), as plain data. Supplied when a model is built and not recorded
    in a run's options: the task's name is part of the run, and its coupling part of the
    task. ValueError for an encoding that reads a coupling on a task that declares none."""
    from harness import tasks

    if not _takes(pe, "coupling"):
        return {}
    coupling = tasks.create(task).coupling if task in tasks.TASKS else None
    if coupling is None:
        declaring = ", ".join(n for n in tasks.available() if tasks.create(n).coupling is not None)
        raise ValueError(
            f"encoding {pe!r} reads the position coupling its task declares, and task {task!r} declares none "
            f"(tasks that do: {declaring})"
        )
    return {"coupling": coupling.as_option()}


def model_options(pe: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword options to build a run's encoding with: its recorded ``pe_options``,
    missing keys meaning what they meant when the run was stored (:func:`stored_defaults`)."""
    return {**stored_defaults(pe), **options}


def build_options(pe: str, options: Mapping[str, Any], task: str | None = None) -> dict[str, Any]:
    """Every keyword a run's ``pe`` is built with: :func:`vocabulary_options`, the
    :func:`task_options` of ``task`` (None: none, as for a check build), then
    :func:`model_options` (its recorded options, missing keys as when stored)."""
    from_task = task_options(pe, task) if task is not None else {}
    return {**vocabulary_options(pe), **from_task, **model_options(pe, options)}


def identity_options(pe: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` as they enter a run's identity (``RunConfig.run_id``): without the keys
    whose value is what their absence meant in a stored run (:func:`stored_defaults`),
    so that two configs that build the same encoding have the same id."""
    stored = stored_defaults(pe)
    return {k: v for k, v in options.items() if not (k in stored and _same(stored[k], v))}


def _same(a: Any, b: Any) -> bool:
    return json.dumps(canonical(a)) == json.dumps(canonical(b))


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
    options = {**harness_defaults(spec.name), **base, **{k: canonical(v) for k, v in spec.options.items()}}
    if options:  # a bare name has nothing to check here (the CLI checks names, with suggestions)
        check_options(spec.name, options, backbone, str(spec))
    task_options(spec.name, task)  # ValueError: an encoding that reads a coupling on a task that declares none
    return spec.name, dict(sorted(options.items()))


def check_options(pe: str, options: Mapping[str, Any], backbone: BackboneConfig, what: str | None = None) -> None:
    """Build ``pe`` with ``options`` for ``backbone`` (:func:`preflight_build`) and turn
    any complaint into a ValueError naming the spec. Size-like options are checked against
    their bounds first (``harness.config.limits``)."""
    try:
        limits.check_option_sizes(options)
        preflight_build(pe, options, backbone)
    except (TypeError, ValueError, KeyError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        spec = what or format_pe(pe, options)
        shown = spec if len(spec) <= 200 else f"{spec[:160]}... ({len(spec):,} characters)"
        raise ValueError(f"encoding {shown!r}: {message}") from None


def inference_options(pe: str) -> tuple[str, ...]:
    """The options an inference-time variant (``name@{...}``) of registry name ``pe`` may
    change (its card's ``inference_options``): those that change what the encoding
    computes from positions without changing its parameters, so the trained weights load
    as they are (RoPE's context-extension ``scaling``, xPos's ``blockwise``). A wrapped
    name has none."""
    return pezoo.card_of(pe).inference_options if ":" not in pe else ()


def check_eval_options(
    pe: str,
    options: Mapping[str, Any],
    eval_options: Mapping[str, Any],
    backbone: BackboneConfig,
    what: str | None = None,
) -> None:
    """ValueError unless ``eval_options`` may replace ``options`` of a trained ``pe`` run at
    evaluation: only keys of :func:`inference_options`, values the encoding accepts, and
    the encoding built with them holds parameters and buffers of the same names and shapes
    as the trained one (so its weights load unchanged)."""
    what = what or format_pe(pe, options) + format_eval_options(eval_options)
    allowed = inference_options(pe)
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

    import pezoo

    with forked_global_rng():
        module = pezoo.create(pe, dims=pezoo.ModelDims(d_model, n_heads, n_layers), **json.loads(options_json))
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


def preflight_build(pe: str, options: Mapping[str, Any], backbone: BackboneConfig) -> int | None:
    """Build ``pe`` with a run's ``options`` for ``backbone`` as ``build_model`` would
    (:func:`build_options`) but without weights (on the meta device, the caller's RNG
    untouched), and return its ``max_position``. The one check build before training:
    checking a spec's options and checking that a run's positions fit share it, and it is
    cached, so a sweep builds each distinct encoding once before its runs build their own.
    A constructor's complaint propagates as raised (SystemExit included)."""
    b = backbone
    return _preflight(pe, json.dumps(build_options(pe, options), sort_keys=True), b.d_model, b.n_heads, b.n_layers)


@functools.lru_cache(maxsize=256)
def _preflight(pe: str, options_json: str, d_model: int, n_heads: int, n_layers: int) -> int | None:
    import torch

    import pezoo

    with forked_global_rng(), torch.device("meta"):
        module = pezoo.create(pe, dims=pezoo.ModelDims(d_model, n_heads, n_layers), **json.loads(options_json))
    width = d_model // n_heads
    other = [(layer, w) for layer, w in enumerate(module.qk_head_dims(width, n_layers)) if w not in (None, width)]
    if other:  # hybrid's global_head_dim, say: it serves models with projections of their own (Gemma 4's)
        layers = ", ".join(str(layer) for layer, _ in other)
        raise ValueError(
            f"its options give layer{'s' if len(other) > 1 else ''} {layers} q/k heads {other[0][1]} wide, where the "
            f"backbone's heads are all d_model / n_heads = {width} wide (a width of their own is for models with "
            "projections of their own, through pezoo.hf)"
        )
    return module.max_position


def shown_as(pe: str) -> str:
    """The name tables show registry name ``pe`` as: its card's alias (``shown_as``) for a
    bare registered name, else itself (run ids keep the registry name)."""
    return (pezoo.card_of(pe).shown_as or pe) if pe in pezoo.ENCODINGS else pe


def display_name(
    pe: str,
    options: Mapping[str, Any] | None,
    *,
    task: str | None = None,
    backbone: BackboneConfig | Mapping[str, Any] | None = None,
    symbolic: Mapping[str, str] | None = None,
) -> str:
    """How tables name a run of ``pe`` with recorded ``options``: the spec, without the
    options the harness writes by default (:func:`harness_defaults`), with the paper
    setup's options shown as ``paper`` when they all match it (needs ``task`` and
    ``backbone``), a stored run's missing options spelled out
    (``randomized:ape{randomize_eval=false}``), and an alias as what it is
    (:func:`shown_as`). E.g. ``rope``, ``randomized:ape``, ``prism{paper}``,
    ``prism{n_cursors=4}``. ``symbolic``: options shown by a name instead of their value
    (the board's ``fope{train_length=L}``: ``leaderboard.records.SIZED_TO_TRAINING``)."""
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
    shown = {k: (symbolic or {}).get(k, v) for k, v in shown.items()}
    return format_pe(shown_as(pe), shown, setup)


def variant_name(eval_options: Mapping[str, Any]) -> str:
    """A short name for an inference-time variant's options: each option as its
    encoding's card labels it (``pezoo.variant_label``: RoPE's scaling as
    ``yarn×4 L=10``, xPos's blockwise attention as ``blockwise L=24``), else as ``k=v``."""
    return ", ".join(
        pezoo.variant_label(key, value) or f"{key}={format_value(value)}" for key, value in sorted(eval_options.items())
    )


VARIANT_MARK = "(same weights)"
"""What a variant's displayed name ends with: it is a trained run evaluated differently."""


def variant_display_name(trained: str, eval_options: Mapping[str, Any] | None) -> str:
    """``rope → yarn×4 L=10 (same weights)``: the trained run's displayed name, an arrow,
    the variant (:func:`variant_name`); just ``trained`` without evaluation options."""
    if not eval_options:
        return trained
    return f"{trained} → {variant_name(eval_options)} {VARIANT_MARK}"


def config_display_name(cfg: Any) -> str:
    """:func:`display_name` of a ``RunConfig`` (a variant's: :func:`variant_display_name`; a
    language-modelling variant fine-tuned first: ``rope → linear×4 (fine-tuned 200 steps at 1024)``)."""
    trained = display_name(cfg.pe, cfg.pe_options, task=cfg.task, backbone=cfg.backbone)
    name = variant_display_name(trained, getattr(cfg, "eval_pe_options", None))
    steps = getattr(cfg.eval, "finetune_steps", 0)
    if steps and name.endswith(VARIANT_MARK):
        name = name[: -len(VARIANT_MARK)] + f"(fine-tuned {steps} steps at {cfg.eval.finetune_length})"
    return name
