"""The conformance checks (:data:`CHECKS`) and :func:`check_encoding`, which runs them.

Each check builds the kit model around the encoding (``kit.py``) or calls its hooks on
plain tensors, and raises :class:`~pezoo.testing.kit.ConformanceError` naming itself and
what differed. What each check asserts is listed in :mod:`pezoo.testing`.

Axis letters: b batch, s sequence, d model width, h heads, e head dim, v vocab.
"""

from __future__ import annotations

import copy
import io
import pickle
from collections.abc import Callable, Iterator, Sequence
from dataclasses import fields
from typing import Any

import torch
from torch import Tensor, nn

from pezoo.attention import BACKENDS
from pezoo.backends import flex_compile
from pezoo.biases import AttentionBias
from pezoo.context import AttentionContext
from pezoo.interface import PositionalEncoding
from pezoo.registry import ModelDims
from pezoo.scores import Normaliser, ScoreTransform
from pezoo.testing.kit import (
    ConformanceError,
    Factory,
    KitConfig,
    KitModel,
    build_model,
    fail,
    quiet_flex_warnings,
    random_tokens,
    scale_hints,
    usable_backends,
)


def _close(check: str, what: str, got: Tensor, want: Tensor, atol: float, rtol: float = 1e-4) -> None:
    if got.shape != want.shape:
        fail(check, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}")
    if not torch.allclose(got, want, atol=atol, rtol=rtol):
        err = (got - want).abs().max().item()
        fail(check, f"{what}: max abs difference {err:.3g} exceeds atol={atol:g}, rtol={rtol:g}")


def _finite(check: str, what: str, t: Tensor) -> None:
    if not torch.isfinite(t).all():
        bad = "NaN" if torch.isnan(t).any() else "inf"
        fail(check, f"{what} contains {bad}")


def _seeded(seed: int, model: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """``model(*args, **kwargs)`` from the global RNG state ``seed``, leaving the caller's alone."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return model(*args, **kwargs)


def _described(value: Any) -> str:
    """``value`` in a few words for a message: a tensor by dtype and shape, a list by its items'
    kinds, never a tensor's full repr."""
    if isinstance(value, Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)} on {value.device}"
    if isinstance(value, (list, tuple)):
        items = ", ".join(_described(v) if isinstance(v, Tensor) else type(v).__name__ for v in value[:3])
        return f"a {type(value).__name__} of {len(value)} ({items}{', ...' if len(value) > 3 else ''})"
    return f"{type(value).__name__} {value!r}"[:200]


def _a_tensor(check: str, call: str, value: Any, device: torch.device) -> Tensor:
    """``value``, what ``call`` returned, if it is a tensor on ``device``; fail naming ``call`` otherwise."""
    if not isinstance(value, Tensor):
        fail(check, f"{call} must return a tensor, got {_described(value)}")
    if value.device.type != device.type or (device.index is not None and value.device.index != device.index):
        fail(check, f"{call} returned a tensor on {value.device}, not on the inputs' device {device}")
    return value


def _left_alone(check: str, call: str, **inputs: tuple[Tensor, Tensor]) -> None:
    """Fail unless each input (a copy taken before ``call``, the tensor after) is unchanged: a
    hook that writes into its inputs changes what the caller computes next (the residual
    stream, the q and k attention uses) without anything failing."""
    for arg, (before, after) in inputs.items():
        if not torch.equal(before, after):
            fail(check, f"{call} changed its input {arg} in place; hooks must leave their inputs alone")


def _check_declarations(check: str, pe: PositionalEncoding, cfg: KitConfig) -> None:
    """What the encoding says of itself, read before it runs: the backends it runs on and the
    head widths its qk takes."""
    takes = pe.attention_backends()
    if takes is not None:
        if not isinstance(takes, (tuple, list)) or not all(isinstance(t, str) for t in takes):
            fail(check, f"attention_backends() must return None or a tuple of backend names, got {_described(takes)}")
        unknown = [t for t in takes if t not in BACKENDS]
        if unknown:
            fail(
                check,
                f"attention_backends() names {', '.join(map(repr, unknown))}, no registered backend "
                f"(registered: {', '.join(sorted(BACKENDS))})",
            )
    n, e = cfg.dims.n_layers, cfg.dims.head_dim
    widths = pe.qk_head_dims(e, n)
    if not isinstance(widths, (list, tuple)) or len(widths) != n:
        fail(check, f"qk_head_dims({e}, {n}) must return one entry per layer ({n}), got {_described(widths)}")
    for layer, width in enumerate(widths):
        if width is not None and (not isinstance(width, int) or isinstance(width, bool) or width != e):
            fail(
                check,
                f"qk_head_dims({e}, {n}) says layer {layer} takes q/k {width!r} wide, but the kit model's heads are "
                f"{e} wide (ModelDims.head_dim): build the encoding for the dims given to the kit",
            )


def check_hook_shapes(factory: Factory, cfg: KitConfig) -> None:
    """Hooks on plain tensors: shapes, dtypes, devices, sorted positions, materialisable
    biases, inputs left unchanged, and what the encoding declares of itself."""
    name = "hook_shapes"
    d, h, e, b = cfg.dims.d_model, cfg.dims.n_heads, cfg.dims.head_dim, cfg.batch
    device = torch.device(cfg.device)
    for mode in ("train", "eval"):
        model = build_model(factory, cfg, cfg.seed)
        model.train(mode == "train")
        pe = model.pe
        _check_declarations(name, pe, cfg)
        for s in sorted({1, 2, 5, cfg.length}):
            pos = _a_tensor(name, f"positions({b}, {s})", pe.positions(b, s, cfg.device), device)
            if pos.dtype not in (torch.int32, torch.int64) or pos.dim() != 2 or pos.shape[-1] != s:
                fail(
                    name,
                    f"positions({b}, {s}) must be an integer (b|1, {s}) tensor, got {pos.dtype} {tuple(pos.shape)}",
                )
            if pos.shape[0] not in (1, b):
                fail(name, f"positions({b}, {s}) has batch dim {pos.shape[0]}, expected 1 or {b}")
            if s > 1 and not bool((pos[:, 1:] > pos[:, :-1]).all()):
                fail(name, f"positions({b}, {s}) are not strictly increasing ({mode} mode): {pos.tolist()}")
            ctx = AttentionContext(q_pos=pos, k_pos=pos, scale_hint=scale_hints(cfg, b, s))
            x = torch.randn(b, s, d, device=cfg.device)
            kept = x.clone(), pos.clone()
            y = _a_tensor(name, "embed(x, pos)", pe.embed(x, pos), device)
            _left_alone(name, "embed(x, pos)", x=(kept[0], x), pos=(kept[1], pos))
            if y.shape != x.shape or y.dtype != x.dtype:
                fail(name, f"embed changed {tuple(x.shape)} {x.dtype} into {tuple(y.shape)} {y.dtype}")
            _finite(name, f"embed output at length {s}", y)
            tokens = random_tokens(cfg, s)
            kept = y.clone(), tokens.clone()
            y2 = _a_tensor(name, "embed_tokens(x, tokens, ctx)", pe.embed_tokens(y, tokens, ctx), device)
            _left_alone(name, "embed_tokens(x, tokens, ctx)", x=(kept[0], y), tokens=(kept[1], tokens))
            if y2.shape != y.shape or y2.dtype != y.dtype:
                fail(name, f"embed_tokens changed {tuple(y.shape)} {y.dtype} into {tuple(y2.shape)} {y2.dtype}")
            _finite(name, f"embed_tokens output at length {s}", y2)
            y = y2
            for layer in range(cfg.dims.n_layers):
                kept_y = y.clone()
                pe.observe(layer, y, ctx)
                _left_alone(name, f"observe({layer}, x, ctx)", x=(kept_y, y))
                q, k = torch.randn(b, h, s, e, device=cfg.device), torch.randn(b, h, s, e, device=cfg.device)
                kept = q.clone(), k.clone()
                call = f"qk({layer}, q, k, ctx)"
                pair = pe.qk(layer, q, k, ctx)
                if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                    fail(name, f"{call} must return the pair (q, k), got {_described(pair)}")
                q2, k2 = (_a_tensor(name, call, t, device) for t in pair)
                _left_alone(name, call, q=(kept[0], q), k=(kept[1], k))
                if q2.shape[:3] != (b, h, s) or k2.shape[:3] != (b, h, s) or q2.shape[-1] != k2.shape[-1]:
                    fail(name, f"qk turned q, k {tuple(q.shape)} into {tuple(q2.shape)}, {tuple(k2.shape)}")
                if q2.shape[-1] < e:
                    fail(name, f"qk shrank the head dim from {e} to {q2.shape[-1]}")
                if q2.dtype != q.dtype or k2.dtype != k.dtype:
                    fail(name, f"{call} turned {q.dtype} q, k into {q2.dtype}, {k2.dtype}; return the inputs' dtype")
                if q2.shape[-1] != e and ctx.head_dim != e:
                    fail(
                        name,
                        f"{call} widened q/k from {e} to {q2.shape[-1]} but left ctx.head_dim = {ctx.head_dim}: record "
                        f"the model's head dim ({e}) there when it is None, or attend's default scale is "
                        f"1/sqrt({q2.shape[-1] if ctx.head_dim is None else ctx.head_dim})",
                    )
                kept = q2.clone(), k2.clone()
                call = f"bias({layer}, q, k, ctx)"
                biases = pe.bias(layer, q2, k2, ctx)
                _left_alone(name, call, q=(kept[0], q2), k=(kept[1], k2))
                if not isinstance(biases, (list, tuple)) or not all(isinstance(t, AttentionBias) for t in biases):
                    fail(name, f"{call} must return a list of AttentionBias, got {_described(biases)}")
                for bias in biases:
                    for dtype in (torch.float32, torch.bfloat16):
                        what = f"{type(bias).__name__}.materialize(ctx, {h}, {dtype})"
                        dense = _a_tensor(name, what, bias.materialize(ctx, h, dtype), device)
                        if dense.dtype != dtype:
                            fail(name, f"{what} returned {dense.dtype}: materialise in the dtype asked for")
                    dense = bias.materialize(ctx, h, torch.float32)
                    try:
                        torch.broadcast_shapes(dense.shape, (b, h, s, s))
                    except RuntimeError:
                        fail(name, f"{type(bias).__name__} materialises to {tuple(dense.shape)}, not (b, h, {s}, {s})")
                    if torch.isnan(dense).any():
                        fail(name, f"{type(bias).__name__} materialises NaN")
                transform, normaliser = pe.score_transform(layer, ctx), pe.normaliser(layer, ctx)
                if transform is not None and not isinstance(transform, ScoreTransform):
                    fail(name, f"score_transform must return a ScoreTransform or None, got {transform!r}")
                if normaliser is not None and not isinstance(normaliser, Normaliser):
                    fail(name, f"normaliser must return a Normaliser or None, got {normaliser!r}")
            out = model(random_tokens(cfg, s), pos, scale_hint=scale_hints(cfg, b, s))
            if out.shape != (b, s, cfg.vocab):
                fail(name, f"kit model output {tuple(out.shape)} != {(b, s, cfg.vocab)}")
            _finite(name, f"kit model output at length {s}", out)


def check_no_future_leakage(factory: Factory, cfg: KitConfig) -> None:
    """Outputs before t do not depend on tokens at t or later (train and eval mode)."""
    name = "no_future_leakage"
    s, b = cfg.length, cfg.batch
    cut = s // 2
    for mode in ("train", "eval"):
        model = build_model(factory, cfg, cfg.seed)
        model.train(mode == "train")
        pos = model.pe.positions(b, s, cfg.device)
        tokens = random_tokens(cfg, s)
        changed = tokens.clone()
        changed[:, cut:] = (changed[:, cut:] + 1 + random_tokens(cfg, s - cut, seed=1) % (cfg.vocab - 1)) % cfg.vocab
        hint = scale_hints(cfg, b, s)
        with torch.no_grad():  # equal RNG states: training-time draws (Abacus's offset) are not the future
            a = _seeded(cfg.seed + 1, model, tokens, pos, scale_hint=hint)
            c = _seeded(cfg.seed + 1, model, changed, pos, scale_hint=hint)
        if not torch.allclose(a[:, :cut], c[:, :cut], atol=cfg.atol, rtol=0):
            err = (a[:, :cut] - c[:, :cut]).abs().max().item()
            fail(name, f"changing tokens {cut}.. changed outputs before {cut} by {err:.3g} ({mode} mode)")


def check_backend_agreement(factory: Factory, cfg: KitConfig) -> None:
    """Every usable backend equals eager in fp32: forward (with key padding) and gradients."""
    name = "backend_agreement"
    model = build_model(factory, cfg, cfg.seed)
    model.eval()
    runs = usable_backends(cfg.device, model.pe)  # the backends this encoding runs on
    backends = [n for n in (cfg.backends or runs) if n != "eager" and n in runs]
    b = cfg.batch
    for s, padded in ((cfg.length, False), (3 * cfg.length, True)):
        pos = model.pe.positions(b, s, cfg.device)
        tokens = random_tokens(cfg, s, seed=s)
        live = torch.ones(b, s, dtype=torch.bool, device=cfg.device)
        if padded:
            live[-1, s - s // 4 :] = False  # right padding: real queries always see real keys
        mask = live if padded else None
        hint = scale_hints(cfg, b, s)
        with torch.no_grad():
            model.set_backend("eager")
            want = model(tokens, pos, key_padding_mask=mask, scale_hint=hint)
            for backend in backends:
                model.set_backend(backend)
                with quiet_flex_warnings():
                    got = model(tokens, pos, key_padding_mask=mask, scale_hint=hint)
                what = f"{backend} vs eager forward at length {s}" + (" with key padding" if padded else "")
                _close(name, what, got[live], want[live], cfg.atol)
    # gradients of every parameter (encoding and model), at the longer length
    s = 3 * cfg.length
    pos = model.pe.positions(b, s, cfg.device)
    tokens, hint = random_tokens(cfg, s, seed=7), scale_hints(cfg, b, s)
    weights = torch.randn(b, s, cfg.vocab, generator=torch.Generator().manual_seed(cfg.seed)).to(cfg.device)

    def grads(backend: str) -> dict[str, Tensor]:
        model.set_backend(backend)
        model.zero_grad(set_to_none=True)
        with quiet_flex_warnings():
            (model(tokens, pos, scale_hint=hint) * weights).sum().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    want = grads("eager")
    for backend in backends:
        got = grads(backend)
        if set(got) != set(want):
            fail(name, f"{backend} gives gradients for {sorted(set(got) ^ set(want))} where eager does not, or v.v.")
        for param, g in want.items():
            _close(name, f"{backend} vs eager gradient of {param}", got[param], g, cfg.atol * 10, rtol=1e-3)
    model.set_backend("eager")


def check_incremental_decoding(factory: Factory, cfg: KitConfig) -> None:
    """A prompt, then one token per call with a persistent state, equals one full pass."""
    name = "incremental_decoding"
    model = build_model(factory, cfg, cfg.seed)
    model.eval()
    b, s = cfg.batch, cfg.length
    pos = model.pe.positions(b, s, cfg.device)  # planned once, like start_state
    tokens, hint = random_tokens(cfg, s), scale_hints(cfg, b, s)
    prompt = max(1, s // 3)
    for backend in _runs_on(model, ("eager", "sdpa")):
        model.set_backend(backend)
        with torch.no_grad():
            full = model(tokens, pos, scale_hint=hint)
            state: dict[str, Any] = {}
            steps = [model(tokens[:, :prompt], pos, state=state, scale_hint=hint)]
            for t in range(prompt, s):
                steps.append(model(tokens[:, t : t + 1], pos, state=state, scale_hint=hint))
        _close(name, f"token-by-token ({backend}) vs full forward", torch.cat(steps, dim=1), full, cfg.atol)
    model.set_backend("eager")


def _runs_on(model: KitModel, backends: Sequence[str]) -> list[str]:
    """Those of ``backends`` the model's encoding runs on (:meth:`~pezoo.PositionalEncoding.attention_backends`)."""
    takes = model.pe.attention_backends()
    return [b for b in backends if takes is None or b in takes]


def check_unsupported_backends(factory: Factory, cfg: KitConfig) -> None:
    """An encoding that runs on some backends only (its score transform or normaliser) is
    refused by every other usable backend with a ValueError naming the ones it runs on, never
    run through a softmax it does not use; and ``auto`` runs it."""
    name = "unsupported_backends"
    model = build_model(factory, cfg, cfg.seed)
    model.eval()
    takes = model.pe.attention_backends()
    if takes is None:
        return
    if not takes:
        fail(name, "attention_backends() names no backend: the encoding could run nowhere")
    s, b = cfg.length, cfg.batch
    pos, tokens, hint = model.pe.positions(b, s, cfg.device), random_tokens(cfg, s), scale_hints(cfg, b, s)
    for backend in usable_backends(cfg.device):
        if backend in takes or backend == "auto":
            continue
        model.set_backend(backend)
        try:
            with torch.no_grad(), quiet_flex_warnings():
                model(tokens, pos, scale_hint=hint)
        except ValueError as exc:
            missing = [t for t in takes if t not in str(exc)]
            if missing:
                fail(name, f"the {backend} backend's refusal does not name {', '.join(missing)}: {exc}")
            continue
        fail(name, f"the {backend} backend ran an encoding that declares it runs on {', '.join(takes)} only")
    model.set_backend("auto")
    with torch.no_grad():
        out = model(tokens, pos, scale_hint=hint)
    _finite(name, "the auto backend's output", out)
    model.set_backend("eager")


def check_state_dict_round_trip(factory: Factory, cfg: KitConfig) -> None:
    """A second instance (another seed) loaded with the first's state dict computes the same."""
    name = "state_dict_round_trip"
    first, second = build_model(factory, cfg, cfg.seed), build_model(factory, cfg, cfg.seed + 1)
    buffer = io.BytesIO()
    torch.save(first.pe.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    if set(state) != set(second.pe.state_dict()):
        fail(name, f"state dict keys differ between two instances: {sorted(set(state) ^ set(second.pe.state_dict()))}")
    second.pe.load_state_dict(state, strict=True)
    first.eval(), second.eval()
    s, b = cfg.length, cfg.batch
    pos, tokens, hint = first.pe.positions(b, s, cfg.device), random_tokens(cfg, s), scale_hints(cfg, b, s)
    with torch.no_grad():
        _close(
            name,
            "outputs after load_state_dict",
            second(tokens, pos, scale_hint=hint),
            first(tokens, pos, scale_hint=hint),
            0.0,
            0.0,
        )


LOW_PRECISION_TOLERANCE = {torch.float16: 0.05, torch.bfloat16: 0.25, torch.float64: 1e-4}
"""Largest difference from the fp32 model's outputs allowed after a dtype move, relative
to the largest fp32 output (loose for fp16 / bf16: it catches garbage, not rounding)."""


def _check_moved(name: str, factory: Factory, cfg: KitConfig, dtypes: Sequence[torch.dtype]) -> None:
    """The model moved to each of ``dtypes`` (eager and sdpa): that dtype out, finite, close to fp32."""
    s, b = cfg.length, cfg.batch
    model = build_model(factory, cfg, cfg.seed)
    model.eval()
    pos, tokens, hint = model.pe.positions(b, s, cfg.device), random_tokens(cfg, s), scale_hints(cfg, b, s)
    with torch.no_grad():
        want = model(tokens, pos, scale_hint=hint)
    scale = want.abs().max().item()
    for dtype in dtypes:
        moved = build_model(factory, cfg, cfg.seed).to(dtype)  # a fresh copy: .to() moves in place
        moved.eval()
        for backend in _runs_on(moved, ("eager", "sdpa")):
            moved.set_backend(backend)
            with torch.no_grad():
                out = moved(tokens, pos, scale_hint=hint)
            if out.dtype != dtype:
                fail(name, f"{dtype} model returned {out.dtype} ({backend})")
            _finite(name, f"{dtype} forward ({backend})", out)
            err = (out.to(torch.float32) - want).abs().max().item()
            if err > LOW_PRECISION_TOLERANCE[dtype] * scale:
                fail(
                    name,
                    f"{dtype} forward ({backend}) differs from fp32 by {err:.3g} "
                    f"(> {LOW_PRECISION_TOLERANCE[dtype]:g} x the largest output {scale:.3g})",
                )


def check_half_precision(factory: Factory, cfg: KitConfig) -> None:
    """``.bfloat16()`` / ``.half()`` models (eager and sdpa): that dtype out, finite, close to fp32."""
    _check_moved("half_precision", factory, cfg, (torch.bfloat16, torch.float16))


def check_float64(factory: Factory, cfg: KitConfig) -> None:
    """A ``.double()`` model returns float64 outputs equal to fp32's up to fp32 rounding."""
    _check_moved("float64", factory, cfg, (torch.float64,))


def check_copy_and_pickle(factory: Factory, cfg: KitConfig) -> None:
    """``copy.deepcopy`` and ``pickle.loads(pickle.dumps(...))`` of the model compute the same outputs."""
    name = "copy_and_pickle"
    s, b = cfg.length, cfg.batch
    model = build_model(factory, cfg, cfg.seed)
    model.eval()
    pos, tokens, hint = model.pe.positions(b, s, cfg.device), random_tokens(cfg, s), scale_hints(cfg, b, s)
    with torch.no_grad():
        want = model(tokens, pos, scale_hint=hint)
    for how, clone in (("deepcopy", copy.deepcopy), ("pickle", lambda m: pickle.loads(pickle.dumps(m)))):
        try:
            other = clone(model)
        except Exception as exc:
            fail(name, f"{how} of the model failed: {type(exc).__name__}: {exc}")
        with torch.no_grad():
            got = other(tokens, pos, scale_hint=hint)
        _close(name, f"outputs after {how}", got, want, 0.0, 0.0)


def check_deterministic(factory: Factory, cfg: KitConfig) -> None:
    """Same seed, same everything: bit-identical outputs in training mode (positions included);
    in eval mode, the same outputs whatever the global RNG state, under ``seeded`` where the
    encoding says its evaluation draws at random (``random_at_eval``)."""
    name = "deterministic"
    s, b = cfg.length, cfg.batch

    def run() -> Tensor:
        model = build_model(factory, cfg, cfg.seed)
        model.train()
        torch.manual_seed(cfg.seed + 1)
        pos = model.pe.positions(b, s, cfg.device)
        with torch.no_grad():
            return model(random_tokens(cfg, s), pos, scale_hint=scale_hints(cfg, b, s))

    _close(name, "two runs under the same seed", run(), run(), 0.0, 0.0)

    def evaluate(global_seed: int) -> tuple[Tensor, Tensor, bool]:
        """Positions and outputs of an eval-mode pass from global RNG state ``global_seed``, under
        ``seeded`` where the encoding draws at evaluation (``random_at_eval``); and whether it does."""
        model = build_model(factory, cfg, cfg.seed)
        model.eval()
        pe, tokens, hint = model.pe, random_tokens(cfg, s), scale_hints(cfg, b, s)
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(global_seed)
            if not pe.random_at_eval:
                pos = pe.positions(b, s, cfg.device)
                return pos, model(tokens, pos, scale_hint=hint), False
            with pe.seeded(cfg.seed):
                pos = pe.positions(b, s, cfg.device)
                return pos, model(tokens, pos, scale_hint=hint), True

    (pos, out, random_at_eval), (pos2, out2, _) = evaluate(cfg.seed + 2), evaluate(cfg.seed + 3)
    if pos.shape == pos2.shape and torch.equal(pos, pos2) and torch.equal(out, out2):
        return
    if random_at_eval:
        fail(name, f"eval-mode positions or outputs under seeded({cfg.seed}) differ between two global RNG states")
    fail(
        name,
        "eval-mode positions or outputs differ between two global RNG states, but random_at_eval is False: an "
        "encoding whose evaluation draws at random says so (random_at_eval) and draws under seeded(seed)",
    )


def check_extrapolation(factory: Factory, cfg: KitConfig) -> None:
    """A forward pass at ``extrapolation_factor`` × length runs and stays finite."""
    name = "extrapolation"
    s = cfg.extrapolation_factor * cfg.length
    model = build_model(factory, cfg, cfg.seed)
    model.eval()
    pos = model.pe.positions(1, s, cfg.device)
    with torch.no_grad():
        out = model(random_tokens(cfg, s, batch=1), pos, scale_hint=scale_hints(cfg, 1, s))
    if out.shape != (1, s, cfg.vocab):
        fail(name, f"output {tuple(out.shape)} at length {s}")
    _finite(name, f"output at length {s}", out)


def check_empty_inputs(factory: Factory, cfg: KitConfig) -> None:
    """No tokens, or no sequences: an empty output of the right shape, in training and
    evaluation mode (PRISM's GRU, xPos's reduction and learned PRF's scale hints raised)."""
    name = "empty_inputs"
    model = build_model(factory, cfg, cfg.seed)
    for train in (True, False):
        model.train(train)
        for b, s in ((cfg.batch, 0), (0, cfg.length)):
            pos = model.pe.positions(b, s, cfg.device)
            with torch.no_grad():
                out = model(random_tokens(cfg, s, batch=b), pos, scale_hint=scale_hints(cfg, b, s))
            if out.shape != (b, s, cfg.vocab):
                fail(name, f"output {tuple(out.shape)} for {b} sequences of {s} tokens, not {(b, s, cfg.vocab)}")


def check_gradients_finite(factory: Factory, cfg: KitConfig) -> None:
    """A training-mode backward pass gives finite gradients for the encoding's parameters."""
    name = "gradients_finite"
    model = build_model(factory, cfg, cfg.seed)
    model.train()
    s, b = cfg.length, cfg.batch
    tokens = random_tokens(cfg, s)
    logits = model(tokens, model.pe.positions(b, s, cfg.device), scale_hint=scale_hints(cfg, b, s))
    nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
    for param_name, p in model.pe.named_parameters():
        if p.grad is not None:
            _finite(name, f"gradient of {param_name}", p.grad)


def _stray_tensors(module: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """Tensors a module keeps as plain attributes (also inside lists, tuples and dicts)."""
    for attr, value in vars(module).items():
        if attr in ("_parameters", "_buffers", "_modules"):
            continue
        items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
        for item in items:
            if isinstance(item, Tensor):
                yield attr, item


def check_device_move(factory: Factory, cfg: KitConfig) -> None:
    """``.to(device)`` moves everything: checked by moving to the meta device (no GPU needed)."""
    name = "device_move"
    model = build_model(factory, cfg, cfg.seed)
    model.eval()
    s, b = cfg.length, cfg.batch
    pos, tokens, hint = model.pe.positions(b, s, cfg.device), random_tokens(cfg, s), scale_hints(cfg, b, s)
    with torch.no_grad():
        want = model(tokens, pos, scale_hint=hint)  # also fills any lazily built cache
    for module_name, module in model.named_modules():
        if type(module).__module__.startswith("torch."):
            continue  # torch's own modules (nn.GRU's _flat_weights follow its parameters in _apply)
        for attr, tensor in _stray_tensors(module):
            fail(
                name,
                f"{module_name or 'model'}.{attr} is a {tuple(tensor.shape)} tensor outside parameters and buffers: "
                "`.to(device)` leaves it behind (register it as a buffer, persistent=False for derived tables)",
            )
    moved = copy.deepcopy(model).to("meta")
    left = [n for n, t in [*moved.named_parameters(), *moved.named_buffers()] if t.device.type != "meta"]
    if left:
        fail(name, f"after .to('meta') still off the meta device: {', '.join(left)}")
    with torch.no_grad():
        got = model(tokens, pos, scale_hint=hint)
    _close(name, "outputs of the model after a copy of it moved", got, want, 0.0, 0.0)


def check_meta_init(factory: Factory, cfg: KitConfig) -> None:
    """PyTorch's deferred initialisation: built on the meta device, materialised with
    ``to_empty``, every module's ``reset_parameters()`` called, then a state dict loaded,
    the model computes what the original does.

    Buffers registered with ``persistent=False`` (tables derived from the constructor's
    arguments) are not in the state dict, so ``reset_parameters`` is what must rebuild
    them: after ``to_empty`` they hold uninitialised memory.
    """
    name = "meta_init"
    reference = build_model(factory, cfg, cfg.seed)
    reference.eval()
    torch.manual_seed(cfg.seed)
    with torch.device("meta"):
        pe = factory()
        model = KitModel(pe, cfg.dims, cfg.vocab)
    model.to_empty(device=cfg.device)
    for module in model.modules():
        reset = getattr(module, "reset_parameters", None)
        if callable(reset):
            reset()
    model.load_state_dict(reference.state_dict(), strict=True)
    model.eval()
    s, b = cfg.length, cfg.batch
    pos, tokens, hint = reference.pe.positions(b, s, cfg.device), random_tokens(cfg, s), scale_hints(cfg, b, s)
    with torch.no_grad():
        want = reference(tokens, pos, scale_hint=hint)
        got = model(tokens, pos, scale_hint=hint)
    what = "outputs of the meta-built model after to_empty, reset_parameters and load_state_dict"
    _close(name, what, got, want, 0.0, 0.0)


CHECKS: dict[str, Callable[[Factory, KitConfig], None]] = {
    "hook_shapes": check_hook_shapes,
    "no_future_leakage": check_no_future_leakage,
    "backend_agreement": check_backend_agreement,
    "incremental_decoding": check_incremental_decoding,
    "unsupported_backends": check_unsupported_backends,
    "state_dict_round_trip": check_state_dict_round_trip,
    "half_precision": check_half_precision,
    "float64": check_float64,
    "copy_and_pickle": check_copy_and_pickle,
    "device_move": check_device_move,
    "meta_init": check_meta_init,
    "deterministic": check_deterministic,
    "extrapolation": check_extrapolation,
    "gradients_finite": check_gradients_finite,
    "empty_inputs": check_empty_inputs,
}


def check_encoding(
    factory: Factory, dims: ModelDims | None = None, *, checks: Sequence[str] | None = None, **config: Any
) -> None:
    """Run the conformance battery on the encoding ``factory`` builds; raise on the first failure.

    Args:
        factory: ``() -> PositionalEncoding``, called several times (under fixed seeds).
        dims: the model shape the factory builds for (default ``KitConfig.dims``).
        checks: names of ``CHECKS`` to run (default: all).
        **config: other :class:`KitConfig` fields (``length``, ``backends``, ``device``, ...).

    Raises:
        ConformanceError (an AssertionError) naming the check and the difference, also
        when the encoding raised inside a check (the original exception is its cause);
        TypeError for unknown config keys or check names, a factory that is an encoding
        (or anything not callable) rather than a function building one, and ``dims`` that
        are no :class:`~pezoo.ModelDims`.
    """
    if isinstance(factory, nn.Module) or not callable(factory):
        raise TypeError(
            f"check_encoding takes a factory, a function that builds the encoding (lambda: pezoo.create(...)), "
            f"got {type(factory).__name__}: every check builds fresh instances"
        )
    if dims is not None and not isinstance(dims, ModelDims):
        raise TypeError(f"dims must be a pezoo.ModelDims, got {type(dims).__name__} {dims!r}"[:300])
    if isinstance(checks, str):
        raise TypeError(f"checks takes a list of check names, e.g. checks=[{checks!r}], not a string")
    valid = {f.name for f in fields(KitConfig)} - {"dims"}
    unknown = sorted(set(config) - valid)
    if unknown:
        raise TypeError(f"check_encoding got unknown option(s) {', '.join(unknown)}; valid: {', '.join(sorted(valid))}")
    cfg = KitConfig(**config) if dims is None else KitConfig(dims=dims, **config)
    names = list(CHECKS) if checks is None else list(checks)
    bad = sorted(set(names) - set(CHECKS))
    if bad:
        raise TypeError(f"unknown check(s) {', '.join(bad)}; valid: {', '.join(CHECKS)}")
    with flex_compile(cfg.compile_flex):
        for check in names:
            try:
                CHECKS[check](factory, cfg)
            except ConformanceError:
                raise
            except Exception as exc:  # an encoding that crashes fails the check it crashed in
                raise ConformanceError(f"[{check}] raised {type(exc).__name__}: {exc}") from exc
